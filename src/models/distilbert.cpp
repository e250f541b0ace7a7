// DistilBERT: word + absolute position embeddings (no token types), LayerNorm (eps 1e-12), Post-LN layers named
// transformer.layer.N.{attention.{q,k,v,out}_lin, sa_layer_norm, ffn.lin1, ffn.lin2, output_layer_norm}.
// DistilBertForSequenceClassification: pre_classifier + relu over [CLS], dropout, then classifier. Training drops
// (config "dropout") after the embeddings and the FFN output, and (attention_dropout) the attention probabilities.
#include "models/model.hpp"
#include "ops/ops.hpp"

namespace encore::models {

namespace {

class DistilBert : public StackedEncoder {
 public:
  std::vector<nn::TransformerEncoderLayer> layers;

  void collect_parameters(const std::string& prefix, std::vector<nn::ParamRef>& out) override {
    embeddings.collect_parameters(prefix + "embeddings.", out);
    for (size_t i = 0; i < layers.size(); ++i) layers[i].collect_parameters(prefix + "transformer.layer." + std::to_string(i) + ".", out);
    if (head) head->collect_parameters(prefix, out);
  }
  void for_each_child(const std::function<void(nn::Module&, const std::string&)>& fn) override {
    for (size_t i = 0; i < layers.size(); ++i) fn(layers[i], "transformer.layer." + std::to_string(i));
  }
  void for_each_layer(const std::function<void(nn::TransformerEncoderLayer&)>& fn) override {
    for (auto& l : layers) fn(l);
  }
  std::vector<const nn::TransformerEncoderLayer*> layer_order() const override { return pointers(layers); }
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
  // dropout after the embeddings and the FFN output; attention_dropout on the probabilities; none after out_lin
  const double p = cfg.get_double("dropout", 0.1);
  m->embeddings.dropout = p;
  m->embeddings.padding_idx = m->info.pad_token_id;
  m->layer_sites = {1.0, 0.0, 0.0, 1.0};
  for (auto& l : m->layers) l.set_dropout({cfg.get_double("attention_dropout", 0.1), 0.0, 0.0, p});
  using In = ClassificationHead::Input;
  m->sequence_head_layout = head_layout(In::first_token, "pre_classifier", "classifier", kernels::Act::relu, 0.0,
                                        cfg.get_double("seq_classif_dropout", 0.2));
  m->sequence_head_layout.input_dropout_site = false;
  if (architecture_ends_with(cfg, "ForSequenceClassification") && root.has("classifier.weight")) {
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
