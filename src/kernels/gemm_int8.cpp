// int8 linear layers: dynamic quantization with int32 accumulation by oneDNN (scheme: kernels.hpp and
// docs/quantization.md).
//
//   weights     s8, symmetric per output channel, quantized once (quantize_weights_s8)
//   activations u8, asymmetric per row (token), quantized per call (quantize_rows_u8)
//   GEMM        oneDNN matmul u8 x s8 -> s32, weights reordered once into its preferred layout
//   epilogue    out = act((acc - zp·wsum)·a_scale·w_scale + bias)   (int8_epilogue_f32)
//
// Why u8 with a zero point rather than symmetric s8: VNNI's vpdpbusd multiplies u8 by s8, so u8 activations
// reach it without oneDNN's internal +128 shift; GELU outputs (the second FFN GEMM's input) lie in
// [-0.17, inf), where a symmetric range would waste half the codes; the zero-point term costs one integer
// multiply-add per output, using wsum[n] = sum_k wq[n,k] computed once.
//
// Saturation: without VNNI, oneDNN's u8 x s8 kernels use vpmaddubsw, which adds two u8·s8 products into a
// saturating int16. 255·127·2 = 64770 overflows it (verified: with DNNL_MAX_CPU_ISA=AVX512_CORE or AVX2 every
// output of a random u8 x s8 product was wrong), 127·127·2 = 32258 does not: on such CPUs activations use
// 7 bits (qmax 127). Where oneDNN has no int8 GEMM (or only its reference one), the same quantized numbers are
// computed in f32 (EmulatedInt8Linear).
//
// Threads: PackedLinear is the one kernel-level object that already runs threaded (oneDNN's OpenMP pool);
// the quantize and epilogue steps are split across the same pool with runtime::parallel_for, the project's
// one threading primitive (serial when nested, static split), rather than with a second mechanism.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "oneapi/dnnl/dnnl.hpp"

#include "encore/error.hpp"
#include "kernels/kernels.hpp"
#include "kernels/onednn.hpp"
#include "runtime/parallel.hpp"
#include "kernels/isa_target.hpp"

namespace encore::kernels {

namespace {

// Per-row quantization parameters, shared by the reference and the SIMD bodies so both quantize identically.
struct RowQuant {
  float scale, inv;
  int32_t zp;
};

// lo <= 0 <= hi. scale = (hi - lo)/qmax, inv = 1/scale, zp = clamp(round(-lo·inv), 0, qmax). A non-finite
// row gets scale NaN (outputs NaN, as in f32) and inv 0 (q = zp = 0); a row whose range is 0 or so small that
// 1/scale overflows is all zeros for int8 (scale 1, zp 0).
inline RowQuant row_quant_params(float lo, float hi, bool finite, int qmax) {
  if (!finite) return {std::numeric_limits<float>::quiet_NaN(), 0.f, 0};
  const float range = hi - lo;
  if (!std::isfinite(range)) return {std::numeric_limits<float>::quiet_NaN(), 0.f, 0};
  const float scale = range / static_cast<float>(qmax);
  const float inv = 1.f / scale;
  if (!(range > 0.f) || !std::isfinite(inv)) return {1.f, 1.f, 0};
  const float z = std::nearbyint(-lo * inv);
  return {scale, inv, static_cast<int32_t>(std::min(std::max(z, 0.f), static_cast<float>(qmax)))};
}

// |x·inv| <= qmax·(1 + 2^-23) for x in [lo, hi]. Products out of that range (a row's outliers, whose q is
// overwritten afterwards, or NaN in a non-finite row) are saturated first: converting them to int is undefined.
inline uint8_t quantize_one(float x, const RowQuant& p, int qmax) {
  float y = x * p.inv;
  y = y >= -1e6f ? (y <= 1e6f ? y : 1e6f) : -1e6f;  // NaN -> -1e6
  const int32_t v = static_cast<int32_t>(std::nearbyint(y)) + p.zp;
  return static_cast<uint8_t>(std::min(std::max(v, 0), qmax));
}

// The row's outliers, when 1 <= above <= kInt8MaxOutliers values have |x| > thr (above: their count, exact),
// and the quantization parameters of the remaining values (the scalar reference's way; simd/int8.inl computes
// the same vectorized).
inline RowQuant row_quant_with_outliers(const float* x, int64_t K, float lo, float hi, bool finite, float thr,
                                        int64_t above, int qmax, Int8RowOutliers& outliers) {
  outliers.count = 0;
  if (finite && above >= 1 && above <= kInt8MaxOutliers) {
    lo = 0.f;
    hi = 0.f;
    for (int64_t k = 0; k < K; ++k) {
      if (std::fabs(x[k]) > thr) {
        outliers.index[outliers.count] = static_cast<int32_t>(k);
        outliers.value[outliers.count] = x[k];
        ++outliers.count;
      } else {
        lo = std::min(lo, x[k]);
        hi = std::max(hi, x[k]);
      }
    }
  }
  return row_quant_params(lo, hi, finite, qmax);
}

inline float epilogue_one(int32_t acc, float a_scale, int32_t zp, float w_scale, int32_t wsum, float bias, Act act) {
  const float v = static_cast<float>(acc - zp * wsum);
  return act_scalar(v * (a_scale * w_scale) + bias, act);
}

}  // namespace

// ---------------- scalar definitions ----------------

namespace {

// nearbyint(x) for |x| < 2^22 in the default rounding mode (to nearest, ties to even; encore never changes it):
// x + 1.5·2^23 has no fraction bits left, so the addition rounds x to an integer, ties to even, and the
// subtraction is exact. Inline, where nearbyint is a libm call that saves and restores the FP environment (a
// baseline x86-64 build has no roundss). Needs float arithmetic in float (SSE), not x87's wider registers.
static_assert(FLT_EVAL_METHOD == 0, "round_half_even_small needs float arithmetic evaluated in float");
inline float round_half_even_small(float x) {
  constexpr float kMagic = 12582912.f;  // 1.5 · 2^23
  return (x + kMagic) - kMagic;
}

// max_k |wr[k]| into *amax; false if a value is not finite.
bool row_abs_max(const float* wr, int64_t K, float* amax) {
  float m = 0.f;
  bool finite = true;
  for (int64_t k = 0; k < K; ++k) {
    const float a = std::fabs(wr[k]);
    finite &= a <= std::numeric_limits<float>::max();  // false for inf and NaN
    m = a > m ? a : m;
  }
  *amax = m;
  return finite;
}

// One row of quantize_weights_s8 (its contract in kernels.hpp); false (and nothing written) if wr has a
// non-finite value.
bool quantize_row_s8(int8_t* q, float* scale, const float* wr, int64_t K) {
  float amax = 0.f;
  if (!row_abs_max(wr, K, &amax)) return false;
  // h(s) = (127·s)/127 rounded in f32 is idempotent (checked exhaustively over f32 mantissas), so the scale
  // recomputed from dequantized weights, max|q·s| = 127·s, is s again.
  const float s0 = amax / 127.f;
  float s = (127.f * s0) / 127.f;
  if (!(s > 0.f) || !std::isfinite(1.f / s)) s = 1.f;  // all-zero (or denormal-tiny) row
  *scale = s;
  // |wr[k] / s| <= amax / s, about 127 (or a tiny value where s = 1): inside round_half_even_small's range.
  for (int64_t k = 0; k < K; ++k) {
    const float v = round_half_even_small(wr[k] / s);
    q[k] = static_cast<int8_t>(std::min(std::max(v, -127.f), 127.f));
  }
  return true;
}

[[noreturn]] void throw_non_finite_row(int64_t n) { throw NonFiniteWeightError(n); }

// Rows per parallel block when quantize_linear_int8 quantizes a weight at load (a few µs of work each).
constexpr int64_t kQuantizeRowGrain = 16;

}  // namespace

NonFiniteWeightError::NonFiniteWeightError(int64_t r)
    : Error("int8 quantization: weight row " + std::to_string(r) + " has a non-finite value"), row(r) {}

// The contract's plain form, row after row (quantize_linear_int8 runs the same rows in parallel blocks).
void quantize_weights_s8(int8_t* q, float* scale, const float* w, int64_t N, int64_t K) {
  for (int64_t n = 0; n < N; ++n)
    if (!quantize_row_s8(q + n * K, scale + n, w + n * K, K)) throw_non_finite_row(n);
}

void dequantize_weights_s8(float* w, const int8_t* q, const float* scale, int64_t N, int64_t K) {
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k) w[n * K + k] = static_cast<float>(q[n * K + k]) * scale[n];
}

