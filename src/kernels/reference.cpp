// Scalar reference twins: the definition of every kernel, written for clarity, not speed.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/kernels.hpp"

namespace encore::kernels {

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::scalar: return "scalar";
    case Isa::avx2: return "avx2";
    case Isa::avx512: return "avx512";
  }
  return "?";
}

const char* act_name(Act act) {
  switch (act) {
    case Act::none: return "none";
    case Act::relu: return "relu";
    case Act::gelu_erf: return "gelu";
    case Act::gelu_tanh: return "gelu_tanh";
    case Act::silu: return "silu";
    case Act::tanh: return "tanh";
  }
  return "?";
}

float act_scalar(float x, Act act) {
  switch (act) {
    case Act::none: return x;
    case Act::relu: return x < 0.f ? 0.f : x;  // NaN stays NaN, as torch.relu; bit for bit vmax(0, x) (-0 stays)
    // gelu(x) = x/2 · (1 + erf(x/√2))
    case Act::gelu_erf: return 0.5f * x * (1.f + std::erf(x * 0.70710678118654752f));
    // gelu_tanh(x) = x/2 · (1 + tanh(√(2/π)·(x + 0.044715x³)))
    case Act::gelu_tanh:
      return 0.5f * x * (1.f + std::tanh(0.79788456080286536f * (x + 0.044715f * x * x * x)));
    // silu(x) = x·sigmoid(x)
    case Act::silu: return x / (1.f + std::exp(-x));
    case Act::tanh: return std::tanh(x);
  }
  return x;
}

void linear_f32_ref(float* out, const float* in, const float* weight, const float* bias, int64_t M, int64_t K,
                    int64_t N, Act act) {
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double acc = bias ? bias[n] : 0.0;
      for (int64_t k = 0; k < K; ++k) acc += static_cast<double>(in[m * K + k]) * weight[n * K + k];
      out[m * N + n] = act_scalar(static_cast<float>(acc), act);
    }
}

void gemm_f32_ref(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                  int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double acc = 0.0;
      for (int64_t k = 0; k < K; ++k) {
        float a = trans_a ? A[k * lda + m] : A[m * lda + k];
        float b = trans_b ? B[n * ldb + k] : B[k * ldb + n];
        acc += static_cast<double>(a) * b;
      }
      float prev = beta == 0.f ? 0.f : beta * C[m * ldc + n];
      C[m * ldc + n] = alpha * static_cast<float>(acc) + prev;
    }
}

void softmax_masked_f32_ref(float* x, int64_t cols, float scale, const float* mask_a, const float* mask_b,
                            int64_t limit) {
  const float neg_inf = -std::numeric_limits<float>::infinity();
  float max_v = neg_inf;
  for (int64_t j = 0; j < limit; ++j) {
    float v = x[j] * scale + (mask_a ? mask_a[j] : 0.f) + (mask_b ? mask_b[j] : 0.f);
    x[j] = v;
    if (v > max_v) max_v = v;
  }
  // Nothing to attend to: zeros, not NaN. A NaN score is not a mask: it makes the row NaN (exp keeps it).
  if (max_v == neg_inf && std::none_of(x, x + limit, [](float v) { return std::isnan(v); })) {
    for (int64_t j = 0; j < cols; ++j) x[j] = 0.f;
    return;
  }
  double sum = 0.0;
  for (int64_t j = 0; j < limit; ++j) {
    x[j] = std::exp(x[j] - max_v);
    sum += x[j];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t j = 0; j < limit; ++j) x[j] *= inv;
  for (int64_t j = limit; j < cols; ++j) x[j] = 0.f;
}

