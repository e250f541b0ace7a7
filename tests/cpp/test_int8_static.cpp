// Static int8 (docs/quantization.md, "Static int8"): the static-range quantizer, the int8 Linear with a static
// input range, and the calibration's range rules (models/static_int8.hpp).
//
// Tolerances:
//  * quantize_rows_u8_static (every ISA) vs quantize_rows_u8_static_ref: bit-identical q and scale (one multiply,
//    a clamp and a round per value; the parameters come from one scalar function, int8_static_params).
//  * reference properties: a value inside [lo, hi] within 1.5 steps of its code (half a step of rounding plus one
//    where the zero point's rounding pushes the top past qmax); a value a step or more beyond the range saturates.
//  * the static linear vs a pipeline of the scalar _ref kernels (scalar integer GEMM): max scaled error 1e-5
//    (native; f32 rounding only), 1e-4 (emulated: an f32 GEMM of the same values).
//  * range rules: exact (ranks of sorted values, channel picks), computed here independently with std::sort.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "encore/error.hpp"
#include "kernels/kernels.hpp"
#include "models/static_int8.hpp"
#include "int8_test_helpers.hpp"

using namespace encore::kernels;
using namespace int8_test;

namespace {

const int64_t kSizes[] = {1, 3, 7, 8, 15, 16, 17, 31, 33, 64, 100, 384, 1001};

// Rows for a static range of [-2, 3]: inside, beyond it both ways, non-finite, huge, halfway codes.
std::vector<float> static_rows(int64_t rows, int64_t K, int64_t ld, uint32_t seed, int variant) {
  auto x = randn(rows * ld, seed, variant == 1 ? 4.f : 1.f, 0.3f);
  for (int64_t r = 0; r < rows; ++r) {
    float* row = x.data() + r * ld;
    if (variant == 2) row[K / 2] = r % 2 ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
    if (variant == 3) row[(r * 7) % K] = r % 2 ? -1e30f : 1e30f;
    if (variant == 4)
      for (int64_t k = 0; k < K; ++k) row[k] = static_cast<float>(k % 11) * (5.f / 255.f) * 0.5f - 2.f;
  }
  return x;
}

}  // namespace

TEST(Int8Static, QuantizeMatchesRefBitwise) {
  ASSERT_FALSE(int8_tables().empty());
  for (const Int8KernelTable* t : int8_tables())
    for (int64_t K : kSizes)
      for (int qmax : {255, 127})
        for (int variant = 0; variant < 5; ++variant) {
          const int64_t rows = 4, ld = K + (variant % 2) * 3;
          const auto x = static_rows(rows, K, ld, static_cast<uint32_t>(K * 7 + variant), variant);
          const Int8StaticParams p = int8_static_params(-2.f, 3.f, qmax);
          std::vector<uint8_t> q1(rows * K), q2(rows * K);
          std::vector<float> s1(rows), s2(rows);
          t->quantize_rows_u8_static(q1.data(), s1.data(), x.data(), rows, K, ld, p.scale, p.inv, p.zp, qmax);
          quantize_rows_u8_static_ref(q2.data(), s2.data(), x.data(), rows, K, ld, p.scale, p.inv, p.zp, qmax);
          const std::string where = std::string(t->name) + " K=" + std::to_string(K) + " qmax=" +
                                    std::to_string(qmax) + " variant=" + std::to_string(variant);
          EXPECT_EQ(q1, q2) << where;
          for (int64_t r = 0; r < rows; ++r) EXPECT_TRUE(same_bits(s1[r], s2[r])) << where << " row " << r;
        }
}

TEST(Int8Static, QuantizeReferenceProperties) {
  const float lo = -2.f, hi = 3.f;
  for (int qmax : {255, 127}) {
    const Int8StaticParams p = int8_static_params(lo, hi, qmax);
    EXPECT_FLOAT_EQ(p.scale, (hi - lo) / static_cast<float>(qmax));
    for (int variant : {0, 1, 2, 4}) {
      const int64_t rows = 4, K = 257;
      const auto x = static_rows(rows, K, K, 11u + variant, variant);
      std::vector<uint8_t> q(rows * K);
      std::vector<float> scale(rows);
      quantize_rows_u8_static_ref(q.data(), scale.data(), x.data(), rows, K, K, p.scale, p.inv, p.zp, qmax);
      for (int64_t r = 0; r < rows; ++r) {
        if (variant == 2) {  // a NaN/inf row: NaN scale, so its outputs are NaN as in f32
          EXPECT_TRUE(std::isnan(scale[r]));
          continue;
        }
        EXPECT_EQ(scale[r], p.scale);
        for (int64_t k = 0; k < K; ++k) {
          const float v = x[r * K + k];
          const int code = q[r * K + k];
          ASSERT_LE(code, qmax);
          const float xhat = static_cast<float>(code - p.zp) * p.scale;
          if (v >= lo && v <= hi) {
            EXPECT_LE(std::fabs(xhat - v), 1.5f * p.scale * (1 + 1e-5f)) << "x=" << v;
          } else if (v >= hi + p.scale) {
            EXPECT_EQ(code, qmax) << "x=" << v << " saturates at the top";
          } else if (v <= lo - p.scale) {
            EXPECT_EQ(code, 0) << "x=" << v << " saturates at the bottom";
          }
          if (v == 0.f) {
            EXPECT_EQ(xhat, 0.f);
          }
        }
      }
    }
  }
}

