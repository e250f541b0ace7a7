// Scaled dot-product attention backward for one (batch, head) slice, with the active GEMM and softmax-backward
// kernels. The definition is attention_head_backward_f32_ref (backward_reference.cpp); the forward is
// ops::attention_forward:
//   s = q·kᵀ ; p = softmax(s·scale + masks) ; p' = dropout(p) ; out = p'·v
#include "kernels/backward.hpp"

namespace encore::kernels {

void attention_head_backward_f32(const AttentionHeadGrads& g, const AttentionHeadArgs& a, float* scratch) {
  const KernelTable& kt = kernels();
  const BackwardKernelTable& bt = backward_kernels();
  const int64_t T = a.T, S = a.S, TS = a.T * a.S;
  const bool dropped = a.dropout_p > 0.f;
  float* dl = g.dlogits ? g.dlogits : scratch;  // dp', then dp, then dlogits, in place
  const float* pv = a.probs;                    // p' (what multiplied v)
  if (dropped) {
    float* pd = scratch + TS;
    dropout_f32(pd, nullptr, a.probs, TS, a.dropout_p, a.seed, a.offset);
    pv = pd;
  }
  const float kv_beta = g.accumulate_kv ? 1.f : 0.f;  // dk, dv: = or +=
  // forward: out = p'·v   ->  dv = p'ᵀ·dout ; dp' = dout·vᵀ
  if (g.dv) kt.gemm_f32(true, false, S, a.Dv, T, 1.f, pv, S, a.dout, a.ld_dout, kv_beta, g.dv, g.ld_dv);
  if (!g.dq && !g.dk && !g.dlogits) return;
  kt.gemm_f32(false, true, T, S, a.Dv, 1.f, a.dout, a.ld_dout, a.v, a.ld_v, 0.f, dl, S);
  // forward: p' = dropout(p)  ->  dp = dp'·keep/(1-p)
  if (dropped) dropout_backward_f32(dl, dl, nullptr, TS, a.dropout_p, a.seed, a.offset);
  // forward: p = softmax(s·scale + masks)  ->  dlogits = p·(dp - Σ p·dp)
  bt.softmax_backward_f32(dl, dl, a.probs, T, S, 1.f);
  // forward: s = q·kᵀ, scaled by `scale` inside the softmax  ->  dq = scale·dlogits·k ; dk = scale·dlogitsᵀ·q
  if (g.dq) kt.gemm_f32(false, false, T, a.Dh, S, a.scale, dl, S, a.k, a.ld_k, 0.f, g.dq, g.ld_dq);
  if (g.dk) kt.gemm_f32(true, false, S, a.Dh, T, a.scale, dl, S, a.q, a.ld_q, kv_beta, g.dk, g.ld_dk);
}

}  // namespace encore::kernels
