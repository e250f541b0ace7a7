// RoBERTa and XLM-RoBERTa: BERT's layers, with position ids counted from padding_idx + 1 over non-padding
// tokens (so the usable length is max_position_embeddings - padding_idx - 1); heads of
// RobertaForSequenceClassification (dense + tanh + out_proj over <s>) and RobertaForTokenClassification.
// The word and position embeddings' padding_idx rows get no gradient, as in torch.
#include "models/model.hpp"

namespace encore::models {

namespace {
class Roberta : public StackedEncoder {
 public:
  int64_t max_sequence_length() const override { return info.max_position_embeddings - info.pad_token_id - 1; }

 protected:
  Tensor position_ids(const Tensor& ids) const override { return padding_offset_position_ids(ids, info.pad_token_id); }
};
}  // namespace

std::unique_ptr<EncoderModel> load_roberta(const HfConfig& cfg, const io::WeightStore& store) {
  const std::string pet = cfg.get_string("position_embedding_type", "absolute");
  ENCORE_CHECK(pet == "absolute", cfg.source(), ": position_embedding_type '", pet, "' is not supported (absolute)");
  const EncoderDims d = read_encoder_dims(cfg);
  auto m = std::make_unique<Roberta>();
  fill_info(m->info, cfg, d);
  m->info.pad_token_id = cfg.get_int("pad_token_id", 1, 0, 10'000'000);
  ENCORE_CHECK(m->max_sequence_length() > 0, cfg.source(), ": max_position_embeddings ", m->info.max_position_embeddings,
               " leaves no room after padding_idx ", m->info.pad_token_id);
  m->hf_class_stem = cfg.get_string("model_type") == "xlm-roberta" ? "XLMRoberta" : "Roberta";
  m->hf_base_prefix = "roberta.";
  m->hf_checkpoint_prefix = detect_prefix(store, m->hf_base_prefix, "embeddings.word_embeddings.weight");
  Weights root(store, "");
  Weights w = root.sub(m->hf_checkpoint_prefix);
  m->embeddings = TokenEmbeddings::load(w, cfg, d.hidden, true);
  m->embeddings.word_embeddings.padding_idx = m->embeddings.position_embeddings.padding_idx = m->info.pad_token_id;
  m->layer_names = bert_layer_names();
  m->load_layers(w, d, d.layers, [](int64_t i) { return "encoder.layer." + std::to_string(i) + "."; });
  m->set_hf_dropout(cfg.get_double("hidden_dropout_prob", 0.1), cfg.get_double("attention_probs_dropout_prob", 0.1));
  if (w.has("pooler.dense.weight")) m->pooler = take_linear(w, "pooler.dense", d.hidden, d.hidden);
  const double p = classifier_dropout(cfg);
  m->sequence_head_layout = head_layout(ClassificationHead::Input::first_token, "classifier.dense",
                                        "classifier.out_proj", kernels::Act::tanh, p, p);
  m->masked_lm_layout = make_masked_lm_layout("lm_head.dense", "lm_head.layer_norm", "lm_head.decoder", "lm_head.bias",
                                              kernels::Act::gelu_erf, d.eps);
  m->select_head(cfg, root, p);
  w.finish();
  return m;
}

}  // namespace encore::models
