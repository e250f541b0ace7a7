// Scaled dot-product attention, one (batch, head) pair per task:
//   scores = Q_bh · K_bhᵀ (T×S) ; P = softmax(scores/√d + masks) ; out_bh = P · V_bh (T×Dv)
// The T×S score buffer is per thread (or the caller's probs tensor when weights are wanted).
#include <cmath>

#include "kernels/kernels.hpp"
#include "ops/ops.hpp"
#include "runtime/parallel.hpp"

namespace encore::ops {

Tensor attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, int64_t heads,
                         const AttentionMasks& masks, Tensor* probs, double dropout_p, bool training,
                         uint64_t seed) {
  ENCORE_CHECK(q.dim() == 3 && k.dim() == 3 && v.dim() == 3, "attention: expected 3-D q, k, v, got ", q.shape_str(),
               ", ", k.shape_str(), ", ", v.shape_str());
  const int64_t B = q.size(0), T = q.size(1), E = q.size(2), S = k.size(1), Ev = v.size(2);
  ENCORE_CHECK(k.size(0) == B && v.size(0) == B && v.size(1) == S && k.size(2) == E,
               "attention: q ", q.shape_str(), ", k ", k.shape_str(), ", v ", v.shape_str(), " do not agree");
  ENCORE_CHECK(heads > 0 && E % heads == 0 && Ev % heads == 0, "attention: ", heads,
               " heads do not divide the dims ", E, " and ", Ev);
  ENCORE_CHECK(q.strides()[2] == 1 && k.strides()[2] == 1 && v.strides()[2] == 1,
               "attention: q, k, v need a contiguous last dimension");
  const int64_t H = heads, Dh = E / H, Dv = Ev / H;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(Dh)));

  const Tensor& am = masks.attn_mask;
  const bool am3 = am.defined() && am.dim() == 3;
  if (am.defined()) {
    if (am3)
      check_shape(am, "attn_mask", {B * H, T, S});
    else
      check_shape(am, "attn_mask", {T, S});
  }
  if (masks.key_padding_mask.defined()) check_shape(masks.key_padding_mask, "key_padding_mask", {B, S});

  Tensor out = Tensor::empty({B, T, Ev});
  if (probs) *probs = Tensor::empty({B, H, T, S});

  const auto& kt = kernels::kernels();
  const float* qp = q.data<float>();
  const float* kp = k.data<float>();
  const float* vp = v.data<float>();
  const int64_t qB = q.strides()[0], qT = q.strides()[1];
  const int64_t kB = k.strides()[0], kT = k.strides()[1];
  const int64_t vB = v.strides()[0], vT = v.strides()[1];
  const float* am_p = am.defined() ? am.data<float>() : nullptr;
  const float* kpm_p = masks.key_padding_mask.defined() ? masks.key_padding_mask.data<float>() : nullptr;

  runtime::parallel_for(0, B * H, 1, [&](int64_t p0, int64_t p1) {
    // One score buffer per task range (i.e. per thread), unless the caller keeps the probabilities.
    Tensor scratch = probs ? Tensor() : Tensor::empty({T * S});
    for (int64_t bh = p0; bh < p1; ++bh) {
      const int64_t b = bh / H, h = bh % H;
      float* scores = probs ? probs->data<float>() + bh * T * S : scratch.data<float>();
      // scores = Q_bh · K_bhᵀ
      kt.gemm_f32(false, true, T, S, Dh, 1.f, qp + b * qB + h * Dh, qT, kp + b * kB + h * Dh, kT, 0.f, scores, S);
      for (int64_t t = 0; t < T; ++t) {
        const float* mask_a = am_p ? am_p + (am3 ? bh * T * S : 0) + t * S : nullptr;
        const float* mask_b = kpm_p ? kpm_p + b * S : nullptr;
        const int64_t limit = masks.causal ? std::min<int64_t>(S, t + 1) : S;
        kt.softmax_masked_f32(scores + t * S, S, scale, mask_a, mask_b, limit);
      }
      if (training && dropout_p > 0.0)
        kernels::dropout_f32(scores, nullptr, scores, T * S, static_cast<float>(dropout_p), seed,
                             static_cast<uint64_t>(bh * T * S));
      // out_bh = P · V_bh
      kt.gemm_f32(false, false, T, Dv, S, 1.f, scores, S, vp + b * vB + h * Dv, vT, 0.f,
                  out.data<float>() + b * T * Ev + h * Dv, Ev);
    }
  });
  return out;
}

}  // namespace encore::ops
