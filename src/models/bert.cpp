// BERT (also MiniLM, BGE, E5, GTE-base): embeddings (word + absolute position + token type, LayerNorm),
// Post-LN layers, optional tanh pooler over [CLS]; heads of BertForSequenceClassification (classifier on the
// pooled output) and BertForTokenClassification (classifier on every token).
#include "models/model.hpp"
#include "ops/ops.hpp"

namespace encore::models {

namespace {

class Bert : public EncoderModel {
 public:
  TokenEmbeddings embeddings;
  std::vector<nn::TransformerEncoderLayer> layers;
  std::optional<LinearWeights> pooler, classifier;
  bool token_head = false;

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
    out.last_hidden_state = run_layers(pointers(layers), x, Tensor(), key_padding_from_attention_mask(mask, B, T), opt, out);
    if (pooler)
      out.pooler_output = ops::linear_forward(first_token(out.last_hidden_state), pooler->weight, pooler->bias,
                                              kernels::Act::tanh);
    if (classifier && opt.compute_logits)
      out.logits = classifier->apply(token_head ? out.last_hidden_state : out.pooler_output);
    return out;
  }
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
  m->layers = load_bert_layers(w, d, "encoder.layer.");
  if (w.has("pooler.dense.weight")) m->pooler = take_linear(w, "pooler.dense", d.hidden, d.hidden);
  const bool seq = architecture_ends_with(cfg, "ForSequenceClassification");
  m->token_head = architecture_ends_with(cfg, "ForTokenClassification");
  if ((seq || m->token_head) && root.has("classifier.weight")) {
    read_labels(cfg, m->info);
    ENCORE_CHECK(m->token_head || m->pooler, cfg.source(), ": a sequence-classification head needs the pooler");
    m->classifier = take_linear(root, "classifier", m->info.num_labels, d.hidden);
    m->info.head = m->token_head ? "token_classification" : "sequence_classification";
  }
  w.finish();
  for (auto& l : m->layers) m->info.num_parameters += l.num_parameters();
  return m;
}

}  // namespace encore::models
