// ELECTRA (discriminator): embeddings of embedding_size, projected to hidden_size by embeddings_project when
// the two differ, then BERT's layers; no pooler. ElectraForSequenceClassification's head is dense + gelu (erf,
// as upstream hard-codes) + out_proj over [CLS]; ElectraForTokenClassification's a classifier per token.
#include "models/model.hpp"

namespace encore::models {

std::unique_ptr<EncoderModel> load_electra(const HfConfig& cfg, const io::WeightStore& store) {
  const EncoderDims d = read_encoder_dims(cfg);
  const int64_t E = cfg.get_int("embedding_size", d.hidden, 1, 65536);
  auto m = std::make_unique<StackedEncoder>();
  fill_info(m->info, cfg, d);
  m->hf_class_stem = "Electra";
  m->hf_base_prefix = "electra.";
  m->hf_checkpoint_prefix = detect_prefix(store, m->hf_base_prefix, "embeddings.word_embeddings.weight");
  Weights root(store, "");
  Weights w = root.sub(m->hf_checkpoint_prefix);
  m->embeddings = TokenEmbeddings::load(w, cfg, E, true);
  m->embeddings.word_embeddings.padding_idx = m->info.pad_token_id;
  m->project_name = "embeddings_project";
  if (E != d.hidden) m->project = take_linear(w, m->project_name, d.hidden, E);
  m->layer_names = bert_layer_names();
  m->load_layers(w, d, d.layers, [](int64_t i) { return "encoder.layer." + std::to_string(i) + "."; });
  m->set_hf_dropout(cfg.get_double("hidden_dropout_prob", 0.1), cfg.get_double("attention_probs_dropout_prob", 0.1));
  const double p = classifier_dropout(cfg);
  m->sequence_head_layout = head_layout(ClassificationHead::Input::first_token, "classifier.dense",
                                        "classifier.out_proj", kernels::Act::gelu_erf, p, p);
  // ElectraForMaskedLM (the generator): dense to embedding_size, gelu (erf, hard-coded upstream), LayerNorm
  m->masked_lm_layout = make_masked_lm_layout("generator_predictions.dense", "generator_predictions.LayerNorm",
                                              "generator_lm_head", "generator_lm_head.bias", kernels::Act::gelu_erf, d.eps);
  m->masked_lm_width = E;
  m->select_head(cfg, root, p);
  w.finish();
  return m;
}

}  // namespace encore::models
