// ELECTRA (discriminator): embeddings of embedding_size, projected to hidden_size by embeddings_project when
// the two differ, then BERT's layers; no pooler. ElectraForSequenceClassification's head is dense + gelu (erf,
// as upstream hard-codes) + out_proj over [CLS]; ElectraForTokenClassification's a classifier per token.
#include "models/model.hpp"
#include "ops/ops.hpp"

namespace encore::models {

namespace {

class Electra : public StackedEncoder {
 public:
  std::vector<nn::TransformerEncoderLayer> layers;

  void collect_parameters(const std::string& prefix, std::vector<nn::ParamRef>& out) override {
    embeddings.collect_parameters(prefix + "embeddings.", out);
    if (project) project->collect_parameters(prefix + "embeddings_project", out);
    for (size_t i = 0; i < layers.size(); ++i) layers[i].collect_parameters(prefix + "encoder.layer." + std::to_string(i) + ".", out);
    if (head) head->collect_parameters(prefix, out);
  }
  void for_each_child(const std::function<void(nn::Module&, const std::string&)>& fn) override {
    for (size_t i = 0; i < layers.size(); ++i) fn(layers[i], "encoder.layer." + std::to_string(i));
  }
  void for_each_layer(const std::function<void(nn::TransformerEncoderLayer&)>& fn) override {
    for (auto& l : layers) fn(l);
  }
  std::vector<const nn::TransformerEncoderLayer*> layer_order() const override { return pointers(layers); }
};

}  // namespace

std::unique_ptr<EncoderModel> load_electra(const HfConfig& cfg, const io::WeightStore& store) {
  const EncoderDims d = read_encoder_dims(cfg);
  const int64_t E = cfg.get_int("embedding_size", d.hidden, 1, 65536);
  auto m = std::make_unique<Electra>();
  fill_info(m->info, cfg, d);
  Weights root(store, "");
  Weights w = root.sub(detect_prefix(store, "electra.", "embeddings.word_embeddings.weight"));
  m->embeddings = TokenEmbeddings::load(w, cfg, E, true);
  m->embeddings.padding_idx = m->info.pad_token_id;
  if (E != d.hidden) m->project = take_linear(w, "embeddings_project", d.hidden, E);
  m->layers = load_bert_layers(w, d, "encoder.layer.");
  m->set_hf_dropout(cfg.get_double("hidden_dropout_prob", 0.1), cfg.get_double("attention_probs_dropout_prob", 0.1));
  const double p = classifier_dropout(cfg);
  using In = ClassificationHead::Input;
  m->sequence_head_layout =
      head_layout(In::first_token, "classifier.dense", "classifier.out_proj", kernels::Act::gelu_erf, p, p);
  if (architecture_ends_with(cfg, "ForSequenceClassification") && root.has("classifier.out_proj.weight")) {
    read_labels(cfg, m->info);
    m->head = take_head(root, m->sequence_head_layout, m->info.num_labels, d.hidden);
    m->info.head = "sequence_classification";
  } else if (architecture_ends_with(cfg, "ForTokenClassification") && root.has("classifier.weight")) {
    read_labels(cfg, m->info);
    m->head = take_head(root, head_layout(In::every_token, "", "classifier", kernels::Act::none, p, 0.0),
                        m->info.num_labels, d.hidden);
    m->info.head = "token_classification";
  }
  w.finish();
  for (auto& l : m->layers) m->info.num_parameters += l.num_parameters();
  return m;
}

}  // namespace encore::models
