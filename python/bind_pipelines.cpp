// Bindings for the task pipelines (transformers' pipeline shapes): encore.TextClassifier, encore.FillMask,
// encore.SparseEncoder. Argument conversion and
// the pipeline's output nesting only; scoring, sorting and labels are the C++ classes'.
#include <string>
#include <utility>
#include <vector>

#include "encore/fill_mask.hpp"
#include "encore/sparse_encoder.hpp"
#include "encore/text_classifier.hpp"
#include "numpy_convert.hpp"

namespace encore_py {

namespace {

// The pipeline's inputs: a str, a {"text", "text_pair"} dict, or a list of either kind (not mixed).
struct ClassifierInputs {
  std::vector<std::string> texts;
  std::vector<std::pair<std::string, std::string>> pairs;
  bool single = false, single_str = false;
};

std::pair<std::string, std::string> text_pair_dict(const py::handle& item, const std::string& what) {
  const py::dict d = py::reinterpret_borrow<py::dict>(item);
  for (auto kv : d) {
    const std::string key = py::str(kv.first).cast<std::string>();
    if (key != "text" && key != "text_pair")
      throw encore::UsageError(what + ": unknown key '" + key + "' (a pair is {\"text\": ..., \"text_pair\": ...})");
  }
  if (!d.contains("text") || !d.contains("text_pair"))
    throw encore::UsageError(what + ": a pair needs both \"text\" and \"text_pair\"");
  return {utf8_text(d["text"], what + "[\"text\"]"), utf8_text(d["text_pair"], what + "[\"text_pair\"]")};
}

ClassifierInputs classifier_inputs(const py::object& inputs) {
  ClassifierInputs in;
  auto add = [&](const py::handle& item, const std::string& what) {
    if (py::isinstance<py::dict>(item)) {
      if (!in.texts.empty()) throw encore::UsageError(what + ": texts and {text, text_pair} dicts cannot be mixed");
      in.pairs.push_back(text_pair_dict(item, what));
    } else {
      if (!in.pairs.empty()) throw encore::UsageError(what + ": texts and {text, text_pair} dicts cannot be mixed");
      in.texts.push_back(utf8_text(item, what));
    }
  };
  if (py::isinstance<py::str>(inputs) || py::isinstance<py::dict>(inputs)) {
    in.single = true;
    in.single_str = py::isinstance<py::str>(inputs);
    add(inputs, "inputs");
    return in;
  }
  if (!py::isinstance<py::list>(inputs) && !py::isinstance<py::tuple>(inputs))
    throw encore::UsageError("inputs must be a str, a {\"text\", \"text_pair\"} dict or a list of them, got " +
                             py::str(py::type::of(inputs).attr("__name__")).cast<std::string>());
  size_t i = 0;
  for (auto item : inputs) add(item, "inputs[" + std::to_string(i++) + "]");
  return in;
}

py::list label_dicts(const std::vector<encore::LabelScore>& labels) {
  py::list out;
  for (const auto& l : labels) {
    py::dict d;
    d["label"] = l.label;
    d["score"] = static_cast<double>(l.score);
    out.append(d);
  }
  return out;
}

// transformers' TextClassificationPipeline.__call__: without top_k, one {label, score} per input (a str gives a
// one-element list, a dict the dict, a list a list of dicts); with top_k (an int or None = all) the top_k best per
// input, sorted (a str or dict gives a list, a list a list of lists).
py::object classify_python(const encore::TextClassifier& self, const py::object& inputs, const py::object& top_k,
                           const py::object& function_to_apply, int64_t batch_size, bool truncation) {
  const ClassifierInputs in = classifier_inputs(inputs);
  const bool legacy = top_k.is(py::ellipsis());
  int64_t k = 1;
  if (!legacy) {
    if (top_k.is_none()) {
      k = -1;
    } else {
      if (!py::isinstance<py::int_>(top_k) || py::isinstance<py::bool_>(top_k))
        throw encore::UsageError("top_k must be an int or None, got " + py::str(py::repr(top_k)).cast<std::string>());
      k = top_k.cast<int64_t>();
      if (k < 0) throw encore::UsageError("top_k must be >= 0 (None: every label), got " + std::to_string(k));
    }
  }
  if (batch_size < 1 || batch_size > (1 << 16))
    throw encore::UsageError("batch_size must be in 1..65536, got " + std::to_string(batch_size));
  encore::ClassifyOptions opt;
  opt.batch_size = batch_size;
  opt.truncate = truncation;
  if (!function_to_apply.is_none())
    opt.function = encore::parse_classification_function(utf8_text(function_to_apply, "function_to_apply"));
  std::vector<std::vector<encore::LabelScore>> rows;
  {
    py::gil_scoped_release nogil;
    rows = in.pairs.empty() ? self.classify(in.texts, k, opt) : self.classify(in.pairs, k, opt);
  }
  if (legacy) {
    py::list out;
    for (const auto& r : rows) out.append(label_dicts(r)[0]);
    if (in.single && !in.single_str) return out[0];
    return out;
  }
  if (in.single) return label_dicts(rows[0]);
  py::list out;
  for (const auto& r : rows) out.append(label_dicts(r));
  return out;
}

// A str (single = true) or a list/tuple of str as texts; `what` names the argument in errors.
std::vector<std::string> text_list(const py::object& inputs, const std::string& what, bool* single) {
  *single = py::isinstance<py::str>(inputs);
  std::vector<std::string> texts;
  if (*single) {
    texts.push_back(utf8_text(inputs, what));
    return texts;
  }
  if (!py::isinstance<py::list>(inputs) && !py::isinstance<py::tuple>(inputs))
    throw encore::UsageError(what + " must be a str or a list of str, got " +
                             py::str(py::type::of(inputs).attr("__name__")).cast<std::string>());
  for (auto item : inputs) texts.push_back(utf8_text(item, what + "[" + std::to_string(texts.size()) + "]"));
  return texts;
}

// transformers' FillMaskPipeline.__call__: per input, the top_k candidates of its mask (a list of dicts), or for
// several masks one list per mask; a str gives its result, a list one result per input (a one-element list its
// only result, as the pipeline unwraps it).
py::object fill_mask_python(const encore::FillMask& self, const py::object& inputs, int64_t top_k, int64_t batch_size,
                            bool truncation) {
  bool single = false;
  const std::vector<std::string> texts = text_list(inputs, "inputs", &single);
  if (batch_size < 1 || batch_size > (1 << 16))
    throw encore::UsageError("batch_size must be in 1..65536, got " + std::to_string(batch_size));
  encore::FillMaskOptions opt;
  opt.top_k = top_k;
  opt.batch_size = batch_size;
  opt.truncate = truncation;
  std::vector<std::vector<std::vector<encore::FillMaskCandidate>>> result;
  {
    py::gil_scoped_release nogil;
    result = self.predict(texts, opt);
  }
  py::list per_text;
  for (const auto& per_mask : result) {
    py::list masks;
    for (const auto& cands : per_mask) {
      py::list list;
      for (const auto& c : cands) {
        py::dict d;
        d["score"] = static_cast<double>(c.score);
        d["token"] = c.token;
        d["token_str"] = c.token_str;
        d["sequence"] = c.sequence;
        list.append(d);
      }
      masks.append(list);
    }
    per_text.append(per_mask.size() == 1 ? masks[0] : py::object(masks));
  }
  if (single || per_text.size() == 1) return per_text[0];
  return per_text;
}

// SparseEncoder.encode / encode_csr: the texts (a str or a list of str) through SparseEncoder::encode.
std::vector<encore::SparseVector> sparse_encode(const encore::SparseEncoder& self, const py::object& sentences,
                                                int64_t batch_size, const py::object& max_active_dims, bool* single) {
  const std::vector<std::string> texts = text_list(sentences, "sentences", single);
  if (batch_size < 1 || batch_size > (1 << 16))
    throw encore::UsageError("batch_size must be in 1..65536, got " + std::to_string(batch_size));
  encore::SparseEncodeOptions opt;
  opt.batch_size = batch_size;
  if (!max_active_dims.is_none()) opt.max_active_dims = max_active_dims.cast<int64_t>();
  py::gil_scoped_release nogil;
  return self.encode(texts, opt);
}

}  // namespace

void bind_pipelines(py::module_& m) {
  py::class_<encore::SparseEncoder>(m, "SparseEncoder",
                                    "SPLADE sparse embeddings from a masked-LM checkpoint, as sentence-transformers' "
                                    "SparseEncoder (MLMTransformer + SpladePooling max): weight[v] = max over tokens "
                                    "of log(1 + relu(logit[v])).\n\nSparseEncoder(path, dtype='fp32'); encode() "
                                    "releases the GIL.")
      .def(py::init([](const py::object& path, const std::string& dtype) {
             const std::string dir = py::str(path).cast<std::string>();
             const encore::DType d = encore::parse_dtype(dtype);
             py::gil_scoped_release nogil;
             return encore::SparseEncoder::load(dir, d);
           }),
           py::arg("path"), py::arg("dtype") = "fp32", "Loads a *ForMaskedLM directory.")
      .def(
          "encode",
          [](const encore::SparseEncoder& self, const py::object& sentences, int64_t batch_size,
             const py::object& max_active_dims) -> py::object {
            bool single = false;
            const auto rows = sparse_encode(self, sentences, batch_size, max_active_dims, &single);
            py::list out;
            for (const auto& r : rows) {
              py::dict d;
              for (size_t i = 0; i < r.indices.size(); ++i) d[py::int_(r.indices[i])] = static_cast<double>(r.values[i]);
              out.append(d);
            }
            return single ? out[0] : py::object(out);
          },
          py::arg("sentences"), py::arg("batch_size") = 8, py::arg("max_active_dims") = py::none(),
          "Sparse embeddings: per text a {index: weight} dict of its non-zero weights (index = vocabulary id, "
          "ascending); one dict for a str. max_active_dims: keep the N largest weights per text.")
      .def(
          "encode_csr",
          [](const encore::SparseEncoder& self, const py::object& sentences, int64_t batch_size,
             const py::object& max_active_dims) {
            bool single = false;
            const auto rows = sparse_encode(self, sentences, batch_size, max_active_dims, &single);
            size_t nnz = 0;
            for (const auto& r : rows) nnz += r.indices.size();
            py::array_t<float> data(static_cast<py::ssize_t>(nnz));
            py::array_t<int64_t> indices(static_cast<py::ssize_t>(nnz)), indptr(static_cast<py::ssize_t>(rows.size() + 1));
            auto d = data.mutable_unchecked<1>();
            auto ix = indices.mutable_unchecked<1>();
            auto ip = indptr.mutable_unchecked<1>();
            py::ssize_t at = 0;
            ip(0) = 0;
            for (size_t i = 0; i < rows.size(); ++i) {
              for (size_t j = 0; j < rows[i].indices.size(); ++j, ++at) {
                d(at) = rows[i].values[j];
                ix(at) = rows[i].indices[j];
              }
              ip(static_cast<py::ssize_t>(i + 1)) = at;
            }
            return py::make_tuple(data, indices, indptr,
                                  py::make_tuple(static_cast<int64_t>(rows.size()), self.dimension()));
          },
          py::arg("sentences"), py::arg("batch_size") = 8, py::arg("max_active_dims") = py::none(),
          "The same as CSR arrays (data float32, indices int64, indptr int64, shape): "
          "scipy.sparse.csr_matrix((data, indices, indptr), shape=shape).")
      .def_property_readonly("dimension", &encore::SparseEncoder::dimension, "the vocabulary size")
      .def_property("max_seq_length", &encore::SparseEncoder::max_seq_length, &encore::SparseEncoder::set_max_seq_length,
                    "tokens per text (special tokens included) before truncation")
      .def("__repr__", [](const encore::SparseEncoder& self) {
        const encore::ModelInfo& mi = self.encoder().model().info();
        return "SparseEncoder(architecture='" + mi.architecture + "', dtype=" + mi.dtype + ", dimension=" +
               std::to_string(self.dimension()) + ", max_seq_length=" + std::to_string(self.max_seq_length()) + ")";
      });

  py::class_<encore::FillMask>(m, "FillMask",
                               "A masked-LM checkpoint (*ForMaskedLM) run as transformers' pipeline('fill-mask'): for "
                               "each mask token, the likeliest vocabulary tokens with their probabilities.\n\n"
                               "FillMask(path, dtype='fp32'); fill_mask(texts, top_k=5) releases the GIL.")
      .def(py::init([](const py::object& path, const std::string& dtype) {
             const std::string dir = py::str(path).cast<std::string>();
             const encore::DType d = encore::parse_dtype(dtype);
             py::gil_scoped_release nogil;
             return encore::FillMask::load(dir, d);
           }),
           py::arg("path"), py::arg("dtype") = "fp32", "Loads a *ForMaskedLM directory.")
      .def("__call__", &fill_mask_python, py::arg("inputs"), py::arg("top_k") = 5, py::arg("batch_size") = 8,
           py::arg("truncation") = true,
           "Fills the mask token(s) of a str or a list of str, as the pipeline: per text a list of top_k "
           "{'score', 'token', 'token_str', 'sequence'} dicts best first (several masks: one list per mask); a list "
           "of texts gives one such result per text. A text without the mask token raises encore.InputError. "
           "truncation: texts are cut to max_length tokens (False: a longer text is an error).")
      .def_property_readonly("mask_token", &encore::FillMask::mask_token, "the tokenizer's mask token, e.g. '[MASK]'")
      .def_property_readonly("mask_token_id", &encore::FillMask::mask_token_id, "its id")
      .def_property("max_length", &encore::FillMask::max_seq_length, &encore::FillMask::set_max_seq_length,
                    "tokens per text (special tokens included) before truncation")
      .def("__repr__", [](const encore::FillMask& self) {
        const encore::ModelInfo& mi = self.encoder().model().info();
        return "FillMask(architecture='" + mi.architecture + "', dtype=" + mi.dtype + ", mask_token='" +
               self.mask_token() + "', max_length=" + std::to_string(self.max_seq_length()) + ")";
      });

  py::class_<encore::TextClassifier>(m, "TextClassifier",
                                     "A *ForSequenceClassification checkpoint run as transformers' "
                                     "pipeline('text-classification'): labels from config.json's id2label, scores "
                                     "through the pipeline's function (sigmoid for multi-label or one label, softmax "
                                     "for several, none for regression).\n\n"
                                     "TextClassifier(path, dtype='fp32'); classifier(texts, top_k=...) releases "
                                     "the GIL.")
      .def(py::init([](const py::object& path, const std::string& dtype) {
             const std::string dir = py::str(path).cast<std::string>();
             const encore::DType d = encore::parse_dtype(dtype);
             py::gil_scoped_release nogil;
             return encore::TextClassifier::load(dir, d);
           }),
           py::arg("path"), py::arg("dtype") = "fp32", "Loads a *ForSequenceClassification directory.")
      .def("__call__", &classify_python, py::arg("inputs"), py::arg("top_k") = py::ellipsis(),
           py::arg("function_to_apply") = py::none(), py::arg("batch_size") = 32, py::arg("truncation") = true,
           "Classifies a str, a {'text', 'text_pair'} dict, or a list of them, as the pipeline: without top_k, one "
           "{'label', 'score'} per input (the best label; a str gives a one-element list); with top_k=N the N best "
           "per input, sorted (top_k=None: every label), as a list per input. function_to_apply: 'sigmoid', "
           "'softmax' or 'none' (default: the model's). truncation: texts are cut to max_length tokens (False: a "
           "longer text is an error; the pipeline does not truncate unless asked).")
      .def_property_readonly("labels", &encore::TextClassifier::labels,
                             "the label names in id order (config.json's id2label, LABEL_<id> where it has none)")
      .def_property_readonly("num_labels", &encore::TextClassifier::num_labels, "number of labels")
      .def_property_readonly(
          "function_to_apply",
          [](const encore::TextClassifier& self) { return encore::classification_function_name(self.default_function()); },
          "the function applied by default: 'sigmoid', 'softmax' or 'none'")
      .def_property_readonly(
          "problem_type",
          [](const encore::TextClassifier& self) -> py::object {
            if (self.problem_type().empty()) return py::none();
            return py::str(self.problem_type());
          },
          "config.json's problem_type (None when unset)")
      .def_property("max_length", &encore::TextClassifier::max_seq_length, &encore::TextClassifier::set_max_seq_length,
                    "tokens per text (special tokens included) before truncation")
      .def("__repr__", [](const encore::TextClassifier& self) {
        const encore::ModelInfo& mi = self.encoder().model().info();
        return "TextClassifier(architecture='" + mi.architecture + "', dtype=" + mi.dtype +
               ", num_labels=" + std::to_string(self.num_labels()) + ", function_to_apply=" +
               encore::classification_function_name(self.default_function()) + ", max_length=" +
               std::to_string(self.max_seq_length()) + ")";
      });
}

}  // namespace encore_py
