// Backward kernels: the gradient of every forward kernel in kernels.hpp, over plain buffers.
//
//   // forward:  out = layernorm(in; weight, bias), saving mean and rstd per row
//   kernels::layernorm_forward_f32_ref(out, mean, rstd, in, w, b, rows, C, eps);
//   // backward: dinp = ∂L/∂in ; dweight += ∂L/∂w ; dbias += ∂L/∂b
//   kernels::backward_kernels().layernorm_backward_f32(dinp, dw, db, dout, mean, rstd, in, w, rows, C);
//
// Conventions, once for the whole file (llm.c's, see ../shared/STYLE.md):
//  * Argument order: the gradients a kernel produces first, then dout (the gradient it receives), then what
//    the forward saved (mean/rstd, probabilities, masks), then the forward's inputs and weights, then dims.
//  * PARAMETER gradients (dweight, dbias, dtable) ACCUMULATE: `+=` into the caller's buffer, so micro-batches
//    and shared weights (ALBERT's layer groups, tied embeddings) sum without a copy. Zero them once per step.
//  * ACTIVATION gradients (dinp, dx, din, dq/dk/dv, dlogits) are WRITTEN: `=`. A tensor that feeds two
//    branches (the residual stream) gets its two gradients summed by the caller (add_f32).
//  * A gradient pointer may be null when that gradient is not wanted (frozen weight, no affine, input data).
//  * Every kernel has a scalar *_ref twin, computed in double internally and rounded once: the definition,
//    tested against central finite differences in double. Fast variants are tested against the ref.
//  * Kernels never spawn threads. Reductions over rows (dweight, dbias, dtable) run in row order inside one
//    call; callers that split rows across threads give each fixed block of rows its own zeroed partial
//    buffer and add the partials in block order (ops/*_backward.cpp), so gradients do not depend on the
//    thread count.
//
// The fast table is the ISA twin of the forward table: backward_kernels() follows kernels().name, so the one
// decision made in dispatch.cpp (ENCORE_KERNELS=ref, ENCORE_ISA=...) also picks the backward kernels.
#pragma once
#include <cstdint>

#include "kernels/kernels.hpp"

namespace encore::kernels {

// d act(x)/dx at the pre-activation x. relu'(0) = 0 (as torch's threshold_backward).
//   gelu'(x)      = Φ(x) + x·φ(x)                        Φ = (1 + erf(x/√2))/2, φ = exp(-x²/2)/√(2π)
//   gelu_tanh'(x) = (1 + t)/2 + x/2·(1 - t²)·√(2/π)·(1 + 3·0.044715x²),  t = tanh(√(2/π)·(x + 0.044715x³))
//   silu'(x)      = s·(1 + x·(1 - s)),  s = sigmoid(x)
//   tanh'(x)      = 1 - tanh(x)²
double act_grad_ref(double x, Act act);
float act_grad_scalar(float x, Act act);  // the same in float (tails of the fast kernels)

struct BackwardKernelTable {
  const char* name;  // "ref", "scalar", "avx2", "avx512"

