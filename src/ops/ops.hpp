// Tensor-level ops: <op>_forward (and, later, <op>_backward) pairs. Each checks shapes and dtypes, names
// the offending argument in its error, splits rows across threads with parallel_for, and calls the active
// kernel table. Inputs may be strided views only where stated; outputs are freshly allocated, contiguous.
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include "encore/tensor.hpp"
#include "kernels/kernels.hpp"

namespace encore::ops {

using kernels::Act;

// x (..., K), weight (N, K), bias (N) or undefined -> act(x·weightᵀ + bias) (..., N). x must be contiguous.
Tensor linear_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, Act act = Act::none);

// The same with a weight prepared by kernels::PackedLinear (shape checks against its N, K).
Tensor linear_forward(const Tensor& x, const kernels::PackedLinear& weight, Act act = Act::none);
// second(act(x·firstᵀ + b1)) (a feed-forward block in inference): PackedLinear::forward_chain where the pair has
// one (int8: no f32 intermediate), else the two linear_forward calls.
Tensor linear_chain_forward(const Tensor& x, const kernels::PackedLinear& first, Act act,
                            const kernels::PackedLinear& second);

// Over the last dim C. weight/bias (C) or undefined. mean/rstd (rows) are filled when defined.
Tensor layernorm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                         Tensor* mean = nullptr, Tensor* rstd = nullptr);
// Residual + LayerNorm in one pass over the rows (inference): y = layernorm(x + residual) over the last dim,
// bit for bit add_forward_ then layernorm_forward. x must be contiguous and not shared with anything that
// still needs it. With keep_sum, x becomes x + residual (Pre-LN's residual stream) and y is a new tensor;
// without, y is written over x and returned (x's storage).
Tensor add_layernorm_forward_(Tensor& x, const Tensor& residual, const Tensor& weight, const Tensor& bias,
                              double eps, bool keep_sum);
Tensor rmsnorm_forward(const Tensor& x, const Tensor& weight, double eps, Tensor* rstd = nullptr);

Tensor activation_forward(const Tensor& x, Act act);
void activation_forward_(Tensor& x, Act act);  // in place
// x (..., 2F) = [x0 | x1] -> act(x0)·x1 (Gate::first) or act(x1)·x0 (Gate::second), (..., F)
Tensor gated_forward(const Tensor& x, Act act, kernels::Gate gate = kernels::Gate::first);
// a + b, same shapes.
Tensor add_forward(const Tensor& a, const Tensor& b);
void add_forward_(Tensor& a, const Tensor& b);  // a += b

// Inverted dropout: x·keep/(1-p). Identity (returns x itself) when !training or p == 0.
Tensor dropout_forward(const Tensor& x, double p, bool training, uint64_t seed);

// Row-wise masked softmax over the last dim (the softmax_masked kernel) on a contiguous tensor, in place.
void softmax_forward_(Tensor& x);

// A boolean (True = masked) or float (additive) mask as a contiguous float32 additive mask.
Tensor additive_mask(const Tensor& mask, const char* name);

struct AttentionMasks {
  Tensor attn_mask;         // additive f32 (T, S), (H, T, S) shared by the batch, or (B*H, T, S); or undefined
  Tensor key_padding_mask;  // additive f32 (B, S), or undefined
  bool causal = false;      // key j > query i is masked (top-left aligned when T != S)
  // Padding-free batch: q, k, v are (1, N, E) holding sequences back to back, sequence b in rows
  // [cu_seqlens[b], cu_seqlens[b+1]); each attends within itself only. attn_mask is then (P, P) or (B*H, P, P)
  // (or (H, P, P)) for a padded length P >= every sequence, and sequence b uses its top-left (len, len) block; no
  // key_padding_mask. Runs the fused kernel (no weights, no dropout).
  std::vector<int64_t> cu_seqlens;
};

