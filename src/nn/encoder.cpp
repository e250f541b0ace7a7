// TransformerEncoderLayer and TransformerEncoder, following torch.nn (Post-LN by default, Pre-LN with norm_first).
#include "nn/common.hpp"

namespace encore::nn {

TransformerEncoderLayer::TransformerEncoderLayer(int64_t d_model_, int64_t nhead, int64_t dim_feedforward_,
                                                 double dropout_, const std::string& activation_,
                                                 double layer_norm_eps, bool batch_first_, bool norm_first_, bool bias,
                                                 const std::string& norm)
    : self_attn(d_model_, nhead, dropout_, bias, false, false, std::nullopt, std::nullopt, true),
      d_model(d_model_),
      dim_feedforward(dim_feedforward_),
      activation(parse_activation(activation_)),
      batch_first(batch_first_),
      norm_first(norm_first_) {
  set_dropout(EncoderLayerDropout::torch(dropout_));
  detail::make_feed_forward(linear1, linear2, d_model, dim_feedforward, activation, bias, "TransformerEncoderLayer");
  const NormKind norm_kind = parse_norm(norm);
  norm1 = Norm(norm_kind, d_model, layer_norm_eps, bias);
  norm2 = Norm(norm_kind, d_model, layer_norm_eps, bias);
  set_name("");
}

void TransformerEncoderLayer::members(Members& m) {
  m.children({{"self_attn", self_attn}, {"linear1", linear1}, {"linear2", linear2}, {"norm1", norm1}, {"norm2", norm2}});
}

Tensor TransformerEncoderLayer::forward(const Tensor& src, const Tensor& src_mask, const Tensor& src_key_padding_mask,
                                        bool is_causal) const {
  ENCORE_CHECK(src.defined() && (src.dim() == 2 || src.dim() == 3),
               "TransformerEncoderLayer: src: expected 3-D (or 2-D unbatched), got ", src.defined() ? src.shape_str() : "none");
  if (training_) clear_saved();
  const detail::BatchLayout io(src, batch_first);
  return io.out(forward_batch_first(io.in(src, "src"), src_mask, io.mask(src_key_padding_mask), is_causal));
}

Tensor TransformerEncoderLayer::forward_batch_first(const Tensor& x, const Tensor& src_mask,
                                                    const Tensor& src_key_padding_mask, bool is_causal,
                                                    Tensor* attn_weights, const std::vector<int64_t>* cu_seqlens) const {
  check_shape(x, "src", {-1, -1, d_model});
  ENCORE_CHECK(!(training_ && cu_seqlens), "TransformerEncoderLayer: padding-free batches are for inference");
  if (training_) return forward_train(x, src_mask, src_key_padding_mask, is_causal, attn_weights);
  auto sa_block = [&](const Tensor& h) {
    AttentionResult r = self_attn.forward_batch_first(h, h, h, src_key_padding_mask, attn_weights != nullptr,
                                                      src_mask, false, is_causal, cu_seqlens);
    if (attn_weights) *attn_weights = r.weights;
    Tensor out = ops::dropout_forward(r.output, dropout_sites_.attention_output, training_, detail::next_seed());
    observe("dropout1", out);  // identity in eval mode; `encore trace` lists every step the layer runs
    return out;
  };
  auto ff_block = [&](const Tensor& h) {
    Tensor out = ops::dropout_forward(
        detail::feed_forward(*this, h, linear1, linear2, activation, dropout_sites_.ffn_hidden, training_),
        dropout_sites_.ffn_output, training_, detail::next_seed());
    observe("dropout2", out);
    return out;
  };
  Tensor out;
  if (norm_first) {
    // x = x + sa(norm1(x)) ; x = x + ff(norm2(x))
    Tensor n1 = norm1.apply(x);
    observe("norm1", n1);
    Tensor h = sa_block(n1);
    n1 = Tensor();
    Tensor n2 = norm2.add_apply(h, x, /*keep_sum=*/true);  // h += x ; n2 = norm2(h), one pass
    observe("attn_residual", h);
    observe("norm2", n2);
    ops::add_forward_(h, ff_block(n2));
    observe("ffn_residual", h);
    out = h;
  } else {
    // x = norm1(x + sa(x)) ; x = norm2(x + ff(x)); each residual + norm in one pass, over the sublayer's output
    Tensor a = sa_block(x);
    Tensor h = norm1.add_apply(a, x, /*keep_sum=*/false);  // in a's storage
    a = Tensor();
    observe("norm1", h);  // norm1(x + dropout1)
    Tensor f = ff_block(h);
    out = norm2.add_apply(f, h, /*keep_sum=*/false);
    observe("norm2", out);  // norm2(h + dropout2)
  }
  observe("out", out);
  return out;
}

TransformerEncoder::TransformerEncoder(const TransformerEncoderLayer& encoder_layer, int64_t num_layers_,
                                       std::optional<Norm> norm_, bool share)
    : norm(std::move(norm_)), num_layers(num_layers_), share_parameters(share), batch_first(encoder_layer.batch_first) {
  ENCORE_CHECK(num_layers > 0, "TransformerEncoder: num_layers must be positive, got ", num_layers);
  layers.assign(share ? 1 : num_layers, encoder_layer);  // deep copies (Parameter)
  set_name("");
}

void TransformerEncoder::members(Members& m) { detail::stack_members(m, layers, norm); }

Tensor TransformerEncoder::forward(const Tensor& src, const Tensor& mask, const Tensor& src_key_padding_mask,
                                   std::optional<bool> is_causal, EncoderTrace* trace) const {
  ENCORE_CHECK(src.defined() && (src.dim() == 2 || src.dim() == 3),
               "TransformerEncoder: src: expected 3-D (or 2-D unbatched), got ", src.defined() ? src.shape_str() : "none");
  if (training_) clear_saved();
  const detail::BatchLayout io(src, batch_first);
  Tensor x = io.in(src, "src");
  const Tensor kpm = io.mask(src_key_padding_mask);
  const bool causal = is_causal.value_or(false);
  if (training_) return io.out(forward_train(x, mask, kpm, causal, trace));
  if (trace && trace->want_hidden_states) trace->hidden_states.push_back(x);
  for (int64_t i = 0; i < num_layers; ++i) {
    const TransformerEncoderLayer& layer = layers[share_parameters ? 0 : i];
    Tensor weights;
    x = layer.forward_batch_first(x, mask, kpm, causal, trace && trace->want_attentions ? &weights : nullptr);
    if (trace && trace->want_hidden_states) trace->hidden_states.push_back(x);
    if (trace && trace->want_attentions) trace->attentions.push_back(weights);
  }
  if (norm) x = norm->apply(x);
  return io.out(x);
}

}  // namespace encore::nn
