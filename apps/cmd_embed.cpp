// encore embed / similarity / info: sentence embeddings from a model directory (default all-MiniLM-L6-v2).
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "apps/common.hpp"
#include "encore/files.hpp"
#include "encore/runtime.hpp"
#include "encore/sentence_encoder.hpp"
#include "encore/shard.hpp"

namespace encore::cli {

namespace fs = std::filesystem;
using Json = nlohmann::json;

namespace {

// Texts from the arguments, or from FILE: one per line, or JSONL objects with a "text" field (.jsonl/.json
// extension or --jsonl). Lines are kept byte for byte (a trailing \r is dropped); empty lines are texts too.
std::vector<std::string> read_inputs(const std::vector<std::string>& args, const std::string& file, bool jsonl,
                                     const std::string& field) {
  std::vector<std::string> texts = args;
  if (file.empty()) return texts;
  ENCORE_CHECK_AS(UsageError, args.empty(), "give texts as arguments or with -i FILE, not both");
  if (file != "-") check_readable_file(file, "input file", /*allow_pipe=*/true);  // a directory, a FIFO, a symlink loop: named
  std::ifstream in(file == "-" ? "/dev/stdin" : file, std::ios::binary);
  ENCORE_CHECK_AS(InputError, in.good(), "cannot read input file '", file, "'");
  const bool as_json = jsonl || fs::path(file).extension() == ".jsonl";
  std::string line;
  int64_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!as_json) {
      texts.push_back(line);
      continue;
    }
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    Json j;
    try {
      j = Json::parse(line);
    } catch (const Json::exception& e) {
      throw InputError(detail::concat(file, ":", line_no, ": not valid JSON: ", e.what()));
    }
    ENCORE_CHECK_AS(InputError, j.is_object() && j.contains(field) && j[field].is_string(), file, ":", line_no,
                 ": expected an object with a string field '", field, "'");
    texts.push_back(j[field].get<std::string>());
  }
  return texts;
}

// .npy v1.0, little-endian float32, C order.
void write_npy(std::ostream& out, const Tensor& t) {
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + std::to_string(t.size(0)) + ", " +
                       std::to_string(t.size(1)) + "), }";
  const size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header.push_back('\n');
  const uint16_t len = static_cast<uint16_t>(header.size());
  out.write("\x93NUMPY\x01\x00", 8);
  out.put(static_cast<char>(len & 0xff));
  out.put(static_cast<char>(len >> 8));
  out << header;
  out.write(reinterpret_cast<const char*>(t.data<float>()), static_cast<std::streamsize>(t.numel() * sizeof(float)));
}

std::string json_text(const std::string& s) {
  return Json(s).dump(-1, ' ', false, Json::error_handler_t::replace);  // invalid UTF-8 shown as U+FFFD
}

// One JSON object per record: {"index": i, "text": ..., "embedding": [...]}, i the record's index in the input.
void append_json_records(std::string& out, const std::vector<std::string>& texts, int64_t first_index,
                         const Tensor& emb, const char* separator) {
  const int64_t C = emb.size(1);
  char buf[32];
  for (int64_t i = 0; i < emb.size(0); ++i) {
    out += "{\"index\": " + std::to_string(first_index + i) + ", \"text\": " + json_text(texts[first_index + i]) +
           ", \"embedding\": [";
    for (int64_t c = 0; c < C; ++c) {
      const float v = emb.data<float>()[i * C + c];
      if (std::isfinite(v))
        std::snprintf(buf, sizeof buf, "%.9g", v);
      else
        std::snprintf(buf, sizeof buf, "null");  // --allow-nonfinite: JSON has no NaN/Inf
      if (c) out += ", ";
      out += buf;
    }
    out += "]}";
    out += separator;
  }
}

// .npy or a JSON array of the records [first_index, first_index + emb.size(0)) (stdout when path is empty or "-").
void write_embeddings(const std::string& path, const std::vector<std::string>& texts, int64_t first_index,
                      const Tensor& emb) {
  auto write_json = [&](std::ostream& out) {
    std::string body;
    append_json_records(body, texts, first_index, emb, ",\n ");
    if (!body.empty()) body.resize(body.size() - 3);  // no separator after the last record
    out << "[" << (body.empty() ? "" : "\n ") << body << "\n]\n";
  };
  if (path.empty() || path == "-") {
    write_json(std::cout);  // checked by main (check_stdout_written)
    return;
  }
  const std::string ext = fs::path(path).extension().string();
  // A temporary file renamed over the target: an existing output is never left half-written, a failed write
  // (full disk, -o naming a directory) leaves nothing behind.
  write_file_atomically(path, [&](std::ostream& out) {
    if (ext == ".npy")
      write_npy(out, emb);
    else
      write_json(out);
  });
}

struct EmbedArgs {
  std::vector<std::string> texts;
  std::string input, output, model, field = "text", dtype = "fp32";
  bool jsonl = false, normalize = false, no_normalize = false, no_truncation = false, quiet = false;
  bool allow_nonfinite = false;
  int64_t batch_size = 32, max_length = 0;
  int threads = 0;
  std::string shard;          // "I/N" (embed only)
  int64_t block = 1024;       // records encoded together (embed only)
  bool resume = false;        // (embed only)
};

