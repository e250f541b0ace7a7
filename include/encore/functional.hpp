// encore::functional - stateless forward/backward op pairs for the pieces modern encoder families share
// (torch.nn.functional's role): rotary position embedding (Hugging Face's convention) and gated activations
// (GeGLU, SwiGLU, ...). Each forward has its backward beside it; none keeps state, so the caller holds what the
// backward needs (the forward's input for the gates, the cos/sin tables for the rotation).
//
//   #include <encore/functional.hpp>
//   namespace F = encore::functional;
//   encore::Tensor pos = encore::Tensor::empty({128}, encore::DType::i64);  // positions 0, 1, ..., 127
//   for (int64_t t = 0; t < 128; ++t) pos.data<int64_t>()[t] = t;
//   F::RotaryTables rope = F::rotary_cos_sin(pos, /*rotary_dim=*/64, /*theta=*/160000.0);  // (T, 32) each
//   encore::Tensor q = encore::Tensor::zeros({2, 128, 12, 64});    // (B, T, heads, head_dim)
//   encore::Tensor q_rot = F::rotary_embedding(q, rope.cos, rope.sin);
//   encore::Tensor dq = F::rotary_embedding_backward(encore::Tensor::full(q.shape(), 1.f), rope.cos, rope.sin);
//
//   encore::Tensor h = encore::Tensor::zeros({2, 128, 2 * 1152});  // Wi(x) of a ModernBERT layer: [input | gate]
//   encore::Tensor y = F::gated_activation(h, "gelu");              // gelu(first half) * second half
//   encore::Tensor dh = F::gated_activation_backward(encore::Tensor::full(y.shape(), 1.f), h, "gelu");
//
// Thread safety: every function only reads its inputs and may run concurrently.
#pragma once
#include <cstdint>
#include <string>

#include "encore/tensor.hpp"

namespace encore::functional {

// ---- rotary position embedding (RoPE) ----
// The tables of Hugging Face's default RotaryEmbedding: for position p and i < R/2 (R = rotary_dim, even),
//   inv_freq_i = 1 / theta^(2i/R),  cos[..., i] = cos(p·inv_freq_i),  sin[..., i] = sin(p·inv_freq_i),
// computed in float32 in the order transformers computes them, so long positions round alike. HF's cos/sin
// are these twice over the R dims (cat(freqs, freqs)); encore keeps the half. position_ids: int64, any shape
// (typically (T) or (B, T)), values in [0, 2^24]. No rope_scaling (NTK, YaRN, linear) variants.
struct RotaryTables {
  Tensor cos, sin;  // position_ids.shape + (R/2)
};
RotaryTables rotary_cos_sin(const Tensor& position_ids, int64_t rotary_dim, double theta = 10000.0);

// HF's apply_rotary_pos_emb on one tensor, per head: y = x·cos + rotate_half(x)·sin with
// rotate_half(x) = cat(-x[..., R/2:R], x[..., :R/2]), over the first R = 2·cos.size(-1) dims of each head; the
// remaining head_dim - R dims pass through unchanged (partial rotary, as HF's models with partial_rotary_factor).
// x: (..., T, heads, head_dim) float32 (encore's (B, T, E) activations viewed as (B, T, heads, head_dim); HF's
// q is (B, heads, T, head_dim): transpose first). cos/sin: (T, R/2) for every leading index, or x's leading
// dims + (T, R/2). Returns a new tensor of x's shape.
Tensor rotary_embedding(const Tensor& x, const Tensor& cos, const Tensor& sin);
// The gradient of x: the rotation is orthogonal, so dx = R(θ)ᵀ·grad_output (pass-through dims: dx = dy).
Tensor rotary_embedding_backward(const Tensor& grad_output, const Tensor& cos, const Tensor& sin);

// ---- gated activations ----
// x (..., 2F) = [x0 | x1] -> (..., F). gate "first": act(x0)·x1 (ModernBERT's Wi and Jina's gated_layers, and
// Qwen3/T5/Llama when gate_proj and up_proj are stacked [gate | up]); "second": act(x1)·x0 (GTE's
// up_gate_proj, and NomicBERT's [fc11 | fc12]). activation: "silu" (SwiGLU; "swiglu" is accepted too), "gelu"
// (erf GeGLU; also "geglu"), "gelu_tanh" (T5's gated-gelu, HF's "gelu_new"/"gelu_pytorch_tanh"), "relu".
Tensor gated_activation(const Tensor& x, const std::string& activation, const std::string& gate = "first");
// The gradient of x (..., 2F) for grad_output (..., F), given the forward's input x.
Tensor gated_activation_backward(const Tensor& grad_output, const Tensor& x, const std::string& activation,
                                 const std::string& gate = "first");

}  // namespace encore::functional
