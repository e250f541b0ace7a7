// encore: command-line front end. Thin: parses arguments and calls the library.
#include <cmath>
#include <cstdio>
#include <iostream>
#include <random>

#include "apps/common.hpp"
#include "encore/runtime.hpp"
#include "encore/version.hpp"

namespace encore::cli {

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
  cmd.add_option("--threads", o.threads, "threads (default: all cores)");
  cmd.add_option("--dtype", o.dtype, "weights for inference: fp32, bf16 or int8 (prepared once, like a loaded model)")
      ->capture_default_str();
}

std::unique_ptr<nn::TransformerEncoder> build_encoder(const StackOptions& o) {
  if (o.threads > 0) set_num_threads(o.threads);
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

int main(int argc, char** argv) {
  CLI::App app{"encore: a C++ engine for Transformer encoders"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "encore " ENCORE_VERSION_STRING);
  encore::cli::register_trace(app);
  encore::cli::register_memory(app);
  encore::cli::register_bench(app);
  encore::cli::register_tokenize(app);
  encore::cli::register_embed(app);
  encore::cli::register_quantize(app);
  encore::cli::register_accuracy(app);
  encore::cli::register_train(app);
  encore::cli::register_serve(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const encore::Error& e) {
    std::cerr << "encore: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
