// Helpers shared by the int8 kernel tests (test_int8.cpp, test_int8_static.cpp).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/kernels.hpp"

namespace int8_test {

inline std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.f, float mean = 0.f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(mean, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// The int8 kernel tables this CPU can run (the scalar reference always).
inline std::vector<const encore::kernels::Int8KernelTable*> int8_tables() {
  using encore::kernels::Isa;
  std::vector<const encore::kernels::Int8KernelTable*> out;
  for (Isa isa : {Isa::scalar, Isa::avx2, Isa::avx512})
    if (const auto* t = encore::kernels::int8_kernels_for(isa)) out.push_back(t);
  return out;
}

inline bool same_bits(float a, float b) { return std::memcmp(&a, &b, 4) == 0; }

// max |a - b| / max(1, |b|)
inline double max_scaled_err(const std::vector<float>& a, const std::vector<float>& b) {
  double e = 0;
  for (size_t i = 0; i < a.size(); ++i)
    e = std::max(e, std::abs(double(a[i]) - b[i]) / std::max(1.0, std::abs(double(b[i]))));
  return e;
}

// The int8 linear from quantized activations (codes q, per-row scale and zero point, outliers), by the scalar
// references: integer GEMM (ref), epilogue with the rows' outliers (ref), the weight's f32 columns in double,
// then the activation.
inline std::vector<float> int8_linear_from_codes(const std::vector<uint8_t>& q, const std::vector<float>& scale,
                                                 const std::vector<int32_t>& zp,
                                                 const std::vector<encore::kernels::Int8RowOutliers>& outliers,
                                                 const std::vector<float>& x, int64_t M, int64_t K,
                                                 const encore::kernels::Int8Weights& qw, const float* bias,
                                                 encore::kernels::Act act) {
  using namespace encore::kernels;
  const int64_t N = qw.N, C = static_cast<int64_t>(qw.columns.size());
  std::vector<int32_t> acc(M * N), wsum(N, 0);
  std::vector<int8_t> wq_t(K * N);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k) {
      wsum[n] += qw.q[n * K + k];
      wq_t[k * N + n] = qw.q[n * K + k];
    }
  gemm_u8s8s32_ref(acc.data(), q.data(), qw.q.data(), M, K, N);
  std::vector<float> y(M * N);
  for (int64_t m = 0; m < M; ++m) {
    int8_epilogue_outliers_f32_ref(y.data() + m * N, acc.data() + m * N, scale[m], zp[m], qw.scale.data(), wsum.data(),
                                   bias, outliers[m], wq_t.data(), N, Act::none);
    for (int64_t n = 0; n < N; ++n) {
      double s = y[m * N + n];
      for (int64_t i = 0; i < C; ++i) s += double(x[m * K + qw.columns[i]]) * qw.column_values[n * C + i];
      y[m * N + n] = act_scalar(static_cast<float>(s), act);
    }
  }
  return y;
}

}  // namespace int8_test
