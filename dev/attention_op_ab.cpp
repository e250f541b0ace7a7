// Scratch A/B (not built by default): ops::attention_forward fused vs unfused (ENCORE_ATTENTION=unfused) on
// q, k, v views of a packed (B, T, 3E) buffer, interleaved in one process. Build by hand from a build dir:
//   g++ -O2 -std=c++20 -fopenmp -I src -I include dev/attention_op_ab.cpp build/libencore.a -ldnnl -o /tmp/attn_ab
//   ENCORE_NUM_THREADS=1 /tmp/attn_ab 8 128 12 64
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "ops/ops.hpp"

using namespace encore;

int main(int argc, char** argv) {
  const int64_t B = argc > 1 ? atoll(argv[1]) : 8, T = argc > 2 ? atoll(argv[2]) : 128;
  const int64_t H = argc > 3 ? atoll(argv[3]) : 12, D = argc > 4 ? atoll(argv[4]) : 64, E = H * D;
  const int rounds = argc > 5 ? atoi(argv[5]) : 20;
  Tensor qkv = Tensor::empty({B, T, 3 * E});
  float* p = qkv.data<float>();
  uint32_t s = 1;
  for (int64_t i = 0; i < B * T * 3 * E; ++i) p[i] = ((s = s * 1664525u + 1013904223u) >> 8) * (4.f / 16777216.f) - 2.f;
  Tensor q = qkv.slice(2, 0, E), k = qkv.slice(2, E, 2 * E), v = qkv.slice(2, 2 * E, 3 * E);
  ops::AttentionMasks masks;
  std::vector<double> tf, tu;
  for (int r = 0; r < rounds + 2; ++r)
    for (int pass = 0; pass < 2; ++pass) {
      const bool fused = (pass + r) % 2 == 0;
      if (fused) unsetenv("ENCORE_ATTENTION"); else setenv("ENCORE_ATTENTION", "unfused", 1);
      auto t0 = std::chrono::steady_clock::now();
      Tensor out = ops::attention_forward(q, k, v, H, masks, nullptr, 0.0, false, 0);
      double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (r >= 2) (fused ? tf : tu).push_back(ms);
    }
  std::sort(tf.begin(), tf.end());
  std::sort(tu.begin(), tu.end());
  const double mf = tf[tf.size() / 2], mu = tu[tu.size() / 2];
  const double gflop = 4.0 * B * H * T * T * D / 1e9;
  std::printf("B=%lld T=%lld H=%lld D=%lld: fused %.2f ms (%.1f GFLOP/s), unfused %.2f ms (%.1f GFLOP/s), speed %.2fx\n",
              (long long)B, (long long)T, (long long)H, (long long)D, mf, gflop / mf * 1e3, mu, gflop / mu * 1e3, mu / mf);
}
