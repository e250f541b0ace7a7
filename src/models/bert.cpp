// BERT (also MiniLM, BGE, E5, GTE-base): embeddings (word + absolute position + token type, LayerNorm),
// Post-LN layers encoder.layer.N, optional tanh pooler over [CLS]; heads of BertForSequenceClassification
// (classifier on the pooled output) and BertForTokenClassification (classifier on every token).
#include "models/model.hpp"

namespace encore::models {

std::unique_ptr<EncoderModel> load_bert(const HfConfig& cfg, const io::WeightStore& store) {
  const std::string pet = cfg.get_string("position_embedding_type", "absolute");
  ENCORE_CHECK(pet == "absolute", cfg.source(), ": position_embedding_type '", pet, "' is not supported (absolute)");
  const EncoderDims d = read_encoder_dims(cfg);
  auto m = std::make_unique<StackedEncoder>();
  fill_info(m->info, cfg, d);
  m->hf_class_stem = "Bert";
  m->hf_base_prefix = "bert.";
  m->hf_checkpoint_prefix = detect_prefix(store, m->hf_base_prefix, "embeddings.word_embeddings.weight");
  Weights root(store, "");
  Weights w = root.sub(m->hf_checkpoint_prefix);
  m->embeddings = TokenEmbeddings::load(w, cfg, d.hidden, true);
  m->embeddings.word_embeddings.padding_idx = m->info.pad_token_id;
  m->layer_names = bert_layer_names();
  m->load_layers(w, d, d.layers, [](int64_t i) { return "encoder.layer." + std::to_string(i) + "."; });
  m->set_hf_dropout(cfg.get_double("hidden_dropout_prob", 0.1), cfg.get_double("attention_probs_dropout_prob", 0.1));
  if (w.has("pooler.dense.weight")) m->pooler = take_linear(w, "pooler.dense", d.hidden, d.hidden);
  m->sequence_head_layout = head_layout(ClassificationHead::Input::pooled, "", "classifier", kernels::Act::none,
                                        classifier_dropout(cfg), 0.0);
  m->masked_lm_layout = make_masked_lm_layout("cls.predictions.transform.dense", "cls.predictions.transform.LayerNorm",
                                              "cls.predictions.decoder", "cls.predictions.bias",
                                              kernel_activation(cfg.get_string("hidden_act", "gelu"), cfg.source()), d.eps);
  m->select_head(cfg, root, classifier_dropout(cfg));
  w.finish();
  return m;
}

}  // namespace encore::models
