// ALBERT: factorized embeddings (embedding_size E, projected to hidden_size by
// encoder.embedding_hidden_mapping_in) and cross-layer sharing: num_hidden_layers steps, step i running every
// inner layer of group int(i / (num_hidden_layers / num_hidden_groups)). Layers are Post-LN, named
// albert_layer_groups.G.albert_layers.K.{attention.{query,key,value,dense,LayerNorm}, ffn, ffn_output,
// full_layer_layer_norm}; pooler is a single Linear + tanh.
#include "models/model.hpp"
#include "ops/ops.hpp"

namespace encore::models {

namespace {

class Albert : public StackedEncoder {
 public:
  std::vector<std::vector<nn::TransformerEncoderLayer>> groups;
  int64_t num_layers = 0;

  void collect_parameters(const std::string& prefix, std::vector<nn::ParamRef>& out) override {
    embeddings.collect_parameters(prefix + "embeddings.", out);
    project->collect_parameters(prefix + "encoder.embedding_hidden_mapping_in", out);
    for (size_t g = 0; g < groups.size(); ++g)
      for (size_t k = 0; k < groups[g].size(); ++k)
        groups[g][k].collect_parameters(
            prefix + "encoder.albert_layer_groups." + std::to_string(g) + ".albert_layers." + std::to_string(k) + ".", out);
    if (pooler) pooler->collect_parameters(prefix + "pooler", out);
    if (head) head->collect_parameters(prefix, out);
  }
  void for_each_child(const std::function<void(nn::Module&, const std::string&)>& fn) override {
    for (size_t g = 0; g < groups.size(); ++g)
      for (size_t k = 0; k < groups[g].size(); ++k) fn(groups[g][k], "group." + std::to_string(g) + "." + std::to_string(k));
  }
  void for_each_layer(const std::function<void(nn::TransformerEncoderLayer&)>& fn) override {
    for (auto& g : groups)
      for (auto& l : g) fn(l);
  }
  // Step i runs every inner layer of group int(i / (num_hidden_layers / num_hidden_groups)).
  std::vector<const nn::TransformerEncoderLayer*> layer_order() const override {
    std::vector<const nn::TransformerEncoderLayer*> order;
    const double layers_per_group = static_cast<double>(num_layers) / static_cast<double>(groups.size());
    for (int64_t i = 0; i < num_layers; ++i)
      for (const auto& layer : groups[static_cast<size_t>(static_cast<double>(i) / layers_per_group)]) order.push_back(&layer);
    return order;
  }
};

}  // namespace

std::unique_ptr<EncoderModel> load_albert(const HfConfig& cfg, const io::WeightStore& store) {
  const EncoderDims d = read_encoder_dims(cfg, "gelu_new");
  const int64_t E = cfg.get_int("embedding_size", 128, 1, 65536);
  const int64_t G = cfg.get_int("num_hidden_groups", 1, 1, d.layers);
  const int64_t K = cfg.get_int("inner_group_num", 1, 1, 1000);
  auto m = std::make_unique<Albert>();
  fill_info(m->info, cfg, d);
  m->num_layers = d.layers;
  Weights root(store, "");
  Weights w = root.sub(detect_prefix(store, "albert.", "embeddings.word_embeddings.weight"));
  m->embeddings = TokenEmbeddings::load(w, cfg, E, true);
  m->embeddings.padding_idx = m->info.pad_token_id;
  m->project = take_linear(w, "encoder.embedding_hidden_mapping_in", d.hidden, E);
  for (int64_t g = 0; g < G; ++g) {
    std::vector<nn::TransformerEncoderLayer> group;
    for (int64_t k = 0; k < K; ++k) {
      const std::string p = "encoder.albert_layer_groups." + std::to_string(g) + ".albert_layers." + std::to_string(k) + ".";
      PostLnNames n{p + "attention.query", p + "attention.key", p + "attention.value", p + "attention.dense",
                    p + "attention.LayerNorm", p + "ffn", p + "ffn_output", p + "full_layer_layer_norm"};
      group.push_back(load_post_ln_layer(w, n, d.hidden, d.heads, d.intermediate, d.activation, d.eps));
      m->info.num_parameters += group.back().num_parameters();
    }
    m->groups.push_back(std::move(group));
  }
  m->set_hf_dropout(cfg.get_double("hidden_dropout_prob", 0.0), cfg.get_double("attention_probs_dropout_prob", 0.0));
  if (w.has("pooler.weight")) m->pooler = take_linear(w, "pooler", d.hidden, d.hidden);
  using In = ClassificationHead::Input;
  m->sequence_head_layout =
      head_layout(In::pooled, "", "classifier", kernels::Act::none, cfg.get_double("classifier_dropout_prob", 0.1), 0.0);
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
  return m;
}

}  // namespace encore::models
