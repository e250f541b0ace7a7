// RoBERTa and XLM-RoBERTa: BERT's layers, with position ids counted from padding_idx + 1 over non-padding
// tokens (so the usable length is max_position_embeddings - padding_idx - 1); heads of
// RobertaForSequenceClassification (dense + tanh + out_proj over <s>) and RobertaForTokenClassification.
#include "models/model.hpp"
#include "ops/ops.hpp"

namespace encore::models {

namespace {

class Roberta : public EncoderModel {
 public:
  TokenEmbeddings embeddings;
  std::vector<nn::TransformerEncoderLayer> layers;
  std::optional<LinearWeights> pooler, head_dense, head_out;
  bool token_head = false;

  int64_t max_sequence_length() const override { return info.max_position_embeddings - info.pad_token_id - 1; }

  void collect_parameters(const std::string& prefix, std::vector<nn::ParamRef>& out) override {
    embeddings.collect_parameters(prefix + "embeddings.", out);
    for (size_t i = 0; i < layers.size(); ++i) layers[i].collect_parameters(prefix + "encoder.layer." + std::to_string(i) + ".", out);
    if (pooler) pooler->collect_parameters(prefix + "pooler.dense", out);
    if (head_dense) head_dense->collect_parameters(prefix + "classifier.dense", out);
    if (head_out) head_out->collect_parameters(prefix + (token_head ? "classifier" : "classifier.out_proj"), out);
  }
  void for_each_child(const std::function<void(nn::Module&, const std::string&)>& fn) override {
    for (size_t i = 0; i < layers.size(); ++i) fn(layers[i], "encoder.layer." + std::to_string(i));
  }
  void for_each_layer(const std::function<void(nn::TransformerEncoderLayer&)>& fn) override {
    for (auto& l : layers) fn(l);
  }

  ModelOutput forward(const Tensor& ids, const Tensor& mask, const Tensor& types,
                      const ForwardOptions& opt) const override {
    auto [B, T] = check_inputs(ids, mask, types);
    ENCORE_CHECK(T <= max_sequence_length(), "input length ", T, " exceeds the model's maximum ", max_sequence_length(),
                 " (max_position_embeddings - padding_idx - 1)");
    ModelOutput out;
    Tensor x = embeddings.forward(ids, padding_offset_position_ids(ids, info.pad_token_id), types);
    out.last_hidden_state = run_layers(pointers(layers), x, Tensor(), key_padding_from_attention_mask(mask, B, T), opt, out);
    if (pooler)
      out.pooler_output = ops::linear_forward(first_token(out.last_hidden_state), pooler->weight, pooler->bias,
                                              kernels::Act::tanh);
    if (head_out && opt.compute_logits) {
      if (token_head) {
        out.logits = head_out->apply(out.last_hidden_state);
      } else {  // classifier.dense + tanh over <s>, then classifier.out_proj
        Tensor h = ops::linear_forward(first_token(out.last_hidden_state), head_dense->weight, head_dense->bias,
                                       kernels::Act::tanh);
        out.logits = head_out->apply(h);
      }
    }
    return out;
  }
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
  m->layers = load_bert_layers(w, d, "encoder.layer.");
  if (w.has("pooler.dense.weight")) m->pooler = take_linear(w, "pooler.dense", d.hidden, d.hidden);
  m->token_head = architecture_ends_with(cfg, "ForTokenClassification");
  if (architecture_ends_with(cfg, "ForSequenceClassification") && root.has("classifier.out_proj.weight")) {
    read_labels(cfg, m->info);
    m->head_dense = take_linear(root, "classifier.dense", d.hidden, d.hidden);
    m->head_out = take_linear(root, "classifier.out_proj", m->info.num_labels, d.hidden);
    m->info.head = "sequence_classification";
  } else if (m->token_head && root.has("classifier.weight")) {
    read_labels(cfg, m->info);
    m->head_out = take_linear(root, "classifier", m->info.num_labels, d.hidden);
    m->info.head = "token_classification";
  }
  w.finish();
  for (auto& l : m->layers) m->info.num_parameters += l.num_parameters();
  return m;
}

}  // namespace encore::models
