// TransformerDecoderLayer, TransformerDecoder and Transformer, following torch.nn.
#include "nn/common.hpp"

namespace encore::nn {

TransformerDecoderLayer::TransformerDecoderLayer(int64_t d_model_, int64_t nhead, int64_t dim_feedforward_,
                                                 double dropout_, const std::string& activation_,
                                                 double layer_norm_eps, bool batch_first_, bool norm_first_, bool bias,
                                                 const std::string& norm)
    : self_attn(d_model_, nhead, dropout_, bias, false, false, std::nullopt, std::nullopt, true),
      multihead_attn(d_model_, nhead, dropout_, bias, false, false, std::nullopt, std::nullopt, true),
      d_model(d_model_),
      dim_feedforward(dim_feedforward_),
      dropout(dropout_),
      activation(parse_activation(activation_)),
      batch_first(batch_first_),
      norm_first(norm_first_) {
  detail::make_feed_forward(linear1, linear2, d_model, dim_feedforward, activation, bias, "TransformerDecoderLayer");
  const NormKind norm_kind = parse_norm(norm);
  norm1 = Norm(norm_kind, d_model, layer_norm_eps, bias);
  norm2 = Norm(norm_kind, d_model, layer_norm_eps, bias);
  norm3 = Norm(norm_kind, d_model, layer_norm_eps, bias);
  set_name("");
}

void TransformerDecoderLayer::members(Members& m) {
  m.children({{"self_attn", self_attn}, {"multihead_attn", multihead_attn}, {"linear1", linear1}, {"linear2", linear2},
              {"norm1", norm1}, {"norm2", norm2}, {"norm3", norm3}});
}

Tensor TransformerDecoderLayer::forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask,
                                        const Tensor& memory_mask, const Tensor& tgt_key_padding_mask,
                                        const Tensor& memory_key_padding_mask, bool tgt_is_causal,
                                        bool memory_is_causal) const {
  ENCORE_CHECK(tgt.defined() && memory.defined(), "TransformerDecoderLayer: tgt and memory are required");
  if (training_) clear_saved();
  ENCORE_CHECK(tgt.dim() != 2 || memory.dim() == 2, "TransformerDecoderLayer: unbatched tgt needs 2-D memory, got ",
               memory.shape_str());
  const detail::BatchLayout io(tgt, batch_first);
  const Tensor x = io.in(tgt, "tgt"), mem = io.in(memory, "memory");
  return io.out(forward_batch_first(x, mem, tgt_mask, memory_mask, io.mask(tgt_key_padding_mask),
                                    io.mask(memory_key_padding_mask), tgt_is_causal, memory_is_causal));
}

Tensor TransformerDecoderLayer::forward_batch_first(const Tensor& x, const Tensor& memory, const Tensor& tgt_mask,
                                                    const Tensor& memory_mask, const Tensor& tgt_key_padding_mask,
                                                    const Tensor& memory_key_padding_mask, bool tgt_is_causal,
                                                    bool memory_is_causal) const {
  check_shape(x, "tgt", {-1, -1, d_model});
  check_shape(memory, "memory", {x.size(0), -1, d_model});
  if (training_)
    return forward_train(x, memory, tgt_mask, memory_mask, tgt_key_padding_mask, memory_key_padding_mask,
                         tgt_is_causal, memory_is_causal);
  auto drop = [&](const Tensor& t) { return ops::dropout_forward(t, dropout, training_, detail::next_seed()); };
  auto sa_block = [&](const Tensor& h) {
    return drop(self_attn.forward_batch_first(h, h, h, tgt_key_padding_mask, false, tgt_mask, false, tgt_is_causal).output);
  };
  auto mha_block = [&](const Tensor& h) {
    return drop(multihead_attn
                    .forward_batch_first(h, memory, memory, memory_key_padding_mask, false, memory_mask, false,
                                         memory_is_causal)
                    .output);
  };
  auto ff_block = [&](const Tensor& h) {
    return drop(detail::feed_forward(*this, h, linear1, linear2, activation, dropout, training_));
  };
  Tensor out = detail::decoder_residuals(*this, x, sa_block, mha_block, ff_block);
  observe("out", out);
  return out;
}

