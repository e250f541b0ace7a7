// MPNet: RoBERTa-style embeddings (positions from padding_idx + 1, no token types) and Post-LN layers named
// encoder.layer.N.attention.{attn.{q,k,v,o}, LayerNorm}, intermediate.dense, output.{dense,LayerNorm}, with a
// relative position bias shared by all layers: bias[h, i, j] = relative_attention_bias[bucket(j - i), h],
// added to the scaled scores before the softmax.
#include <cmath>

#include "models/model.hpp"
#include "ops/ops.hpp"

namespace encore::models {

namespace {

// T5-style bidirectional bucket of relative position rel = key - query (num_buckets, max_distance 128).
int64_t relative_position_bucket(int64_t rel, int64_t num_buckets, int64_t max_distance = 128) {
  int64_t ret = 0;
  int64_t n = -rel;
  num_buckets /= 2;
  if (n < 0) ret += num_buckets;
  n = std::abs(n);
  const int64_t max_exact = num_buckets / 2;
  if (n < max_exact) return ret + n;
  // log-spaced buckets beyond max_exact, computed in float as upstream does
  const float nf = static_cast<float>(n);
  int64_t large = max_exact + static_cast<int64_t>(std::log(nf / static_cast<float>(max_exact)) /
                                                   std::log(static_cast<float>(max_distance) / static_cast<float>(max_exact)) *
                                                   static_cast<float>(num_buckets - max_exact));
  return ret + std::min<int64_t>(large, num_buckets - 1);
}

class MPNet : public EncoderModel {
 public:
  TokenEmbeddings embeddings;
  std::vector<nn::TransformerEncoderLayer> layers;
  Tensor relative_bias;  // (num_buckets, heads)
  int64_t num_buckets = 32;
  std::optional<LinearWeights> pooler, head_dense, head_out;
  bool token_head = false;

  int64_t max_sequence_length() const override { return info.max_position_embeddings - info.pad_token_id - 1; }

  void collect_parameters(const std::string& prefix, std::vector<nn::ParamRef>& out) override {
    embeddings.collect_parameters(prefix + "embeddings.", out);
    for (size_t i = 0; i < layers.size(); ++i) layers[i].collect_parameters(prefix + "encoder.layer." + std::to_string(i) + ".", out);
    out.push_back({prefix + "encoder.relative_attention_bias.weight", &relative_bias, &drelative_bias});
    if (pooler) pooler->collect_parameters(prefix + "pooler.dense", out);
    if (head_dense) head_dense->collect_parameters(prefix + "classifier.dense", out);
    if (head_out) head_out->collect_parameters(prefix + (token_head ? "classifier" : "classifier.out_proj"), out);
  }
  Tensor drelative_bias;
  void for_each_child(const std::function<void(nn::Module&, const std::string&)>& fn) override {
    for (size_t i = 0; i < layers.size(); ++i) fn(layers[i], "encoder.layer." + std::to_string(i));
  }
  void for_each_layer(const std::function<void(nn::TransformerEncoderLayer&)>& fn) override {
    for (auto& l : layers) fn(l);
  }

  ModelOutput forward(const Tensor& ids, const Tensor& mask, const Tensor& types,
                      const ForwardOptions& opt) const override {
    auto [B, T] = check_inputs(ids, mask, types);
    ENCORE_CHECK(T <= max_sequence_length(), "input length ", T, " exceeds the model's maximum ", max_sequence_length());
    ModelOutput out;
    Tensor x = embeddings.forward(ids, padding_offset_position_ids(ids, info.pad_token_id), Tensor());
    // position bias (B*H, T, T): the same (H, T, T) block for every sequence
    const int64_t H = info.num_heads;
    Tensor bias = Tensor::empty({B * H, T, T});
    const float* rb = relative_bias.data<float>();
    float* pb = bias.data<float>();
    for (int64_t i = 0; i < T; ++i)
      for (int64_t j = 0; j < T; ++j) {
        const int64_t bucket = relative_position_bucket(j - i, num_buckets);
        for (int64_t h = 0; h < H; ++h) pb[(h * T + i) * T + j] = rb[bucket * H + h];
      }
    for (int64_t b = 1; b < B; ++b) bias.slice(0, b * H, (b + 1) * H).copy_from(bias.slice(0, 0, H));
    out.last_hidden_state = run_layers(pointers(layers), x, bias, key_padding_from_attention_mask(mask, B, T), opt, out);
    if (pooler)
      out.pooler_output = ops::linear_forward(first_token(out.last_hidden_state), pooler->weight, pooler->bias,
                                              kernels::Act::tanh);
    if (head_out && opt.compute_logits) {
      if (token_head) {
        out.logits = head_out->apply(out.last_hidden_state);
      } else {
        Tensor h = ops::linear_forward(first_token(out.last_hidden_state), head_dense->weight, head_dense->bias,
                                       kernels::Act::tanh);
        out.logits = head_out->apply(h);
      }
    }
    return out;
  }
};

}  // namespace

std::unique_ptr<EncoderModel> load_mpnet(const HfConfig& cfg, const io::WeightStore& store) {
  const EncoderDims d = read_encoder_dims(cfg);
  auto m = std::make_unique<MPNet>();
  fill_info(m->info, cfg, d);
  m->info.pad_token_id = cfg.get_int("pad_token_id", 1, 0, 10'000'000);
  m->num_buckets = cfg.get_int("relative_attention_num_buckets", 32, 2, 4096);
  Weights root(store, "");
  Weights w = root.sub(detect_prefix(store, "mpnet.", "embeddings.word_embeddings.weight"));
  m->embeddings = TokenEmbeddings::load(w, cfg, d.hidden, false);
  for (int64_t i = 0; i < d.layers; ++i) {
    const std::string p = "encoder.layer." + std::to_string(i) + ".";
    PostLnNames n{p + "attention.attn.q", p + "attention.attn.k", p + "attention.attn.v", p + "attention.attn.o",
                  p + "attention.LayerNorm", p + "intermediate.dense", p + "output.dense", p + "output.LayerNorm"};
    m->layers.push_back(load_post_ln_layer(w, n, d.hidden, d.heads, d.intermediate, d.activation, d.eps));
  }
  m->relative_bias = w.take("encoder.relative_attention_bias.weight", {m->num_buckets, d.heads}).contiguous();
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
