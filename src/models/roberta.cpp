// RoBERTa and XLM-RoBERTa: BERT's layers, with position ids counted from padding_idx + 1 over non-padding
// tokens (so the usable length is max_position_embeddings - padding_idx - 1); heads of
// RobertaForSequenceClassification (dense + tanh + out_proj over <s>) and RobertaForTokenClassification.
// The word and position embeddings' padding_idx rows get no gradient, as in torch.
#include "models/model.hpp"
#include "ops/ops.hpp"

namespace encore::models {

namespace {

class Roberta : public StackedEncoder {
 public:
  std::vector<nn::TransformerEncoderLayer> layers;

  int64_t max_sequence_length() const override { return info.max_position_embeddings - info.pad_token_id - 1; }
  Tensor position_ids(const Tensor& ids) const override { return padding_offset_position_ids(ids, info.pad_token_id); }

  void collect_parameters(const std::string& prefix, std::vector<nn::ParamRef>& out) override {
    embeddings.collect_parameters(prefix + "embeddings.", out);
    for (size_t i = 0; i < layers.size(); ++i) layers[i].collect_parameters(prefix + "encoder.layer." + std::to_string(i) + ".", out);
    if (pooler) pooler->collect_parameters(prefix + "pooler.dense", out);
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

std::unique_ptr<EncoderModel> load_roberta(const HfConfig& cfg, const io::WeightStore& store) {
  const std::string pet = cfg.get_string("position_embedding_type", "absolute");
  ENCORE_CHECK(pet == "absolute", cfg.source(), ": position_embedding_type '", pet, "' is not supported (absolute)");
  const EncoderDims d = read_encoder_dims(cfg);
  auto m = std::make_unique<Roberta>();
  fill_info(m->info, cfg, d);
  m->info.pad_token_id = cfg.get_int("pad_token_id", 1, 0, 10'000'000);
  ENCORE_CHECK(m->max_sequence_length() > 0, cfg.source(), ": max_position_embeddings ", m->info.max_position_embeddings,
               " leaves no room after padding_idx ", m->info.pad_token_id);
  Weights root(store, "");
  Weights w = root.sub(detect_prefix(store, "roberta.", "embeddings.word_embeddings.weight"));
  m->embeddings = TokenEmbeddings::load(w, cfg, d.hidden, true);
  m->embeddings.padding_idx = m->embeddings.position_padding_idx = m->info.pad_token_id;
  m->layers = load_bert_layers(w, d, "encoder.layer.");
  m->set_hf_dropout(cfg.get_double("hidden_dropout_prob", 0.1), cfg.get_double("attention_probs_dropout_prob", 0.1));
  if (w.has("pooler.dense.weight")) m->pooler = take_linear(w, "pooler.dense", d.hidden, d.hidden);
  const double p = classifier_dropout(cfg);
  using In = ClassificationHead::Input;
  m->sequence_head_layout =
      head_layout(In::first_token, "classifier.dense", "classifier.out_proj", kernels::Act::tanh, p, p);
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