Int8Weights quantize_linear_int8(const float* w, int64_t N, int64_t K) {
  Int8Weights qw;
  qw.N = N;
  qw.K = K;
  // Both passes split the rows into `chunks` blocks run in parallel, each with its own K floats of scratch,
  // allocated before the regions (nothing may throw inside one).
  const int64_t chunks =
      std::max<int64_t>(1, std::min<int64_t>(runtime::num_threads(), (N + kQuantizeRowGrain - 1) / kQuantizeRowGrain));
  std::vector<float> scratch(static_cast<size_t>(chunks * K), 0.f);
  const auto for_each_chunk = [&](auto&& fn) {  // fn(rows begin, rows end, the chunk's scratch)
    runtime::parallel_for(0, chunks, 1, [&](int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c) fn(c * N / chunks, (c + 1) * N / chunks, scratch.data() + c * K);
    });
  };
  // colmax[k] = max_n |w[n,k]| (per block, then merged: max is exact in any order); outlier columns:
  // colmax > ratio·median(colmax), the largest kMax of them
  std::vector<uint8_t> finite(static_cast<size_t>(N), 1);
  for_each_chunk([&](int64_t n0, int64_t n1, float* local) {
    for (int64_t n = n0; n < n1; ++n) {
      const float* wr = w + n * K;
      bool ok = true;
      for (int64_t k = 0; k < K; ++k) {
        const float a = std::fabs(wr[k]);
        ok &= a <= std::numeric_limits<float>::max();
        local[k] = a > local[k] ? a : local[k];
      }
      finite[n] = ok;
    }
  });
  std::vector<float> colmax(static_cast<size_t>(K), 0.f);
  for (int64_t c = 0; c < chunks; ++c)
    for (int64_t k = 0; k < K; ++k) colmax[k] = std::max(colmax[k], scratch[c * K + k]);
  for (int64_t n = 0; n < N; ++n)
    if (!finite[n]) throw_non_finite_row(n);
  qw.columns = columns_above_median(colmax, kInt8OutlierColumnRatio, kInt8MaxOutlierColumns);
  const int64_t C = static_cast<int64_t>(qw.columns.size());
  qw.column_values.resize(static_cast<size_t>(N * C));
  qw.q.resize(static_cast<size_t>(N * K));
  qw.scale.resize(static_cast<size_t>(N));
  // Each row quantized as quantize_weights_s8 does, with its outlier columns set to 0 in a copy of the row.
  for_each_chunk([&](int64_t n0, int64_t n1, float* body) {
    for (int64_t n = n0; n < n1; ++n) {
      const float* wr = w + n * K;
      std::copy(wr, wr + K, body);
      for (int64_t i = 0; i < C; ++i) {
        qw.column_values[n * C + i] = wr[qw.columns[i]];
        body[qw.columns[i]] = 0.f;
      }
      quantize_row_s8(qw.q.data() + n * K, qw.scale.data() + n, body, K);  // finite: checked above
    }
  });
  return qw;
}

