// encore: command-line front end. Thin: parses arguments and calls the library.
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <cstdio>
#include <iostream>
#include <random>
#include <sstream>
#include <thread>

#include "apps/common.hpp"
#include "encore/runtime.hpp"
#include "encore/version.hpp"

namespace encore::cli {

CLI::Validator FiniteRange(double lo, double hi) {
  std::ostringstream desc;
  desc << "FLOAT in [" << lo << " - " << hi << "]";
  return CLI::Validator(
      [lo, hi](std::string& s) -> std::string {
        double v = 0;
        char* end = nullptr;
        errno = 0;
        v = std::strtod(s.c_str(), &end);
        if (s.empty() || end == nullptr || *end != '\0')
          return "expected a number, got '" + s + "'";
        std::ostringstream os;
        if (!std::isfinite(v) || errno == ERANGE || v < lo || v > hi) {
          os << "expected a finite number in [" << lo << ", " << hi << "], got '" << s << "'";
          return os.str();
        }
        return std::string();
      },
      desc.str());
}

CLI::Option* add_threads_option(CLI::App& cmd, int& threads) {
  return cmd.add_option("--threads", threads, "threads (default 0: all cores; at most " +
                                                  std::to_string(kMaxThreads) + ")")
      ->check(CLI::Range(0, kMaxThreads));
}

CLI::Validator DTypeName() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        try {
          parse_dtype(s);
        } catch (const Error& e) {
          return e.what();
        }
        return std::string();
      },
      "DTYPE");
}

void add_stack_options(CLI::App& cmd, StackOptions& o) {
  cmd.add_option("--layers", o.layers, "number of encoder layers")->check(CLI::Range(int64_t{1}, int64_t{1000}))->capture_default_str();
  cmd.add_option("--d-model", o.d_model, "model width")->check(CLI::Range(int64_t{1}, int64_t{65536}))->capture_default_str();
  cmd.add_option("--heads", o.heads, "attention heads")->check(CLI::Range(int64_t{1}, int64_t{4096}))->capture_default_str();
  cmd.add_option("--d-ff", o.d_ff, "feed-forward width")->check(CLI::Range(int64_t{1}, int64_t{1 << 20}))->capture_default_str();
  cmd.add_option("--batch", o.batch, "sequences per batch")->check(CLI::Range(int64_t{1}, int64_t{1 << 16}))->capture_default_str();
  cmd.add_option("--seq", o.seq, "tokens per sequence")->check(CLI::Range(int64_t{1}, int64_t{1 << 20}))->capture_default_str();
  cmd.add_option("--activation", o.activation, "relu, gelu, gelu_tanh, silu, swiglu, geglu")->capture_default_str();
  cmd.add_flag("--norm-first", o.norm_first, "Pre-LN instead of Post-LN");
  cmd.add_option("--seed", o.seed, "initialisation seed")->capture_default_str();
  add_threads_option(cmd, o.threads);
  add_dtype_option(cmd, o.dtype, "weights for inference: fp32, bf16 or int8 (prepared once, like a loaded model)");
}

void apply_threads(int threads) {
  if (threads <= 0) return;
  const unsigned cores = std::thread::hardware_concurrency();
  if (cores > 0 && static_cast<unsigned>(threads) > cores)
    note("--threads ", threads, " is more than this machine's ", cores, " cores: threads will share cores (slower)");
  set_num_threads(threads);
}

void add_dtype_option(CLI::App& cmd, std::string& dtype, const std::string& help) {
  cmd.add_option("--dtype", dtype, help)
      ->check(CLI::IsMember({"fp32", "float32", "bf16", "bfloat16", "int8"}))
      ->capture_default_str();
}

DType parse_inference_dtype(const std::string& name) {
  ENCORE_CHECK_AS(UsageError,
                  name == "fp32" || name == "float32" || name == "bf16" || name == "bfloat16" || name == "int8",
                  "--dtype ", name, ": expected fp32, bf16 or int8");
  return parse_dtype(name);
}

