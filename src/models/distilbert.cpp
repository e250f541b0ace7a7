// DistilBERT: word + absolute position embeddings (no token types), LayerNorm (eps 1e-12), Post-LN layers named
// transformer.layer.N.{attention.{q,k,v,out}_lin, sa_layer_norm, ffn.lin1, ffn.lin2, output_layer_norm}.
// DistilBertForSequenceClassification: pre_classifier + relu over [CLS], then classifier.
#include "models/model.hpp"
#include "ops/ops.hpp"

namespace encore::models {

namespace {

class DistilBert : public EncoderModel {
 public:
  TokenEmbeddings embeddings;
  std::vector<nn::TransformerEncoderLayer> layers;
  std::optional<LinearWeights> pre_classifier, classifier;
  bool token_head = false;

  void collect_parameters(const std::string& prefix, std::vector<nn::ParamRef>& out) override {
    embeddings.collect_parameters(prefix + "embeddings.", out);
    for (size_t i = 0; i < layers.size(); ++i) layers[i].collect_parameters(prefix + "transformer.layer." + std::to_string(i) + ".", out);
    if (pre_classifier) pre_classifier->collect_parameters(prefix + "pre_classifier", out);
    if (classifier) classifier->collect_parameters(prefix + "classifier", out);
  }
  void for_each_child(const std::function<void(nn::Module&, const std::string&)>& fn) override {
    for (size_t i = 0; i < layers.size(); ++i) fn(layers[i], "transformer.layer." + std::to_string(i));
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
    Tensor x = embeddings.forward(ids, absolute_position_ids(B, T), Tensor());
    out.last_hidden_state = run_layers(pointers(layers), x, Tensor(), key_padding_from_attention_mask(mask, B, T), opt, out);
    if (classifier && opt.compute_logits) {
      if (token_head) {
        out.logits = classifier->apply(out.last_hidden_state);
      } else {
        Tensor h = ops::linear_forward(first_token(out.last_hidden_state), pre_classifier->weight,
                                       pre_classifier->bias, kernels::Act::relu);
        out.logits = classifier->apply(h);
      }
    }
    return out;
  }
};

}  // namespace

std::unique_ptr<EncoderModel> load_distilbert(const HfConfig& cfg, const io::WeightStore& store) {
  EncoderDims d;
  d.hidden = cfg.get_int("dim", std::nullopt, 1, 65536);
  d.layers = cfg.get_int("n_layers", std::nullopt, 1, 1000);
  d.heads = cfg.get_int("n_heads", std::nullopt, 1, 4096);
  d.intermediate = cfg.get_int("hidden_dim", std::nullopt, 1, 1 << 20);
  ENCORE_CHECK(d.hidden % d.heads == 0, cfg.source(), ": dim ", d.hidden, " is not divisible by n_heads ", d.heads);
  d.activation = activation_from_hf(cfg.get_string("activation", "gelu"), cfg.source());
  d.eps = 1e-12;  // fixed upstream
  auto m = std::make_unique<DistilBert>();
  fill_info(m->info, cfg, d);
  Weights root(store, "");
  Weights w = root.sub(detect_prefix(store, "distilbert.", "embeddings.word_embeddings.weight"));
  m->embeddings = TokenEmbeddings::load(w, cfg, d.hidden, false);
  m->embeddings.eps = 1e-12;
  for (int64_t i = 0; i < d.layers; ++i) {
    const std::string p = "transformer.layer." + std::to_string(i) + ".";
    PostLnNames n{p + "attention.q_lin", p + "attention.k_lin", p + "attention.v_lin", p + "attention.out_lin",
                  p + "sa_layer_norm",   p + "ffn.lin1",        p + "ffn.lin2",        p + "output_layer_norm"};
    m->layers.push_back(load_post_ln_layer(w, n, d.hidden, d.heads, d.intermediate, d.activation, d.eps));
  }
  m->token_head = architecture_ends_with(cfg, "ForTokenClassification");
  if (architecture_ends_with(cfg, "ForSequenceClassification") && root.has("classifier.weight")) {
    read_labels(cfg, m->info);
    m->pre_classifier = take_linear(root, "pre_classifier", d.hidden, d.hidden);
    m->classifier = take_linear(root, "classifier", m->info.num_labels, d.hidden);
    m->info.head = "sequence_classification";
  } else if (m->token_head && root.has("classifier.weight")) {
    read_labels(cfg, m->info);
    m->classifier = take_linear(root, "classifier", m->info.num_labels, d.hidden);
    m->info.head = "token_classification";
  }
  w.finish();
  for (auto& l : m->layers) m->info.num_parameters += l.num_parameters();
  return m;
}

}  // namespace encore::models
