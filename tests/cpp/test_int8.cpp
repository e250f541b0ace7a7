// int8 kernels and the int8 PackedLinear (gemm_int8.cpp, docs/quantization.md).
//
// Tolerances, per test:
//  * quantize_rows_u8 (every ISA) vs quantize_rows_u8_ref: bit-identical q, scale, zero point and outliers (min,
//    max and counts are exact; the row parameters come from one shared scalar function).
//  * epilogues (plain and with a row's outliers) vs _ref: 2e-6 scaled by max(1, |terms|) (fused vs unfused multiply-add, and
//    the polynomial GELU/exp of the SIMD activations, 1e-6 in ActivationsMatchRef).
//  * oneDNN's u8 x s8 -> s32 GEMM: exact integers, checked through the whole linear against a pipeline of the
//    _ref kernels (scalar integer GEMM): max scaled error 1e-5 (f32 rounding in epilogue/corrections only).
//  * int8 linear vs the fp32 linear computed in double: within the quantization error bound, element by element:
//      |y - y_ref| <= L·(1.5·a_scale[m]·sum_k |ŵ[n,k]| + w_scale[n]/2·sum_k |x[m,k]|) + 1e-5·sum_k |x·w| + 1e-6
//    (body activations are off by at most 1.5 steps: half a step of rounding plus one where the zero point's own
//    rounding pushes the top of the range past qmax; weights by half a step; outliers and f32 columns are exact;
//    L = 1.13 bounds the slope of GELU/SiLU, 1 for the others).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "oneapi/dnnl/dnnl.h"

#include "encore/error.hpp"
#include "kernels/kernels.hpp"
#include "int8_test_helpers.hpp"
#include "scoped_threads.hpp"

using namespace encore::kernels;
using namespace int8_test;

namespace {

const int64_t kSizes[] = {1, 3, 7, 8, 15, 16, 17, 31, 33, 64, 100, 384, 768, 1001};
const Act kActs[] = {Act::none, Act::relu, Act::gelu_erf, Act::gelu_tanh, Act::silu, Act::tanh};

// Massive values injected per row in variant 4: one, a few, the most a row may have, one too many.
const int64_t kOutlierCounts[4] = {1, 3, kInt8MaxOutliers, kInt8MaxOutliers + 1};

// Rows of K values exercising every branch of the row quantizer.
std::vector<float> quantizer_rows(int64_t K, int64_t ld, uint32_t seed, int variant) {
  const int64_t rows = 4;
  auto x = randn(rows * ld, seed, 0.7f, variant == 1 ? 3.f : variant == 2 ? -3.f : 0.f);
  for (int64_t r = 0; r < rows; ++r) {
    float* row = x.data() + r * ld;
    switch (variant) {
      case 3:  // all zero
        std::fill(row, row + K, 0.f);
        break;
      case 4:  // a few massive values: outliers when there are at most kInt8MaxOutliers of them
        for (int64_t i = 0; i < std::min<int64_t>(K, kOutlierCounts[r]); ++i)
          row[(i * 7919) % K] = (i % 2 ? -1.f : 1.f) * (30.f + static_cast<float>(i));
        break;
      case 5:  // non-finite
        row[K / 2] = r % 2 ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
        break;
      case 6:  // tiny: 1/scale overflows
        for (int64_t k = 0; k < K; ++k) row[k] *= 1e-40f;
        break;
      case 7:  // values exactly halfway between codes and on the range ends
        for (int64_t k = 0; k < K; ++k) row[k] = static_cast<float>(k % 11) * 0.5f - 2.5f;
        break;
      case 8:  // a huge outlier over a tiny body: x·(1/scale) far outside int32 for the outlier itself
        for (int64_t k = 0; k < K; ++k) row[k] *= 1e-3f;
        row[(r * 5) % K] = r % 2 ? -1e30f : 1e30f;
        break;
      default:
        break;
    }
  }
  return x;
}

}  // namespace