void add_input_options(CLI::App& cmd, std::string& input, std::string& input_format, std::string& field,
                       bool* jsonl_alias) {
  cmd.add_option("-i,--input", input, "input file ('-': standard input): text (one text per line), JSONL or CSV");
  auto* fmt = cmd.add_option("--input-format", input_format, "text, jsonl or csv (default: from the extension: "
                             ".jsonl, .csv, else text)")
                  ->check(CLI::IsMember({"text", "jsonl", "csv"}));
  if (jsonl_alias) cmd.add_flag("--jsonl", *jsonl_alias, "the same as --input-format jsonl")->excludes(fmt);
  cmd.add_option("--field", field, "the JSONL/CSV field holding the text")->capture_default_str();
}

RecordFormat checked_input_format(const CLI::App& cmd, const std::string& input, const std::string& input_format,
                                  const std::string& field, bool jsonl_alias) {
  if (input.empty()) {
    ENCORE_CHECK_AS(UsageError, cmd.count("--field") == 0 && input_format.empty() && !jsonl_alias,
                    "--field and --input-format describe an input file: give it with -i FILE");
    return RecordFormat::text;
  }
  const RecordFormat f = !input_format.empty() ? parse_record_format(input_format)
                         : jsonl_alias         ? RecordFormat::jsonl
                                               : record_format_from_path(input);
  ENCORE_CHECK_AS(UsageError, f != RecordFormat::text || cmd.count("--field") == 0, "--field '", field, "': '",
                  input, "' is read as plain text, one text per line; say --input-format jsonl or csv (or name the "
                  "file .jsonl/.csv) to read a field");
  return f;
}

// The texts given as arguments, then the records of -i FILE (their `field` in JSONL/CSV; '-' = stdin), in order.
static std::vector<std::string> read_input_texts(std::vector<std::string> texts, const std::string& input,
                                                 RecordFormat format, const std::string& field) {
  if (input.empty()) return texts;
  RecordReader reader(input, format, {.what = "input file", .allow_pipe = true});
  for (Record r; reader.next(r);) texts.push_back(reader.field(r, field));
  return texts;
}

void add_text_task_options(CLI::App& cmd, TextTaskArgs& a, const std::string& what, const std::string& model_help) {
  cmd.add_option(what, a.texts, what + " (or -i FILE)");
  cmd.add_option("--model", a.model, model_help)->required();
  cmd.add_option("--batch-size", a.batch_size, "sequences per forward pass")
      ->check(CLI::Range(int64_t{1}, int64_t{1 << 16}))
      ->capture_default_str();
  add_threads_option(cmd, a.threads);
  add_dtype_option(cmd, a.dtype, "encoder GEMMs: fp32, bf16 or int8 (docs/quantization.md)");
  add_input_options(cmd, a.input, a.input_format, a.field, nullptr);
}

std::vector<std::string> read_task_texts(const CLI::App& cmd, const TextTaskArgs& a, const std::string& verb) {
  parse_inference_dtype(a.dtype);
  const RecordFormat format = checked_input_format(cmd, a.input, a.input_format, a.field);
  ENCORE_CHECK_AS(UsageError, a.input.empty() || a.texts.empty(), "give texts as arguments or with -i FILE, not both");
  apply_threads(a.threads);
  std::vector<std::string> texts = read_input_texts(a.texts, a.input, format, a.field);
  ENCORE_CHECK_AS(UsageError, !texts.empty(), "nothing to ", verb, ": give texts as arguments or with -i FILE");
  return texts;
}

std::unique_ptr<nn::TransformerEncoder> build_encoder(const StackOptions& o) {
  apply_threads(o.threads);
  nn::manual_seed(o.seed);
  nn::TransformerEncoderLayer layer(o.d_model, o.heads, o.d_ff, 0.0, o.activation, 1e-5, /*batch_first=*/true,
                                    o.norm_first);
  auto enc = std::make_unique<nn::TransformerEncoder>(layer, o.layers);
  enc->eval();
  enc->prepare_inference(parse_dtype(o.dtype));
  return enc;
}

Tensor random_input(const StackOptions& o) {
  Tensor x = Tensor::empty({o.batch, o.seq, o.d_model});
  std::mt19937 rng(static_cast<uint32_t>(o.seed + 1));
  std::normal_distribution<float> d(0.f, 1.f);
  float* p = x.data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) p[i] = d(rng);
  return x;
}

