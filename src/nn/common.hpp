// Helpers shared by the layer implementations (not public).
#pragma once
#include "encore/nn.hpp"
#include "ops/ops.hpp"

namespace encore::nn::detail {

// (T, B, E) -> (B, T, E) when !batch_first (a contiguous copy), else x itself. Checks rank 3.
Tensor to_batch_first(const Tensor& x, bool batch_first, const char* name);
// Inverse of to_batch_first for outputs.
Tensor from_batch_first(const Tensor& x, bool batch_first);

// The layout of a torch-style entry point's tensors, read from its first input: (T, B, E), (B, T, E) with
// batch_first, or unbatched (T, E) when that input is 2-D (the caller checked the rank). Layers compute on
// batch-first 3-D tensors: in() takes an input (or an output's gradient) there, out() brings a result back, and
// mask() gives an unbatched key padding mask (S) its batch dimension.
struct BatchLayout {
  BatchLayout(const Tensor& first, bool batch_first_) : unbatched(first.dim() == 2), batch_first(batch_first_) {}
  Tensor in(const Tensor& x, const char* name) const {
    return unbatched ? x.unsqueeze(0) : to_batch_first(x, batch_first, name);
  }
  Tensor out(const Tensor& x) const { return unbatched ? x.select(0, 0).contiguous() : from_batch_first(x, batch_first); }
  Tensor mask(const Tensor& m) const { return unbatched && m.defined() ? m.unsqueeze(0) : m; }
  bool unbatched, batch_first;
};

// The position-wise feed-forward pair of an encoder or decoder layer, in this order (each draws its init seed):
// linear1 (d_model -> dim_feedforward, twice that when gated) and linear2 (dim_feedforward -> d_model).
void make_feed_forward(Linear& linear1, Linear& linear2, int64_t d_model, int64_t dim_feedforward,
                       Activation activation, bool bias, const char* who);

// A layer stack's children (TransformerEncoder, TransformerDecoder): "layers.0" ... "layers.N-1", then "norm".
template <class Layer>
void stack_members(Members& m, std::vector<Layer>& layers, std::optional<Norm>& norm) {
  for (size_t i = 0; i < layers.size(); ++i) m.child("layers." + std::to_string(i), layers[i]);
  if (norm) m.child("norm", *norm);
}

// act(x·Wᵀ + b) through the module's prepared weights in eval mode when it has them, else the plain weights.
Tensor linear(const Linear& lin, const Tensor& x, bool training, kernels::Act act = kernels::Act::none);
kernels::Precision precision_of(DType dtype);  // f32, bf16 or int8; anything else throws
// A contiguous weight handed to PackedLinear::create for the lazy f32 path (kernels.hpp): kept alive until packed,
// and then, for a checkpoint's file mapping, its pages are given back to the OS (one resident copy, not two).
kernels::PackedLinear::PlainWeight plain_weight(const Tensor& contiguous_weight);
// The backward of out = act(x·Wᵀ + b) through lin's plain weights (pre: the pre-activation ops::linear_forward_train
// kept, unused when act is none): returns dx and accumulates lin.dweight / lin.dbias (zeros on first use).
Tensor linear_backward(Linear& lin, const Tensor& dout, const Tensor& x, const Tensor& pre = Tensor(),
                       kernels::Act act = kernels::Act::none);

kernels::Act pointwise_act(Activation a);  // the activation applied to linear1's output (gate's act if gated)
bool is_gated(Activation a);

// linear2(dropout(act(linear1(x)))) with act fused into linear1's epilogue when not gated.
Tensor feed_forward(const Module& owner, const Tensor& x, const Linear& linear1, const Linear& linear2,
                    Activation activation, double dropout, bool training);

uint64_t next_seed();  // from the manual_seed generator (or the innermost SeedScope on this thread)

// While alive, next_seed() on this thread draws from a stream started at `seed` instead of the global generator,
// so a block run twice under SeedScope(s) draws the same dropout masks both times (gradient checkpointing).
class SeedScope {
 public:
  explicit SeedScope(uint64_t seed);
  ~SeedScope();
  SeedScope(const SeedScope&) = delete;
  SeedScope& operator=(const SeedScope&) = delete;

 private:
  bool previous_active_;
  uint64_t previous_state_;
};

// torch.nn.TransformerDecoderLayer's residual and LayerNorm wiring around its three sublayers, shared by the
// inference and the training forward (the sublayers differ; in training the norms save their inputs, so every
// residual add is out of place or on the sublayer's fresh output):
//   Pre-LN:  h1 = x + sa(norm1(x)) ; h2 = h1 + mha(norm2(h1)) ; out = h2 + ff(norm3(h2))
//   Post-LN: h1 = norm1(x + sa(x)) ; h2 = norm2(h1 + mha(h1)) ; out = norm3(h2 + ff(h2))
template <class SelfAttention, class CrossAttention, class FeedForward>
Tensor decoder_residuals(const TransformerDecoderLayer& layer, const Tensor& x, SelfAttention&& sa,
                         CrossAttention&& mha, FeedForward&& ff) {
  if (layer.norm_first) {
    Tensor h1 = ops::add_forward(x, sa(layer.norm1.apply(x)));
    Tensor h2 = ops::add_forward(h1, mha(layer.norm2.apply(h1)));
    return ops::add_forward(h2, ff(layer.norm3.apply(h2)));
  }
  Tensor a = sa(x);
  ops::add_forward_(a, x);
  Tensor h1 = layer.norm1.apply(a);
  Tensor c = mha(h1);
  ops::add_forward_(c, h1);
  Tensor h2 = layer.norm2.apply(c);
  Tensor f = ff(h2);
  ops::add_forward_(f, h2);
  return layer.norm3.apply(f);
}

// The position-wise feed-forward block in training: out = dropout_out(linear2(dropout_hidden(act(linear1(x)))))
// (gated: act(a)·b), saving what ffn_backward needs; ffn_backward returns dx and accumulates linear1/linear2's
// gradients. Seeds are drawn from next_seed() in the forward and replayed.
struct FfnSaved {
  Tensor in, pre, hidden;  // linear1's input, its pre-activation (or the gated [a | b]), linear2's input
  uint64_t seed_hidden = 0, seed_out = 0;
};
Tensor ffn_forward_train(FfnSaved& sv, const Tensor& x, const Linear& linear1, const Linear& linear2,
                         Activation activation, double p_hidden, double p_out);
Tensor ffn_backward(const FfnSaved& sv, const Tensor& dout, Linear& linear1, Linear& linear2, Activation activation,
                    double p_hidden, double p_out);

void observe(const std::string& name, const Tensor& value);
bool observing();
// Tells this thread's gradient-ready hook (ScopedGradientReadyHook), if any, that `module`'s gradients are final.
void gradients_ready(Module& module);

}  // namespace encore::nn::detail
