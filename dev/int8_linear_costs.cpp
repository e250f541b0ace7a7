// Scratch (not built by default): two costs of BERT-base's int8 Linears in a model that the GEMM-only ceiling
// (bench/cpp/gemm_ceiling.cpp, PackedLinear/int8: one Linear called back to back, Act::none) does not see.
//   g++ -O2 -std=c++20 -fopenmp -I src -I include dev/int8_linear_costs.cpp build/libencore.a -ldnnl \
//       -o /tmp/int8_costs && OMP_NUM_THREADS=2 /tmp/int8_costs
//
// 1. Cold weights: 12 layers x 4 Linears with distinct weights (85 MB of int8, more than the L3) called in model
//    order, against each layer-0 Linear called twice in a row (the second timed), M = 1024. Measured 2026-11-25
//    (2 threads, three runs): cold - hot = 0.10 / 0.16 / 0.13 ms (768 x 2304), 0.004 / 0.006 / -0.009 (768 x 768),
//    0.04 / 0.09 / -0.03 (768 x 3072), 0.08 / 0.16 / 0.11 ms (3072 x 768): about 2.4-5 ms per BERT-base 8x128
//    forward, most of it in the Q/K/V and FFN output Linears. Prefetching the next
//    Linear's packed weights (learned call order, _mm_prefetch T1 or T2 in slices between 64/128-row GEMM calls)
//    did not recover it: the cold - hot gaps stayed 0.08-0.2 ms and the calls got slower (not landed).
// 2. The GELU fused into the intermediate Linear's epilogue (768 x 3072, M = 1024, interleaved, 60 calls each):
//    median 2.436 ms plain, 2.718 ms with gelu_erf (+0.28 ms per layer, 3.4 ms per BERT-base forward); the
//    gelu_erf vector code runs at 0.24 ns per element per thread, and replacing its division by rcp14 + one
//    Newton step did not change that (0.239 vs 0.245 ns; the division overlaps, the op count bounds it).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <vector>

#include "kernels/kernels.hpp"

using namespace encore::kernels;

namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

std::shared_ptr<const PackedLinear> random_int8_linear(int64_t K, int64_t N, std::mt19937& rng) {
  std::normal_distribution<float> normal;
  std::vector<float> w(N * K), b(N);
  for (auto& x : w) x = 0.02f * normal(rng);
  for (auto& x : b) x = normal(rng);
  return PackedLinear::create(w.data(), b.data(), N, K, Precision::int8);
}

void cold_weights(std::mt19937& rng) {
  const int64_t M = 1024, L = 12;
  const std::pair<int64_t, int64_t> shapes[4] = {{768, 2304}, {768, 768}, {768, 3072}, {3072, 768}};
  std::vector<std::shared_ptr<const PackedLinear>> lin;
  for (int l = 0; l < L; ++l)
    for (auto [K, N] : shapes) lin.push_back(random_int8_linear(K, N, rng));
  std::normal_distribution<float> normal;
  std::vector<float> in(M * 3072), out(M * 3072);
  for (auto& x : in) x = normal(rng);
  std::vector<double> cold(4, 0), hot(4, 0);
  const int reps = 6;
  for (int rep = 0; rep <= reps; ++rep) {  // rep 0 warms up
    for (int l = 0; l < L; ++l)
      for (int s = 0; s < 4; ++s) {
        const auto t0 = std::chrono::steady_clock::now();
        lin[l * 4 + s]->forward(out.data(), in.data(), M, Act::none);
        if (rep) cold[s] += ms_since(t0);
      }
    for (int l = 0; l < L; ++l)
      for (int s = 0; s < 4; ++s) {
        lin[s]->forward(out.data(), in.data(), M, Act::none);
        const auto t0 = std::chrono::steady_clock::now();
        lin[s]->forward(out.data(), in.data(), M, Act::none);
        if (rep) hot[s] += ms_since(t0);
      }
  }
  for (int s = 0; s < 4; ++s)
    std::printf("K=%4ld N=%4ld  cold (model order) %.3f ms  hot (repeated) %.3f ms  cold - hot %.3f ms\n",
                static_cast<long>(shapes[s].first), static_cast<long>(shapes[s].second), cold[s] / (reps * L),
                hot[s] / (reps * L), (cold[s] - hot[s]) / (reps * L));
}

void gelu_in_epilogue(std::mt19937& rng) {
  const int64_t M = 1024, K = 768, N = 3072;
  auto lin = random_int8_linear(K, N, rng);
  std::normal_distribution<float> normal;
  std::vector<float> in(M * K), out(M * N);
  for (auto& x : in) x = normal(rng);
  const Act acts[3] = {Act::none, Act::gelu_erf, Act::gelu_tanh};
  std::vector<double> t[3];
  for (int rep = 0; rep < 60; ++rep)
    for (int a = 0; a < 3; ++a) {
      const auto t0 = std::chrono::steady_clock::now();
      lin->forward(out.data(), in.data(), M, acts[a]);
      t[a].push_back(ms_since(t0));
    }
  for (int a = 0; a < 3; ++a) {
    std::sort(t[a].begin(), t[a].end());
    std::printf("768 x 3072, M = 1024, %-9s median %.3f ms  min %.3f ms\n", act_name(acts[a]), t[a][t[a].size() / 2],
                t[a][0]);
  }
}

}  // namespace

int main() {
  std::mt19937 rng(0);
  cold_weights(rng);
  gelu_in_epilogue(rng);
}