std::vector<int64_t> columns_above_median(const std::vector<float>& colmax, float ratio, int max_count) {
  const int64_t K = static_cast<int64_t>(colmax.size());
  if (K == 0) return {};
  std::vector<float> sorted = colmax;
  std::nth_element(sorted.begin(), sorted.begin() + (K - 1) / 2, sorted.end());
  const float threshold = ratio * sorted[(K - 1) / 2];
  std::vector<int64_t> out;
  for (int64_t k = 0; k < K; ++k)
    if (colmax[k] > threshold) out.push_back(k);
  std::stable_sort(out.begin(), out.end(), [&](int64_t a, int64_t b) { return colmax[a] > colmax[b]; });
  if (out.size() > static_cast<size_t>(max_count)) out.resize(static_cast<size_t>(max_count));
  std::sort(out.begin(), out.end());
  return out;
}

void dequantize_linear_int8(float* w, const Int8Weights& qw) {
  dequantize_weights_s8(w, qw.q.data(), qw.scale.data(), qw.N, qw.K);
  const int64_t C = static_cast<int64_t>(qw.columns.size());
  for (int64_t n = 0; n < qw.N; ++n)
    for (int64_t i = 0; i < C; ++i) w[n * qw.K + qw.columns[i]] = qw.column_values[n * C + i];
}

bool int8_round_trip_exact(const Int8Weights& qw) {
  std::vector<float> w(static_cast<size_t>(qw.N * qw.K));
  dequantize_linear_int8(w.data(), qw);
  return quantize_linear_int8(w.data(), qw.N, qw.K) == qw;
}

void quantize_rows_u8_ref(uint8_t* q, float* scale, int32_t* zp, Int8RowOutliers* outliers, const float* x,
                          int64_t rows, int64_t K, int64_t ld_x, int qmax) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * ld_x;
    float lo = 0.f, hi = 0.f;
    bool finite = true;
    for (int64_t k = 0; k < K; ++k) {
      finite = finite && std::isfinite(xr[k]);
      lo = std::min(lo, xr[k]);
      hi = std::max(hi, xr[k]);
    }
    const float thr = std::max(-lo, hi) / kInt8OutlierRatio;
    int64_t above = 0;
    for (int64_t k = 0; k < K && finite; ++k) above += std::fabs(xr[k]) > thr;
    const RowQuant p = row_quant_with_outliers(xr, K, lo, hi, finite, thr, above, qmax, outliers[r]);
    scale[r] = p.scale;
    zp[r] = p.zp;
    for (int64_t k = 0; k < K; ++k) q[r * K + k] = finite ? quantize_one(xr[k], p, qmax) : 0;
    for (int32_t i = 0; i < outliers[r].count; ++i) q[r * K + outliers[r].index[i]] = static_cast<uint8_t>(p.zp);
  }
}

void quantize_rows_u8_static_ref(uint8_t* q, float* scale, const float* x, int64_t rows, int64_t K, int64_t ld_x,
                                 float a_scale, float inv, int32_t zp, int qmax) {
  const RowQuant p{a_scale, inv, zp};
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * ld_x;
    bool finite = true;
    for (int64_t k = 0; k < K; ++k) {
      finite = finite && std::isfinite(xr[k]);
      q[r * K + k] = quantize_one(xr[k], p, qmax);
    }
    scale[r] = finite ? a_scale : std::numeric_limits<float>::quiet_NaN();
  }
}

Int8StaticParams int8_static_params(float lo, float hi, int qmax) {
  ENCORE_CHECK(std::isfinite(lo) && std::isfinite(hi) && lo <= 0.f && hi >= 0.f, "static int8: input range [", lo,
               ", ", hi, "] must be finite with lo <= 0 <= hi");
  const RowQuant p = row_quant_params(lo, hi, true, qmax);
  return {p.scale, p.inv, p.zp};
}

void int8_epilogue_f32_ref(float* out, const int32_t* acc, const float* a_scale, const int32_t* zp,
                           const float* w_scale, const int32_t* wsum, const float* bias, int64_t rows, int64_t N,
                           Act act) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t n = 0; n < N; ++n)
      out[r * N + n] = epilogue_one(acc[r * N + n], a_scale[r], zp[r], w_scale[n], wsum[n], bias ? bias[n] : 0.f, act);
}

void int8_epilogue_outliers_f32_ref(float* out, const int32_t* acc, float a_scale, int32_t zp, const float* w_scale,
                                    const int32_t* wsum, const float* bias, const Int8RowOutliers& outliers,
                                    const int8_t* wq_t, int64_t N, Act act) {
  for (int64_t n = 0; n < N; ++n) {
    float c = 0.f;
    for (int32_t i = 0; i < outliers.count; ++i)
      c += outliers.value[i] * static_cast<float>(wq_t[static_cast<int64_t>(outliers.index[i]) * N + n]);
    const float v = static_cast<float>(acc[n] - zp * wsum[n]);
    out[n] = act_scalar(v * (a_scale * w_scale[n]) + (bias ? bias[n] : 0.f) + w_scale[n] * c, act);
  }
}

