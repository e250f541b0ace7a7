// Scalar reference twins of the backward kernels: the definition of every gradient, written for clarity,
// computed in double and rounded once. Each gradient line quotes the forward line it differentiates.
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/backward.hpp"

namespace encore::kernels {

namespace {
constexpr double kSqrt1_2 = 0.70710678118654752440;     // 1/√2
constexpr double kInvSqrt2Pi = 0.39894228040143267794;  // 1/√(2π)
constexpr double kSqrt2_Pi = 0.79788456080286535588;    // √(2/π)
constexpr double kGeluC = 0.044715;
}  // namespace

double act_grad_ref(double x, Act act) {
  switch (act) {
    case Act::none: return 1.0;
    // forward: x < 0 ? 0 : x
    case Act::relu: return x > 0.0 ? 1.0 : 0.0;
    // forward: x/2 · (1 + erf(x/√2))
    case Act::gelu_erf: return 0.5 * (1.0 + std::erf(x * kSqrt1_2)) + x * std::exp(-0.5 * x * x) * kInvSqrt2Pi;
    // forward: x/2 · (1 + tanh(√(2/π)·(x + 0.044715x³)))
    case Act::gelu_tanh: {
      const double t = std::tanh(kSqrt2_Pi * (x + kGeluC * x * x * x));
      return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * kSqrt2_Pi * (1.0 + 3.0 * kGeluC * x * x);
    }
    // forward: x·sigmoid(x)
    case Act::silu: {
      const double s = 1.0 / (1.0 + std::exp(-x));
      return s * (1.0 + x * (1.0 - s));
    }
    // forward: tanh(x)
    case Act::tanh: {
      const double t = std::tanh(x);
      return 1.0 - t * t;
    }
  }
  return 1.0;
}

void activation_backward_f32_ref(float* dx, const float* dout, const float* x, int64_t n, Act act) {
  // forward: out[i] = act(x[i])
  for (int64_t i = 0; i < n; ++i) dx[i] = static_cast<float>(dout[i] * act_grad_ref(x[i], act));
}

void gated_backward_f32_ref(float* din, const float* dout, const float* in, int64_t rows, int64_t F, Act act,
                            Gate gate) {
  const int64_t ia = gate == Gate::first ? 0 : F, ib = F - ia;
  for (int64_t r = 0; r < rows; ++r) {
    const float* a = in + r * 2 * F + ia;
    const float* b = in + r * 2 * F + ib;
    const float* dy = dout + r * F;
    float* da = din + r * 2 * F + ia;
    float* db = din + r * 2 * F + ib;
    for (int64_t i = 0; i < F; ++i) {
      const double g = dy[i];
      // forward: y[i] = act(a[i]) · b[i]
      da[i] = static_cast<float>(g * b[i] * act_grad_ref(a[i], act));
      db[i] = static_cast<float>(g * act_scalar(a[i], act));
    }
  }
}

void layernorm_backward_f32_ref(float* dinp, float* dweight, float* dbias, const float* dout, const float* mean,
                                const float* rstd, const float* inp, const float* weight, int64_t rows, int64_t C) {
  std::vector<double> dw(dweight ? C : 0, 0.0), db(dbias ? C : 0, 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = inp + r * C;
    const float* dy = dout + r * C;
    const double m = mean[r], s = rstd[r];
    // pass 1: the two row means, and the parameter gradients (read dout before dinp may overwrite it)
    double sum_g = 0.0, sum_gx = 0.0;
    for (int64_t i = 0; i < C; ++i) {
      const double xhat = (x[i] - m) * s;
      const double g = dy[i] * (weight ? static_cast<double>(weight[i]) : 1.0);
      sum_g += g;
      sum_gx += g * xhat;
      // forward: out[i] = xhat·weight[i] + bias[i]
      if (dweight) dw[i] += dy[i] * xhat;
      if (dbias) db[i] += dy[i];
    }
    const double mean_g = sum_g / static_cast<double>(C), mean_gx = sum_gx / static_cast<double>(C);
    // forward: xhat = (x - mean)·rstd, mean = Σx/C, rstd = (Σ(x-mean)²/C + eps)^(-1/2)
    for (int64_t i = 0; i < C; ++i) {
      const double xhat = (x[i] - m) * s;
      const double g = dy[i] * (weight ? static_cast<double>(weight[i]) : 1.0);
      dinp[r * C + i] = static_cast<float>(s * (g - mean_g - xhat * mean_gx));
    }
  }
  for (int64_t i = 0; dweight && i < C; ++i) dweight[i] = static_cast<float>(dweight[i] + dw[i]);
  for (int64_t i = 0; dbias && i < C; ++i) dbias[i] = static_cast<float>(dbias[i] + db[i]);
}

void rmsnorm_backward_f32_ref(float* dinp, float* dweight, const float* dout, const float* rstd, const float* inp,
                              const float* weight, int64_t rows, int64_t C) {
  std::vector<double> dw(dweight ? C : 0, 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = inp + r * C;
    const float* dy = dout + r * C;
    const double s = rstd[r];
    double sum_gx = 0.0;
    for (int64_t i = 0; i < C; ++i) {
      const double xhat = x[i] * s;
      sum_gx += dy[i] * (weight ? static_cast<double>(weight[i]) : 1.0) * xhat;
      // forward: out[i] = xhat·weight[i]
      if (dweight) dw[i] += dy[i] * xhat;
    }
    const double mean_gx = sum_gx / static_cast<double>(C);
    // forward: xhat = x·rstd, rstd = (Σx²/C + eps)^(-1/2)
    for (int64_t i = 0; i < C; ++i) {
      const double g = dy[i] * (weight ? static_cast<double>(weight[i]) : 1.0);
      dinp[r * C + i] = static_cast<float>(s * (g - x[i] * s * mean_gx));
    }
  }
  for (int64_t i = 0; dweight && i < C; ++i) dweight[i] = static_cast<float>(dweight[i] + dw[i]);
}

void softmax_backward_f32_ref(float* dx, const float* dp, const float* p, int64_t rows, int64_t cols, float scale) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* pr = p + r * cols;
    const float* dpr = dp + r * cols;
    double dot = 0.0;
    for (int64_t j = 0; j < cols; ++j) dot += static_cast<double>(pr[j]) * dpr[j];
    // forward: p[j] = exp(y[j] - max) / Σ exp(y - max), y = x·scale + masks
    for (int64_t j = 0; j < cols; ++j)
      dx[r * cols + j] = static_cast<float>(static_cast<double>(scale) * pr[j] * (dpr[j] - dot));
  }
}