  // forward: out[i] = act(x[i])  ->  dx[i] = dout[i]·act'(x[i]). x is the PRE-activation. dx may alias dout.
  void (*activation_backward_f32)(float* dx, const float* dout, const float* x, int64_t n, Act act);
  // forward: out (rows, F) = act(a)·b with in = [x0 | x1] (rows, 2F), (a, b) = (x0, x1) for Gate::first, (x1, x0)
  // for Gate::second  ->  da = dout·b·act'(a), db = dout·act(a), written to the halves a and b came from.
  void (*gated_backward_f32)(float* din, const float* dout, const float* in, int64_t rows, int64_t F, Act act,
                             Gate gate);
  // forward: xhat = (in - mean)·rstd ; out = xhat·weight + bias  (weight/bias may be null)
  //   dinp = rstd·(g - mean(g) - xhat·mean(g·xhat)), g = dout·weight ; dweight += Σ_rows dout·xhat ;
  //   dbias += Σ_rows dout. dinp may alias dout; dweight/dbias may be null.
  void (*layernorm_backward_f32)(float* dinp, float* dweight, float* dbias, const float* dout, const float* mean,
                                 const float* rstd, const float* inp, const float* weight, int64_t rows, int64_t C);
  // forward: xhat = in·rstd ; out = xhat·weight (weight may be null)
  //   dinp = rstd·(g - xhat·mean(g·xhat)), g = dout·weight ; dweight += Σ_rows dout·xhat. dinp may alias dout.
  void (*rmsnorm_backward_f32)(float* dinp, float* dweight, const float* dout, const float* rstd, const float* inp,
                               const float* weight, int64_t rows, int64_t C);
  // forward (softmax_masked_f32 per row): p = softmax(x·scale + masks) on [0, limit), 0 elsewhere
  //   dx = scale·p·(dp - Σ_j p·dp) over rows of `cols` contiguous floats. Masked entries and fully masked rows
  //   have p = 0, so their gradient is exactly 0 (never NaN for finite dp). dx may alias dp.
  void (*softmax_backward_f32)(float* dx, const float* dp, const float* p, int64_t rows, int64_t cols, float scale);
  // dbias[c] += Σ_r dout[r·ld + c] for c in [0, cols), rows summed in order (a linear layer's bias gradient).
  void (*bias_backward_f32)(float* dbias, const float* dout, int64_t rows, int64_t cols, int64_t ld);
};

const BackwardKernelTable& backward_kernels();      // follows kernels().name
const BackwardKernelTable& backward_kernels_ref();  // the *_ref twins
const BackwardKernelTable* backward_kernels_for(Isa isa);  // a specific ISA's table, or null if the CPU lacks it

// ---- scalar references (the 'ref' and 'scalar' tables' entries) ----
void activation_backward_f32_ref(float* dx, const float* dout, const float* x, int64_t n, Act act);
void gated_backward_f32_ref(float* din, const float* dout, const float* in, int64_t rows, int64_t F, Act act,
                            Gate gate);
void layernorm_backward_f32_ref(float* dinp, float* dweight, float* dbias, const float* dout, const float* mean,
                                const float* rstd, const float* inp, const float* weight, int64_t rows, int64_t C);
void rmsnorm_backward_f32_ref(float* dinp, float* dweight, const float* dout, const float* rstd, const float* inp,
                              const float* weight, int64_t rows, int64_t C);
void softmax_backward_f32_ref(float* dx, const float* dp, const float* p, int64_t rows, int64_t cols, float scale);
void bias_backward_f32_ref(float* dbias, const float* dout, int64_t rows, int64_t cols, int64_t ld);

// Linear without activation (the fused-activation variants first apply activation_backward to dout, on the
// saved pre-activation): forward out(M,N) = inp(M,K)·weight(N,K)ᵀ + bias(N)
//   dinp = dout·weight (=) ; dweight += doutᵀ·inp ; dbias += Σ_rows dout.
// The definition only: ops::linear_backward computes the same with gemm_f32 and bias_backward_f32.
void linear_backward_f32_ref(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                             const float* weight, int64_t M, int64_t K, int64_t N);

// Residual add: forward out = a + b  ->  da = dout ; db = dout (either may be null).
void add_backward_f32(float* da, float* db, const float* dout, int64_t n);
void add_backward_f32_ref(float* da, float* db, const float* dout, int64_t n);

// forward (dropout_f32): out = in·keep/(1-p)  ->  dx = dout·keep/(1-p). keep comes from mask when it is not
// null, else it is regenerated from the counter-based RNG exactly as dropout_f32(…, p, seed, offset) drew it
// (no mask memory; one hash per element). dx may alias dout.
void dropout_backward_f32(float* dx, const float* dout, const uint8_t* mask, int64_t n, float p, uint64_t seed,
                          uint64_t offset);
void dropout_backward_f32_ref(float* dx, const float* dout, const uint8_t* mask, int64_t n, float p, uint64_t seed,
                              uint64_t offset);

// forward (embedding_lookup_f32): out[i] = table[ids[i]]  ->  dtable[ids[i]] += dout[i], i in order, so a
// repeated id sums its rows deterministically. Rows are C floats with row stride ld (ld >= C) in both dtable
// and dout, so callers can split columns across threads. ids equal to padding_idx are skipped (torch's
// padding_idx; pass -1 for none). ids must be in [0, vocab) (checked by the op).
void embedding_backward_f32(float* dtable, const float* dout, const int64_t* ids, int64_t n, int64_t C, int64_t ld,
                            int64_t padding_idx);
void embedding_backward_f32_ref(float* dtable, const float* dout, const int64_t* ids, int64_t n, int64_t C,
                                int64_t ld, int64_t padding_idx);

// ---- scaled dot-product attention, one (batch, head) slice (backward_attention.cpp) ----
// The forward (ops::attention_forward) for the slice, row strides in elements, last dims contiguous:
//   s = q·kᵀ (T×S) ; p = softmax(s·scale + masks) ; p' = dropout(p) ; out = p'·v (T×Dv)
struct AttentionHeadArgs {
  const float* dout;  int64_t ld_dout;  // (T, Dv) gradient of out
  const float* probs;                   // (T, S) contiguous: saved p, BEFORE dropout (masked entries are 0)
  const float* q;     int64_t ld_q;     // (T, Dh)
  const float* k;     int64_t ld_k;     // (S, Dh)
  const float* v;     int64_t ld_v;     // (S, Dv)
  int64_t T = 0, S = 0, Dh = 0, Dv = 0;
  float scale = 1.f;                    // 1/√Dh in attention_forward
  float dropout_p = 0.f;                // 0: no dropout was applied; else p' = dropout_f32(p, dropout_p, seed, offset)
  uint64_t seed = 0, offset = 0;
};
// Gradients of the slice (=; dk and dv += when accumulate_kv: the query heads of grouped-query attention that share
// one key/value head add their parts in turn). Any pointer may be null (not wanted).
//   dv = p'ᵀ·dout ; dp = dropout'(dout·vᵀ) ; dlogits = p·(dp - Σ_j p·dp) ; dq = scale·dlogits·k ; dk = scale·dlogitsᵀ·q
// dlogits (T, S) contiguous is the gradient w.r.t. the softmax input s·scale + masks, i.e. of any additive mask
// or attention bias (before its broadcast is summed).
struct AttentionHeadGrads {
  float* dq = nullptr;  int64_t ld_dq = 0;
  float* dk = nullptr;  int64_t ld_dk = 0;
  float* dv = nullptr;  int64_t ld_dv = 0;
  float* dlogits = nullptr;
  bool accumulate_kv = false;
};
void attention_head_backward_f32_ref(const AttentionHeadGrads& g, const AttentionHeadArgs& a);
// The same with kernels().gemm_f32 and backward_kernels().softmax_backward_f32. scratch: 2·T·S floats.
// Call it from one thread per slice: the GEMM library is single-threaded only inside a parallel region (or
// with one OpenMP thread), which ops::attention_backward arranges.
void attention_head_backward_f32(const AttentionHeadGrads& g, const AttentionHeadArgs& a, float* scratch);

}  // namespace encore::kernels