void gemm_u8s8s32_ref(int32_t* acc, const uint8_t* a, const int8_t* w, int64_t M, int64_t K, int64_t N) {
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      int32_t s = 0;
      for (int64_t k = 0; k < K; ++k) s += static_cast<int32_t>(a[m * K + k]) * static_cast<int32_t>(w[n * K + k]);
      acc[m * N + n] = s;
    }
}

}  // namespace encore::kernels

// ---------------- SIMD instantiations (as isa_avx512.cpp / isa_avx2.cpp) ----------------

ENCORE_TARGET_BEGIN_AVX512
namespace encore::kernels::int8_avx512 {
#include "kernels/simd/vec_avx512.inl"
#include "kernels/simd/math.inl"
#include "kernels/simd/int8_vec_avx512.inl"
#include "kernels/simd/int8.inl"
}  // namespace encore::kernels::int8_avx512
ENCORE_TARGET_END

ENCORE_TARGET_BEGIN_AVX2
namespace encore::kernels::int8_avx2 {
#include "kernels/simd/vec_avx2.inl"
#include "kernels/simd/math.inl"
#include "kernels/simd/int8_vec_avx2.inl"
#include "kernels/simd/int8.inl"
}  // namespace encore::kernels::int8_avx2
ENCORE_TARGET_END

namespace encore::kernels {

// ---------------- dispatch: the same ISA as kernels() ----------------

namespace {
const Int8KernelTable kRefTable{"ref", quantize_rows_u8_ref, int8_epilogue_f32_ref, int8_epilogue_outliers_f32_ref,
                                quantize_rows_u8_static_ref};
const Int8KernelTable kAvx2Table{"avx2", int8_avx2::quantize_rows_u8, int8_avx2::int8_epilogue_f32,
                                 int8_avx2::int8_epilogue_outliers_f32, int8_avx2::quantize_rows_u8_static};
const Int8KernelTable kAvx512Table{"avx512", int8_avx512::quantize_rows_u8, int8_avx512::int8_epilogue_f32,
                                   int8_avx512::int8_epilogue_outliers_f32, int8_avx512::quantize_rows_u8_static};

bool verbose() {
  const char* v = std::getenv("ENCORE_VERBOSE");
  return v && std::string(v) == "1";
}
bool reference_mode() { return std::strcmp(kernels().name, "ref") == 0; }
}  // namespace

const Int8KernelTable& int8_kernels_ref() { return kRefTable; }

const Int8KernelTable* int8_kernels_for(Isa isa) {
  if (static_cast<int>(isa) > static_cast<int>(detected_isa())) return nullptr;
  switch (isa) {
    case Isa::avx512: return &kAvx512Table;
    case Isa::avx2: return &kAvx2Table;
    case Isa::scalar: return &kRefTable;
  }
  return nullptr;
}

const Int8KernelTable& int8_kernels() {
  static const Int8KernelTable& t = [&]() -> const Int8KernelTable& {
    const std::string name = kernels().name;  // "ref", "scalar", "avx2", "avx512": decided once in dispatch.cpp
    return name == "avx512" ? kAvx512Table : name == "avx2" ? kAvx2Table : kRefTable;
  }();
  return t;
}

// ---------------- int8 PackedLinear ----------------

const char* int8_path_name(Int8Path p) {
  switch (p) {
    case Int8Path::automatic: return "automatic";
    case Int8Path::native8: return "oneDNN u8 x s8 -> s32, 8-bit activations";
    case Int8Path::native7: return "oneDNN u8 x s8 -> s32, 7-bit activations (no VNNI: vpmaddubsw would saturate)";
    case Int8Path::emulated: return "emulated (no oneDNN int8 GEMM): fake-quantized activations x dequantized weights in fp32 GEMMs";
  }
  return "?";
}

namespace {

// Products and sums stay exact in int32 for K up to 2^31 / (255·127) = 66311: |acc| and |zp·wsum| are each
// at most 255·127·K.
constexpr int64_t kMaxK = 65536;

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

dnnl::matmul::primitive_desc make_pd(int64_t M, int64_t K, int64_t N, const dnnl::memory::desc& wei,
                                     const dnnl::primitive_attr& attr = dnnl::primitive_attr()) {
  dnnl::memory::desc src({M, K}, dt::u8, tag::ab), dst({M, N}, dt::s32, tag::ab);
  return {dnnl::matmul::desc(src, wei, dst), attr, onednn_engine()};
}

// Per-thread scratch reused across calls (forward() may run concurrently from several threads): grow-only.
// q/scale/zp/outliers/acc: a Linear's quantized input and its GEMM result; the `next` ones: the second Linear's
// of a forward_chain, whose input is the first one's output; block: a few rows of that output in f32.
struct Scratch {
  std::vector<uint8_t> q, next_q, scratchpad;
  std::vector<float> scale, xf, next_scale, next_xf, block;
  std::vector<int32_t> zp, acc, next_zp, next_acc;
  std::vector<Int8RowOutliers> outliers, next_outliers;
};
Scratch& scratch() {
  thread_local Scratch s;
  return s;
}
template <typename T>
T* grown(std::vector<T>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
  return v.data();
}

int64_t row_grain(int64_t cols) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(cols, 1)); }

