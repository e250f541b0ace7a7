// Scratch (not built by default): where the time of one fused-attention block goes. The kernel's own tile loop
// (attention_fused_tiles) runs with its matmul object wrapped in one that reads the TSC around each call, so the
// split is K/V tile preparation (load_keys: the K transposition, for bf16 also the packing of K and V), Q·Kᵀ
// (scores), P·V (pv, for bf16 including the conversion of P), and the rest (online softmax, the final
// normalisation, the set-up). Single thread, q/k/v views of a packed (T, 3E) buffer as bench/cpp/attention_fused.cpp.
//   g++ -O3 -std=c++20 -I src -I include dev/attention_split.cpp src/kernels/attention_fused_ref.cpp -o /tmp/attn_split && /tmp/attn_split
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#include <x86intrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "kernels/kernels.hpp"
#include "kernels/isa_target.hpp"

ENCORE_TARGET_BEGIN_AVX512_BF16
namespace encore::kernels::split {
#include "kernels/simd/vec_avx512.inl"
#include "kernels/simd/math.inl"
#include "kernels/simd/attention_fused.inl"
#include "kernels/simd/attention_fused_bf16.inl"
using attention_detail::ScoreOut;

template <typename Mm>
struct Timed {
  Mm& mm;
  uint64_t t[3] = {0, 0, 0};
  void load_keys(int64_t j0, int64_t nk) { auto s = __rdtsc(); mm.load_keys(j0, nk); t[0] += __rdtsc() - s; }
  void scores(const ScoreOut& o, int64_t i0, int64_t nq, int64_t nk) { auto c = __rdtsc(); mm.scores(o, i0, nq, nk); t[1] += __rdtsc() - c; }
  void put_p(float* row, int64_t r, int64_t j, Vec e) { mm.put_p(row, r, j, e); }
  void pv(float* acc, const float* s, int64_t nq, int64_t nk, bool put) { auto c = __rdtsc(); mm.pv(acc, s, nq, nk, put); t[2] += __rdtsc() - c; }
};

void run(bool bf16, int64_t Dk, int64_t T, int iters) {
  using namespace attention_detail;
  const int64_t H = 12, E = H * Dk, ld = 3 * E;
  std::vector<float> qkv(T * ld), out(T * E), scratch(attention_fused_scratch_floats(T, Dk, true));
  uint32_t r = 7;
  for (float& x : qkv) x = ((r = r * 1664525u + 1013904223u) >> 8) * (4.f / 16777216.f) - 2.f;
  AttentionBlock a;
  a.q = qkv.data(); a.k = qkv.data() + E; a.v = qkv.data() + 2 * E;
  a.ld_q = a.ld_k = a.ld_v = ld; a.out = out.data(); a.ld_out = E; a.T = a.S = T; a.Dk = a.Dv = Dk;
  a.scale = 1.f / std::sqrt(float(Dk));
  uint64_t tot = 0, part[3] = {0, 0, 0}, qprep = 0;
  for (int it = 0; it < iters + 10; ++it) {
    float* work = scratch.data() + Dk * kKT;
    const uint64_t t0 = __rdtsc();
    uint64_t t1 = t0;
    uint64_t p[3];
    if (bf16) {
      Bf16Tiles mm(a, scratch.data(), work + tile_work_floats(T));
      t1 = __rdtsc();
      Timed<Bf16Tiles> tm{mm};
      attention_fused_tiles(a, tm, work);
      for (int k = 0; k < 3; ++k) p[k] = tm.t[k];
    } else {
      F32Tiles mm{a, scratch.data()};
      Timed<F32Tiles> tm{mm};
      attention_fused_tiles(a, tm, work);
      for (int k = 0; k < 3; ++k) p[k] = tm.t[k];
    }
    const uint64_t t2 = __rdtsc();
    if (it < 10) continue;
    tot += t2 - t0; qprep += t1 - t0;
    for (int k = 0; k < 3; ++k) part[k] += p[k];
  }
  const double n = iters, other = double(tot - part[0] - part[1] - part[2] - qprep);
  std::printf("%-5s Dk %2lld T %3lld: %8.0f ticks  load_keys %4.1f%%  QK %4.1f%%  PV %4.1f%%  Qbf16 %4.1f%%  softmax+rest %4.1f%%\n",
              bf16 ? "bf16" : "f32", (long long)Dk, (long long)T, tot / n, 100. * part[0] / tot, 100. * part[1] / tot,
              100. * part[2] / tot, 100. * qprep / tot, 100. * other / tot);
}
}  // namespace encore::kernels::split
ENCORE_TARGET_END

int main() {
  for (bool bf16 : {false, true})
    for (int64_t dk : {32, 64})
      for (int64_t t : {48, 128, 256}) encore::kernels::split::run(bf16, dk, t, 2000);
}
