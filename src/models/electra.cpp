// ELECTRA (discriminator): embeddings of embedding_size, projected to hidden_size by embeddings_project when
// the two differ, then BERT's layers; no pooler. ElectraForSequenceClassification's head is dense + gelu (erf,
// as upstream hard-codes) + out_proj over [CLS]; ElectraForTokenClassification's a classifier per token.
#include "models/model.hpp"
#include "ops/ops.hpp"

namespace encore::models {

namespace {

class Electra : public EncoderModel {
 public:
  TokenEmbeddings embeddings;
  std::optional<LinearWeights> project, head_dense, head_out;
  std::vector<nn::TransformerEncoderLayer> layers;
  bool token_head = false;

  void collect_parameters(const std::string& prefix, std::vector<nn::ParamRef>& out) override {
    embeddings.collect_parameters(prefix + "embeddings.", out);
    if (project) project->collect_parameters(prefix + "embeddings_project", out);
    for (size_t i = 0; i < layers.size(); ++i) layers[i].collect_parameters(prefix + "encoder.layer." + std::to_string(i) + ".", out);
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
    ENCORE_CHECK(T <= info.max_position_embeddings, "input length ", T, " exceeds max_position_embeddings ",
                 info.max_position_embeddings);
    ModelOutput out;
    Tensor x = embeddings.forward(ids, absolute_position_ids(B, T), types);
    if (project) x = project->apply(x);
    out.last_hidden_state = run_layers(pointers(layers), x, Tensor(), key_padding_from_attention_mask(mask, B, T), opt, out);
    if (head_out && opt.compute_logits) {
      if (token_head) {
        out.logits = head_out->apply(out.last_hidden_state);
      } else {
        Tensor h = ops::linear_forward(first_token(out.last_hidden_state), head_dense->weight, head_dense->bias,
                                       kernels::Act::gelu_erf);
        out.logits = head_out->apply(h);
      }
    }
    return out;
  }
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
  if (E != d.hidden) m->project = take_linear(w, "embeddings_project", d.hidden, E);
  m->layers = load_bert_layers(w, d, "encoder.layer.");
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