// Quantizes in(M,K) into the scratch with the active kernels, rows split across threads.
void quantize_input(Scratch& s, const float* in, int64_t M, int64_t K, int qmax) {
  uint8_t* q = grown(s.q, M * K);
  float* scale = grown(s.scale, M);
  int32_t* zp = grown(s.zp, M);
  Int8RowOutliers* outliers = grown(s.outliers, M);
  const Int8KernelTable& k8 = int8_kernels();
  runtime::parallel_for(0, M, row_grain(K), [&](int64_t r0, int64_t r1) {
    k8.quantize_rows_u8(q + r0 * K, scale + r0, zp + r0, outliers + r0, in + r0 * K, r1 - r0, K, K, qmax);
  });
}

// A static input range resolved for one Linear (Int8StaticInput).
struct StaticQuant {
  Int8StaticParams p;
  std::vector<int64_t> columns;  // computed in f32
};

StaticQuant resolve_static(const Int8StaticInput& input, int64_t K, int qmax) {
  ENCORE_CHECK(input.columns.size() <= static_cast<size_t>(kInt8MaxOutliers), "static int8: at most ",
               kInt8MaxOutliers, " f32 input columns, got ", input.columns.size());
  for (size_t i = 0; i < input.columns.size(); ++i)
    ENCORE_CHECK(input.columns[i] >= 0 && input.columns[i] < K && (i == 0 || input.columns[i] > input.columns[i - 1]),
                 "static int8: f32 input columns must be ascending indices in [0, ", K, ")");
  return {int8_static_params(input.lo, input.hi, qmax), input.columns};
}

// Rows of in(M,K) quantized with the static parameters. The f32 columns are every row's outliers (exact values,
// q = zero point): the epilogue adds value·wq[:, column]·w_scale, in the same pass, as for the dynamic path's
// outliers (a column that is also one of the weight's f32 columns has wq = 0 there and gets its rank-C update).
void quantize_static(const StaticQuant& sq, uint8_t* q, float* a_scale, int32_t* zp, Int8RowOutliers* outliers,
                     const float* in, int64_t M, int64_t K, int qmax) {
  int8_kernels().quantize_rows_u8_static(q, a_scale, in, M, K, K, sq.p.scale, sq.p.inv, sq.p.zp, qmax);
  const int32_t C = static_cast<int32_t>(sq.columns.size());
  for (int64_t r = 0; r < M; ++r) {
    zp[r] = sq.p.zp;
    outliers[r].count = C;
    for (int32_t i = 0; i < C; ++i) {
      const int64_t c = sq.columns[i];
      outliers[r].index[i] = static_cast<int32_t>(c);
      outliers[r].value[i] = in[r * K + c];
      q[r * K + c] = static_cast<uint8_t>(sq.p.zp);
    }
  }
}