// The shape of an attention call, checked: q (B, T, H·Dh), k (B, S, KV·Dh), v (B, S, KV·Dv), last dims
// contiguous, KV dividing H. KV < H is grouped-query attention: query head h reads key/value head h / (H / KV)
// (what torch's repeat_interleave of K and V along heads, or transformers' repeat_kv, computes, without the
// copies); KV == H is multi-head attention. The output is (B, T, H·Dv).
struct AttentionShape {
  int64_t B = 0, T = 0, S = 0, H = 0, KV = 0, Dh = 0, Dv = 0;
  int64_t group() const { return H / KV; }  // query heads per key/value head
};
AttentionShape attention_shape(const Tensor& q, const Tensor& k, const Tensor& v, int64_t heads);

// Scaled dot-product attention over heads. q (B, T, E), k (B, S, E), v (B, S, Ev) with last dim contiguous
// and any row strides (views into a packed QKV buffer are fine). Returns (B, T, Ev) with heads concatenated.
// k and v may hold fewer heads than q (grouped-query attention, see AttentionShape); the output is then
// (B, T, heads·Dv).
// scale multiplies q·kᵀ before the masks are added, as torch's scaled_dot_product_attention(scale=): unset means
// 1/√(E/heads); T5 uses 1, DeBERTa 1/√(3·E/heads). It must be finite.
// probs, if non-null, receives the per-head probabilities (B, H, T, S) after masking - and after dropout in
// training mode, as torch returns attention weights (training code uses attention_forward_train instead).
// Without probs and dropout it runs the fused kernel (kernels::AttentionBlock: no T x S buffer), unless the
// environment has ENCORE_ATTENTION=unfused (read per call, so one process can A/B the two paths).
// Precision of the fused kernel's two matmuls (QKᵀ and P·V) on this thread: fp32 by default; bf16 inputs with
// fp32 accumulation (kernels::attention_fused_bf16_ref) inside an AttentionPrecisionScope(true), which the forward
// of a bf16 or int8 model opens (AutoModel::forward). Softmax, masks, the unfused path (weights, dropout)
// and training stay fp32. ENCORE_ATTENTION=f32 (read per call) keeps the fp32 kernel for an A/B run.
class AttentionPrecisionScope {
 public:
  explicit AttentionPrecisionScope(bool bf16_matmuls);
  ~AttentionPrecisionScope();
  AttentionPrecisionScope(const AttentionPrecisionScope&) = delete;
  AttentionPrecisionScope& operator=(const AttentionPrecisionScope&) = delete;

 private:
  bool previous_;
};
bool attention_bf16_matmuls();  // this thread's setting, ENCORE_ATTENTION=f32 included
// Bytes of scratch the fused path holds at once for B sequences of T tokens, head dim Dk, with `threads` threads
// (one kernel scratch per thread that gets work; what plan_encoder_memory counts for inference).
int64_t attention_fused_scratch_bytes(int64_t B, int64_t T, int64_t heads, int64_t Dk, int64_t threads,
                                      bool bf16_matmuls = false);
Tensor attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, int64_t heads,
                         const AttentionMasks& masks, Tensor* probs, double dropout_p, bool training,
                         uint64_t seed, std::optional<double> scale = std::nullopt);
// FLOPs of attention for the profiler: QKᵀ and PV, 2 per multiply-add, over every (query, key) pair (per sequence
// of a padding-free batch); 0 for shapes attention refuses.
double attention_flops(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMasks& masks);

namespace detail {
// The scale attention applies: *scale (checked finite) or 1/√head_dim.
float attention_scale(std::optional<double> scale, int64_t head_dim);
// Where attn_mask's plane for (sequence b, head h) starts: data + b·per_batch + h·per_head, rows S floats apart.
// Checks the mask is float32, contiguous and (T, S), (H, T, S) or (B·H, T, S); an undefined mask gives data null.
struct AttnMaskPlanes {
  const float* data = nullptr;
  int64_t per_batch = 0, per_head = 0;
  const float* plane(int64_t b, int64_t h) const { return data + b * per_batch + h * per_head; }
};
AttnMaskPlanes attn_mask_planes(const Tensor& attn_mask, int64_t B, int64_t H, int64_t T, int64_t S);
}  // namespace detail

