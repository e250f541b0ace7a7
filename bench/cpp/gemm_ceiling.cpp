// What the hardware and the GEMM library allow, to read bench/compare's end-to-end numbers against.
//
//   ./build/encore_microbench                                  # all, with GFLOP/s counters
//   ./build/encore_microbench --benchmark_format=json          # what bench/compare.py reads
//
// FmaPeak/<isa>: every thread (OpenMP, as many as encore uses) runs 12 independent chains of fused multiply-adds
// on full-width registers, so the FMA units are never waiting for a result: FLOP/s = 2 x lanes x FMAs per second.
// This is the machine's fp32 ceiling for any GEMM (AVX-512: 16 lanes; AVX2: 8 lanes; on CPUs that run
// 512-bit operations as two 256-bit halves the two give the same FLOP/s).
//
// VnniPeak/<isa>: the same with 12 chains of vpdpbusd (u8 x s8 products summed by fours into int32: AVX512-VNNI on
// 16 lanes, AVX-VNNI on 8), the int8 ceiling: ops/s = 2 x 4 x lanes x instructions per second (a multiply and an
// add per u8 x s8 product, as GEMM GOP/s count them).
//
// PackedLinear/<dtype>/M/K/N: encore's prepared linear (oneDNN matmul on weights reordered once, the path every
// encoder layer takes), out(M, N) = in(M, K) · W(N, K)ᵀ + b, at the shapes of a BERT-base layer (K x N =
// 768 x 2304 packed Q/K/V, 768 x 768 attention output, 768 x 3072 and 3072 x 768 feed-forward) for 1, 8 and 32
// sequences of 128 tokens (M = 128, 1024, 4096). FLOP count 2·M·K·N. int8 is the whole int8 Linear as the
// encoder runs it: activations quantized per call, the u8 x s8 GEMM, dequantization, bias and outlier columns.
// int8-static is the same Linear with a static input range (`encore quantize --calibrate`: no range scan or outlier
// search per call); int8-static-2ch also has 2 f32 input channels (what calibration finds in many MiniLM GEMMs),
// which run as every row's outliers in the epilogue.
// fp32-gelu is fp32 with the feed-forward's exact GELU fused as the GEMM's epilogue, as the encoder's intermediate
// Linear runs it (the GEMM-only ceiling of bench/compare.py leaves GELU out: this says what it costs), at BERT-base's
// and all-MiniLM-L6-v2's intermediate shapes; fp32-minilm is fp32 at MiniLM's 384 x 1536 and 384 x 384.
#include <benchmark/benchmark.h>
#include <immintrin.h>
#include <omp.h>

#include <random>
#include <vector>

#include "kernels/kernels.hpp"
#include "runtime/parallel.hpp"

namespace {

constexpr int kChains = 12;
constexpr int64_t kStepsPerThread = 1 << 22;

__attribute__((target("avx512f"))) float fma_chains_avx512(int64_t steps) {
  __m512 acc[kChains];
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i));
  for (int64_t s = 0; s < steps; ++s)
    for (int i = 0; i < kChains; ++i) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
  __m512 sum = acc[0];
  for (int i = 1; i < kChains; ++i) sum = _mm512_add_ps(sum, acc[i]);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, sum);
  float r = 0;
  for (float x : lanes) r += x;
  return r;
}

__attribute__((target("avx2,fma"))) float fma_chains_avx2(int64_t steps) {
  __m256 acc[kChains];
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  for (int i = 0; i < kChains; ++i) acc[i] = _mm256_set1_ps(static_cast<float>(i));
  for (int64_t s = 0; s < steps; ++s)
    for (int i = 0; i < kChains; ++i) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
  __m256 sum = acc[0];
  for (int i = 1; i < kChains; ++i) sum = _mm256_add_ps(sum, acc[i]);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, sum);
  float r = 0;
  for (float x : lanes) r += x;
  return r;
}

__attribute__((target("avx512f,avx512vnni"))) int vnni_chains_avx512(int64_t steps) {
  __m512i acc[kChains];
  const __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-2);
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_epi32(i);
  for (int64_t s = 0; s < steps; ++s)
    for (int i = 0; i < kChains; ++i) acc[i] = _mm512_dpbusd_epi32(acc[i], a, b);
  __m512i sum = acc[0];
  for (int i = 1; i < kChains; ++i) sum = _mm512_add_epi32(sum, acc[i]);
  alignas(64) int lanes[16];
  _mm512_store_si512(lanes, sum);
  int r = 0;
  for (int x : lanes) r += x;
  return r;
}