void bias_backward_f32_ref(float* dbias, const float* dout, int64_t rows, int64_t cols, int64_t ld) {
  for (int64_t c = 0; c < cols; ++c) {
    double acc = 0.0;
    // forward: out[r][c] = ... + bias[c]
    for (int64_t r = 0; r < rows; ++r) acc += dout[r * ld + c];
    dbias[c] = static_cast<float>(dbias[c] + acc);
  }
}

void linear_backward_f32_ref(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                             const float* weight, int64_t M, int64_t K, int64_t N) {
  // forward: out[m][n] = bias[n] + Σ_k inp[m][k]·weight[n][k]
  for (int64_t m = 0; dinp && m < M; ++m)
    for (int64_t k = 0; k < K; ++k) {
      double acc = 0.0;
      for (int64_t n = 0; n < N; ++n) acc += static_cast<double>(dout[m * N + n]) * weight[n * K + k];
      dinp[m * K + k] = static_cast<float>(acc);
    }
  for (int64_t n = 0; dweight && n < N; ++n)
    for (int64_t k = 0; k < K; ++k) {
      double acc = 0.0;
      for (int64_t m = 0; m < M; ++m) acc += static_cast<double>(dout[m * N + n]) * inp[m * K + k];
      dweight[n * K + k] = static_cast<float>(dweight[n * K + k] + acc);
    }
  if (dbias) bias_backward_f32_ref(dbias, dout, M, N, N);
}

void add_backward_f32_ref(float* da, float* db, const float* dout, int64_t n) {
  // forward: out[i] = a[i] + b[i]
  for (int64_t i = 0; i < n; ++i) {
    if (da) da[i] = dout[i];
    if (db) db[i] = dout[i];
  }
}

void dropout_backward_f32_ref(float* dx, const float* dout, const uint8_t* mask, int64_t n, float p, uint64_t seed,
                              uint64_t offset) {
  std::vector<uint8_t> keep(static_cast<size_t>(n));
  if (mask) {
    std::memcpy(keep.data(), mask, static_cast<size_t>(n));
  } else {  // the mask dropout_f32 drew for (seed, offset + i), recovered by running it on ones
    std::vector<float> ones(static_cast<size_t>(n), 1.f), tmp(static_cast<size_t>(n));
    dropout_f32(tmp.data(), keep.data(), ones.data(), n, p, seed, offset);
  }
  const float scale = p < 1.f ? 1.f / (1.f - p) : 0.f;  // exactly dropout_f32's factor
  // forward: out[i] = keep[i] ? in[i]·scale : 0
  for (int64_t i = 0; i < n; ++i) dx[i] = keep[static_cast<size_t>(i)] ? dout[i] * scale : 0.f;
}