TEST(Int8, QuantizeRowsMatchesRefBitwise) {
  ASSERT_FALSE(int8_tables().empty());
  for (const Int8KernelTable* t : int8_tables())
    for (int64_t K : kSizes)
      for (int qmax : {255, 127})
        for (int variant = 0; variant < 9; ++variant) {
          const int64_t rows = 4, ld = K + (variant % 2) * 5;  // odd variants read strided rows
          auto x = quantizer_rows(K, ld, static_cast<uint32_t>(K * 31 + variant), variant);
          std::vector<uint8_t> q1(rows * K), q2(rows * K);
          std::vector<float> s1(rows), s2(rows);
          std::vector<int32_t> z1(rows), z2(rows);
          std::vector<Int8RowOutliers> o1(rows), o2(rows);
          t->quantize_rows_u8(q1.data(), s1.data(), z1.data(), o1.data(), x.data(), rows, K, ld, qmax);
          quantize_rows_u8_ref(q2.data(), s2.data(), z2.data(), o2.data(), x.data(), rows, K, ld, qmax);
          const std::string where = std::string(t->name) + " K=" + std::to_string(K) + " qmax=" +
                                    std::to_string(qmax) + " variant=" + std::to_string(variant);
          EXPECT_EQ(q1, q2) << where;
          EXPECT_EQ(z1, z2) << where;
          for (int64_t r = 0; r < rows; ++r) {
            EXPECT_TRUE(same_bits(s1[r], s2[r])) << where << " row " << r << ": " << s1[r] << " vs " << s2[r];
            ASSERT_EQ(o1[r].count, o2[r].count) << where << " row " << r;
            for (int32_t i = 0; i < o1[r].count; ++i) {
              EXPECT_EQ(o1[r].index[i], o2[r].index[i]) << where;
              EXPECT_TRUE(same_bits(o1[r].value[i], o2[r].value[i])) << where;
            }
          }
        }
}

TEST(Int8, QuantizeRowsReferenceProperties) {
  for (int64_t K : kSizes)
    for (int qmax : {255, 127})
      for (int variant : {0, 1, 2, 3, 4, 7, 8}) {
        const int64_t rows = 4;
        auto x = quantizer_rows(K, K, static_cast<uint32_t>(K + variant), variant);
        std::vector<uint8_t> q(rows * K);
        std::vector<float> scale(rows);
        std::vector<int32_t> zp(rows);
        std::vector<Int8RowOutliers> out(rows);
        quantize_rows_u8_ref(q.data(), scale.data(), zp.data(), out.data(), x.data(), rows, K, K, qmax);
        for (int64_t r = 0; r < rows; ++r) {
          ASSERT_GT(scale[r], 0.f);
          ASSERT_GE(zp[r], 0);
          ASSERT_LE(zp[r], qmax);
          std::vector<bool> is_outlier(K, false);
          for (int32_t i = 0; i < out[r].count; ++i) {
            is_outlier[out[r].index[i]] = true;
            EXPECT_EQ(out[r].value[i], x[r * K + out[r].index[i]]);  // exact
            EXPECT_EQ(q[r * K + out[r].index[i]], zp[r]);            // reads as 0 in the GEMM
          }
          if (variant == 4 && K >= 2 * kInt8MaxOutliers) {
            EXPECT_EQ(out[r].count, r < 3 ? kOutlierCounts[r] : 0) << "K=" << K << " (more than kInt8MaxOutliers: none)";
          }
          for (int64_t k = 0; k < K; ++k) {
            ASSERT_LE(q[r * K + k], qmax);
            if (is_outlier[k]) continue;
            const float xhat = static_cast<float>(static_cast<int>(q[r * K + k]) - zp[r]) * scale[r];
            EXPECT_LE(std::fabs(xhat - x[r * K + k]), 1.5f * scale[r] * (1 + 1e-5f))
                << "K=" << K << " variant=" << variant << " x=" << x[r * K + k];
            if (x[r * K + k] == 0.f) {
              EXPECT_EQ(xhat, 0.f);  // zero is exact (padding, ReLU zeros)
            }
          }
        }
      }
}

