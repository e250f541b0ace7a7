// Tensor-level backward ops: the <op>_backward half of every <op>_forward in ops.hpp, plus the forward
// variants that save what a backward needs (the inference forwards in ops.hpp are unchanged).
//
//   // forward, saving the pre-activation and the norm statistics
//   Tensor pre, mean, rstd;
//   Tensor h = ops::linear_forward_train(&pre, x, w1, b1, Act::gelu_erf);
//   Tensor y = ops::layernorm_forward(h, ln_w, ln_b, 1e-5, &mean, &rstd);
//   // backward: dw1, db1, dln_w, dln_b are zero-initialized once per step and ACCUMULATE
//   Tensor dh, dx;
//   ops::layernorm_backward(&dh, &dln_w, &dln_b, dy, mean, rstd, h, ln_w);
//   ops::linear_backward(&dx, &dw1, &db1, dh, pre, x, w1, Act::gelu_erf);
//
// Conventions (the same as kernels/backward.hpp, once for the whole file):
//  * Arguments: gradient outputs first (pointers; null = not wanted), then dout, then what the forward saved,
//    then the forward's inputs and weights, then options.
//  * PARAMETER gradients (dweight, dbias, dtable) ACCUMULATE (+=) into caller-owned tensors of the
//    parameter's shape (f32, contiguous), e.g. Tensor::zeros(weight.shape()) made once per step.
//  * ACTIVATION gradients (dx, dq, dk, dv, dlogits) are WRITTEN (=): *dx is replaced by a fresh contiguous
//    tensor of the input's shape, except where stated (attention writes into views you pass). Where a tensor
//    fed two branches (a residual), sum the two gradients yourself (add_forward_).
//  * Deterministic: every gradient is bitwise the same for any thread count. Work is cut into blocks whose
//    size depends on the shapes only; a reduction across blocks (dweight of a norm over rows) goes through
//    per-block partial buffers summed in block order, or is split over output columns (bias, embedding
//    table, weight GEMMs) so that each element is reduced by one thread in a fixed order; library GEMMs run
//    single-threaded inside those blocks (oneDNN's sgemm would otherwise split K by thread count).
//  * Thread-safety: ops may run concurrently on different tensors; they only read their inputs.
#pragma once
#include <cstdint>
#include <functional>

#include "encore/tensor.hpp"
#include "kernels/backward.hpp"
#include "ops/ops.hpp"