__attribute__((target("avx2,avxvnni"))) int vnni_chains_avx2(int64_t steps) {
  __m256i acc[kChains];
  const __m256i a = _mm256_set1_epi8(3), b = _mm256_set1_epi8(-2);
  for (int i = 0; i < kChains; ++i) acc[i] = _mm256_set1_epi32(i);
  for (int64_t s = 0; s < steps; ++s)
    for (int i = 0; i < kChains; ++i) acc[i] = _mm256_dpbusd_avx_epi32(acc[i], a, b);
  __m256i sum = acc[0];
  for (int i = 1; i < kChains; ++i) sum = _mm256_add_epi32(sum, acc[i]);
  alignas(32) int lanes[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), sum);
  int r = 0;
  for (int x : lanes) r += x;
  return r;
}

// Every OpenMP thread runs `chains` (kStepsPerThread steps of kChains independent chains); ops_per_step is what one
// step of one chain counts (2 x lanes for an FMA, 2 x 4 x lanes for a vpdpbusd).
template <typename Sink>
void Peak(benchmark::State& state, bool supported, Sink (*chains)(int64_t), double ops_per_step) {
  if (!supported) {
    state.SkipWithError("this CPU lacks the instruction set");
    return;
  }
  const int threads = omp_get_max_threads();
  Sink sink = 0;
  for (auto _ : state) {
#pragma omp parallel reduction(+ : sink)
    sink += chains(kStepsPerThread);
  }
  benchmark::DoNotOptimize(sink);
  const double ops = ops_per_step * kChains * static_cast<double>(kStepsPerThread) * threads;
  state.counters["GFLOPs"] = benchmark::Counter(ops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["threads"] = threads;
}

void FmaPeakAvx512(benchmark::State& s) { Peak(s, __builtin_cpu_supports("avx512f"), fma_chains_avx512, 2.0 * 16); }
void FmaPeakAvx2(benchmark::State& s) {
  Peak(s, __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"), fma_chains_avx2, 2.0 * 8);
}
void VnniPeakAvx512(benchmark::State& s) {
  Peak(s, __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vnni"), vnni_chains_avx512, 2.0 * 4 * 16);
}
void VnniPeakAvx2(benchmark::State& s) { Peak(s, __builtin_cpu_supports("avxvnni"), vnni_chains_avx2, 2.0 * 4 * 8); }
BENCHMARK(VnniPeakAvx512)->Name("VnniPeak/avx512")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(VnniPeakAvx2)->Name("VnniPeak/avx2")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(FmaPeakAvx512)->Name("FmaPeak/avx512")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(FmaPeakAvx2)->Name("FmaPeak/avx2")->UseRealTime()->Unit(benchmark::kMillisecond);

// static_channels < 0: as prepared (dynamic int8); >= 0: int8 with a static input range and that many f32 channels
void PackedLinear(benchmark::State& state, encore::kernels::Precision precision, int static_channels = -1,
                  encore::kernels::Act act = encore::kernels::Act::none) {
  const int64_t M = state.range(0), K = state.range(1), N = state.range(2);
  std::mt19937 rng(0);
  std::normal_distribution<float> normal;
  std::vector<float> in(M * K), weight(N * K), bias(N), out(M * N);
  for (float& x : in) x = normal(rng);
  for (float& x : weight) x = 0.02f * normal(rng);
  for (float& x : bias) x = normal(rng);
  auto linear = encore::kernels::PackedLinear::create(weight.data(), bias.data(), N, K, precision);
  if (static_channels >= 0) {
    encore::kernels::Int8StaticInput range;
    range.lo = -4.5f;  // the inputs are standard normal: 4.5 sigma
    range.hi = 4.5f;
    for (int c = 0; c < static_channels; ++c) range.columns.push_back(c * (K / static_channels));
    linear = linear->with_static_int8_input(range);
  }
  if (!linear->native) {
    state.SkipWithError("no native GEMM for this dtype on this CPU");
    return;
  }
  linear->forward(out.data(), in.data(), M, act);  // primitive created outside the timing
  for (auto _ : state) {
    linear->forward(out.data(), in.data(), M, act);
    benchmark::ClobberMemory();
  }
  state.counters["GFLOPs"] =
      benchmark::Counter(2.0 * M * K * N * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void BertBaseShapes(benchmark::internal::Benchmark* b) {
  for (int64_t M : {128, 1024, 4096})
    for (auto [K, N] : {std::pair<int64_t, int64_t>{768, 2304}, {768, 768}, {768, 3072}, {3072, 768}})
      b->Args({M, K, N});
}
BENCHMARK_CAPTURE(PackedLinear, fp32, encore::kernels::Precision::f32)
    ->Apply(BertBaseShapes)->ArgNames({"M", "K", "N"})->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(PackedLinear, bf16, encore::kernels::Precision::bf16)
    ->Apply(BertBaseShapes)->ArgNames({"M", "K", "N"})->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(PackedLinear, int8, encore::kernels::Precision::int8)
    ->Apply(BertBaseShapes)->ArgNames({"M", "K", "N"})->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(PackedLinear, fp32-gelu, encore::kernels::Precision::f32, -1, encore::kernels::Act::gelu_erf)
    ->Args({1024, 768, 3072})->Args({1024, 384, 1536})->ArgNames({"M", "K", "N"})->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(PackedLinear, fp32-minilm, encore::kernels::Precision::f32)
    ->Args({1024, 384, 1536})->Args({1024, 384, 384})->ArgNames({"M", "K", "N"})->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(PackedLinear, int8-static, encore::kernels::Precision::int8, 0)
    ->Apply(BertBaseShapes)->ArgNames({"M", "K", "N"})->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(PackedLinear, int8-static-2ch, encore::kernels::Precision::int8, 2)
    ->Apply(BertBaseShapes)->ArgNames({"M", "K", "N"})->UseRealTime()->Unit(benchmark::kMillisecond);

// QuantizeRowsU8: the per-call activation quantization alone (range scan, outlier search and u8 quantization of M
// rows of K, rows split over the threads as the int8 Linear splits them): the most a static int8 scheme (ranges
// fixed at calibration) could save per Linear is part of this time; compare with PackedLinear/int8 at the same M
// and K. QuantizeRowsU8Static: the static int8 quantization of the same rows (fixed range [-4.5, 4.5], one pass).
template <bool kStatic>
void QuantizeRows(benchmark::State& state) {
  const int64_t M = state.range(0), K = state.range(1);
  std::mt19937 rng(0);
  std::normal_distribution<float> normal;
  std::vector<float> in(M * K);
  for (float& x : in) x = normal(rng);
  std::vector<uint8_t> q(M * K);
  std::vector<float> scale(M);
  std::vector<int32_t> zp(M);
  std::vector<encore::kernels::Int8RowOutliers> outliers(M);
  const auto p = encore::kernels::int8_static_params(-4.5f, 4.5f, 255);
  const auto& k8 = encore::kernels::int8_kernels();
  for (auto _ : state) {
    encore::runtime::parallel_for(0, M, 64, [&](int64_t r0, int64_t r1) {
      if (kStatic)
        k8.quantize_rows_u8_static(q.data() + r0 * K, scale.data() + r0, in.data() + r0 * K, r1 - r0, K, K, p.scale,
                                   p.inv, p.zp, 255);
      else
        k8.quantize_rows_u8(q.data() + r0 * K, scale.data() + r0, zp.data() + r0, outliers.data() + r0,
                            in.data() + r0 * K, r1 - r0, K, K, 255);
    });
    benchmark::ClobberMemory();
  }
  state.counters["GB/s"] = benchmark::Counter(4.0 * M * K * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK_TEMPLATE(QuantizeRows, false)->Name("QuantizeRowsU8")->Args({1024, 768})->Args({1024, 3072})
    ->Args({4096, 768})->Args({4096, 3072})->ArgNames({"M", "K"})->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK_TEMPLATE(QuantizeRows, true)->Name("QuantizeRowsU8Static")->Args({1024, 768})->Args({1024, 3072})
    ->Args({4096, 768})->Args({4096, 3072})->ArgNames({"M", "K"})->UseRealTime()->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
