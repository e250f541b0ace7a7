// BERT (also MiniLM, BGE, E5, GTE-base): embeddings (word + absolute position + token type, LayerNorm),
// Post-LN layers, optional tanh pooler over [CLS]; heads of BertForSequenceClassification (classifier on the
// pooled output) and BertForTokenClassification (classifier on every token).
#include "models/model.hpp"
#include "ops/ops.hpp"

namespace encore::models {

namespace {

class Bert : public StackedEncoder {
 public:
  std::vector<nn::TransformerEncoderLayer> layers;

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

std::unique_ptr<EncoderModel> load_bert(const HfConfig& cfg, const io::WeightStore& store) {
  const std::string pet = cfg.get_string("position_embedding_type", "absolute");
  ENCORE_CHECK(pet == "absolute", cfg.source(), ": position_embedding_type '", pet, "' is not supported (absolute)");
  const EncoderDims d = read_encoder_dims(cfg);
  auto m = std::make_unique<Bert>();
  fill_info(m->info, cfg, d);
  Weights root(store, "");
  Weights w = root.sub(detect_prefix(store, "bert.", "embeddings.word_embeddings.weight"));
  m->embeddings = TokenEmbeddings::load(w, cfg, d.hidden, true);
  m->embeddings.padding_idx = cfg.get_int("pad_token_id", 0, 0, 10'000'000);
  m->layers = load_bert_layers(w, d, "encoder.layer.");
  m->set_hf_dropout(cfg.get_double("hidden_dropout_prob", 0.1), cfg.get_double("attention_probs_dropout_prob", 0.1));
  using In = ClassificationHead::Input;
  m->sequence_head_layout = head_layout(In::pooled, "", "classifier", kernels::Act::none, classifier_dropout(cfg), 0.0);
  if (w.has("pooler.dense.weight")) m->pooler = take_linear(w, "pooler.dense", d.hidden, d.hidden);
  const bool seq = architecture_ends_with(cfg, "ForSequenceClassification");
  const bool token_head = architecture_ends_with(cfg, "ForTokenClassification");
  if ((seq || token_head) && root.has("classifier.weight")) {
    read_labels(cfg, m->info);
    ENCORE_CHECK(token_head || m->pooler, cfg.source(), ": a sequence-classification head needs the pooler");
    ClassificationHead layout = m->sequence_head_layout;
    if (token_head) layout.input = In::every_token;
    m->head = take_head(root, layout, m->info.num_labels, d.hidden);
    m->info.head = token_head ? "token_classification" : "sequence_classification";
  }
  w.finish();
  for (auto& l : m->layers) m->info.num_parameters += l.num_parameters();
  return m;
}

}  // namespace encore::models