class OneDnnInt8Linear final : public PackedLinear {
 public:
  OneDnnInt8Linear(const Int8Weights& qw, const float* bias, int bits) {
    N = qw.N;
    K = qw.K;
    precision = Precision::int8;
    activation_bits = bits;
    qmax_ = bits == 8 ? 255 : 127;
    w_scale_ = qw.scale;
    wsum_.assign(static_cast<size_t>(N), 0);
    wq_t_.resize(static_cast<size_t>(N * K));
    // wsum and the (K, N) transpose over row blocks in parallel (integer sums: exact). Consecutive rows write
    // neighbouring bytes of the same K cache lines of wq_t_, which stay in cache (K·64 B: 192 KB at K = 3072).
    runtime::parallel_for(0, N, 64, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        int32_t sum = 0;
        for (int64_t j = 0; j < K; ++j) {
          sum += qw.q[i * K + j];
          wq_t_[j * N + i] = qw.q[i * K + j];
        }
        wsum_[i] = sum;
      }
    });
    columns_ = qw.columns;
    const int64_t C = static_cast<int64_t>(columns_.size());
    column_w_.resize(static_cast<size_t>(C * N));  // (C, N) for out += x[:, columns] · column_w
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < C; ++i) column_w_[i * N + n] = qw.column_values[n * C + i];
    if (bias) bias_.assign(bias, bias + N);
    if (reference_mode()) {  // ENCORE_KERNELS=ref: the scalar integer GEMM on the plain weights
      plain_ = qw.q;
      return;
    }
    // Packed layout resolved once with a representative M (as OneDnnPackedLinear: brgemm's blocking depends
    // on K, N and the ISA, not on M).
    const auto chosen = make_pd(128, K, N, dnnl::memory::desc({K, N}, dt::s8, tag::any)).weights_desc();
    packed_desc_ = padded_packing_layout(chosen, K, N);
    packed_ = reorder_weight(dnnl::memory::desc({K, N}, dt::s8, tag::ba), qw.q.data(), packed_desc_);
  }

  // One parallel region per call: each thread quantizes its share of the rows, runs the integer GEMM on them
  // (oneDNN is single-threaded inside the region) and applies the epilogue while they are in cache. Calls of at
  // most kRowsPerThread rows run on the calling thread, where oneDNN threads the GEMM itself. (Three regions -
  // quantize, GEMM, epilogue - cost three barriers, which on a loaded machine means three time slices.)
  void forward(float* out, const float* in, int64_t M, Act act) const override {
    if (M == 0) return;
    runtime::parallel_for(0, M, kRowsPerThread, [&](int64_t r0, int64_t r1) {
      forward_rows(out + r0 * N, in + r0 * K, r1 - r0, act);
    });
  }

  int64_t packed_row_stride() const override { return plain_.empty() ? plain_row_stride(packed_desc_) : 0; }

  // out = next(act(in·Wᵀ + b)) in the same region: each thread's rows go through this Linear's GEMM, its epilogue
  // (kChainBlock rows at a time into a small f32 buffer) and straight on into next's quantization, then next's GEMM
  // and epilogue. The (M, N) f32 intermediate is never written and next never re-reads it; every row is computed
  // exactly as by forward() then next.forward() (the same kernels on the same values), so the result is identical.
  // Needs next to be an int8 Linear of K == N here too, and this one without f32 weight columns (their correction
  // comes after the epilogue, over whole rows).
  bool chains_with(const PackedLinear& next) const override {
    const auto* nx = dynamic_cast<const OneDnnInt8Linear*>(&next);
    return nx && nx->K == N && columns_.empty();
  }
  void forward_chain(float* out, const float* in, int64_t M, Act act, const PackedLinear& next) const override {
    ENCORE_CHECK(chains_with(next), "int8 linear: forward_chain with a Linear it does not chain with");
    const auto& nx = static_cast<const OneDnnInt8Linear&>(next);
    runtime::parallel_for(0, M, kRowsPerThread, [&](int64_t r0, int64_t r1) {
      forward_chain_rows(out + r0 * nx.N, in + r0 * K, r1 - r0, act, nx);
    });
  }

  // A copy sharing the packed weights and primitives (quantize_static: the input's f32 columns are every row's
  // outliers).
  std::shared_ptr<const PackedLinear> with_static_int8_input(const Int8StaticInput& input) const override {
    auto out = std::make_shared<OneDnnInt8Linear>(*this);
    out->static_ = resolve_static(input, K, qmax_);
    out->static_int8 = true;
    return out;
  }

 private:
  static constexpr int64_t kRowsPerThread = 64;
  static constexpr int64_t kChainBlock = 8;  // rows of the f32 intermediate at a time: 8 x 3072 floats = 96 KB

  // in(M, K) quantized into the thread's scratch and its integer GEMM: what the epilogue reads.
  struct Accumulated {
    const float* a_scale;
    const int32_t* zp;
    const Int8RowOutliers* outliers;
    const int32_t* acc;
  };
  Accumulated quantize_and_gemm(Scratch& s, const float* in, int64_t M) const {
    uint8_t* q = grown(s.q, M * K);
    float* a_scale = grown(s.scale, M);
    int32_t* zp = grown(s.zp, M);
    Int8RowOutliers* outliers = grown(s.outliers, M);
    int32_t* acc = grown(s.acc, M * N);
    quantize(q, a_scale, zp, outliers, in, M);
    gemm(s, acc, q, M);
    return {a_scale, zp, outliers, acc};
  }

  void forward_rows(float* out, const float* in, int64_t M, Act act) const {
    Scratch& s = scratch();
    const Accumulated a = quantize_and_gemm(s, in, M);
    const int64_t C = static_cast<int64_t>(columns_.size());
    float* xc = grown(s.xf, M * C);
    for (int64_t r = 0; r < M; ++r)
      for (int64_t i = 0; i < C; ++i) xc[r * C + i] = in[r * K + columns_[i]];
    epilogue(out, a.acc, a.a_scale, a.zp, a.outliers, xc, M, act);
  }

  void forward_chain_rows(float* out, const float* in, int64_t M, Act act, const OneDnnInt8Linear& nx) const {
    Scratch& s = scratch();
    const Accumulated a = quantize_and_gemm(s, in, M);
    // this Linear's output, kChainBlock rows at a time, quantized as next's input (and next's f32 columns kept)
    uint8_t* q2 = grown(s.next_q, M * N);
    float* a_scale2 = grown(s.next_scale, M);
    int32_t* zp2 = grown(s.next_zp, M);
    Int8RowOutliers* outliers2 = grown(s.next_outliers, M);
    const int64_t C2 = static_cast<int64_t>(nx.columns_.size());
    float* xc2 = grown(s.next_xf, M * C2);
    float* block = grown(s.block, kChainBlock * N);
    for (int64_t r0 = 0; r0 < M; r0 += kChainBlock) {
      const int64_t rows = std::min(kChainBlock, M - r0);
      epilogue(block, a.acc + r0 * N, a.a_scale + r0, a.zp + r0, a.outliers + r0, nullptr, rows, act);
      nx.quantize(q2 + r0 * N, a_scale2 + r0, zp2 + r0, outliers2 + r0, block, rows);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t i = 0; i < C2; ++i) xc2[(r0 + r) * C2 + i] = block[r * N + nx.columns_[i]];
    }
    int32_t* acc2 = grown(s.next_acc, M * nx.N);
    nx.gemm(s, acc2, q2, M);
    nx.epilogue(out, acc2, a_scale2, zp2, outliers2, xc2, M, Act::none);
  }

  // Rows of in(M, K) quantized as this Linear's input: per row (quantize_rows_u8), or with its static range.
  void quantize(uint8_t* q, float* a_scale, int32_t* zp, Int8RowOutliers* outliers, const float* in,
                int64_t M) const {
    if (static_) quantize_static(*static_, q, a_scale, zp, outliers, in, M, K, qmax_);
    else int8_kernels().quantize_rows_u8(q, a_scale, zp, outliers, in, M, K, K, qmax_);
  }

  // acc(M, N) = q(M, K) · wqᵀ in int32
  void gemm(Scratch& s, int32_t* acc, const uint8_t* q, int64_t M) const {
    if (!plain_.empty()) {
      gemm_u8s8s32_ref(acc, q, plain_.data(), M, K, N);
      return;
    }
    auto& eng = onednn_engine();
    // oneDNN threads the call by the work-size rule (a no-op inside forward's parallel region), as f32 Linears do
    const runtime::ThreadLimit threads(runtime::threads_for_flops(2.0 * static_cast<double>(M * K * N)));
    // Primitives exist for a bounded set of row counts only (onednn.hpp, for_each_row_block).
    for_each_row_block(M, [&](int64_t r0, int64_t rows) {
      const std::shared_ptr<const Primitive> p = get(rows);
      uint8_t* pad = grown(s.scratchpad, static_cast<int64_t>(p->scratchpad.get_size()));
      dnnl::memory src({{rows, K}, dt::u8, tag::ab}, eng, const_cast<uint8_t*>(q + r0 * K));
      dnnl::memory dst({{rows, N}, dt::s32, tag::ab}, eng, acc + r0 * N);
      dnnl::memory scratchpad(p->scratchpad, eng, pad);
      p->matmul.execute(onednn_thread_stream(), {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, packed_.memory},
                                                 {DNNL_ARG_DST, dst}, {DNNL_ARG_SCRATCHPAD, scratchpad}});
      onednn_thread_stream().wait();
    });
  }

  // out(M, N) = act(dequantized acc + bias + the rows' outliers + xc · column_w); xc(M, C): the input's values
  // in this Linear's f32 weight columns (unused when it has none).
  void epilogue(float* out, const int32_t* acc, const float* a_scale, const int32_t* zp, const Int8RowOutliers* outliers,
                const float* xc, int64_t M, Act act) const {
    const Int8KernelTable& k8 = int8_kernels();
    const float* bias = bias_.empty() ? nullptr : bias_.data();
    const int64_t C = static_cast<int64_t>(columns_.size());
    // With outlier columns every row gets a correction, so the activation comes last, in its own pass.
    const Act fused = C > 0 ? Act::none : act;
    for (int64_t r = 0; r < M;) {
      int64_t e = r;  // rows [r, e) have no outliers: one fused epilogue call
      while (e < M && outliers[e].count == 0) ++e;
      if (e > r) {
        k8.int8_epilogue_f32(out + r * N, acc + r * N, a_scale + r, zp + r, w_scale_.data(), wsum_.data(), bias,
                             e - r, N, fused);
        r = e;
        continue;
      }
      // a row with outliers: their contribution joins the epilogue, in the same pass
      k8.int8_epilogue_outliers_f32(out + r * N, acc + r * N, a_scale[r], zp[r], w_scale_.data(), wsum_.data(), bias,
                                    outliers[r], wq_t_.data(), N, fused);
      ++r;
    }
    if (C == 0) return;
    // out += x[:, columns] · column_w, then the activation
    kernels().gemm_f32(false, false, M, N, C, 1.f, xc, C, column_w_.data(), N, 1.f, out, N);
    if (act != Act::none) kernels().activation_f32(out, out, M * N, act);
  }

  // Per row-block size: the matmul for the packed weights, with a user scratchpad (each thread passes its own, so
  // concurrent calls never share oneDNN's library scratchpad).
  struct Primitive {
    dnnl::matmul matmul;
    dnnl::memory::desc scratchpad;
  };
  std::shared_ptr<const Primitive> get(int64_t M) const {
    std::lock_guard<std::mutex> lock(cache_->mutex);
    auto it = cache_->prims.find(M);
    if (it != cache_->prims.end()) return it->second;
    dnnl::primitive_attr attr;  // M from for_each_row_block's bounded set: the map stays small
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    dnnl::matmul::primitive_desc pd = make_pd(M, K, N, packed_desc_, attr);
    auto p = std::make_shared<const Primitive>(Primitive{dnnl::matmul(pd), pd.scratchpad_desc()});
    cache_->prims.emplace(M, p);
    return p;
  }

  int qmax_ = 255;
  std::optional<StaticQuant> static_;  // with_static_int8_input
  std::vector<float> w_scale_, bias_;
  std::vector<int32_t> wsum_;
  std::vector<int8_t> wq_t_;   // (K, N): weight columns for the outlier correction
  std::vector<int64_t> columns_;  // f32 outlier columns (Int8Weights::columns)
  std::vector<float> column_w_;   // (columns, N)
  std::vector<int8_t> plain_;  // reference mode only
  dnnl::memory::desc packed_desc_;
  PackedWeight packed_;
  struct PrimitiveCache {
    std::mutex mutex;
    // shared_ptr: the primitive a caller holds stays valid whatever the map does meanwhile
    std::unordered_map<int64_t, std::shared_ptr<const Primitive>> prims;
  };
  std::shared_ptr<PrimitiveCache> cache_ = std::make_shared<PrimitiveCache>();  // shared by static copies
};