void layernorm_forward_f32_ref(float* out, float* mean, float* rstd, const float* in, const float* weight,
                               const float* bias, int64_t rows, int64_t C, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = in + r * C;
    double m = 0.0;
    for (int64_t i = 0; i < C; ++i) m += x[i];
    m /= static_cast<double>(C);
    double v = 0.0;
    for (int64_t i = 0; i < C; ++i) v += (x[i] - m) * (x[i] - m);
    v /= static_cast<double>(C);
    const double s = 1.0 / std::sqrt(v + eps);
    for (int64_t i = 0; i < C; ++i) {
      double y = (x[i] - m) * s;
      if (weight) y *= weight[i];
      if (bias) y += bias[i];
      out[r * C + i] = static_cast<float>(y);
    }
    if (mean) mean[r] = static_cast<float>(m);
    if (rstd) rstd[r] = static_cast<float>(s);
  }
}

void rmsnorm_forward_f32_ref(float* out, float* rstd, const float* in, const float* weight, int64_t rows,
                             int64_t C, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = in + r * C;
    double ss = 0.0;
    for (int64_t i = 0; i < C; ++i) ss += static_cast<double>(x[i]) * x[i];
    const double s = 1.0 / std::sqrt(ss / static_cast<double>(C) + eps);
    for (int64_t i = 0; i < C; ++i) out[r * C + i] = static_cast<float>(x[i] * s * (weight ? weight[i] : 1.f));
    if (rstd) rstd[r] = static_cast<float>(s);
  }
}

void activation_f32_ref(float* out, const float* in, int64_t n, Act act) {
  for (int64_t i = 0; i < n; ++i) out[i] = act_scalar(in[i], act);
}

void gated_f32_ref(float* out, const float* in, int64_t rows, int64_t F, Act act, Gate gate) {
  const int64_t ia = gate == Gate::first ? 0 : F, ib = F - ia;  // offsets of the activated half and the other
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < F; ++i)
      out[r * F + i] = act_scalar(in[r * 2 * F + ia + i], act) * in[r * 2 * F + ib + i];
}

void rotary_f32_ref(float* out, int64_t ld_out, const float* in, int64_t ld, const float* cos, const float* sin,
                    int64_t tokens, int64_t heads, int64_t head_dim, int64_t rotary_dim, bool inverse) {
  const int64_t half = rotary_dim / 2;
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t h = 0; h < heads; ++h) {
      const float* x = in + t * ld + h * head_dim;
      float* y = out + t * ld_out + h * head_dim;
      for (int64_t i = 0; i < half; ++i) {
        const double c = cos[t * half + i], s = inverse ? -sin[t * half + i] : sin[t * half + i];
        const double x1 = x[i], x2 = x[i + half];  // both read before y (which may alias x) is written
        // y = x·cos + rotate_half(x)·sin, rotate_half(x) = [-x2 | x1]
        y[i] = static_cast<float>(x1 * c - x2 * s);
        y[i + half] = static_cast<float>(x2 * c + x1 * s);
      }
      for (int64_t i = rotary_dim; i < head_dim; ++i) y[i] = x[i];  // the pass-through dims
    }
}

void add_f32_ref(float* out, const float* a, const float* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void add_layernorm_f32_ref(float* out, float* sum, const float* a, const float* b, const float* weight,
                           const float* bias, int64_t rows, int64_t C, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    float* s = (sum ? sum : out) + r * C;
    add_f32_ref(s, a + r * C, b + r * C, C);
    layernorm_forward_f32_ref(out + r * C, nullptr, nullptr, s, weight, bias, 1, C, eps);
  }
}

static uint16_t bf16_bits(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  if ((bits & 0x7f800000u) == 0x7f800000u) {  // inf/nan: truncate, keeping NaN a NaN
    bits &= 0xffff0000u;
    if ((bits & 0x007f0000u) == 0 && (x != x)) bits |= 0x00400000u;
  } else {
    bits += 0x7fffu + ((bits >> 16) & 1u);  // round half to even
  }
  return static_cast<uint16_t>(bits >> 16);
}

float bf16_round(float x) {
  const uint32_t bits = static_cast<uint32_t>(bf16_bits(x)) << 16;
  float y;
  std::memcpy(&y, &bits, 4);
  return y;
}

void convert_f32_to_bf16_ref(uint16_t* out, const float* in, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = bf16_bits(in[i]);
}

}  // namespace encore::kernels