TEST(Int8, EpiloguesMatchRef) {
  for (const Int8KernelTable* t : int8_tables())
    for (int64_t N : kSizes)
      for (Act act : kActs)
        for (bool with_bias : {true, false}) {
          const int64_t rows = 3;
          std::mt19937 rng(static_cast<uint32_t>(N * 7 + static_cast<int>(act)));
          std::uniform_int_distribution<int32_t> acc_d(-2000000, 2000000), zp_d(0, 255), ws_d(-30000, 30000);
          std::vector<int32_t> acc(rows * N), zp(rows), wsum(N);
          for (auto& v : acc) v = acc_d(rng);
          for (auto& v : zp) v = zp_d(rng);
          for (auto& v : wsum) v = ws_d(rng);
          auto a_scale = randn(rows, 5, 1e-3f), w_scale = randn(N, 6, 1e-3f), bias = randn(N, 7);
          for (auto& v : a_scale) v = std::fabs(v) + 1e-4f;
          for (auto& v : w_scale) v = std::fabs(v) + 1e-4f;
          std::vector<float> got(rows * N), want(rows * N);
          const float* b = with_bias ? bias.data() : nullptr;
          t->int8_epilogue_f32(got.data(), acc.data(), a_scale.data(), zp.data(), w_scale.data(), wsum.data(), b,
                               rows, N, act);
          int8_epilogue_f32_ref(want.data(), acc.data(), a_scale.data(), zp.data(), w_scale.data(), wsum.data(), b,
                                rows, N, act);
          for (int64_t r = 0; r < rows; ++r)
            for (int64_t n = 0; n < N; ++n) {
              const double terms = std::fabs(double(acc[r * N + n] - int64_t(zp[r]) * wsum[n]) * a_scale[r] *
                                             w_scale[n]) + (b ? std::fabs(b[n]) : 0.0);
              EXPECT_LE(std::fabs(double(got[r * N + n]) - want[r * N + n]), 2e-6 * std::max(1.0, terms))
                  << t->name << " N=" << N << " " << act_name(act);
            }
          // a row with outliers: the fused epilogue
          const int64_t K = 37;
          std::vector<int8_t> wq_t(K * N);
          for (auto& v : wq_t) v = static_cast<int8_t>(static_cast<int>(rng() % 255) - 127);
          Int8RowOutliers o;
          o.count = kInt8MaxOutliers;
          for (int i = 0; i < o.count; ++i) {
            o.index[i] = (i * 11) % K;
            o.value[i] = 20.f * (i % 2 ? -1.f : 1.f) + i;
          }
          std::vector<float> c1(N), c2(N);
          t->int8_epilogue_outliers_f32(c1.data(), acc.data(), a_scale[0], zp[0], w_scale.data(), wsum.data(), b, o,
                                        wq_t.data(), N, act);
          int8_epilogue_outliers_f32_ref(c2.data(), acc.data(), a_scale[0], zp[0], w_scale.data(), wsum.data(), b, o,
                                         wq_t.data(), N, act);
          for (int64_t n = 0; n < N; ++n) {
            double corr = 0;
            for (int i = 0; i < o.count; ++i) corr += std::fabs(o.value[i] * wq_t[o.index[i] * N + n]);
            const double terms = std::fabs(double(acc[n] - int64_t(zp[0]) * wsum[n]) * a_scale[0] * w_scale[n]) +
                                 (b ? std::fabs(b[n]) : 0.0) + w_scale[n] * corr;
            EXPECT_LE(std::fabs(double(c1[n]) - c2[n]), 2e-6 * std::max(1.0, terms)) << t->name << " outliers N=" << N;
          }
        }
}

