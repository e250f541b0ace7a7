// Test oracles for the backward tests: forwards templated on the scalar type (instantiated on double for the
// finite-difference oracle), central finite differences, and error measures. Header-only, test-only.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "kernels/kernels.hpp"

namespace bwdtest {

using encore::kernels::Act;
using Vec = std::vector<double>;

inline std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.f, float shift = 0.f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng) + shift;
  return v;
}

template <typename T>
std::vector<double> to_double(const std::vector<T>& v) {
  return std::vector<double>(v.begin(), v.end());
}

// ∂L/∂x by central differences in double, L evaluated at x ± h·e_j (h relative to |x_j|, at least 1e-6).
inline Vec fd_grad(const std::function<double(const Vec&)>& L, Vec x, double h_rel = 1e-6) {
  Vec g(x.size());
  for (size_t j = 0; j < x.size(); ++j) {
    const double x0 = x[j], h = h_rel * std::max(1.0, std::abs(x0));
    x[j] = x0 + h;
    const double lp = L(x);
    x[j] = x0 - h;
    const double lm = L(x);
    x[j] = x0;
    g[j] = (lp - lm) / (2 * h);
  }
  return g;
}

// Σ w·y: the scalar loss whose gradient w.r.t. y is w (= dout).
inline double dot(const Vec& w, const Vec& y) {
  double s = 0;
  for (size_t i = 0; i < w.size(); ++i) s += w[i] * y[i];
  return s;
}

// max|a - b| / max|b| (the error relative to the gradient's scale); absolute below a scale of 1e-6.
template <typename A>
double rel_err(const std::vector<A>& a, const Vec& b) {
  EXPECT_EQ(a.size(), b.size());
  double num = 0, den = 1e-6;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    EXPECT_TRUE(std::isfinite(static_cast<double>(a[i]))) << "non-finite gradient at " << i;
    num = std::max(num, std::abs(static_cast<double>(a[i]) - b[i]));
    den = std::max(den, std::abs(b[i]));
  }
  return num / den;
}

// max |a-b| / max(1, |b|): fast kernel vs its _ref twin, as in test_kernels.cpp.
inline double max_scaled_err(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double e = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    EXPECT_TRUE(std::isfinite(a[i])) << "non-finite at " << i;
    e = std::max(e, std::abs(double(a[i]) - b[i]) / std::max(1.0, std::abs(double(b[i]))));
  }
  return e;
}

// ---- forwards on T (the definitions the backward kernels differentiate) ----

template <typename T>
T act(T x, Act a) {
  switch (a) {
    case Act::none: return x;
    case Act::relu: return x > T(0) ? x : T(0);
    case Act::gelu_erf: return T(0.5) * x * (T(1) + std::erf(x / std::sqrt(T(2))));
    case Act::gelu_tanh:
      return T(0.5) * x * (T(1) + std::tanh(std::sqrt(T(2) / T(M_PI)) * (x + T(0.044715) * x * x * x)));
    case Act::silu: return x / (T(1) + std::exp(-x));
    case Act::tanh: return std::tanh(x);
  }
  return x;
}

// out(M, N) = act(x(M, K)·w(N, K)ᵀ + b(N)); b may be empty.
template <typename T>
std::vector<T> linear(const std::vector<T>& x, const std::vector<T>& w, const std::vector<T>& b, int64_t M,
                      int64_t K, int64_t N, Act a) {
  std::vector<T> out(M * N);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      T acc = b.empty() ? T(0) : b[n];
      for (int64_t k = 0; k < K; ++k) acc += x[m * K + k] * w[n * K + k];
      out[m * N + n] = act(acc, a);
    }
  return out;
}

// w, b may be empty (no affine / no bias).
template <typename T>
std::vector<T> layernorm(const std::vector<T>& x, const std::vector<T>& w, const std::vector<T>& b, int64_t rows,
                         int64_t C, T eps) {
  std::vector<T> out(rows * C);
  for (int64_t r = 0; r < rows; ++r) {
    T m = 0, v = 0;
    for (int64_t i = 0; i < C; ++i) m += x[r * C + i];
    m /= T(C);
    for (int64_t i = 0; i < C; ++i) v += (x[r * C + i] - m) * (x[r * C + i] - m);
    const T s = T(1) / std::sqrt(v / T(C) + eps);
    for (int64_t i = 0; i < C; ++i)
      out[r * C + i] = (x[r * C + i] - m) * s * (w.empty() ? T(1) : w[i]) + (b.empty() ? T(0) : b[i]);
  }
  return out;
}

