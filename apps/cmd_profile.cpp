// encore profile: the time of each operation of a model's forward pass (or training step), as a table sorted by
// time and, with --trace, a Chrome trace (include/encore/profiler.hpp).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>

#include "apps/common.hpp"
#include "encore/model.hpp"
#include "encore/profiler.hpp"
#include "encore/sentence_encoder.hpp"

namespace encore::cli {

namespace {

struct ProfileArgs {
  std::string model, dtype = "fp32", trace;
  int64_t batch = 8, seq = 128;
  int warmup = 2, iters = 10;
  bool train = false;
  int threads = 0;
  uint64_t seed = 0;
};

// (batch, seq) ids drawn uniformly from the vocabulary past its first 1,000 entries (where BERT-style vocabularies
// keep special and unused tokens), seeded.
Tensor random_ids(const ModelInfo& info, const ProfileArgs& a) {
  std::mt19937_64 rng(a.seed);
  const int64_t lo = std::min<int64_t>(1000, info.vocab_size - 1);
  std::uniform_int_distribution<int64_t> pick(lo, info.vocab_size - 1);
  Tensor ids = Tensor::empty({a.batch, a.seq}, DType::i64);
  for (int64_t i = 0; i < ids.numel(); ++i) ids.data<int64_t>()[i] = pick(rng);
  return ids;
}

}  // namespace

void register_profile(CLI::App& app) {
  static ProfileArgs a;
  auto* cmd = app.add_subcommand("profile", "time of each operation of a model's forward pass (or training step), "
                                            "slowest first; --trace writes a Chrome trace");
  cmd->add_option("--model", a.model, "model directory (default: $ENCORE_MODEL, else all-MiniLM-L6-v2)");
  cmd->add_option("--batch", a.batch, "sequences per forward")->check(CLI::Range(int64_t{1}, int64_t{1} << 16))->capture_default_str();
  cmd->add_option("--seq", a.seq, "tokens per sequence (at most the model's limit)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  cmd->add_option("--warmup", a.warmup, "untimed runs first")->check(CLI::Range(0, 100000))->capture_default_str();
  cmd->add_option("--iters", a.iters, "profiled runs, each after a run timed with the profiler off")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  cmd->add_flag("--train", a.train, "profile a training step (forward with dropout + backward of the last hidden "
                "state) instead of an inference forward");
  cmd->add_option("--trace", a.trace, "also write the profiled runs as a Chrome trace JSON (open in "
                  "https://ui.perfetto.dev or chrome://tracing)");
  cmd->add_option("--seed", a.seed, "seed of the random token ids")->capture_default_str();
  add_dtype_option(*cmd, a.dtype, "encoder GEMMs: fp32, bf16 or int8 (inference only)");
  add_threads_option(*cmd, a.threads);
  cmd->callback([] {
    const DType dtype = parse_inference_dtype(a.dtype);
    ENCORE_CHECK_AS(UsageError, !a.train || dtype == DType::f32, "--train profiles fp32 training; --dtype ", a.dtype,
                    " is for inference");
    apply_threads(a.threads);
    AutoModel model = AutoModel::load(a.model.empty() ? default_model_dir() : a.model, dtype);
    const ModelInfo& info = model.info();
    ENCORE_CHECK_AS(UsageError, a.seq <= model.max_sequence_length(), "--seq ", a.seq, " is more than the model's ",
                    model.max_sequence_length(), " tokens");
    const Tensor ids = random_ids(info, a);
    Tensor mask = Tensor::empty({a.batch, a.seq}, DType::i64);
    std::fill_n(mask.data<int64_t>(), mask.numel(), int64_t{1});
    Tensor d_hidden;
    if (a.train) {
      model.train();
      d_hidden = Tensor::full({a.batch, a.seq, info.hidden_size}, 1e-3f);
    }
    auto run = [&] {
      ModelOutput out = model.forward(ids, mask);
      if (a.train) model.backward(d_hidden);
    };
    auto seconds_of_one = [&] {
      const auto t0 = std::chrono::steady_clock::now();
      run();
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    };
    for (int i = 0; i < a.warmup; ++i) run();
    // Runs with the profiler off and on alternate, so drift (clock, cache, other load) falls on both alike.
    profiler::reset();
    double plain = 0, profiled = 0;  // seconds summed over the runs
    for (int i = 0; i < a.iters; ++i) {
      plain += seconds_of_one();
      profiler::set_enabled(true);
      profiled += seconds_of_one();
      profiler::set_enabled(false);
    }
    plain /= a.iters;
    profiled /= a.iters;

    std::printf("%s\n", runtime_info().c_str());
    std::printf("%s (%s), %s, %s: batch %lld x %lld tokens, %d runs\n", info.architecture.c_str(),
                info.model_type.c_str(), info.dtype.c_str(), a.train ? "training step" : "forward",
                (long long)a.batch, (long long)a.seq, a.iters);
    std::printf("%s", profiler::format_table(profiler::summary(), a.iters, profiled).c_str());
    std::printf("%-24s %9s %12.3f %7.1f  (profiler overhead %+.1f%%)\n", "run, profiler off", "", plain * 1e3,
                100.0 * plain / profiled, 100.0 * (profiled / plain - 1.0));
    if (!a.trace.empty()) {
      profiler::write_chrome_trace(a.trace);
      std::printf("trace: %s (%zu events)\n", a.trace.c_str(), profiler::events().size());
    }
  });
}

}  // namespace encore::cli
