// Shared pieces of the encore CLI: the options that describe an encoder stack, and building one.
#pragma once
#include <CLI/CLI.hpp>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "encore/error.hpp"
#include "encore/memory_plan.hpp"
#include "encore/nn.hpp"
#include "encore/records.hpp"
#include "encore/runtime.hpp"

namespace encore::cli {

struct StackOptions {
  int64_t layers = 12, d_model = 768, heads = 12, d_ff = 3072, batch = 8, seq = 128;
  std::string activation = "gelu";
  bool norm_first = false;
  uint64_t seed = 0;
  int threads = 0;  // 0 = default
  std::string dtype = "fp32";
};

// Every numeric option has a range (docs/errors.md): CLI11's Range lets NaN through, this does not.
// FiniteRange(lo, hi): a finite number in [lo, hi]; "nan", "inf" and "1e999" are refused with the option's name.
CLI::Validator FiniteRange(double lo, double hi);
// --threads N: 1..kMaxThreads (0, the default, means all cores).
CLI::Option* add_threads_option(CLI::App& cmd, int& threads);
// A dtype name parse_dtype accepts (fp32, bf16, fp16, int8 and their aliases), checked while parsing (exit 2).
// Inference options (fp16 is not an inference dtype) use add_dtype_option below.
CLI::Validator DTypeName();

// Adds --layers --d-model --heads --d-ff --batch --seq --activation --norm-first --seed --threads.
void add_stack_options(CLI::App& cmd, StackOptions& o);
// Applies --threads and builds a randomly initialised (Xavier, seeded) batch-first encoder in eval mode.
std::unique_ptr<nn::TransformerEncoder> build_encoder(const StackOptions& o);
Tensor random_input(const StackOptions& o);  // (batch, seq, d_model), unit normal, seeded
EncoderShape encoder_shape(const StackOptions& o);
std::string human_bytes(int64_t bytes);

// Applies --threads: 0 = all cores; more than the machine's cores is allowed, with a note.
void apply_threads(int threads);
// --dtype for inference: fp32/float32, bf16/bfloat16 or int8, checked when the options are parsed (before any
// output), so `--dtype fp16` fails with the allowed values.
void add_dtype_option(CLI::App& cmd, std::string& dtype, const std::string& help);
DType parse_inference_dtype(const std::string& name);
// The input convention of `embed` and `tokenize`: -i/--input FILE ('-' = standard input), --input-format
// text|jsonl|csv (default: from the extension), --field NAME (the text's field in JSONL/CSV). jsonl_alias:
// the old --jsonl flag (= --input-format jsonl), when the command had it.
void add_input_options(CLI::App& cmd, std::string& input, std::string& input_format, std::string& field,
                       bool* jsonl_alias);
// The input's format from those options; refuses --field/--input-format without -i, and --field on plain text.
RecordFormat checked_input_format(const CLI::App& cmd, const std::string& input, const std::string& input_format,
                                  const std::string& field, bool jsonl_alias = false);
// The options of a command that runs a model directory over texts (rerank, classify, ner, fill-mask): the texts as
// arguments (positional `what`) or -i FILE (text lines, JSONL, CSV; '-' = standard input, a FIFO allowed),
// --model (required), --batch-size, --threads, --dtype and the input options.
struct TextTaskArgs {
  std::string model, input, input_format, field = "text", dtype = "fp32";
  std::vector<std::string> texts;
  int64_t batch_size = 32;
  int threads = 0;
};
void add_text_task_options(CLI::App& cmd, TextTaskArgs& a, const std::string& what, const std::string& model_help);
// Checks the options (usage errors, exit 2), applies --threads, and returns the texts: the arguments, or the
// records of -i FILE (JSONL/CSV: the --field of each). An empty result is a usage error saying "nothing to <verb>".
std::vector<std::string> read_task_texts(const CLI::App& cmd, const TextTaskArgs& a, const std::string& verb);
// "encore: note: ..." on stderr: what the CLI changed from what was asked.
template <typename... Args>
void note(const Args&... args) {
  std::fprintf(stderr, "encore: note: %s\n", detail::concat(args...).c_str());
}

void register_trace(CLI::App& app);
void register_memory(CLI::App& app);
void register_bench(CLI::App& app);
void register_tokenize(CLI::App& app);
void register_embed(CLI::App& app);  // embed, similarity, info
void register_quantize(CLI::App& app);
void register_accuracy(CLI::App& app);
void register_train(CLI::App& app);
void register_serve(CLI::App& app);
void register_rerank(CLI::App& app);
void register_ner(CLI::App& app);
void register_classify(CLI::App& app);
void register_profile(CLI::App& app);
void register_fill_mask(CLI::App& app);
void register_qa(CLI::App& app);

}  // namespace encore::cli