namespace encore::ops {

// ---- linear ----
// act(x·weightᵀ + bias) like linear_forward, computed as a plain GEMM into *pre (the pre-activation, saved
// for backward) followed by the activation kernel. Decision: backward needs act'(pre), and gelu/silu cannot
// be inverted from their output, so the pre-activation is SAVED (one (…, N) tensor, as torch saves gelu's
// input) rather than recomputed with a second GEMM. act == none: *pre is left undefined (nothing to save).
// Values match linear_forward up to the rounding of the fused epilogue.
Tensor linear_forward_train(Tensor* pre, const Tensor& x, const Tensor& weight, const Tensor& bias,
                            Act act = Act::none);
// forward: out = act(pre), pre = x·weightᵀ + bias. dpre = dout·act'(pre) ; dx = dpre·weight ;
// dweight += dpreᵀ·x ; dbias += Σ_rows dpre. pre is ignored (may be undefined) when act == none.
void linear_backward(Tensor* dx, Tensor* dweight, Tensor* dbias, const Tensor& dout, const Tensor& pre,
                     const Tensor& x, const Tensor& weight, Act act = Act::none);

// ---- norms (mean/rstd as filled by layernorm_forward / rmsnorm_forward) ----
// weight/bias undefined = no affine / no bias (then dweight/dbias must be null).
void layernorm_backward(Tensor* dx, Tensor* dweight, Tensor* dbias, const Tensor& dout, const Tensor& mean,
                        const Tensor& rstd, const Tensor& x, const Tensor& weight);
void rmsnorm_backward(Tensor* dx, Tensor* dweight, const Tensor& dout, const Tensor& rstd, const Tensor& x,
                      const Tensor& weight);

// ---- elementwise ----
// x is the activation's INPUT (pre-activation).
void activation_backward(Tensor* dx, const Tensor& dout, const Tensor& x, Act act);
// x (…, 2F) = [x0 | x1] as given to gated_forward (same gate); *dx (…, 2F).
void gated_backward(Tensor* dx, const Tensor& dout, const Tensor& x, Act act,
                    kernels::Gate gate = kernels::Gate::first);
// forward (rotary_forward): y = R(θ)·x per head pair -> dx = R(θ)ᵀ·dout (the inverse rotation). cos/sin as given
// to the forward; no gradient flows to them (they are functions of the positions).
void rotary_backward(Tensor* dx, const Tensor& dout, const Tensor& cos, const Tensor& sin);
// out = a + b: *da = *db = dout (shared handles, no copy; clone before writing into one of them).
void add_backward(Tensor* da, Tensor* db, const Tensor& dout);
// The mask dropout_forward drew for (p, seed) is regenerated, not stored: dx = dout·keep/(1-p).
// !training or p == 0: *dx = dout (identity, as the forward).
void dropout_backward(Tensor* dx, const Tensor& dout, double p, bool training, uint64_t seed);
// softmax_forward_ (row-wise over the last dim, scale 1): dx = p·(dout - Σ p·dout). probs is its output.
void softmax_backward(Tensor* dx, const Tensor& dout, const Tensor& probs);

// ---- embeddings ----
// dtable (V, C) += scatter of dout (…, C) rows by ids (…); ids equal to padding_idx get no gradient (torch's
// Embedding(padding_idx=…); -1 = none). Deterministic: repeated ids are summed in token order. Positions
// (learned) are an embedding over position ids; sinusoidal positions have no parameters and no backward.
void embedding_backward(Tensor* dtable, const Tensor& dout, const Tensor& ids, int64_t padding_idx = -1);

// ---- attention ----
// attention_forward with what backward needs: *probs (B, H, T, S) receives the probabilities BEFORE dropout
// (masked entries 0; attention_forward's own probs output is overwritten by the dropped-out values when
// training with dropout). The output is bitwise attention_forward's for the same arguments.
Tensor attention_forward_train(Tensor* probs, const Tensor& q, const Tensor& k, const Tensor& v, int64_t heads,
                               const AttentionMasks& masks, double dropout_p, bool training, uint64_t seed,
                               std::optional<double> scale = std::nullopt);
// Backward of attention_forward / attention_forward_train over all heads. probs is the saved (B, H, T, S)
// pre-dropout tensor (masks and causality are encoded in it: masked entries have zero probability and get zero
// gradient; fully masked rows give zero, never NaN); dropout_p/training/seed/scale must be the forward's.
// dq (B, T, E), dk (B, S, E), dv (B, S, Ev): if *dq is defined it is written in place and may be a strided
// view (last dim contiguous), e.g. a slice of a packed (B, T, 3E) dQKV buffer; else it is allocated
// contiguous. The three must not overlap (if k and v are one tensor, sum dk and dv yourself).
// d_attn_mask, if non-null, gets dlogits = ∂L/∂(q·kᵀ·scale + masks) (B, H, T, S), the gradient of an additive
// attn_mask / attention bias (T5's relative bias, DeBERTa's c2p/p2c terms):
//  * *d_attn_mask undefined: it receives dlogits itself, per head, before any broadcast is summed;
//  * *d_attn_mask defined (float32, contiguous, (T, S), (H, T, S), (B·H, T, S) or (B, H, T, S)): dlogits summed
//    over what that shape broadcasts is ADDED to it (a parameter gradient: a bias shared by several layers sums
//    their calls). Deterministic, whatever the thread count.
void attention_backward(Tensor* dq, Tensor* dk, Tensor* dv, Tensor* d_attn_mask, const Tensor& dout,
                        const Tensor& probs, const Tensor& q, const Tensor& k, const Tensor& v, int64_t heads,
                        double dropout_p, bool training, uint64_t seed, std::optional<double> scale = std::nullopt);

// ---- DeBERTa's disentangled attention bias ----
// Backward of disentangled_bias_forward over a padded batch (sequence b = batch row b, all T rows, P = T):
// dbias (B, heads, T, T) as attention_backward's dlogits. ACCUMULATES (+=) into dq, dk (B, T, C) and dKr, dQr
// (R, C) (contiguous, allocated by the caller; dKr / dQr only where Kr / Qr are defined).
void disentangled_bias_backward(Tensor* dq, Tensor* dk, Tensor* dkr, Tensor* dqr, const Tensor& dbias,
                                const Tensor& q, const Tensor& k, const Tensor& kr, const Tensor& qr, int64_t heads,
                                const RelativeRows& rel, float scale);

// relative_position_bias_forward's backward: dtable (num_buckets, H) += dbias (H, T, S) summed per bucket
// (dbias: e.g. attention_backward's d_attn_mask summed over every layer that added the bias).
void relative_position_bias_backward(Tensor* dtable, const Tensor& dbias, int64_t max_distance,
                                     bool bidirectional = true);

// ---- 1-D convolution over tokens ----
// dx = (writes) the gradient of x; ACCUMULATES into dweight (Cout, Cin/groups, K) and dbias (Cout) when non-null.
void conv1d_backward(Tensor* dx, Tensor* dweight, Tensor* dbias, const Tensor& dout, const Tensor& x,
                     const Tensor& weight, int64_t groups, const std::vector<int64_t>* cu_seqlens = nullptr);

namespace detail {
// fn(i0, i1) over [0, n) with parallel_for (grain 1), with library GEMMs inside single-threaded whatever the
// caller's thread count: inside the parallel region they are already, and where parallel_for runs fn on the
// calling thread, OpenMP's thread count for nested library calls is set to 1 for the duration. With block
// sizes that depend on the shapes only, results are then the same bitwise for any thread count.
void parallel_blocks(int64_t n, const std::function<void(int64_t, int64_t)>& fn);
// Number of fixed-size blocks of `block` items covering n.
inline int64_t num_blocks(int64_t n, int64_t block) { return (n + block - 1) / block; }
// A parameter gradient to accumulate into: defined, float32, contiguous, of the parameter's shape.
void check_grad(const Tensor& grad, const char* name, const Shape& shape);
}  // namespace detail

}  // namespace encore::ops
