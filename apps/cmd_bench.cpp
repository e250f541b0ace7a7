// encore bench: tokens/s of a configurable encoder stack (randomly initialised; the speed of the shapes).
// For ratios against PyTorch measured in the same run, use bench/encoder_vs_torch.py.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "apps/common.hpp"
#include "encore/runtime.hpp"

namespace encore::cli {

void register_bench(CLI::App& app) {
  auto* cmd = app.add_subcommand("bench", "tokens/s of an encoder stack (default: BERT-base shape, 8 x 128)");
  static StackOptions o;
  static int warmup = 2, iters = 10;
  add_stack_options(*cmd, o);
  cmd->add_option("--warmup", warmup, "untimed iterations")->check(CLI::Range(0, 100000))->capture_default_str();
  cmd->add_option("--iters", iters, "timed iterations")->check(CLI::Range(1, 100000))->capture_default_str();
  cmd->callback([] {
    auto enc = build_encoder(o);
    Tensor x = random_input(o);
    std::printf("%s\n", runtime_info().c_str());
    std::printf("encoder: %lld layers x d_model %lld, %lld heads, d_ff %lld, %s, %s; %lld parameters; %s\n",
                (long long)o.layers, (long long)o.d_model, (long long)o.heads, (long long)o.d_ff,
                o.activation.c_str(), o.norm_first ? "pre-LN" : "post-LN", (long long)enc->num_parameters(),
                o.dtype.c_str());
    Tensor out;
    for (int i = 0; i < warmup; ++i) out = enc->forward(x);
    std::vector<double> ms;
    for (int i = 0; i < iters; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      out = enc->forward(x);
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(ms.begin(), ms.end());
    const double median = ms[ms.size() / 2];
    const double tokens = static_cast<double>(o.batch * o.seq);
    std::printf("input %s -> output %s\n", x.shape_str().c_str(), out.shape_str().c_str());
    std::printf("%d iterations: median %.2f ms, min %.2f ms, max %.2f ms; %.0f tokens/s (median)\n", iters, median,
                ms.front(), ms.back(), tokens / (median / 1000.0));
  });
}

}  // namespace encore::cli
