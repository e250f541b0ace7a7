// One (sequence, head) block of the fused attention kernel, single-threaded, as the encoder runs it per task:
// q, k, v read as views of a packed (T, 3E) QKV buffer (E = 12 heads), T queries against T keys, no masks.
//
//   ./build/encore_microbench --benchmark_filter=AttentionFused
//
// AttentionFused/<precision>/<Dk>/<T>: precision f32 (the fp32 kernel) or bf16 (the bf16-matmul kernel; where the
// CPU lacks AVX512-BF16 the table's entry is the fp32 kernel, so the two rows measure the same code). Dk 32 is
// MiniLM's head, 64 BERT-base's. FLOP count 4·T·T·Dk (QKᵀ and P·V, a multiply and an add each), what encore
// profile counts for attention; GFLOP/s is that over the time of one call (the key transposition, the online
// softmax and the final normalisation included).
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdlib>
#include <memory>
#include <random>

#include "kernels/kernels.hpp"

namespace {

struct AlignedFloats {
  std::unique_ptr<float, decltype(&std::free)> p;
  explicit AlignedFloats(int64_t n)
      : p(static_cast<float*>(std::aligned_alloc(64, static_cast<size_t>((n * 4 + 63) / 64 * 64))), &std::free) {}
  float* data() const { return p.get(); }
};

void attention_fused_block(benchmark::State& state, bool bf16) {
  using namespace encore::kernels;
  const int64_t Dk = state.range(0), T = state.range(1), H = 12, E = H * Dk, ld = 3 * E;
  // 64-byte aligned as the engine's tensors and scratch are (a std::vector's 16-byte alignment moved these rates by
  // up to ~10% from one run to the next)
  const AlignedFloats qkv(T * ld), out(T * E), scratch(attention_fused_scratch_floats(T, Dk, bf16));
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.f, 1.f);
  for (int64_t i = 0; i < T * ld; ++i) qkv.data()[i] = dist(rng);
  AttentionBlock a;
  a.q = qkv.data();
  a.k = qkv.data() + E;
  a.v = qkv.data() + 2 * E;
  a.ld_q = a.ld_k = a.ld_v = ld;
  a.out = out.data();
  a.ld_out = E;
  a.T = a.S = T;
  a.Dk = a.Dv = Dk;
  a.scale = 1.f / std::sqrt(static_cast<float>(Dk));
  const KernelTable& t = kernels();
  const auto kernel = bf16 ? t.attention_fused_bf16 : t.attention_fused_f32;
  for (auto _ : state) {
    kernel(a, scratch.data());
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(4.0 * T * T * Dk, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}

void shapes(benchmark::internal::Benchmark* b) {
  for (int64_t dk : {32, 64})
    for (int64_t t : {48, 128, 256}) b->Args({dk, t});
}

}  // namespace

BENCHMARK_CAPTURE(attention_fused_block, f32, false)->Name("AttentionFused/f32")->Apply(shapes);
BENCHMARK_CAPTURE(attention_fused_block, bf16, true)->Name("AttentionFused/bf16")->Apply(shapes);