TEST(Int8, WeightQuantization) {
  const int64_t N = 37, K = 301;
  auto w = randn(N * K, 3, 0.05f);
  // three outlier input columns (BERT FFN output style) and one all-zero row
  for (int64_t n = 0; n < N; ++n) {
    w[n * K + 17] *= 60.f;
    w[n * K + 200] *= 40.f;
    w[n * K + 299] *= 25.f;
  }
  for (int64_t k = 0; k < K; ++k) w[5 * K + k] = 0.f;
  const Int8Weights qw = quantize_linear_int8(w.data(), N, K);
  EXPECT_EQ(qw.columns, (std::vector<int64_t>{17, 200, 299}));
  std::vector<float> deq(N * K);
  dequantize_linear_int8(deq.data(), qw);
  for (int64_t n = 0; n < N; ++n) {
    float amax = 0.f;
    for (int64_t k = 0; k < K; ++k) {
      const bool column = k == 17 || k == 200 || k == 299;
      if (column) {
        EXPECT_EQ(qw.q[n * K + k], 0);
        EXPECT_EQ(deq[n * K + k], w[n * K + k]);  // f32 columns are exact
      } else {
        amax = std::max(amax, std::fabs(w[n * K + k]));
        // half a step, plus the f32 rounding of w/scale (at most 127·2^-24 < 1e-5 of a step)
        EXPECT_LE(std::fabs(deq[n * K + k] - w[n * K + k]), qw.scale[n] * (0.5f + 1e-5f));
        // the contract (kernels.hpp): q = round_half_even(w / scale), computed here with libm's nearbyint
        const float want = std::min(std::max(std::nearbyint(w[n * K + k] / qw.scale[n]), -127.f), 127.f);
        EXPECT_EQ(qw.q[n * K + k], static_cast<int8_t>(want)) << "row " << n << " column " << k;
      }
    }
    EXPECT_EQ(qw.scale[n], n == 5 ? 1.f : (127.f * (amax / 127.f)) / 127.f);
  }
  // Requantizing the dequantized weight gives back the same q, scales and columns (what a quantized
  // checkpoint relies on), here and for plain Gaussian weights.
  EXPECT_TRUE(int8_round_trip_exact(qw));
  auto g = randn(64 * 96, 4, 0.02f);
  const Int8Weights gq = quantize_linear_int8(g.data(), 64, 96);
  EXPECT_TRUE(gq.columns.empty());
  EXPECT_TRUE(int8_round_trip_exact(gq));
  // Scales are fixed points of h(s) = (127·s)/127: for every f32 mantissa at one exponent (scale-invariant).
  for (uint32_t m = 0; m < (1u << 23); m += 97) {
    const uint32_t bits = (120u << 23) | m;
    float s0;
    std::memcpy(&s0, &bits, 4);
    const float s = (127.f * s0) / 127.f;
    ASSERT_EQ((127.f * s) / 127.f, s) << "mantissa " << m;
  }
  // Ties: values exactly half-way between two steps round to even, as nearbyint does (2.5 -> 2, 3.5 -> 4, -2.5 -> -2).
  std::vector<float> ties = {127.f, 2.5f, 3.5f, -2.5f, -0.5f, 0.5f, 126.5f, -126.5f};  // amax 127: scale 1
  std::vector<int8_t> tq(ties.size());
  float tscale = 0.f;
  quantize_weights_s8(tq.data(), &tscale, ties.data(), 1, static_cast<int64_t>(ties.size()));
  EXPECT_EQ(tscale, 1.f);
  EXPECT_EQ(tq, (std::vector<int8_t>{127, 2, 4, -2, 0, 0, 126, -126}));
  // A non-finite weight is refused, naming the first row that has one, through both entry points.
  const auto error_of = [&](bool plain) -> std::string {
    try {
      if (plain) {
        std::vector<int8_t> q(N * K);
        std::vector<float> sc(N);
        quantize_weights_s8(q.data(), sc.data(), w.data(), N, K);
      } else {
        quantize_linear_int8(w.data(), N, K);
      }
    } catch (const encore::Error& e) {
      return e.what();
    }
    return "no error";
  };
  w[3] = std::numeric_limits<float>::infinity();
  w[20 * K + 7] = std::numeric_limits<float>::quiet_NaN();
  for (const bool plain : {false, true})
    EXPECT_NE(error_of(plain).find("weight row 0 has a non-finite value"), std::string::npos) << error_of(plain);
  w[3] = 0.f;  // the NaN in row 20 is next
  for (const bool plain : {false, true})
    EXPECT_NE(error_of(plain).find("weight row 20 has a non-finite value"), std::string::npos) << error_of(plain);
}

