// DeBERTa's disentangled attention terms as an additive attention bias (forward and backward). Per head h of
// width d (columns [h·d, (h+1)·d) of q, k, Kr, Qr) and m = row(i - j):
//   bias[i, j] = scale·(q_i·Kr[m] + k_j·Qr[m])          (content->position + position->content)
// Each (sequence, head) computes q·Krᵀ and k·Qrᵀ (L x R) with one GEMM each, then gathers; the backward
// scatters the bias gradient back into those (L x R) shapes and runs the transposed GEMMs. GEMMs run through
// the kernel table (its scalar gemm_f32_ref under ENCORE_KERNELS=ref), single-threaded inside parallel_blocks.
#include <algorithm>

#include "encore/profiler.hpp"
#include "ops/backward.hpp"
#include "ops/ops.hpp"

namespace encore::ops {

namespace {

void check_rows(const Tensor& t, const char* name, int64_t C) {
  ENCORE_CHECK(t.dtype() == DType::f32 && t.dim() == 3 && t.size(2) == C && t.strides()[2] == 1, name,
               ": expected float32 (B, T, ", C, ") with a contiguous last dim, got ", t.shape_str());
}

void check_relative(const Tensor& t, const char* name, int64_t R, int64_t C) {
  if (!t.defined()) return;
  check_shape(t, name, {R, C});
  check_dtype(t, name, DType::f32);
  ENCORE_CHECK(t.is_contiguous(), name, ": must be contiguous");
}

// The (seq, head) pairs' sequence checks shared by forward and backward.
void check_common(const std::vector<DisentangledSeq>& seqs, const Tensor& q, const Tensor& k, const Tensor& kr,
                  const Tensor& qr, int64_t heads, const RelativeRows& rel) {
  ENCORE_CHECK(heads > 0 && q.dim() == 3 && q.size(2) % heads == 0, "disentangled_bias: q ", q.shape_str(),
               " is not (B, T, heads·d) for heads ", heads);
  const int64_t C = q.size(2);
  check_rows(q, "disentangled_bias: q", C);
  check_rows(k, "disentangled_bias: k", C);
  ENCORE_CHECK(q.size(0) == k.size(0) && q.size(1) == k.size(1), "disentangled_bias: q ", q.shape_str(), " and k ",
               k.shape_str(), " differ");
  ENCORE_CHECK(kr.defined() || qr.defined(), "disentangled_bias: neither Kr nor Qr given");
  check_relative(kr, "disentangled_bias: Kr", rel.rows, C);
  check_relative(qr, "disentangled_bias: Qr", rel.rows, C);
  for (const DisentangledSeq& s : seqs) {
    ENCORE_CHECK(s.b >= 0 && s.b < q.size(0) && s.r0 >= 0 && s.L >= 0 && s.r0 + s.L <= q.size(1),
                 "disentangled_bias: sequence (b ", s.b, ", rows ", s.r0, "..", s.r0 + s.L, ") outside q ",
                 q.shape_str());
    ENCORE_CHECK(s.L <= rel.T, "disentangled_bias: sequence of ", s.L, " tokens, the relative index covers ", rel.T);
  }
  for (int32_t m : rel.row)
    ENCORE_CHECK(m >= 0 && m < rel.rows, "disentangled_bias: relative row ", m, " outside [0, ", rel.rows, ")");
}

}  // namespace

void disentangled_bias_forward(Tensor& bias, int64_t P, const std::vector<DisentangledSeq>& seqs, const Tensor& q,
                               const Tensor& k, const Tensor& kr, const Tensor& qr, int64_t heads,
                               const RelativeRows& rel, float scale) {
  check_common(seqs, q, k, kr, qr, heads, rel);
  const int64_t H = heads, C = q.size(2), d = C / H, R = rel.rows, n = static_cast<int64_t>(seqs.size()) * H;
  check_shape(bias, "disentangled_bias: bias", {n, P, P});
  ENCORE_CHECK(bias.is_contiguous() && bias.dtype() == DType::f32, "disentangled_bias: bias must be contiguous float32");
  for (const DisentangledSeq& s : seqs) ENCORE_CHECK(s.L <= P, "disentangled_bias: sequence of ", s.L, " in slots of ", P);
  double flops = 0;
  for (const DisentangledSeq& s : seqs) flops += 2.0 * s.L * R * C * ((kr.defined() ? 1 : 0) + (qr.defined() ? 1 : 0));
  profiler::Scope profile("disentangled_bias", flops);
  const auto& kt = kernels::kernels();
  const int64_t ldq = q.strides()[1], ldk = k.strides()[1];
  detail::parallel_blocks(n, [&](int64_t t0, int64_t t1) {
    std::vector<float> c2p, p2c;
    for (int64_t t = t0; t < t1; ++t) {
      const DisentangledSeq& s = seqs[t / H];
      const int64_t h = t % H, L = s.L;
      if (L == 0) continue;
      const float* qh = q.data<float>() + s.b * q.strides()[0] + s.r0 * ldq + h * d;
      const float* kh = k.data<float>() + s.b * k.strides()[0] + s.r0 * ldk + h * d;
      // c2p (L, R) = q_h·Kr_hᵀ ; p2c (L, R) = k_h·Qr_hᵀ
      if (kr.defined()) {
        c2p.resize(L * R);
        kt.gemm_f32(false, true, L, R, d, 1.f, qh, ldq, kr.data<float>() + h * d, C, 0.f, c2p.data(), R);
      }
      if (qr.defined()) {
        p2c.resize(L * R);
        kt.gemm_f32(false, true, L, R, d, 1.f, kh, ldk, qr.data<float>() + h * d, C, 0.f, p2c.data(), R);
      }
      float* out = bias.data<float>() + t * P * P;
      for (int64_t i = 0; i < L; ++i)
        for (int64_t j = 0; j < L; ++j) {
          const int32_t m = rel.at(i, j);
          float v = 0.f;
          if (kr.defined()) v += c2p[i * R + m] * scale;
          if (qr.defined()) v += p2c[j * R + m] * scale;
          out[i * P + j] = v;
        }
    }
  });
}

void disentangled_bias_backward(Tensor* dq, Tensor* dk, Tensor* dkr, Tensor* dqr, const Tensor& dbias,
                                const Tensor& q, const Tensor& k, const Tensor& kr, const Tensor& qr, int64_t heads,
                                const RelativeRows& rel, float scale) {
  const int64_t B = q.size(0), T = q.size(1);
  std::vector<DisentangledSeq> seqs;
  for (int64_t b = 0; b < B; ++b) seqs.push_back({b, 0, T});
  check_common(seqs, q, k, kr, qr, heads, rel);
  const int64_t H = heads, C = q.size(2), d = C / H, R = rel.rows;
  check_shape(dbias, "disentangled_bias_backward: dbias", {B, H, T, T});
  ENCORE_CHECK(dbias.is_contiguous(), "disentangled_bias_backward: dbias must be contiguous");
  detail::check_grad(*dq, "disentangled_bias_backward: dq", q.shape());
  detail::check_grad(*dk, "disentangled_bias_backward: dk", k.shape());
  if (kr.defined()) detail::check_grad(*dkr, "disentangled_bias_backward: dKr", kr.shape());
  if (qr.defined()) detail::check_grad(*dqr, "disentangled_bias_backward: dQr", qr.shape());
  profiler::Scope profile("disentangled_bias_backward",
                          4.0 * B * T * R * C * ((kr.defined() ? 1 : 0) + (qr.defined() ? 1 : 0)));
  const auto& kt = kernels::kernels();
  const int64_t ldq = q.strides()[1], ldk = k.strides()[1];
  // One task per head, the batch in order inside it: each gradient element is summed in one fixed order.
  detail::parallel_blocks(H, [&](int64_t h0, int64_t h1) {
    std::vector<float> gc(T * R), gp(T * R);
    for (int64_t h = h0; h < h1; ++h)
      for (int64_t b = 0; b < B; ++b) {
        // in the forward pass this was:  bias[i, j] = scale·(c2p[i, m] + p2c[j, m]),  m = row(i - j)
        std::fill(gc.begin(), gc.end(), 0.f);
        std::fill(gp.begin(), gp.end(), 0.f);
        const float* g = dbias.data<float>() + (b * H + h) * T * T;
        for (int64_t i = 0; i < T; ++i)
          for (int64_t j = 0; j < T; ++j) {
            const float v = g[i * T + j] * scale;
            const int32_t m = rel.at(i, j);
            gc[i * R + m] += v;
            gp[j * R + m] += v;
          }
        const float* qh = q.data<float>() + b * q.strides()[0] + h * d;
        const float* kh = k.data<float>() + b * k.strides()[0] + h * d;
        float* dqh = dq->data<float>() + b * T * C + h * d;
        float* dkh = dk->data<float>() + b * T * C + h * d;
        if (kr.defined()) {  // c2p = q·Krᵀ:  dq += gc·Kr ; dKr += gcᵀ·q
          kt.gemm_f32(false, false, T, d, R, 1.f, gc.data(), R, kr.data<float>() + h * d, C, 1.f, dqh, C);
          kt.gemm_f32(true, false, R, d, T, 1.f, gc.data(), R, qh, ldq, 1.f, dkr->data<float>() + h * d, C);
        }
        if (qr.defined()) {  // p2c = k·Qrᵀ:  dk += gp·Qr ; dQr += gpᵀ·k
          kt.gemm_f32(false, false, T, d, R, 1.f, gp.data(), R, qr.data<float>() + h * d, C, 1.f, dkh, C);
          kt.gemm_f32(true, false, R, d, T, 1.f, gp.data(), R, kh, ldk, 1.f, dqr->data<float>() + h * d, C);
        }
      }
  });
}

}  // namespace encore::ops