// The same numbers without an int8 GEMM: x̂ = (q - zp)·a_scale (8-bit; outliers exact), ŵ = wq·w_scale,
// out = act(x̂·ŵᵀ + bias) in an f32 GEMM. Equal to the native result up to f32 rounding of products and sums.
class EmulatedInt8Linear final : public PackedLinear {
 public:
  EmulatedInt8Linear(const Int8Weights& qw, const float* bias) {
    N = qw.N;
    K = qw.K;
    precision = Precision::int8;
    native = false;
    activation_bits = 8;
    columns_ = qw.columns;
    std::vector<float> deq(static_cast<size_t>(N * K));
    dequantize_linear_int8(deq.data(), qw);
    inner_ = PackedLinear::create(deq.data(), bias, N, K, Precision::f32);
  }

  std::shared_ptr<const PackedLinear> with_static_int8_input(const Int8StaticInput& input) const override {
    auto out = std::make_shared<EmulatedInt8Linear>(*this);
    out->static_ = resolve_static(input, K, 255);  // its f32 columns: outliers, exact x dequantized weights
    out->static_int8 = true;
    return out;
  }

  void forward(float* out, const float* in, int64_t M, Act act) const override {
    if (M == 0) return;
    Scratch& s = scratch();
    if (static_) {
      uint8_t* q = grown(s.q, M * K);
      float* scale = grown(s.scale, M);
      int32_t* zp = grown(s.zp, M);
      Int8RowOutliers* outliers = grown(s.outliers, M);
      runtime::parallel_for(0, M, row_grain(K), [&](int64_t r0, int64_t r1) {
        quantize_static(*static_, q + r0 * K, scale + r0, zp + r0, outliers + r0, in + r0 * K, r1 - r0, K, 255);
      });
    } else {
      quantize_input(s, in, M, K, 255);
    }
    float* xf = grown(s.xf, M * K);
    const uint8_t* q = s.q.data();
    const float* a_scale = s.scale.data();
    const int32_t* zp = s.zp.data();
    const Int8RowOutliers* outliers = s.outliers.data();
    runtime::parallel_for(0, M, row_grain(K), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        for (int64_t k = 0; k < K; ++k)
          xf[r * K + k] = static_cast<float>(static_cast<int32_t>(q[r * K + k]) - zp[r]) * a_scale[r];
        for (int32_t i = 0; i < outliers[r].count; ++i) xf[r * K + outliers[r].index[i]] = outliers[r].value[i];
        for (int64_t c : columns_) xf[r * K + c] = in[r * K + c];  // f32 columns see the exact input
      }
    });
    inner_->forward(out, xf, M, act);
  }

 private:
  std::vector<int64_t> columns_;
  std::optional<StaticQuant> static_;
  std::shared_ptr<const PackedLinear> inner_;
};

}  // namespace