namespace {

// The definition of the int8 linear, from the scalar references: quantize (ref), integer GEMM (ref), epilogue
// (ref, with the rows' outliers), f32 columns in double, then the activation.
std::vector<float> int8_linear_reference(const std::vector<float>& x, int64_t M, int64_t K, const Int8Weights& qw,
                                         const float* bias, Act act, int qmax) {
  std::vector<uint8_t> q(M * K);
  std::vector<float> scale(M);
  std::vector<int32_t> zp(M);
  std::vector<Int8RowOutliers> outliers(M);
  quantize_rows_u8_ref(q.data(), scale.data(), zp.data(), outliers.data(), x.data(), M, K, K, qmax);
  return int8_linear_from_codes(q, scale, zp, outliers, x, M, K, qw, bias, act);
}

struct LinearCase {
  int64_t M, K, N;
  int variant;  // 0 gaussian, 1 all-positive near the top of the range (saturation bait), 2 outlier rows and columns
};
const LinearCase kLinearCases[] = {{1, 1, 1, 0},    {1, 17, 3, 0},    {5, 33, 7, 2},    {67, 44, 80, 0},
                                   {3, 768, 769, 2}, {128, 64, 192, 1}, {31, 384, 1536, 2}, {9, 1536, 384, 1}};

void make_case(const LinearCase& c, std::vector<float>& x, std::vector<float>& w, std::vector<float>& b) {
  x = randn(c.M * c.K, 21 + c.M, 1.f);
  w = randn(c.N * c.K, 22 + c.N, 0.1f);
  b = randn(c.N, 23 + c.N);
  if (c.variant == 1) {  // u8 codes near 255 against weights near +127: vpmaddubsw pairs overflow int16
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(100.f, 101.f);
    for (auto& v : x) v = u(rng);
    for (auto& v : w) v = std::fabs(v) + 0.05f;
  }
  if (c.variant == 2) {
    for (int64_t m = 0; m < c.M; m += 3) x[m * c.K + (m * 13) % c.K] = 40.f;  // one massive channel per 3rd row
    if (c.K > 20)
      for (int64_t n = 0; n < c.N; ++n) w[n * c.K + c.K / 2] *= 50.f;  // an outlier weight column
  }
}

}  // namespace

TEST(Int8, LinearMatchesReferencePipeline) {
  // Every path this CPU can run: native8 needs VNNI (else vpmaddubsw saturates), native7 and emulated run anywhere.
  std::vector<Int8Path> paths = {Int8Path::native7, Int8Path::emulated};
  if (int8_path_for_this_cpu() == Int8Path::native8) paths.push_back(Int8Path::native8);
  for (Int8Path path : paths)
    for (const LinearCase& c : kLinearCases)
      for (Act act : {Act::none, Act::gelu_erf, Act::relu})
        for (bool with_bias : {true, false}) {
          std::vector<float> x, w, b;
          make_case(c, x, w, b);
          const float* bias = with_bias ? b.data() : nullptr;
          auto lin = create_int8_linear(w.data(), bias, c.N, c.K, path);
          EXPECT_EQ(lin->precision, Precision::int8);
          EXPECT_EQ(lin->native, path != Int8Path::emulated);
          std::vector<float> got(c.M * c.N);
          lin->forward(got.data(), x.data(), c.M, act);
          const int qmax = path == Int8Path::native7 ? 127 : 255;
          auto want = int8_linear_reference(x, c.M, c.K, quantize_linear_int8(w.data(), c.N, c.K), bias, act, qmax);
          // native: exact integer GEMM, so only f32 rounding differs; emulated: f32 GEMM of the same values
          const double tol = path == Int8Path::emulated ? 1e-4 : 1e-5;
          EXPECT_LE(max_scaled_err(got, want), tol) << int8_path_name(path) << " M=" << c.M << " K=" << c.K
                                                    << " N=" << c.N << " variant=" << c.variant << " "
                                                    << act_name(act);
        }
}

