// Shared pieces of the encore CLI: the options that describe an encoder stack, and building one.
#pragma once
#include <CLI/CLI.hpp>

#include <cstdint>
#include <memory>
#include <string>

#include "encore/memory_plan.hpp"
#include "encore/nn.hpp"
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
CLI::Validator DTypeName();

// Adds --layers --d-model --heads --d-ff --batch --seq --activation --norm-first --seed --threads.
void add_stack_options(CLI::App& cmd, StackOptions& o);
// Applies --threads and builds a randomly initialised (Xavier, seeded) batch-first encoder in eval mode.
std::unique_ptr<nn::TransformerEncoder> build_encoder(const StackOptions& o);
Tensor random_input(const StackOptions& o);  // (batch, seq, d_model), unit normal, seeded
EncoderShape encoder_shape(const StackOptions& o);
std::string human_bytes(int64_t bytes);

void register_trace(CLI::App& app);
void register_memory(CLI::App& app);
void register_bench(CLI::App& app);
void register_tokenize(CLI::App& app);
void register_embed(CLI::App& app);  // embed, similarity, info
void register_quantize(CLI::App& app);
void register_accuracy(CLI::App& app);
void register_train(CLI::App& app);
void register_serve(CLI::App& app);

}  // namespace encore::cli
