// Scaled dot-product attention: the training forward (saving the pre-dropout probabilities) and the backward,
// one (batch, head) slice per task as in attention.cpp:
//   scores = Q_bh·K_bhᵀ ; P = softmax(scores·scale + masks) ; P' = dropout(P) ; out_bh = P'·V_bh
// Backward tasks are (batch, key/value head) pairs: the query heads sharing a key/value head (grouped-query
// attention; one head without it) run in head order within the task, the first writing dk/dv and the others adding
// to them. Tasks write disjoint parts of dq/dk/dv, so there is no reduction across threads; the per-slice GEMMs run
// single-threaded (detail::parallel_blocks), so the result does not depend on the thread count.
#include "encore/profiler.hpp"
#include <cmath>

#include "ops/backward.hpp"
#include "runtime/parallel.hpp"

namespace encore::ops {

namespace {

struct AttnDims : AttentionShape {
  float scale = 1.f;
};

AttnDims check_qkv(const Tensor& q, const Tensor& k, const Tensor& v, int64_t heads, std::optional<double> scale) {
  AttnDims d;
  static_cast<AttentionShape&>(d) = attention_shape(q, k, v, heads);
  check_dtype(q, "attention q", DType::f32);
  check_dtype(k, "attention k", DType::f32);
  check_dtype(v, "attention v", DType::f32);
  d.scale = detail::attention_scale(scale, d.Dh);  // exactly attention_forward's
  return d;
}

// *g if defined (checked: shape, f32, last dim contiguous), else a new contiguous tensor of that shape.
Tensor grad_output(Tensor* g, const char* name, const Shape& shape) {
  if (g->defined()) {
    check_shape(*g, name, shape);
    check_dtype(*g, name, DType::f32);
    ENCORE_CHECK(g->strides()[2] == 1, name, ": needs a contiguous last dimension, got strides ",
                 shape_str(g->strides()));
    return *g;
  }
  *g = Tensor::empty(shape);
  return *g;
}

// dmask += dlogits (B, H, T, S) summed over what dmask's shape broadcasts: (B·H, T, S) or (B, H, T, S) elementwise,
// (H, T, S) over b, (T, S) over b and h. Parallel over the T·S positions, each summing in (b, h) order: the result
// does not depend on the thread count.
void add_broadcast_sum(Tensor& dmask, const Tensor& dlogits, const AttnDims& d) {
  check_dtype(dmask, "attention d_attn_mask", DType::f32);
  ENCORE_CHECK(dmask.is_contiguous(), "attention d_attn_mask: must be contiguous");
  const int64_t B = d.B, H = d.H, TS = d.T * d.S;
  const Shape& s = dmask.shape();
  const bool full = s == Shape{B * H, d.T, d.S} || s == Shape{B, H, d.T, d.S};
  const bool per_head = s == Shape{H, d.T, d.S}, shared = s == Shape{d.T, d.S};
  ENCORE_CHECK(full || per_head || shared, "attention d_attn_mask: expected (", d.T, ", ", d.S, "), (",
               H, ", ", d.T, ", ", d.S, ") or (", B * H, ", ", d.T, ", ", d.S, "), got ", dmask.shape_str());
  const float* g = dlogits.data<float>();
  float* out = dmask.data<float>();
  const int64_t planes_out = full ? B * H : per_head ? H : 1;
  runtime::parallel_for(0, TS, 256, [&](int64_t i0, int64_t i1) {
    for (int64_t plane = 0; plane < planes_out; ++plane) {
      float* o = out + plane * TS;
      if (full) {
        for (int64_t i = i0; i < i1; ++i) o[i] += g[plane * TS + i];
        continue;
      }
      for (int64_t b = 0; b < B; ++b)
        for (int64_t h = per_head ? plane : 0; h < (per_head ? plane + 1 : H); ++h) {
          const float* gp = g + (b * H + h) * TS;
          for (int64_t i = i0; i < i1; ++i) o[i] += gp[i];
        }
    }
  });
}

}  // namespace

Tensor attention_forward_train(Tensor* probs, const Tensor& q, const Tensor& k, const Tensor& v, int64_t heads,
                               const AttentionMasks& masks, double dropout_p, bool training, uint64_t seed,
                               std::optional<double> scale) {
  profiler::Scope profile("attention", attention_flops(q, k, v, masks));
  ENCORE_CHECK(probs, "attention_forward_train: probs (the saved probabilities) is required");
  const AttnDims d = check_qkv(q, k, v, heads, scale);
  const int64_t B = d.B, T = d.T, S = d.S, H = d.H, Dh = d.Dh, Dv = d.Dv, group = d.group(), Ev = H * Dv;
  const detail::AttnMaskPlanes am = detail::attn_mask_planes(masks.attn_mask, B, H, T, S);
  if (masks.key_padding_mask.defined()) check_shape(masks.key_padding_mask, "key_padding_mask", {B, S});
  ENCORE_CHECK(dropout_p >= 0.0 && dropout_p <= 1.0, "attention: dropout must be in [0, 1], got ", dropout_p);
  const bool dropped = training && dropout_p > 0.0;

  Tensor out = Tensor::empty({B, T, Ev});
  *probs = Tensor::empty({B, H, T, S});
  const auto& kt = kernels::kernels();
  const float* qp = q.data<float>();
  const float* kp = k.data<float>();
  const float* vp = v.data<float>();
  const int64_t qB = q.strides()[0], qT = q.strides()[1];
  const int64_t kB = k.strides()[0], kT = k.strides()[1];
  const int64_t vB = v.strides()[0], vT = v.strides()[1];
  const float* kpm_p = masks.key_padding_mask.defined() ? masks.key_padding_mask.data<float>() : nullptr;

  // The same kernel calls, in the same order, as attention_forward; only P' goes to a scratch buffer so that
  // P itself is kept.
  runtime::parallel_for(0, B * H, 1, [&](int64_t p0, int64_t p1) {
    Tensor scratch = dropped ? Tensor::empty({T * S}) : Tensor();
    for (int64_t bh = p0; bh < p1; ++bh) {
      const int64_t b = bh / H, h = bh % H, g = h / group;  // g: its key/value head
      float* scores = probs->data<float>() + bh * T * S;
      // scores = Q_bh · K_bgᵀ
      kt.gemm_f32(false, true, T, S, Dh, 1.f, qp + b * qB + h * Dh, qT, kp + b * kB + g * Dh, kT, 0.f, scores, S);
      for (int64_t t = 0; t < T; ++t) {
        const float* mask_a = am.data ? am.plane(b, h) + t * S : nullptr;
        const float* mask_b = kpm_p ? kpm_p + b * S : nullptr;
        const int64_t limit = masks.causal ? std::min<int64_t>(S, t + 1) : S;
        kt.softmax_masked_f32(scores + t * S, S, d.scale, mask_a, mask_b, limit);
      }
      const float* pv = scores;
      if (dropped) {
        kernels::dropout_f32(scratch.data<float>(), nullptr, scores, T * S, static_cast<float>(dropout_p), seed,
                             static_cast<uint64_t>(bh * T * S));
        pv = scratch.data<float>();
      }
      // out_bh = P' · V_bg
      kt.gemm_f32(false, false, T, Dv, S, 1.f, pv, S, vp + b * vB + g * Dv, vT, 0.f,
                  out.data<float>() + b * T * Ev + h * Dv, Ev);
    }
  });
  return out;
}

void attention_backward(Tensor* dq, Tensor* dk, Tensor* dv, Tensor* d_attn_mask, const Tensor& dout,
                        const Tensor& probs, const Tensor& q, const Tensor& k, const Tensor& v, int64_t heads,
                        double dropout_p, bool training, uint64_t seed, std::optional<double> scale) {
  profiler::Scope profile("attention backward", 2.0 * attention_flops(q, k, v, AttentionMasks{}));
  const AttnDims d = check_qkv(q, k, v, heads, scale);
  const int64_t B = d.B, T = d.T, S = d.S, H = d.H, KV = d.KV, Dh = d.Dh, Dv = d.Dv, group = d.group();
  const int64_t E = H * Dh, Ev = H * Dv;
  check_dtype(dout, "attention dout", DType::f32);
  check_shape(dout, "attention dout", {B, T, Ev});
  check_dtype(probs, "attention probs", DType::f32);
  check_shape(probs, "attention probs", {B, H, T, S});
  ENCORE_CHECK(dropout_p >= 0.0 && dropout_p <= 1.0, "attention: dropout must be in [0, 1], got ", dropout_p);
  const float drop = training ? static_cast<float>(dropout_p) : 0.f;

  Tensor gq = dq ? grad_output(dq, "attention dq", {B, T, E}) : Tensor();
  Tensor gk = dk ? grad_output(dk, "attention dk", {B, S, KV * Dh}) : Tensor();
  Tensor gv = dv ? grad_output(dv, "attention dv", {B, S, KV * Dv}) : Tensor();
  // d_attn_mask: undefined -> receives dlogits itself; defined -> dlogits summed over its broadcast is added to it
  const bool sum_into_mask = d_attn_mask && d_attn_mask->defined();
  Tensor gl = d_attn_mask ? Tensor::empty({B, H, T, S}) : Tensor();
  if (d_attn_mask && !sum_into_mask) *d_attn_mask = gl;
  Tensor go = dout.contiguous(), pc = probs.contiguous();
  if (T == 0 || S == 0) {  // nothing attended: every gradient is zero
    for (Tensor* t : {&gq, &gk, &gv})
      if (t->defined())
        for (int64_t b = 0; b < B; ++b) t->select(0, b).copy_from(Tensor::zeros(t->select(0, b).shape()));
    return;
  }

  detail::parallel_blocks(B * KV, [&](int64_t p0, int64_t p1) {
    Tensor scratch = Tensor::empty({2 * T * S});
    for (int64_t bg = p0; bg < p1; ++bg) {
      const int64_t b = bg / KV, g = bg % KV;  // key/value head g serves query heads [g·group, (g+1)·group)
      for (int64_t h = g * group; h < (g + 1) * group; ++h) {
        const int64_t bh = b * H + h;
        kernels::AttentionHeadArgs a;
        a.dout = go.data<float>() + b * T * Ev + h * Dv, a.ld_dout = Ev;
        a.probs = pc.data<float>() + bh * T * S;
        a.q = q.data<float>() + b * q.strides()[0] + h * Dh, a.ld_q = q.strides()[1];
        a.k = k.data<float>() + b * k.strides()[0] + g * Dh, a.ld_k = k.strides()[1];
        a.v = v.data<float>() + b * v.strides()[0] + g * Dv, a.ld_v = v.strides()[1];
        a.T = T, a.S = S, a.Dh = Dh, a.Dv = Dv;
        a.scale = d.scale;
        a.dropout_p = drop, a.seed = seed, a.offset = static_cast<uint64_t>(bh * T * S);
        kernels::AttentionHeadGrads grads;
        if (gq.defined()) grads.dq = gq.data<float>() + b * gq.strides()[0] + h * Dh, grads.ld_dq = gq.strides()[1];
        if (gk.defined()) grads.dk = gk.data<float>() + b * gk.strides()[0] + g * Dh, grads.ld_dk = gk.strides()[1];
        if (gv.defined()) grads.dv = gv.data<float>() + b * gv.strides()[0] + g * Dv, grads.ld_dv = gv.strides()[1];
        if (gl.defined()) grads.dlogits = gl.data<float>() + bh * T * S;
        grads.accumulate_kv = h % group != 0;  // the group's first head writes dk/dv, the others add
        kernels::attention_head_backward_f32(grads, a, scratch.data<float>());
      }
    }
  });
  if (sum_into_mask) add_broadcast_sum(*d_attn_mask, gl, d);
}

}  // namespace encore::ops