TEST(Int8Static, ParamsRejectBadRanges) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (auto [lo, hi] : std::vector<std::pair<float, float>>{{nan, 1.f}, {-1.f, nan}, {-inf, 1.f}, {0.5f, 1.f},
                                                             {-1.f, -0.5f}})
    EXPECT_THROW(int8_static_params(lo, hi, 255), encore::Error) << lo << " " << hi;
  const Int8StaticParams z = int8_static_params(0.f, 0.f, 255);  // an all-zero input: every code is 0
  EXPECT_EQ(z.zp, 0);
}

namespace {

// The definition of the static int8 linear from the scalar references: static quantization (ref) with the f32
// input columns as every row's outliers, integer GEMM (ref), epilogue with outliers (ref), the weight's f32
// columns in double, then the activation.
std::vector<float> static_linear_reference(const std::vector<float>& x, int64_t M, int64_t K, const Int8Weights& qw,
                                           const float* bias, Act act, int qmax, const Int8StaticInput& in) {
  const Int8StaticParams p = int8_static_params(in.lo, in.hi, qmax);
  std::vector<uint8_t> q(M * K);
  std::vector<float> scale(M);
  std::vector<int32_t> zp(M, p.zp);
  quantize_rows_u8_static_ref(q.data(), scale.data(), x.data(), M, K, K, p.scale, p.inv, p.zp, qmax);
  std::vector<Int8RowOutliers> outliers(M);
  for (int64_t m = 0; m < M; ++m) {
    outliers[m].count = static_cast<int32_t>(in.columns.size());
    for (size_t i = 0; i < in.columns.size(); ++i) {
      outliers[m].index[i] = static_cast<int32_t>(in.columns[i]);
      outliers[m].value[i] = x[m * K + in.columns[i]];
      q[m * K + in.columns[i]] = static_cast<uint8_t>(p.zp);
    }
  }
  return int8_linear_from_codes(q, scale, zp, outliers, x, M, K, qw, bias, act);
}

struct StaticCase {
  int64_t M, K, N;
  int columns;  // f32 input columns (the largest: every 13th channel scaled by 20)
};
const StaticCase kCases[] = {{1, 1, 1, 0}, {1, 17, 3, 1}, {5, 33, 7, 2}, {67, 44, 80, 0},
                             {3, 768, 769, 8}, {31, 384, 1536, 3}, {9, 1536, 384, 1}, {130, 64, 192, 2}};

}  // namespace

TEST(Int8Static, LinearMatchesReferencePipeline) {
  std::vector<Int8Path> paths = {Int8Path::native7, Int8Path::emulated};
  if (int8_path_for_this_cpu() == Int8Path::native8) paths.push_back(Int8Path::native8);
  for (Int8Path path : paths)
    for (const StaticCase& c : kCases)
      for (Act act : {Act::none, Act::gelu_erf})
        for (bool weight_column : {false, true}) {
          auto x = randn(c.M * c.K, 31 + c.M, 1.f, 0.2f);
          auto w = randn(c.N * c.K, 32 + c.N, 0.1f);
          auto b = randn(c.N, 33 + c.N);
          Int8StaticInput in;
          for (int i = 0; i < c.columns; ++i) in.columns.push_back((i * 13) % c.K);
          std::sort(in.columns.begin(), in.columns.end());
          in.columns.erase(std::unique(in.columns.begin(), in.columns.end()), in.columns.end());
          for (int64_t m = 0; m < c.M; ++m)
            for (int64_t col : in.columns) x[m * c.K + col] *= 20.f;
          if (weight_column && c.K > 20)  // an f32 weight column, which an f32 input column may hit too (col 0)
            for (int64_t n = 0; n < c.N; ++n) w[n * c.K] *= 50.f;
          // a range that most values fit; some saturate
          in.lo = -2.f;
          in.hi = 2.5f;
          auto lin = create_int8_linear(w.data(), b.data(), c.N, c.K, path)->with_static_int8_input(in);
          EXPECT_TRUE(lin->static_int8);
          std::vector<float> got(c.M * c.N);
          lin->forward(got.data(), x.data(), c.M, act);
          const int qmax = path == Int8Path::native7 ? 127 : 255;
          auto want = static_linear_reference(x, c.M, c.K, quantize_linear_int8(w.data(), c.N, c.K), b.data(), act,
                                              qmax, in);
          const double tol = path == Int8Path::emulated ? 1e-4 : 1e-5;
          EXPECT_LE(max_scaled_err(got, want), tol) << int8_path_name(path) << " M=" << c.M << " K=" << c.K
                                                    << " N=" << c.N << " columns=" << c.columns;
          // the dynamic linear it came from is unchanged
          auto dyn = create_int8_linear(w.data(), b.data(), c.N, c.K, path);
          EXPECT_FALSE(dyn->static_int8);
        }
}