template <typename T>
std::vector<T> rmsnorm(const std::vector<T>& x, const std::vector<T>& w, int64_t rows, int64_t C, T eps) {
  std::vector<T> out(rows * C);
  for (int64_t r = 0; r < rows; ++r) {
    T ss = 0;
    for (int64_t i = 0; i < C; ++i) ss += x[r * C + i] * x[r * C + i];
    const T s = T(1) / std::sqrt(ss / T(C) + eps);
    for (int64_t i = 0; i < C; ++i) out[r * C + i] = x[r * C + i] * s * (w.empty() ? T(1) : w[i]);
  }
  return out;
}

// in (rows, 2F) = [a | b] -> act(a)·b (rows, F)
template <typename T>
std::vector<T> gated(const std::vector<T>& in, int64_t rows, int64_t F, Act a) {
  std::vector<T> out(rows * F);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < F; ++i) out[r * F + i] = act(in[r * 2 * F + i], a) * in[r * 2 * F + F + i];
  return out;
}

// One row of softmax_masked_f32: y = x·scale + mask on [0, limit), softmax there, 0 elsewhere; a row with no
// finite entry is all zeros. mask may be empty.
template <typename T>
void softmax_row(T* p, const T* x, int64_t cols, T scale, const T* mask, int64_t limit) {
  const T neg_inf = -std::numeric_limits<T>::infinity();
  T m = neg_inf;
  for (int64_t j = 0; j < limit; ++j) {
    p[j] = x[j] * scale + (mask ? mask[j] : T(0));
    m = std::max(m, p[j]);
  }
  if (m == neg_inf) {
    for (int64_t j = 0; j < cols; ++j) p[j] = 0;
    return;
  }
  T sum = 0;
  for (int64_t j = 0; j < limit; ++j) sum += (p[j] = std::exp(p[j] - m));
  for (int64_t j = 0; j < limit; ++j) p[j] /= sum;
  for (int64_t j = limit; j < cols; ++j) p[j] = 0;
}

// One attention head: p = softmax(q·kᵀ·scale + mask) (rows limited to t+1 keys when causal), p' = p·keep·ds,
// out = p'·v. q (T, Dh), k (S, Dh), v (S, Dv) contiguous; mask (T, S) additive or empty; keep (T, S) or empty.
// probs, if non-null, receives p (before dropout).
template <typename T>
std::vector<T> attention_head(const std::vector<T>& q, const std::vector<T>& k, const std::vector<T>& v,
                              const std::vector<T>& mask, bool causal, const std::vector<uint8_t>& keep, T ds,
                              int64_t Tq, int64_t S, int64_t Dh, int64_t Dv, T scale, std::vector<T>* probs = nullptr) {
  std::vector<T> s(Tq * S), p(Tq * S), out(Tq * Dv, T(0));
  for (int64_t t = 0; t < Tq; ++t)
    for (int64_t j = 0; j < S; ++j) {
      T acc = 0;
      for (int64_t d = 0; d < Dh; ++d) acc += q[t * Dh + d] * k[j * Dh + d];
      s[t * S + j] = acc;
    }
  for (int64_t t = 0; t < Tq; ++t)
    softmax_row(p.data() + t * S, s.data() + t * S, S, scale, mask.empty() ? nullptr : mask.data() + t * S,
                causal ? std::min<int64_t>(S, t + 1) : S);
  if (probs) *probs = p;
  for (int64_t t = 0; t < Tq; ++t)
    for (int64_t j = 0; j < S; ++j) {
      const T pd = keep.empty() ? p[t * S + j] : (keep[t * S + j] ? p[t * S + j] * ds : T(0));
      for (int64_t d = 0; d < Dv; ++d) out[t * Dv + d] += pd * v[j * Dv + d];
    }
  return out;
}

}  // namespace bwdtest