// DeBERTa's disentangled attention (content->position and position->content) as an additive attention bias for
// attention_forward's attn_mask. Relative rows: the distance i - j of a query i and key j (|i - j| < T) selects
// row(i - j) of the projected relative embeddings Kr, Qr (R, heads·d).
struct RelativeRows {
  int64_t T = 0, rows = 0;
  std::vector<int32_t> row;  // row[i - j + T - 1], each in [0, rows)
  int32_t at(int64_t i, int64_t j) const { return row[static_cast<size_t>(i - j + T - 1)]; }
};
// One sequence: batch index b of q and k, its rows [r0, r0 + L); its bias block is the top-left (L, L) of slot p
// (the sequence's index in the list) in bias (seqs·heads, P, P), head h at slot p·heads + h.
struct DisentangledSeq {
  int64_t b = 0, r0 = 0, L = 0;
};
// q, k (B, T, heads·d) with a contiguous last dim (any row stride); Kr / Qr (R, heads·d) contiguous or undefined
// (that term absent; not both). Per head, with m = rel.row(i - j):
//   bias[p·heads + h, i, j] = scale·(q_i·Kr[m] + k_j·Qr[m])
// Writes the (L, L) blocks only (the rest of bias keeps its values).
void disentangled_bias_forward(Tensor& bias, int64_t P, const std::vector<DisentangledSeq>& seqs, const Tensor& q,
                               const Tensor& k, const Tensor& kr, const Tensor& qr, int64_t heads,
                               const RelativeRows& rel, float scale);

// Relative position bias (T5): table (num_buckets, H) float32 -> (H, T, S), bias[h, i, j] = table[bucket(j - i), h]
// with kernels::relative_position_bucket (bidirectional for an encoder). The result is attention's (H, T, S)
// attn_mask, shared by every sequence of a batch.
Tensor relative_position_bias_forward(const Tensor& table, int64_t T, int64_t S, int64_t max_distance,
                                      bool bidirectional = true);

// torch.nn.Conv1d over the token axis of x (B, T, Cin) contiguous (i.e. on x.transpose(1, 2)): weight (Cout,
// Cin/groups, K) as torch stores it, K odd, padding (K-1)/2 so out is (B, T, Cout); bias (Cout) or undefined.
// x is 0 outside each sequence: each batch row, or with cu_seqlens the row ranges of a packed (1, N, Cin).
Tensor conv1d_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t groups,
                      const std::vector<int64_t>* cu_seqlens = nullptr);

// Rotary position embedding (kernels::KernelTable::rotary_f32, Hugging Face's rotate_half convention).
// x (..., T, H, D) float32; cos, sin (T, R/2) shared by every leading index, or (..., T, R/2) with x's leading
// dims; R = 2·cos.size(-1) must be even and <= D (the first R dims of each head rotate, the rest pass through).
// Returns y = x·cos + rotate_half(x)·sin per head, contiguous, x's shape.
Tensor rotary_forward(const Tensor& x, const Tensor& cos, const Tensor& sin);
// The (..., R/2) cos and sin tables for int64 position_ids (...): Hugging Face's default RotaryEmbedding
// (inv_freq = theta^(-2i/R), angles in float32 as there; see kernels::rotary_cos_sin_f32). Returns cos; *sin gets sin.
Tensor rotary_cos_sin(const Tensor& position_ids, int64_t rotary_dim, double theta, Tensor* sin);

// ids (any shape) int64 -> (..., C) rows of table (V, C); ids out of [0, V) throw naming the id.
Tensor embedding_forward(const Tensor& ids, const Tensor& table, const char* name);
// (T, C) sinusoidal table for positions [start, start + T).
Tensor sinusoidal_positions(int64_t start, int64_t T, int64_t C);

}  // namespace encore::ops