TEST(Int8Static, RejectsWhatItCannotUse) {
  auto w = randn(8 * 16, 1, 0.1f);
  auto lin = create_int8_linear(w.data(), nullptr, 8, 16);
  Int8StaticInput bad;
  bad.lo = -1.f;
  bad.hi = std::numeric_limits<float>::quiet_NaN();
  EXPECT_THROW(lin->with_static_int8_input(bad), encore::Error);
  Int8StaticInput cols;
  cols.lo = -1.f;
  cols.hi = 1.f;
  cols.columns = {3, 2};
  EXPECT_THROW(lin->with_static_int8_input(cols), encore::Error);  // not ascending
  cols.columns = {16};
  EXPECT_THROW(lin->with_static_int8_input(cols), encore::Error);  // out of range
  cols.columns = {0, 1, 2, 3, 4, 5, 6, 7, 8};
  EXPECT_THROW(lin->with_static_int8_input(cols), encore::Error);  // more than kInt8MaxOutliers
  auto f32 = PackedLinear::create(w.data(), nullptr, 8, 16, Precision::f32);
  cols.columns = {};
  EXPECT_THROW(f32->with_static_int8_input(cols), encore::Error);  // int8 only
}

TEST(Int8Static, RangeRules) {
  using encore::models::f32_input_channels;
  using encore::models::parse_range_rule;
  using encore::models::quantile_range;
  EXPECT_EQ(parse_range_rule("max"), 100.0);
  EXPECT_DOUBLE_EQ(parse_range_rule("p99.99"), 99.99);
  for (const char* bad : {"", "p", "p50", "p100.5", "99.9", "pX", "p99.9x", "min"})
    EXPECT_THROW(parse_range_rule(bad), encore::UsageError) << bad;
  // quantiles against a sort: rank floor(p·(n-1))
  for (double pct : {99.99, 99.9, 99.0, 90.0}) {
    auto v = randn(10007, 5, 1.f, 0.5f);
    std::vector<float> sorted = v;
    std::sort(sorted.begin(), sorted.end());
    const size_t n = sorted.size();
    const float want_hi = std::max(0.f, sorted[static_cast<size_t>(std::floor(pct / 100.0 * double(n - 1)))]);
    const float want_lo = std::min(0.f, sorted[static_cast<size_t>(std::floor((1.0 - pct / 100.0) * double(n - 1)))]);
    const auto [lo, hi] = quantile_range(v, pct);
    EXPECT_EQ(lo, want_lo) << pct;
    EXPECT_EQ(hi, want_hi) << pct;
  }
  std::vector<float> positive = {1.f, 2.f, 3.f};  // 0 is always inside the range
  EXPECT_EQ(quantile_range(positive, 99.0).first, 0.f);
  // f32 channels: max |x| above ratio x the median channel's, the largest kMaxF32Channels, ascending
  std::vector<float> mn(100, -1.f), mx(100, 1.f);
  mx[7] = 5.f;    // 5x
  mn[42] = -9.f;  // 9x (the negative side counts)
  mx[99] = 3.9f;  // below 4x
  EXPECT_EQ(f32_input_channels(mn, mx, 4.0), (std::vector<int64_t>{7, 42}));
  EXPECT_EQ(f32_input_channels(mn, mx, 6.0), (std::vector<int64_t>{42}));
  EXPECT_TRUE(f32_input_channels(mn, mx, 0.0).empty());
  for (int k = 0; k < 20; ++k) mx[50 + k] = 10.f + static_cast<float>(k);  // 20 candidates: the 8 largest
  std::vector<int64_t> want;
  for (int k = 12; k < 20; ++k) want.push_back(50 + k);
  EXPECT_EQ(f32_input_channels(mn, mx, 4.0), want);
}