void embedding_backward_f32_ref(float* dtable, const float* dout, const int64_t* ids, int64_t n, int64_t C,
                                int64_t ld, int64_t padding_idx) {
  for (int64_t i = 0; i < n; ++i) {
    if (ids[i] == padding_idx) continue;
    // forward: out[i][c] = table[ids[i]][c]
    for (int64_t c = 0; c < C; ++c) dtable[ids[i] * ld + c] += dout[i * ld + c];
  }
}

void attention_head_backward_f32_ref(const AttentionHeadGrads& g, const AttentionHeadArgs& a) {
  const int64_t T = a.T, S = a.S, Dh = a.Dh, Dv = a.Dv;
  const size_t TS = static_cast<size_t>(T * S);
  // keep and the dropout factor exactly as the forward drew them (all kept when there was no dropout)
  std::vector<uint8_t> keep(TS, 1);
  double drop_scale = 1.0;
  if (a.dropout_p > 0.f) {
    std::vector<float> ones(TS, 1.f), tmp(TS);
    dropout_f32(tmp.data(), keep.data(), ones.data(), static_cast<int64_t>(TS), a.dropout_p, a.seed, a.offset);
    drop_scale = a.dropout_p < 1.f ? 1.f / (1.f - a.dropout_p) : 0.f;
  }
  auto P = [&](int64_t t, int64_t s) { return static_cast<double>(a.probs[t * S + s]); };
  auto Pd = [&](int64_t t, int64_t s) { return keep[t * S + s] ? P(t, s) * drop_scale : 0.0; };
  auto dO = [&](int64_t t, int64_t d) { return static_cast<double>(a.dout[t * a.ld_dout + d]); };

  // forward: out[t][d] = Σ_s p'[t][s]·v[s][d]
  for (int64_t s = 0; g.dv && s < S; ++s)
    for (int64_t d = 0; d < Dv; ++d) {
      double acc = 0.0;
      for (int64_t t = 0; t < T; ++t) acc += Pd(t, s) * dO(t, d);
      float& out = g.dv[s * g.ld_dv + d];
      out = g.accumulate_kv ? out + static_cast<float>(acc) : static_cast<float>(acc);
    }
  std::vector<double> dl(TS);  // dlogits
  for (int64_t t = 0; t < T; ++t) {
    std::vector<double> dp(static_cast<size_t>(S));
    double dot = 0.0;
    for (int64_t s = 0; s < S; ++s) {
      double dpd = 0.0;  // forward: out[t][d] = Σ_s p'[t][s]·v[s][d]
      for (int64_t d = 0; d < Dv; ++d) dpd += dO(t, d) * a.v[s * a.ld_v + d];
      dp[s] = keep[t * S + s] ? dpd * drop_scale : 0.0;  // forward: p' = keep ? p·scale : 0
      dot += P(t, s) * dp[s];
    }
    // forward: p[t] = softmax(s[t]·scale + masks)
    for (int64_t s = 0; s < S; ++s) dl[t * S + s] = P(t, s) * (dp[s] - dot);
  }
  for (size_t i = 0; g.dlogits && i < TS; ++i) g.dlogits[i] = static_cast<float>(dl[i]);
  // forward: s[t][j] = Σ_d q[t][d]·k[j][d]  (then scaled by `scale` before the softmax)
  for (int64_t t = 0; g.dq && t < T; ++t)
    for (int64_t d = 0; d < Dh; ++d) {
      double acc = 0.0;
      for (int64_t s = 0; s < S; ++s) acc += dl[t * S + s] * a.k[s * a.ld_k + d];
      g.dq[t * g.ld_dq + d] = static_cast<float>(a.scale * acc);
    }
  for (int64_t s = 0; g.dk && s < S; ++s)
    for (int64_t d = 0; d < Dh; ++d) {
      double acc = 0.0;
      for (int64_t t = 0; t < T; ++t) acc += dl[t * S + s] * a.q[t * a.ld_q + d];
      float& out = g.dk[s * g.ld_dk + d];
      out = g.accumulate_kv ? out + static_cast<float>(a.scale * acc) : static_cast<float>(a.scale * acc);
    }
}

}  // namespace encore::kernels