void add_embed_options(CLI::App* cmd, EmbedArgs& a, bool with_io) {
  cmd->add_option("--model", a.model, "model directory (default: $ENCORE_MODEL, else all-MiniLM-L6-v2)");
  cmd->add_option("--batch-size", a.batch_size, "texts per forward pass")->check(CLI::Range(int64_t{1}, int64_t{1 << 16}))->capture_default_str();
  cmd->add_option("--max-length", a.max_length, "truncate to this many tokens (default: the model's max_seq_length)")
      ->check(CLI::Range(int64_t{1}, int64_t{1 << 20}));
  auto* n = cmd->add_flag("--normalize", a.normalize, "L2-normalise embeddings");
  auto* nn = cmd->add_flag("--no-normalize", a.no_normalize, "do not normalise (default: what the model's pipeline says)");
  n->excludes(nn);
  cmd->add_flag("--no-truncation", a.no_truncation, "fail on texts longer than max length instead of truncating");
  add_threads_option(*cmd, a.threads);
  cmd->add_flag("--allow-nonfinite", a.allow_nonfinite, "write NaN/Inf embeddings instead of failing (JSON gets "
                "null for them); by default a forward producing NaN/Inf is an error naming the module");
  cmd->add_option("--dtype", a.dtype, "encoder GEMMs: fp32, bf16 or int8 (docs/quantization.md)")
      ->check(DTypeName())
      ->capture_default_str();
  if (with_io) {
    cmd->add_option("-i,--input", a.input, "text file, one text per line ('-' for stdin), or JSONL with --jsonl/.jsonl");
    cmd->add_flag("--jsonl", a.jsonl, "read -i as JSONL objects");
    cmd->add_option("--field", a.field, "JSONL field holding the text")->capture_default_str();
    cmd->add_option("-o,--output", a.output, "output .npy, .jsonl or .json (default: JSON on stdout)");
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
                    "so a record's vector does not depend on the shard; a .jsonl output is fsynced per block)")
        ->check(CLI::Range(int64_t{1}, int64_t{1} << 30))
        ->capture_default_str();
    cmd->add_flag("--resume", a.resume, "continue an interrupted run into the same .jsonl output: whole blocks "
                  "already written are kept, a torn tail is dropped (same input, --shard and --block needed)");
  }
}

SentenceEncoder load_encoder(const EmbedArgs& a) {
  if (a.threads > 0) set_num_threads(a.threads);
  SentenceEncoder enc = SentenceEncoder::load(a.model.empty() ? default_model_dir() : a.model, parse_dtype(a.dtype));
  if (a.max_length > 0) enc.set_max_seq_length(std::min<int64_t>(a.max_length, enc.model().max_sequence_length()));
  return enc;
}

EncodeOptions encode_options(const EmbedArgs& a) {
  EncodeOptions opt;
  opt.batch_size = a.batch_size;
  if (a.normalize) opt.normalize = true;
  if (a.no_normalize) opt.normalize = false;
  opt.truncate = !a.no_truncation;
  opt.allow_nonfinite = a.allow_nonfinite;
  return opt;
}

void draw_progress(int64_t done, int64_t total) {
  const int width = 40, filled = static_cast<int>(width * done / std::max<int64_t>(total, 1));
  std::fprintf(stderr, "\r[%s%s] %lld/%lld", std::string(filled, '#').c_str(), std::string(width - filled, ' ').c_str(),
               (long long)done, (long long)total);
  if (done == total) std::fprintf(stderr, "\n");
}

Tensor run_encoder(const SentenceEncoder& enc, const std::vector<std::string>& texts, const EmbedArgs& a) {
  EncodeOptions opt = encode_options(a);
  if (!a.quiet && static_cast<int64_t>(texts.size()) > 2 * a.batch_size && isatty(STDERR_FILENO))
    opt.progress = draw_progress;
  return enc.encode(texts, opt);
}