TEST(Int8, LinearWithinQuantizationErrorBound) {
  for (const LinearCase& c : kLinearCases)
    for (Act act : kActs) {
      std::vector<float> x, w, b;
      make_case(c, x, w, b);
      auto lin = PackedLinear::create(w.data(), b.data(), c.N, c.K, Precision::int8);
      std::vector<float> got(c.M * c.N);
      lin->forward(got.data(), x.data(), c.M, act);
      // the bound's ingredients, from the same quantization the linear used
      const Int8Weights qw = quantize_linear_int8(w.data(), c.N, c.K);
      std::vector<float> deq(c.N * c.K);
      dequantize_linear_int8(deq.data(), qw);
      const int qmax = lin->activation_bits == 7 ? 127 : 255;
      std::vector<uint8_t> q(c.M * c.K);
      std::vector<float> a_scale(c.M);
      std::vector<int32_t> zp(c.M);
      std::vector<Int8RowOutliers> outl(c.M);
      quantize_rows_u8_ref(q.data(), a_scale.data(), zp.data(), outl.data(), x.data(), c.M, c.K, c.K, qmax);
      const double L = (act == Act::gelu_erf || act == Act::gelu_tanh || act == Act::silu) ? 1.13 : 1.0;
      double worst = 0;
      for (int64_t m = 0; m < c.M; ++m)
        for (int64_t n = 0; n < c.N; ++n) {
          double ref = b[n], sum_abs_w = 0, sum_abs_x = 0, sum_abs_xw = 0;
          for (int64_t k = 0; k < c.K; ++k) {
            ref += double(x[m * c.K + k]) * w[n * c.K + k];
            sum_abs_w += std::fabs(deq[n * c.K + k]);
            sum_abs_x += std::fabs(x[m * c.K + k]);
            sum_abs_xw += std::fabs(double(x[m * c.K + k]) * w[n * c.K + k]);
          }
          ref = act_scalar(static_cast<float>(ref), act);
          const double bound = L * (1.5 * a_scale[m] * sum_abs_w + 0.5 * qw.scale[n] * sum_abs_x) +
                               1e-5 * sum_abs_xw + 1e-6;
          const double err = std::fabs(got[m * c.N + n] - ref);
          worst = std::max(worst, err / bound);
          ASSERT_LE(err, bound) << "M=" << c.M << " K=" << c.K << " N=" << c.N << " variant=" << c.variant << " "
                                << act_name(act) << " at (" << m << ", " << n << ")";
        }
      // The bound is a worst case: typical errors are far inside it (a loose but real check of scale handling).
      if (c.K >= 64) {
        EXPECT_LT(worst, 0.5) << "M=" << c.M << " K=" << c.K << " N=" << c.N;
      }
    }
}

// forward_chain (a feed-forward pair without the f32 intermediate) against the two forwards it replaces: the same
// kernels on the same values, so bit-identical outputs. Row counts cross the per-thread split (64 rows) and the
// chain's 8-row blocks; the hidden layer gets outlier rows (x's massive channel through the first weight), the
// second weight f32 columns, and the second Linear a static input range with an f32 channel. A first Linear with
// f32 weight columns, an emulated pair or an fp32 second Linear has no chain: chains_with says so, and
// forward_chain throws without writing.
TEST(Int8, ChainMatchesTwoForwardsBitwise) {
  // Two threads on any machine, so the 65- and 130-row cases are split between threads (64 rows each).
  const ScopedThreads two(2);
  std::vector<Int8Path> paths = {Int8Path::native7};
  if (int8_path_for_this_cpu() == Int8Path::native8) paths.push_back(Int8Path::native8);
  struct ChainCase {
    int64_t M, K, H, N;
  };
  const ChainCase cases[] = {{1, 16, 24, 8}, {7, 33, 70, 17}, {9, 64, 256, 64}, {65, 48, 200, 31}, {130, 96, 384, 96}};
  for (Int8Path path : paths)
    for (const ChainCase& c : cases)
      for (Act act : {Act::none, Act::gelu_erf, Act::relu})
        for (int second_kind = 0; second_kind < 3; ++second_kind) {  // plain, f32 weight columns, static input
          auto x = randn(c.M * c.K, 31 + c.M, 1.f);
          for (int64_t m = 0; m < c.M; m += 4) x[m * c.K + (m * 5) % c.K] = 60.f;  // massive channels
          auto w1 = randn(c.H * c.K, 32 + c.H, 0.1f), b1 = randn(c.H, 33), w2 = randn(c.N * c.H, 34 + c.N, 0.1f),
               b2 = randn(c.N, 35);
          if (second_kind == 1)
            for (int64_t n = 0; n < c.N; ++n) w2[n * c.H + c.H / 3] *= 50.f;
          auto first = create_int8_linear(w1.data(), b1.data(), c.H, c.K, path);
          auto second = create_int8_linear(w2.data(), b2.data(), c.N, c.H, path);
          if (second_kind == 2) {
            Int8StaticInput in;
            in.lo = -1.5f;
            in.hi = 2.5f;
            in.columns = {c.H / 2};
            second = second->with_static_int8_input(in);
          }
          std::vector<float> hidden(c.M * c.H), want(c.M * c.N), got(c.M * c.N, -7.f);
          first->forward(hidden.data(), x.data(), c.M, act);
          second->forward(want.data(), hidden.data(), c.M, Act::none);
          ASSERT_TRUE(first->chains_with(*second));
          first->forward_chain(got.data(), x.data(), c.M, act, *second);
          int64_t differ = 0;
          for (size_t i = 0; i < got.size(); ++i) differ += !same_bits(got[i], want[i]);
          EXPECT_EQ(differ, 0) << int8_path_name(path) << " M=" << c.M << " K=" << c.K << " H=" << c.H
                               << " N=" << c.N << " " << act_name(act) << " second kind " << second_kind;
        }
  // no chain: the first Linear has an f32 weight column; an emulated pair; a second Linear of another width; fp32
  auto w = randn(64 * 48, 41, 0.1f), w2 = randn(32 * 64, 42, 0.1f), x = randn(5 * 48, 43);
  auto wcol = w;
  for (int64_t n = 0; n < 64; ++n) wcol[n * 48 + 7] *= 50.f;
  auto second = create_int8_linear(w2.data(), nullptr, 32, 64, paths[0]);
  auto plain = create_int8_linear(w.data(), nullptr, 64, 48, paths[0]);
  EXPECT_TRUE(plain->chains_with(*second));
  EXPECT_FALSE(create_int8_linear(wcol.data(), nullptr, 64, 48, paths[0])->chains_with(*second));
  EXPECT_FALSE(create_int8_linear(w.data(), nullptr, 64, 48, Int8Path::emulated)
                   ->chains_with(*create_int8_linear(w2.data(), nullptr, 32, 64, Int8Path::emulated)));
  EXPECT_FALSE(plain->chains_with(*plain));  // 64 outputs into 48 inputs
  EXPECT_FALSE(plain->chains_with(*PackedLinear::create(w2.data(), nullptr, 32, 64, Precision::f32)));
  std::vector<float> out(5 * 32, -7.f);
  EXPECT_THROW(plain->forward_chain(out.data(), x.data(), 5, Act::none, *plain), encore::Error);
  for (float v : out) ASSERT_EQ(v, -7.f);
}