TransformerDecoder::TransformerDecoder(const TransformerDecoderLayer& decoder_layer, int64_t num_layers_,
                                       std::optional<Norm> norm_)
    : norm(std::move(norm_)), num_layers(num_layers_), batch_first(decoder_layer.batch_first) {
  ENCORE_CHECK(num_layers > 0, "TransformerDecoder: num_layers must be positive, got ", num_layers);
  layers.assign(num_layers, decoder_layer);  // deep copies (Parameter)
  set_name("");
}

void TransformerDecoder::members(Members& m) { detail::stack_members(m, layers, norm); }

Tensor TransformerDecoder::forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask,
                                   const Tensor& memory_mask, const Tensor& tgt_key_padding_mask,
                                   const Tensor& memory_key_padding_mask, std::optional<bool> tgt_is_causal,
                                   bool memory_is_causal) const {
  ENCORE_CHECK(tgt.defined() && memory.defined() && (tgt.dim() == 2 || tgt.dim() == 3),
               "TransformerDecoder: tgt: expected 3-D (or 2-D unbatched), got ", tgt.defined() ? tgt.shape_str() : "none");
  if (training_) clear_saved();
  const detail::BatchLayout io(tgt, batch_first);
  Tensor x = io.in(tgt, "tgt");
  const Tensor mem = io.in(memory, "memory");
  for (const auto& layer : layers)
    x = layer.forward_batch_first(x, mem, tgt_mask, memory_mask, io.mask(tgt_key_padding_mask),
                                  io.mask(memory_key_padding_mask), tgt_is_causal.value_or(false), memory_is_causal);
  if (norm) x = norm->apply(x);
  return io.out(x);
}

Transformer::Transformer(int64_t d_model_, int64_t nhead_, int64_t num_encoder_layers, int64_t num_decoder_layers,
                         int64_t dim_feedforward, double dropout, const std::string& activation, double layer_norm_eps,
                         bool batch_first_, bool norm_first, bool bias, const std::string& norm)
    : encoder(TransformerEncoderLayer(d_model_, nhead_, dim_feedforward, dropout, activation, layer_norm_eps,
                                      batch_first_, norm_first, bias, norm),
              num_encoder_layers, Norm(parse_norm(norm), d_model_, layer_norm_eps, bias)),
      decoder(TransformerDecoderLayer(d_model_, nhead_, dim_feedforward, dropout, activation, layer_norm_eps,
                                      batch_first_, norm_first, bias, norm),
              num_decoder_layers, Norm(parse_norm(norm), d_model_, layer_norm_eps, bias)),
      d_model(d_model_),
      nhead(nhead_),
      batch_first(batch_first_) {
  set_name("");
}

void Transformer::members(Members& m) { m.children({{"encoder", encoder}, {"decoder", decoder}}); }

Tensor Transformer::forward(const Tensor& src, const Tensor& tgt, const Tensor& src_mask, const Tensor& tgt_mask,
                            const Tensor& memory_mask, const Tensor& src_key_padding_mask,
                            const Tensor& tgt_key_padding_mask, const Tensor& memory_key_padding_mask,
                            std::optional<bool> src_is_causal, std::optional<bool> tgt_is_causal,
                            bool memory_is_causal) const {
  ENCORE_CHECK(src.defined() && tgt.defined(), "Transformer: src and tgt are required");
  ENCORE_CHECK(src.dim() == tgt.dim(), "Transformer: src and tgt must have the same rank, got ", src.shape_str(),
               " and ", tgt.shape_str());
  if (src.dim() == 3) {
    const int64_t bdim = batch_first ? 0 : 1;
    ENCORE_CHECK(src.size(bdim) == tgt.size(bdim), "Transformer: the batch number of src and tgt must be equal, got ",
                 src.shape_str(), " and ", tgt.shape_str());
  }
  ENCORE_CHECK(src.size(-1) == d_model && tgt.size(-1) == d_model,
               "Transformer: the feature number of src and tgt must be equal to d_model ", d_model, ", got ",
               src.shape_str(), " and ", tgt.shape_str());
  Tensor memory = encoder.forward(src, src_mask, src_key_padding_mask, src_is_causal);
  return decoder.forward(tgt, memory, tgt_mask, memory_mask, tgt_key_padding_mask, memory_key_padding_mask,
                         tgt_is_causal, memory_is_causal);
}

}  // namespace encore::nn
