// encore embed / similarity / info: sentence embeddings from a model directory (default all-MiniLM-L6-v2).
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "apps/common.hpp"
#include "encore/embedding_quantization.hpp"
#include "encore/files.hpp"
#include "encore/runtime.hpp"
#include "encore/records.hpp"
#include "encore/sentence_encoder.hpp"
#include "encore/shard.hpp"
#include "encore/sparse_encoder.hpp"
#include "encore/similarity.hpp"

namespace encore::cli {

namespace fs = std::filesystem;
using Json = nlohmann::json;

namespace {

enum class OutputFormat { json, jsonl, csv, npy };

struct EmbedArgs {
  std::vector<std::string> texts;
  std::string input, input_format, output, format, model, field = "text", dtype = "fp32";
  bool jsonl = false, normalize = false, no_normalize = false, no_truncation = false, quiet = false;
  std::string truncation = "right";  // right, left, error, chunk (--no-truncation: error)
  int64_t chunk_stride = 0;
  bool allow_nonfinite = false;
  int64_t batch_size = 32, max_length = 0;
  std::optional<std::string> prompt_name, prompt;
  int64_t dimensions = 0;  // 0: all
  int threads = 0;
  std::string shard;     // "I/N" (embed only)
  int64_t block = 1024;  // records encoded together (embed only)
  bool resume = false;   // (embed only)
  std::string precision = "float32";  // (embed only) sentence-transformers' quantize_embeddings precisions
  std::string calibration;            // (embed only) texts whose embeddings set the int8/uint8 buckets
  bool sparse = false;                // (embed only) SPLADE sparse vectors (encore::SparseEncoder)
  int64_t max_active_dims = 0;        // (embed only, --sparse) 0: all non-zero weights
};


OutputFormat output_format(const EmbedArgs& a) {
  std::string f = a.format;
  if (f.empty()) {
    if (a.output.empty() || a.output == "-") return OutputFormat::json;
    f = fs::path(a.output).extension().string();
    if (!f.empty()) f.erase(0, 1);
    ENCORE_CHECK_AS(UsageError, f == "json" || f == "jsonl" || f == "csv" || f == "npy", "output '", a.output,
                    "': use a .npy, .jsonl, .json or .csv file name, or say --format");
  }
  if (f == "jsonl") return OutputFormat::jsonl;
  if (f == "csv") return OutputFormat::csv;
  if (f == "npy") return OutputFormat::npy;
  return OutputFormat::json;
}

// Everything the options say, checked before a model is loaded or a file is written (usage errors, exit 2).
void validate(const EmbedArgs& a, CLI::App* cmd) {
  parse_inference_dtype(a.dtype);
  ENCORE_CHECK_AS(UsageError, !a.texts.empty() || !a.input.empty(),
                  "nothing to embed: give texts as arguments, with -i FILE, or on standard input");
  checked_input_format(*cmd, a.input, a.input_format, a.field, a.jsonl);
  ENCORE_CHECK_AS(UsageError, a.input.empty() || a.texts.empty(), "give texts as arguments or with -i FILE, not both");
  const bool to_file = !a.output.empty() && a.output != "-";
  // the same regular file by another name too: a symbolic or hard link (fs::equivalent), or a path not created yet
  // (a terminal both read and written, -i /dev/stdin -o /dev/stdout, is not one)
  auto same_file = [](const std::string& x, const std::string& y) {
    std::error_code ec, ec_x, ec_y;
    if (is_stream_output(x)) return false;
    const fs::path cx = fs::weakly_canonical(x, ec_x), cy = fs::weakly_canonical(y, ec_y);
    return fs::equivalent(x, y, ec) || (!ec_x && !ec_y && cx == cy);
  };
  ENCORE_CHECK_AS(UsageError, !to_file || a.input.empty() || a.input == "-" || !same_file(a.output, a.input),
                  "output '", a.output, "' would overwrite the input");
  std::error_code ec;
  ENCORE_CHECK_AS(UsageError, !to_file || !fs::is_directory(a.output, ec), "output '", a.output,
                  "' is a directory; give a file name");
  const OutputFormat f = output_format(a);
  ENCORE_CHECK_AS(UsageError, f != OutputFormat::npy || (to_file && !is_stream_output(a.output)),
                  "--format npy needs an output file (-o FILE.npy) it can rewrite the header of; '", a.output,
                  "' is a stream (an open descriptor such as /dev/stdout, or a FIFO): use .jsonl, .json or .csv there");
  ENCORE_CHECK_AS(UsageError, !a.resume || (f == OutputFormat::jsonl && to_file),
                  "--resume needs a .jsonl output (-o FILE.jsonl), which is written block by block");
  const EmbeddingPrecision p = parse_embedding_precision(a.precision);
  const bool bucketed = p == EmbeddingPrecision::int8 || p == EmbeddingPrecision::uint8;
  ENCORE_CHECK_AS(UsageError, !bucketed || !a.calibration.empty(), "--precision ", a.precision,
                  " needs --calibration FILE: texts (one per line, ideally a sample of the corpus) whose embeddings "
                  "set each dimension's range; records are written block by block, so the input itself cannot");
  ENCORE_CHECK_AS(UsageError, bucketed || a.calibration.empty(),
                  "--calibration only applies to --precision int8 or uint8");
}

void add_embed_options(CLI::App* cmd, EmbedArgs& a, bool with_io) {
  cmd->add_option("--model", a.model, "model directory (default: $ENCORE_MODEL, else all-MiniLM-L6-v2)");
  cmd->add_option("--batch-size", a.batch_size, "texts per forward pass")->check(CLI::Range(int64_t{1}, int64_t{1 << 16}))->capture_default_str();
  cmd->add_option("--max-length", a.max_length, "truncate to this many tokens (default: the model's max_seq_length; "
                  "more than the model's limit is lowered to it, with a note)")
      ->check(CLI::Range(int64_t{1}, int64_t{1 << 20}));
  auto* n = cmd->add_flag("--normalize", a.normalize, "L2-normalise embeddings");
  auto* nn = cmd->add_flag("--no-normalize", a.no_normalize, "do not normalise (default: what the model's pipeline says)");
  n->excludes(nn);
  auto* nt = cmd->add_flag("--no-truncation", a.no_truncation, "fail on texts longer than max length instead of "
                           "truncating (the same as --truncation error)");
  auto* tr = cmd->add_option("--truncation", a.truncation, "texts longer than max length: right (keep the first "
                             "tokens, as sentence-transformers), left (keep the last), error (fail naming the text) "
                             "or chunk (embed every window of max length and average them, weighted by tokens; "
                             "docs/cli.md)")
                 ->check(CLI::IsMember({"right", "left", "error", "chunk"}))
                 ->capture_default_str();
  nt->excludes(tr);
  cmd->add_option("--chunk-stride", a.chunk_stride, "--truncation chunk: tokens each window repeats from the one "
                  "before (default 0: windows side by side)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
  auto* pn = cmd->add_option("--prompt-name", a.prompt_name, "prepend the model's prompt of this name to every text "
                             "(config_sentence_transformers.json's prompts, e.g. query; default: the model's "
                             "default_prompt_name, if any)");
  auto* pt = cmd->add_option("--prompt", a.prompt, "prepend this text to every text (instead of a named prompt; "
                             "--prompt '' turns a default prompt off)");
  pn->excludes(pt);
  cmd->add_option("--dimensions", a.dimensions, "keep the first N dimensions of each embedding (Matryoshka models; "
                  "with --normalize the kept part is normalised again)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  add_threads_option(*cmd, a.threads);
  cmd->add_flag("--allow-nonfinite", a.allow_nonfinite, "write NaN/Inf embeddings instead of failing (JSON gets "
                "null for them); by default a forward producing NaN/Inf is an error naming the module");
  add_dtype_option(*cmd, a.dtype, "encoder GEMMs: fp32, bf16 or int8 (docs/quantization.md)");
  if (with_io) add_input_options(*cmd, a.input, a.input_format, a.field, &a.jsonl);
  if (with_io) {
    cmd->add_option("-o,--output", a.output, "output file: .npy, .jsonl, .json or .csv (default: JSON on stdout); "
                    "JSONL/CSV input records keep their fields (e.g. an id) beside the embedding");
    cmd->add_option("--format", a.format, "output format: json, jsonl, csv or npy (default: from the -o extension)")
        ->check(CLI::IsMember({"json", "jsonl", "csv", "npy"}));
    cmd->add_flag("-q,--quiet", a.quiet, "no progress bar");
    cmd->add_option("--shard", a.shard, "I/N: embed only shard I of N (0 <= I < N): a contiguous run of whole "
                    "blocks; the N outputs concatenated in shard order equal one unsharded run (docs/scale.md)")
        ->check(CLI::Validator(
            [](std::string& spec) -> std::string {
              try {
                Shard::parse(spec);
              } catch (const Error& e) {
                return e.what();
              }
              return std::string();
            },
            "I/N"));
    cmd->add_option("--block", a.block, "records encoded together (sorted by length and batched within a block, "
                    "so a record's vector does not depend on the shard; a .jsonl output is fsynced per block; "
                    "standard input without --shard/--resume: default --batch-size, so each batch is written as "
                    "soon as it is embedded)")
        ->check(CLI::Range(int64_t{1}, int64_t{1} << 30))
        ->capture_default_str();
    cmd->add_flag("--resume", a.resume, "continue an interrupted run into the same .jsonl output: whole blocks "
                  "already written are kept, a torn tail is dropped (same input, --shard and --block needed)");
    cmd->add_option("--precision", a.precision, "quantized embeddings as sentence-transformers' quantize_embeddings: "
                    "int8 / uint8 (256 buckets per dimension, ranges from --calibration), binary / ubinary (signs "
                    "packed 8 to a byte)")
        ->check(CLI::IsMember({"float32", "int8", "uint8", "binary", "ubinary"}))
        ->capture_default_str();
    cmd->add_option("--calibration", a.calibration, "int8/uint8: a text file (one text per line) whose embeddings "
                    "give each dimension's minimum and maximum");
    cmd->add_flag("--sparse", a.sparse, "SPLADE sparse vectors from a *ForMaskedLM model (sentence-transformers' "
                  "SparseEncoder): JSON lines of [{\"index\", \"value\"}] (TEI's /embed_sparse), index ascending");
    cmd->add_option("--max-active-dims", a.max_active_dims, "with --sparse: keep the N largest weights per text")
        ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  }
}

// One input text and the record it came from (JSONL/CSV: its fields are carried into the output).
struct Item {
  std::string text;
  std::vector<RecordField> fields;  // empty for positional texts and plain text lines
};

// Where the texts come from: positional arguments, or -i FILE / '-' / a pipe, read one record at a time.
class InputSource {
 public:
  InputSource(const EmbedArgs& a, RecordFormat format) : args_(a.texts), field_(a.field) {
    if (a.input.empty()) return;
    reader_.emplace(a.input, format,
                    RecordReader::Options{.allow_non_objects = false, .what = "input file", .allow_pipe = true});
  }
  // Up to `max` items; empty at the end.
  std::vector<Item> next(size_t max) {
    std::vector<Item> out;
    while (out.size() < max && pos_ < args_.size()) out.push_back({args_[pos_++], {}});
    if (!reader_) return out;
    for (Record r; out.size() < max && reader_->next(r);) {
      Item it{reader_->field(r, field_), {}};
      if (reader_->format() != RecordFormat::text) {
        std::erase_if(r.fields, [&](const RecordField& f) { return replaced(f.name); });
        it.fields = std::move(r.fields);
      }
      out.push_back(std::move(it));
    }
    return out;
  }
  bool streaming() const { return reader_ && reader_->path() == "<stdin>"; }

 private:
  // The output names each record "index" (its position in the input, which --resume checks) and its vector
  // "embedding" (CSV: embedding_0, embedding_1, ...): input fields of those names (an earlier run's output read
  // back) are replaced by this run's, with a note the first time.
  bool replaced(const std::string& name) {
    const bool ours = name == "index" || name == "embedding" ||
                      (name.starts_with("embedding_") && name.size() > 10 &&
                       name.find_first_not_of("0123456789", 10) == std::string::npos);
    if (ours && !noted_) {
      note("the input's field '", name, "' (and any other named index, embedding or embedding_N) is replaced by "
           "the one encore embed writes: the record's position and its new embedding");
      noted_ = true;
    }
    return ours;
  }

  bool noted_ = false;
  std::vector<std::string> args_;
  std::string field_;
  size_t pos_ = 0;
  std::optional<RecordReader> reader_;
};

// .npy v1.0 header for (rows, cols) of float32, int8 or uint8, C order; the data follows it.
std::string npy_header(DType dtype, int64_t rows, int64_t cols) {
  const char* descr = dtype == DType::i8 ? "|i1" : dtype == DType::u8 ? "|u1" : "<f4";
  std::string header = std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': (" +
                       std::to_string(rows) + ", " + std::to_string(cols) + "), }";
  // Padded to 128 bytes in all (the format allows any multiple of 64): the header written first with 0 rows
  // and the final one have the same length.
  header.append(128 - 10 - 1 - header.size(), ' ');
  header.push_back('\n');
  const uint16_t len = static_cast<uint16_t>(header.size());
  return std::string("\x93NUMPY\x01\x00", 8) + static_cast<char>(len & 0xff) + static_cast<char>(len >> 8) + header;
}

std::string json_text(const std::string& s) {
  return Json(s).dump(-1, ' ', false, Json::error_handler_t::replace);  // invalid UTF-8 shown as U+FFFD
}

std::string csv_cell(const std::string& s) {
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

// Writes embeddings block by block as they come. Each record is its index in the whole input (what --shard and
// --resume rely on), then the input record's fields (JSONL/CSV input) or its text, then the embedding:
//   json   an array of {"index": i, ..., "embedding": [...]}
//   jsonl  one such object per line; a file is appended to and fsynced per block (include/encore/shard.hpp)
//   csv    columns index, the input's columns (or text), embedding_0..embedding_{C-1}
//   npy    float32 (rows, C), the row count written at the end (the stream must be a seekable file)
// NaN/Inf (--allow-nonfinite) are null in JSON, nan/inf in CSV. Quantized embeddings (--precision) are integers
// (npy: int8 or uint8). Where the bytes go and how failed writes are
// reported is the caller's: stdout (checked by main), write_file_atomically, or a BlockAppender.
class OutputSink {
 public:
  OutputSink(std::ostream* out, BlockAppender* appender, OutputFormat format, DType dtype)
      : out_(out), appender_(appender), format_(format), dtype_(dtype) {}

  // The embeddings of items (float32, or int8/uint8 quantized), the first of which is record `first_index`.
  void write(const std::vector<Item>& items, int64_t first_index, const Tensor& emb) {
    const int64_t C = emb.size(1);
    if (format_ == OutputFormat::npy) {
      if (rows_ == 0) *out_ << npy_header(dtype_, 0, C);  // rewritten with the row count at the end
      out_->write(static_cast<const char*>(emb.raw_data()),
                  static_cast<std::streamsize>(emb.numel() * static_cast<int64_t>(dtype_size(dtype_))));
      rows_ += emb.size(0), cols_ = C;
      return;
    }
    std::string buf;
    char num[32];
    auto number = [&](int64_t at, const char* separator) {
      if (dtype_ == DType::i8) {
        std::snprintf(num, sizeof num, "%s%d", separator, int{emb.data<int8_t>()[at]});
      } else if (dtype_ == DType::u8) {
        std::snprintf(num, sizeof num, "%s%d", separator, int{emb.data<uint8_t>()[at]});
      } else {
        const float v = emb.data<float>()[at];
        if (std::isfinite(v) || format_ == OutputFormat::csv)
          std::snprintf(num, sizeof num, "%s%.9g", separator, v);
        else
          std::snprintf(num, sizeof num, "%snull", separator);  // JSON has no NaN/Inf
      }
      buf += num;
    };
    for (size_t i = 0; i < items.size(); ++i, ++rows_) {
      const Item& it = items[i];
      const std::string index = std::to_string(first_index + static_cast<int64_t>(i));
      if (format_ == OutputFormat::csv) {
        if (rows_ == 0) {
          buf += "index";
          if (it.fields.empty()) buf += ",text";
          for (const RecordField& f : it.fields) buf += "," + csv_cell(f.name);
          for (int64_t c = 0; c < C; ++c) buf += ",embedding_" + std::to_string(c);
          buf += "\n";
        }
        buf += index;
        if (it.fields.empty()) buf += "," + csv_cell(it.text);
        for (const RecordField& f : it.fields) buf += "," + csv_cell(f.value);
        for (int64_t c = 0; c < C; ++c) number(static_cast<int64_t>(i) * C + c, ",");
        buf += "\n";
        continue;
      }
      const bool lines = format_ == OutputFormat::jsonl;
      buf += lines ? "" : rows_ ? ",\n " : "[\n ";
      buf += "{\"index\": " + index;
      if (it.fields.empty()) buf += ", \"text\": " + json_text(it.text);
      for (const RecordField& f : it.fields) buf += ", " + json_text(f.name) + ": " + f.json;
      buf += ", \"embedding\": [";
      for (int64_t c = 0; c < C; ++c) number(static_cast<int64_t>(i) * C + c, c ? ", " : "");
      buf += lines ? "]}\n" : "]}";
    }
    if (appender_) {
      appender_->append(buf);
      appender_->sync();  // a killed run keeps every whole block (--resume)
      return;
    }
    *out_ << buf;
    out_->flush();  // a reader on the other end of a pipe sees each block as soon as it is embedded
  }

  // width: values per embedding, for the header of an empty .npy (an empty shard is a (0, width) array).
  void finish(int64_t width) {
    if (appender_) return;
    if (format_ == OutputFormat::json) *out_ << (rows_ ? "\n]\n" : "[]\n");
    if (format_ == OutputFormat::npy) {
      if (rows_ == 0) *out_ << npy_header(dtype_, 0, cols_ = width);
      out_->seekp(0);
      *out_ << npy_header(dtype_, rows_, cols_);  // same length: the header is padded to 128 bytes either way
      out_->seekp(0, std::ios::end);
    }
    out_->flush();
  }

 private:
  std::ostream* out_;
  BlockAppender* appender_;
  OutputFormat format_;
  DType dtype_;
  int64_t rows_ = 0, cols_ = 0;
};

SentenceEncoder load_encoder(const EmbedArgs& a) {
  apply_threads(a.threads);
  SentenceEncoder enc = SentenceEncoder::load(a.model.empty() ? default_model_dir() : a.model, parse_dtype(a.dtype));
  if (a.max_length > 0) {
    const int64_t limit = enc.model().max_sequence_length();
    if (a.max_length > limit)
      note("--max-length ", a.max_length, " is more than the model's limit of ", limit, " tokens: using ", limit);
    enc.set_max_seq_length(std::min<int64_t>(a.max_length, limit));
  }
  if (a.dimensions > 0) enc.set_truncate_dim(a.dimensions);
  EncodeOptions prompt;
  prompt.prompt_name = a.prompt_name;
  prompt.prompt = a.prompt;
  enc.resolve_prompt(prompt);  // an unknown --prompt-name fails here, before any input is read or output written
  return enc;
}

// total < 0: unknown (streaming); the bar then counts texts without a total.
// truncated: when given, counts the texts right/left truncation shortened.
Tensor run_encoder(const SentenceEncoder& enc, const std::vector<std::string>& texts, const EmbedArgs& a,
                   int64_t done_before, int64_t total, int64_t* truncated = nullptr) {
  EncodeOptions opt;
  opt.batch_size = a.batch_size;
  if (a.normalize) opt.normalize = true;
  if (a.no_normalize) opt.normalize = false;
  opt.truncation = a.no_truncation            ? Truncation::error
                   : a.truncation == "left"  ? Truncation::left
                   : a.truncation == "error" ? Truncation::error
                   : a.truncation == "chunk" ? Truncation::chunk
                                             : Truncation::right;
  opt.chunk_stride = a.chunk_stride;
  if (truncated) opt.truncated = [truncated](int64_t) { ++*truncated; };
  opt.allow_nonfinite = a.allow_nonfinite;
  opt.prompt_name = a.prompt_name;
  opt.prompt = a.prompt;
  const bool bar = !a.quiet && isatty(STDERR_FILENO) && (total < 0 || total > 2 * a.batch_size);
  if (bar) {
    opt.progress = [done_before, total](int64_t done, int64_t) {
      done += done_before;
      if (total < 0) {
        std::fprintf(stderr, "\r%lld texts", (long long)done);
        return;
      }
      const int width = 40, filled = static_cast<int>(width * done / std::max<int64_t>(total, 1));
      std::fprintf(stderr, "\r[%s%s] %lld/%lld", std::string(filled, '#').c_str(),
                   std::string(width - filled, ' ').c_str(), (long long)done, (long long)total);
      if (done == total) std::fprintf(stderr, "\n");
    };
  }
  return enc.encode(texts, opt);
}

// 22713216 -> "22,713,216"
std::string grouped(int64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

// embed --sparse: every text's SPLADE vector as one JSON line (TEI's /embed_sparse entries), to stdout or -o FILE.
void embed_sparse(const EmbedArgs& a, OutputFormat format, InputSource& source) {
  ENCORE_CHECK_AS(UsageError, a.shard.empty() && !a.resume && a.precision == "float32" && a.dimensions == 0 &&
                                  !a.prompt_name && !a.prompt && !a.normalize &&
                                  (format == OutputFormat::json || format == OutputFormat::jsonl),
                  "--sparse writes JSON lines (standard output or a .jsonl/.json file); --shard, --resume, "
                  "--precision, --dimensions, --prompt(-name), --normalize and npy/csv output do not apply to it");
  const std::vector<Item> items = source.next(SIZE_MAX);
  ENCORE_CHECK_AS(InputError, !items.empty(), "nothing to embed: the input holds no texts");
  apply_threads(a.threads);
  SparseEncoder enc = SparseEncoder::load(a.model.empty() ? default_model_dir() : a.model, parse_dtype(a.dtype));
  if (a.max_length > 0) enc.set_max_seq_length(std::min<int64_t>(a.max_length, enc.encoder().model().max_sequence_length()));
  std::vector<std::string> texts;
  for (const Item& it : items) texts.push_back(it.text);
  SparseEncodeOptions opt;
  opt.batch_size = a.batch_size;
  if (a.max_active_dims > 0) opt.max_active_dims = a.max_active_dims;
  std::ofstream file;
  if (!a.output.empty() && a.output != "-") {
    file.open(a.output);
    ENCORE_CHECK_AS(ResourceError, file.good(), "cannot write '", a.output, "'");
  }
  std::ostream& out = file.is_open() ? file : std::cout;
  for (const SparseVector& v : enc.encode(texts, opt)) {
    Json line = Json::array();
    for (size_t i = 0; i < v.indices.size(); ++i) line.push_back({{"index", v.indices[i]}, {"value", v.values[i]}});
    out << line.dump() << "\n";
  }
  out.flush();
  ENCORE_CHECK_AS(ResourceError, out.good(), "writing '", file.is_open() ? a.output : std::string("<stdout>"), "' failed");
}

}  // namespace

void register_embed(CLI::App& app) {
  static EmbedArgs e;
  auto* embed = app.add_subcommand("embed", "sentence embeddings of texts (arguments, -i FILE, or standard input)");
  embed->add_option("texts", e.texts, "texts to embed (none and no -i: standard input, when it is not a terminal)");
  add_embed_options(embed, e, true);
  embed->callback([embed] {
    const bool implicit_stdin = e.texts.empty() && e.input.empty() && !isatty(STDIN_FILENO);
    if (implicit_stdin) e.input = "-";
    validate(e, embed);
    const RecordFormat input_format = checked_input_format(*embed, e.input, e.input_format, e.field, e.jsonl);
    const OutputFormat format = output_format(e);
    InputSource source(e, input_format);
    ENCORE_CHECK_AS(UsageError, e.sparse || e.max_active_dims == 0, "--max-active-dims needs --sparse");
    if (e.sparse) return embed_sparse(e, format, source);
    // Records are embedded a block at a time (include/encore/shard.hpp): sorted by length and batched within
    // their block, written before the next block is read. Standard input without --shard/--resume streams:
    // blocks are read as they arrive, of --batch-size records unless --block is given. Otherwise the input is
    // read whole first (the shard rule and the progress bar need its size).
    const bool stream = source.streaming() && e.shard.empty() && !e.resume;
    const int64_t block = stream && embed->count("--block") == 0 ? e.batch_size : e.block;
    std::vector<Item> all;
    RecordRange range{0, INT64_MAX};
    if (!stream) {
      all = source.next(SIZE_MAX);
      ENCORE_CHECK_AS(InputError, !all.empty(), "input '", e.input == "-" ? std::string("<stdin>") : e.input,
                      "' holds no texts");
      range = shard_records(static_cast<int64_t>(all.size()), block,
                            e.shard.empty() ? Shard{} : Shard::parse(e.shard));
    }
    const int64_t start = e.resume ? resume_jsonl(e.output, range, block) : range.begin;
    if (e.resume && start == range.end) return;  // a resumed run that had finished
    const EmbeddingPrecision precision = parse_embedding_precision(e.precision);
    auto embed_into = [&](OutputSink& sink) {
      SentenceEncoder enc = load_encoder(e);
      int64_t truncated = 0;
      Tensor ranges;  // int8/uint8: the calibration texts' per-dimension minimum and maximum
      if (!e.calibration.empty()) {
        std::vector<std::string> sample;
        RecordReader reader(e.calibration, RecordFormat::text,
                            RecordReader::Options{.allow_non_objects = false, .what = "calibration file"});
        for (Record r; reader.next(r);) sample.push_back(reader.field(r, "text"));
        ranges = quantization_ranges(run_encoder(enc, sample, e, 0, static_cast<int64_t>(sample.size())));
      }
      int64_t next = start;
      for (std::vector<Item> items;; next += static_cast<int64_t>(items.size())) {
        if (stream) {
          items = source.next(static_cast<size_t>(block));
        } else {
          const int64_t end = std::min(range.end, next + block);
          items.assign(std::make_move_iterator(all.begin() + next), std::make_move_iterator(all.begin() + end));
        }
        if (items.empty()) break;
        std::vector<std::string> texts;
        for (const Item& it : items) texts.push_back(it.text);
        const Tensor emb = run_encoder(enc, texts, e, next - range.begin, stream ? -1 : range.size(), &truncated);
        sink.write(items, next, precision == EmbeddingPrecision::float32 ? emb
                                                                         : quantize_embeddings(emb, precision, ranges));
      }
      if (stream && !e.quiet && isatty(STDERR_FILENO) && next) std::fprintf(stderr, "\n");
      if (stream && next == 0) {  // `encore embed` with nothing given and nothing piped in is a usage error
        if (implicit_stdin)
          throw UsageError("nothing to embed: give texts as arguments, with -i FILE, or on standard input (it was "
                           "empty)");
        throw InputError("standard input holds no texts");
      }
      if (truncated > 0)
        note(grouped(truncated), " of ", grouped(next - start), " texts were longer than ", enc.max_seq_length(),
             " tokens and lost their ", e.truncation == "left" ? "first" : "last", " tokens (--truncation ", e.truncation,
             "); --truncation chunk embeds them whole, --truncation error refuses them");
      const bool packed = precision == EmbeddingPrecision::binary || precision == EmbeddingPrecision::ubinary;
      sink.finish(packed ? (enc.dimension() + 7) / 8 : enc.dimension());
    };
    if (e.output.empty() || e.output == "-") {
      OutputSink sink(&std::cout, nullptr, format, embedding_precision_dtype(precision));  // main checks that stdout was written
      embed_into(sink);
    } else if (format == OutputFormat::jsonl) {
      BlockAppender out(e.output, /*truncate=*/!e.resume);  // appended and fsynced block by block (--resume)
      OutputSink sink(nullptr, &out, format, embedding_precision_dtype(precision));
      embed_into(sink);
      out.close();
    } else {
      // A temporary file renamed over the target at the end: an existing output is never left half-written,
      // a failed write leaves nothing behind.
      write_file_atomically(e.output, [&](std::ostream& os) {
        OutputSink sink(&os, nullptr, format, embedding_precision_dtype(precision));
        embed_into(sink);
      });
    }
  });

  static EmbedArgs s;
  auto* sim = app.add_subcommand("similarity", "cosine similarity matrix of the texts' embeddings");
  sim->add_option("texts", s.texts, "texts to compare")->required();
  add_embed_options(sim, s, false);
  sim->callback([] {
    parse_inference_dtype(s.dtype);
    SentenceEncoder enc = load_encoder(s);
    s.quiet = true;
    const Tensor emb = run_encoder(enc, s.texts, s, 0, static_cast<int64_t>(s.texts.size()));
    const Tensor sim = cos_sim(emb, emb);
    const int64_t n = sim.size(0);
    for (int64_t i = 0; i < n; ++i) std::printf("[%lld] %s\n", (long long)i, s.texts[i].c_str());
    std::printf("\n     ");
    for (int64_t j = 0; j < n; ++j) std::printf(" %6lld", (long long)j);
    std::printf("\n");
    for (int64_t i = 0; i < n; ++i) {
      std::printf("[%2lld] ", (long long)i);
      for (int64_t j = 0; j < n; ++j) std::printf(" %6.3f", sim.data<float>()[i * n + j]);
      std::printf("\n");
    }
  });

  static std::string info_model;
  static bool info_families = false;
  auto* info = app.add_subcommand("info", "architecture, parameters, memory and pooling of a model directory");
  info->add_option("model", info_model, "model directory (default: $ENCORE_MODEL, else all-MiniLM-L6-v2)");
  info->add_flag("--families", info_families,
                 "list every model family encore loads (config.json's model_type) and what each runs, as a "
                 "Markdown table, instead of describing a model");
  info->callback([] {
    if (info_families) {
      ENCORE_CHECK_AS(UsageError, info_model.empty(), "encore info --families takes no model directory");
      std::printf("| model_type | task heads | attention and positions |\n|---|---|---|\n");
      for (const AutoModel::Family& f : AutoModel::supported_families())
        std::printf("| `%s` | %s | %s |\n", f.model_type.c_str(), f.heads.c_str(), f.attention.c_str());
      std::printf("\nEvery family runs padded and padding-free batches, in fp32, bf16 and int8, and trains.\n");
      return;
    }
    const std::string dir = info_model.empty() ? default_model_dir() : info_model;
    SentenceEncoder enc = SentenceEncoder::load(dir);
    const ModelInfo& mi = enc.model().info();
    std::printf("model            %s\n", dir.c_str());
    std::printf("architecture     %s (model_type %s)%s%s\n", mi.architecture.c_str(), mi.model_type.c_str(),
                mi.head.empty() ? "" : ", head: ", mi.head.c_str());
    std::printf("layers           %lld x hidden %lld, %lld heads, intermediate %lld, %s\n", (long long)mi.num_layers,
                (long long)mi.hidden_size, (long long)mi.num_heads, (long long)mi.intermediate_size, mi.hidden_act.c_str());
    std::printf("vocabulary       %lld tokens (%s tokenizer)\n", (long long)mi.vocab_size,
                enc.tokenizer().model_type().c_str());
    const int64_t total = enc.model().module().num_parameters();
    std::printf("parameters       %s in all (%s in the encoder layers)\n", grouped(total).c_str(),
                grouped(mi.num_parameters).c_str());
    if (mi.stored_dtype == "int8")
      std::printf("weights          int8 in the checkpoint (the encoder Linear weights; embeddings, norms and biases "
                  "float32): run it with --dtype int8\n");
    else
      std::printf("weights          %s in the checkpoint (%s)\n", mi.stored_dtype.c_str(),
                  human_bytes(total * 4).c_str());
    std::printf("max length       %lld tokens (model limit %lld)\n", (long long)enc.max_seq_length(),
                (long long)enc.model().max_sequence_length());
    if (mi.head == "sequence_classification" || mi.head == "token_classification") {
      std::string labels;
      for (size_t i = 0; i < mi.id2label.size(); ++i) labels += (i ? ", " : "") + mi.id2label[i];
      std::printf("task             %s classification, %lld labels%s%s\n",
                  mi.head == "token_classification" ? "token" : "sequence", (long long)mi.num_labels,
                  labels.empty() ? "" : ": ", labels.c_str());
      return;
    }
    std::printf("task             sentence embedding\n");
    std::printf("embedding        %lld dimensions%s\n", (long long)enc.dimension(), enc.normalizes() ? ", L2-normalised" : "");
    std::printf("pipeline\n");
    std::istringstream lines(enc.describe());
    for (std::string l; std::getline(lines, l);) std::printf("  %s\n", l.c_str());
  });
}

}  // namespace encore::cli
