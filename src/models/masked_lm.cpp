// MaskedLMHead: the prediction head of the *ForMaskedLM models (see model.hpp for each family's names).
#include "models/model.hpp"
#include "nn/common.hpp"
#include "ops/ops.hpp"

namespace encore::models {

kernels::Act kernel_activation(const std::string& hidden_act, const std::string& source) {
  return nn::detail::pointwise_act(nn::parse_activation(activation_from_hf(hidden_act, source)));
}

MaskedLMHead make_masked_lm_layout(const std::string& dense, const std::string& norm, const std::string& decoder,
                                   const std::string& bias, kernels::Act act, double eps) {
  MaskedLMHead h;
  h.dense_name = dense;
  h.norm_name = norm;
  h.decoder_name = decoder;
  h.bias_name = bias;
  h.act = act;
  h.eps = eps;
  return h;
}

std::optional<MaskedLMHead> take_masked_lm_head(Weights& root, const MaskedLMHead& layout, int64_t hidden,
                                                int64_t width, int64_t vocab, bool tie_word_embeddings) {
  if (layout.dense_name.empty() || !root.has(layout.dense_name + ".weight")) return std::nullopt;
  MaskedLMHead h = layout;
  h.dense = take_linear(root, layout.dense_name, width, hidden);
  h.norm_weight = root.take(layout.norm_name + ".weight", {width});
  h.norm_bias = root.take(layout.norm_name + ".bias", {width});
  // transformers drops a tied decoder weight from the file; an untied one is stored (and required)
  if (root.has(layout.decoder_name + ".weight") || !tie_word_embeddings)
    h.decoder_weight = root.take(layout.decoder_name + ".weight", {vocab, width});
  // the bias is the head's own parameter (BERT's cls.predictions.bias); older files hold it as the decoder's
  const std::string bias = root.has(layout.bias_name) || !root.has(layout.decoder_name + ".bias")
                               ? layout.bias_name
                               : layout.decoder_name + ".bias";
  h.bias = root.take(bias, {vocab});
  return h;
}

Tensor MaskedLMHead::forward(const Tensor& x, const Tensor& word_embeddings) const {
  // logits = LayerNorm(act(x·denseᵀ + b))·decoderᵀ + bias
  const Tensor h = ops::layernorm_forward(ops::linear_forward(x.contiguous(), dense.weight, dense.bias, act),
                                          norm_weight, norm_bias, eps);
  return ops::linear_forward(h, decoder_weight.defined() ? decoder_weight : word_embeddings, bias);
}

}  // namespace encore::models