TEST(Int8, RejectsWhatItCannotRepresent) {
  std::vector<float> w(4 * 70000, 0.01f);
  EXPECT_THROW(create_int8_linear(w.data(), nullptr, 4, 70000), encore::Error);  // int32 accumulation limit
}

// oneDNN capped below VNNI, as DNNL_MAX_CPU_ISA=AVX2 does: the automatic path must switch to 7-bit activations,
// and 8-bit ones really do come out wrong there (so this test can fail). oneDNN's ISA can only be capped before
// its first use in the process: ctest runs each test in its own process; run alone otherwise.
TEST(Int8NoVnni, SevenBitActivationsAvoidSaturation) {
  if (dnnl_set_max_cpu_isa(dnnl_cpu_isa_avx2) != dnnl_success)
    GTEST_SKIP() << "oneDNN already initialised in this process (run with --gtest_filter=Int8NoVnni.*)";
  if ((static_cast<unsigned>(dnnl_get_effective_cpu_isa()) & 0x7u) != 0x7u) GTEST_SKIP() << "no AVX2";
  ASSERT_EQ(int8_path_for_this_cpu(), Int8Path::native7);
  for (const LinearCase& c : kLinearCases) {
    std::vector<float> x, w, b;
    make_case(c, x, w, b);
    auto lin = create_int8_linear(w.data(), b.data(), c.N, c.K);
    EXPECT_EQ(lin->activation_bits, 7);
    std::vector<float> got(c.M * c.N);
    lin->forward(got.data(), x.data(), c.M, Act::none);
    auto want = int8_linear_reference(x, c.M, c.K, quantize_linear_int8(w.data(), c.N, c.K), b.data(), Act::none, 127);
    EXPECT_LE(max_scaled_err(got, want), 1e-5) << "M=" << c.M << " K=" << c.K << " N=" << c.N;
    if (c.variant == 1) {  // forcing 8 bits on this ISA reproduces the saturation the 7-bit path avoids
      auto bad = create_int8_linear(w.data(), b.data(), c.N, c.K, Int8Path::native8);
      bad->forward(got.data(), x.data(), c.M, Act::none);
      auto exact = int8_linear_reference(x, c.M, c.K, quantize_linear_int8(w.data(), c.N, c.K), b.data(), Act::none, 255);
      EXPECT_GT(max_scaled_err(got, exact), 1e-2) << "expected vpmaddubsw saturation without VNNI";
    }
  }
}