EncoderShape encoder_shape(const StackOptions& o) {
  EncoderShape s;
  s.layers = o.layers;
  s.d_model = o.d_model;
  s.heads = o.heads;
  s.d_ff = o.d_ff;
  s.batch = o.batch;
  s.seq = o.seq;
  s.activation = o.activation;
  s.norm_first = o.norm_first;
  s.threads = get_num_threads();
  return s;
}

std::string human_bytes(int64_t bytes) {
  char buf[64];
  const double b = static_cast<double>(bytes);
  if (b >= 1024.0 * 1024 * 1024)
    std::snprintf(buf, sizeof buf, "%.2f GiB", b / (1024.0 * 1024 * 1024));
  else if (b >= 1024.0 * 1024)
    std::snprintf(buf, sizeof buf, "%.1f MiB", b / (1024.0 * 1024));
  else if (b >= 1024.0)
    std::snprintf(buf, sizeof buf, "%.1f KiB", b / 1024.0);
  else
    std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(bytes));
  return buf;
}

}  // namespace encore::cli

namespace {

// Standard output is checked like any output file: a full disk or a closed pipe must not exit 0 with the
// output lost ("embed hi > /dev/full").
void check_stdout_written() {
  std::cout.flush();
  const bool stream_ok = static_cast<bool>(std::cout);
  const bool flushed = std::fflush(stdout) == 0 && !std::ferror(stdout);
  const int err = errno;
  ENCORE_CHECK_AS(ResourceError, stream_ok && flushed, "writing standard output failed",
                  flushed ? "" : ": ", flushed ? "" : std::strerror(err));
}

// The CLI's one error boundary: whatever escapes a subcommand becomes one "encore: error: ..." line and a
// documented exit code (docs/errors.md): usage 2, bad input 3, resource 4, internal 70.
int report(const char* kind, const std::string& what, int code) {
  std::cerr << "encore: " << kind << what << "\n";
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace encore;
  CLI::App app{"encore: a C++ engine for Transformer encoders"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "encore " ENCORE_VERSION_STRING);
  app.footer("Exit codes: 0 success, 2 usage (an option or argument is wrong), 3 bad input (a model file, config, "
             "text or data file), 4 resource (memory, disk, a size limit, a failed write), 70 internal error. "
             "See docs/errors.md.");
  encore::cli::register_trace(app);
  encore::cli::register_memory(app);
  encore::cli::register_bench(app);
  encore::cli::register_tokenize(app);
  encore::cli::register_embed(app);
  encore::cli::register_quantize(app);
  encore::cli::register_accuracy(app);
  encore::cli::register_train(app);
  encore::cli::register_serve(app);
  encore::cli::register_rerank(app);
  encore::cli::register_ner(app);
  encore::cli::register_classify(app);
  encore::cli::register_profile(app);
  encore::cli::register_fill_mask(app);
  encore::cli::register_qa(app);
  try {
    try {
      app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
      const int rc = app.exit(e);  // prints help/version (0) or the parse error
      return rc == 0 ? 0 : 2;
    }
    check_stdout_written();
    return 0;
  } catch (const Error& e) {
    return report("error: ", e.what(), exit_code_of(e));
  } catch (const nlohmann::json::exception& e) {
    return report("error: invalid JSON value: ", e.what(), 3);
  } catch (const std::filesystem::filesystem_error& e) {
    std::string what = e.code().message();
    if (!e.path1().empty()) what = "'" + e.path1().string() + "': " + what;
    if (!e.path2().empty()) what += " (and '" + e.path2().string() + "')";
    return report("error: ", what, 3);
  } catch (const std::bad_alloc&) {
    return report("error: ", "out of memory", 4);
  } catch (const std::length_error& e) {
    return report("error: ", std::string("a size limit was exceeded: ") + e.what(), 4);
  } catch (const std::exception& e) {
    return report("internal error (please report it): ", e.what(), 70);
  } catch (...) {
    return report("internal error (please report it): ", "unknown exception", 70);
  }
}
