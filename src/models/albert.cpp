// ALBERT: factorized embeddings (embedding_size E, projected to hidden_size by
// encoder.embedding_hidden_mapping_in) and cross-layer sharing: num_hidden_layers steps, step i running every
// inner layer of group int(i / (num_hidden_layers / num_hidden_groups)). Layers are Post-LN, named
// albert_layer_groups.G.albert_layers.K.{attention.{query,key,value,dense,LayerNorm}, ffn, ffn_output,
// full_layer_layer_norm}; pooler is a single Linear + tanh.
#include "models/model.hpp"

namespace encore::models {

std::unique_ptr<EncoderModel> load_albert(const HfConfig& cfg, const io::WeightStore& store) {
  const EncoderDims d = read_encoder_dims(cfg, "gelu_new");
  const int64_t E = cfg.get_int("embedding_size", 128, 1, 65536);
  const int64_t G = cfg.get_int("num_hidden_groups", 1, 1, d.layers);
  const int64_t K = cfg.get_int("inner_group_num", 1, 1, 1000);
  auto m = std::make_unique<StackedEncoder>();
  fill_info(m->info, cfg, d);
  m->hf_class_stem = "Albert";
  m->hf_base_prefix = "albert.";
  m->hf_checkpoint_prefix = detect_prefix(store, m->hf_base_prefix, "embeddings.word_embeddings.weight");
  Weights root(store, "");
  Weights w = root.sub(m->hf_checkpoint_prefix);
  m->embeddings = TokenEmbeddings::load(w, cfg, E, true);
  m->embeddings.word_embeddings.padding_idx = m->info.pad_token_id;
  m->project_name = "encoder.embedding_hidden_mapping_in";
  m->project = take_linear(w, m->project_name, d.hidden, E);
  m->layer_names = {"attention.query", "attention.key", "attention.value", "attention.dense",
                    "attention.LayerNorm", "ffn", "ffn_output", "full_layer_layer_norm"};
  // layer g * K + k is inner layer k of group g
  m->load_layers(w, d, G * K, [K](int64_t i) {
    return "encoder.albert_layer_groups." + std::to_string(i / K) + ".albert_layers." + std::to_string(i % K) + ".";
  });
  // Step i runs every inner layer of group int(i / (num_hidden_layers / num_hidden_groups)).
  const double layers_per_group = static_cast<double>(d.layers) / static_cast<double>(G);
  for (int64_t i = 0; i < d.layers; ++i)
    for (int64_t k = 0; k < K; ++k)
      m->run_order.push_back(static_cast<size_t>(static_cast<int64_t>(static_cast<double>(i) / layers_per_group) * K + k));
  m->set_hf_dropout(cfg.get_double("hidden_dropout_prob", 0.0), cfg.get_double("attention_probs_dropout_prob", 0.0));
  m->pooler_name = "pooler";
  if (w.has("pooler.weight")) m->pooler = take_linear(w, m->pooler_name, d.hidden, d.hidden);
  const double p = cfg.get_double("classifier_dropout_prob", 0.1);
  m->sequence_head_layout = head_layout(ClassificationHead::Input::pooled, "", "classifier", kernels::Act::none, p, 0.0);
  m->masked_lm_layout = make_masked_lm_layout("predictions.dense", "predictions.LayerNorm", "predictions.decoder",
                                              "predictions.bias",
                                              kernel_activation(cfg.get_string("hidden_act", "gelu_new"), cfg.source()), d.eps);
  m->masked_lm_width = E;
  m->select_head(cfg, root, p);
  w.finish();
  return m;
}

}  // namespace encore::models