void PackedLinear::forward_chain(float*, const float*, int64_t, Act, const PackedLinear&) const {
  throw Error(std::string("forward_chain: this ") + precision_name(precision) +
              " Linear has no chained path (check chains_with first)");
}

std::shared_ptr<const PackedLinear> PackedLinear::with_static_int8_input(const Int8StaticInput&) const {
  throw Error(std::string("static int8 input ranges apply to int8 Linears only, this one is ") +
              precision_name(precision));
}

namespace {
// oneDNN's implementation of the int8 Linear's matmul on this CPU ("" where it has none), decided once.
const std::string& int8_matmul_implementation() {
  static const std::string impl = [] {
    try {
      return std::string(make_pd(128, 256, 256, dnnl::memory::desc({256, 256}, dt::s8, tag::any)).impl_info_str());
    } catch (const dnnl::error&) {
      return std::string();
    }
  }();
  return impl;
}
}  // namespace

bool int8_gemm_kernels_are_process_wide() {
  // ENCORE_KERNELS=ref runs the scalar integer GEMM (OneDnnInt8Linear's reference mode), no oneDNN kernel
  return !reference_mode() && int8_matmul_implementation().rfind("gemm:jit", 0) == 0;
}

void warm_up_int8_gemm_kernels() {
  constexpr int64_t M = 3, N = 16, K = 128;
  std::vector<uint8_t> a(M * K, 0);
  std::vector<int8_t> b(N * K, 0);
  std::vector<int32_t> c(M * N);
  const int32_t column_offset = 0;
  const dnnl_status_t st = dnnl_gemm_u8s8s32('N', 'T', 'F', M, N, K, 1.f, a.data(), K, 0, b.data(), K, 0, 0.f,
                                             c.data(), N, &column_offset);
  ENCORE_CHECK(st == dnnl_success, "dnnl_gemm_u8s8s32 failed with status ", static_cast<int>(st));
}

Int8Path int8_path_for_this_cpu() {
  static const Int8Path path = [] {
    // oneDNN's effective ISA honours DNNL_MAX_CPU_ISA. VNNI: avx512_core_vnni and above (bit 0x40, AMX
    // included) or avx2_vnni (bit 0x400).
    const unsigned isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
    const bool vnni = (isa & 0x40u) != 0 || (isa & 0x400u) != 0;
    const std::string& impl = int8_matmul_implementation();
    // oneDNN's reference matmul is correct but orders of magnitude slower than an f32 GEMM: emulate instead.
    const Int8Path p = impl.empty() || impl.rfind("ref", 0) == 0 ? Int8Path::emulated
                       : vnni                                     ? Int8Path::native8
                                                                  : Int8Path::native7;
    if (verbose())
      std::fprintf(stderr, "encore: int8 GEMM: %s [oneDNN %s, cpu isa 0x%x]\n", int8_path_name(p),
                   impl.empty() ? "none" : impl.c_str(), isa);
    return p;
  }();
  return path;
}

std::shared_ptr<const PackedLinear> create_int8_linear(const float* weight, const float* bias, int64_t N, int64_t K,
                                                       Int8Path path) {
  ENCORE_CHECK(N > 0 && K > 0, "PackedLinear: empty weight (", N, ", ", K, ")");
  ENCORE_CHECK(K <= kMaxK, "int8 linear: in_features ", K, " exceeds ", kMaxK,
               " (int32 accumulation could overflow); use fp32 or bf16");
  if (path == Int8Path::automatic) path = int8_path_for_this_cpu();
  const Int8Weights qw = quantize_linear_int8(weight, N, K);
  if (path == Int8Path::emulated) return std::make_shared<EmulatedInt8Linear>(qw, bias);
  return std::make_shared<OneDnnInt8Linear>(qw, bias, path == Int8Path::native8 ? 8 : 7);
}

}  // namespace encore::kernels