// `encore embed`: the shard's records in blocks (include/encore/shard.hpp): each block encoded on its own; a .jsonl
// output appended and fsynced block by block (so --resume can continue it), other outputs written at the end.
void embed_records(const std::vector<std::string>& texts, const EmbedArgs& a) {
  const int64_t n = static_cast<int64_t>(texts.size());
  const Shard shard = a.shard.empty() ? Shard{} : Shard::parse(a.shard);
  const RecordRange range = shard_records(n, a.block, shard);
  const bool stream = fs::path(a.output).extension() == ".jsonl";
  ENCORE_CHECK_AS(UsageError, !a.resume || stream, "--resume needs a .jsonl output (-o FILE.jsonl), which is written block by block");
  const int64_t start = a.resume ? resume_jsonl(a.output, range, a.block) : range.begin;
  std::unique_ptr<BlockAppender> out;
  if (stream) out = std::make_unique<BlockAppender>(a.output, /*truncate=*/!a.resume);
  if (stream && start == range.end) return;  // a resumed run that had finished, or an empty shard

  SentenceEncoder enc = load_encoder(a);
  EncodeOptions opt = encode_options(a);
  const bool bar = !a.quiet && range.size() > 2 * a.batch_size && isatty(STDERR_FILENO);
  std::vector<Tensor> parts;
  for (int64_t b = start; b < range.end; b += a.block) {
    const int64_t e = std::min(range.end, b + a.block);
    const std::vector<std::string> block(texts.begin() + b, texts.begin() + e);
    if (bar) opt.progress = [&, b](int64_t done, int64_t) { draw_progress(b + done - range.begin, range.size()); };
    Tensor emb = enc.encode(block, opt);
    if (out) {
      std::string lines;
      append_json_records(lines, texts, b, emb, "\n");
      out->append(lines);
      out->sync();
    } else {
      parts.push_back(std::move(emb));
    }
  }
  if (out) return;
  const int64_t C = enc.dimension();
  Tensor all = Tensor::empty({range.size(), C});
  int64_t row = 0;
  for (const Tensor& p : parts) {
    std::copy_n(p.data<float>(), p.numel(), all.data<float>() + row * C);
    row += p.size(0);
  }
  write_embeddings(a.output, texts, range.begin, all);
}

}  // namespace

void register_embed(CLI::App& app) {
  static EmbedArgs e;
  auto* embed = app.add_subcommand("embed", "sentence embeddings of texts (arguments, a file, or JSONL)");
  embed->add_option("texts", e.texts, "texts to embed");
  add_embed_options(embed, e, true);
  embed->callback([] {
    ENCORE_CHECK_AS(UsageError, e.output.empty() || e.input.empty() || fs::weakly_canonical(e.output) != fs::weakly_canonical(e.input),
                    "output '", e.output, "' would overwrite the input");
    if (!e.output.empty() && e.output != "-") {  // checked before any work
      const std::string ext = fs::path(e.output).extension().string();
      ENCORE_CHECK_AS(UsageError, ext == ".npy" || ext == ".jsonl" || ext == ".json", "output '", e.output,
                      "': use a .npy, .jsonl or .json file name");
      std::error_code ec;
      ENCORE_CHECK_AS(UsageError, !fs::is_directory(e.output, ec), "output '", e.output,
                      "' is a directory; give a file name");
    }
    const std::vector<std::string> texts = read_inputs(e.texts, e.input, e.jsonl, e.field);
    ENCORE_CHECK_AS(UsageError, !texts.empty() || !e.input.empty(), "nothing to embed: give texts as arguments or with -i FILE");
    ENCORE_CHECK_AS(InputError, !texts.empty(), "input file '", e.input, "' holds no texts");
    embed_records(texts, e);
  });

  static EmbedArgs s;
  auto* sim = app.add_subcommand("similarity", "cosine similarity matrix of the texts' embeddings");
  sim->add_option("texts", s.texts, "texts to compare")->required();
  add_embed_options(sim, s, false);
  sim->callback([] {
    SentenceEncoder enc = load_encoder(s);
    s.normalize = true;
    s.no_normalize = false;
    s.quiet = true;
    const Tensor emb = run_encoder(enc, s.texts, s);  // normalised: dot products are cosines
    const int64_t n = emb.size(0), C = emb.size(1);
    for (int64_t i = 0; i < n; ++i) std::printf("[%lld] %s\n", (long long)i, s.texts[i].c_str());
    std::printf("\n     ");
    for (int64_t j = 0; j < n; ++j) std::printf(" %6lld", (long long)j);
    std::printf("\n");
    for (int64_t i = 0; i < n; ++i) {
      std::printf("[%2lld] ", (long long)i);
      for (int64_t j = 0; j < n; ++j) {
        double dot = 0;
        for (int64_t c = 0; c < C; ++c) dot += double(emb.data<float>()[i * C + c]) * emb.data<float>()[j * C + c];
        std::printf(" %6.3f", dot);
      }
      std::printf("\n");
    }
  });

  static std::string info_model;
  auto* info = app.add_subcommand("info", "architecture, parameters, memory and pooling of a model directory");
  info->add_option("model", info_model, "model directory (default: $ENCORE_MODEL, else all-MiniLM-L6-v2)");
  info->callback([] {
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
    std::printf("parameters       %lld in the encoder layers (%s as float32)\n", (long long)mi.num_parameters,
                human_bytes(mi.num_parameters * 4).c_str());
    std::printf("max length       %lld tokens (model limit %lld)\n", (long long)enc.max_seq_length(),
                (long long)enc.model().max_sequence_length());
    std::printf("embedding        %lld dimensions%s\n", (long long)enc.dimension(), enc.normalizes() ? ", L2-normalised" : "");
    std::printf("pipeline\n");
    std::istringstream lines(enc.describe());
    for (std::string l; std::getline(lines, l);) std::printf("  %s\n", l.c_str());
  });
}

}  // namespace encore::cli
