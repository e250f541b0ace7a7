// MPNet: RoBERTa-style embeddings (positions from padding_idx + 1, no token types) and Post-LN layers named
// encoder.layer.N.attention.{attn.{q,k,v,o}, LayerNorm}, intermediate.dense, output.{dense,LayerNorm}, with a
// relative position bias shared by all layers: bias[h, i, j] = relative_attention_bias[bucket(j - i), h],
// added to the scaled scores before the softmax; its gradient sums the scores' gradients of every layer by bucket.
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

class MPNet : public StackedEncoder {
 public:
  Tensor relative_bias, drelative_bias;  // (num_buckets, heads)
  int64_t num_buckets = 32;

  int64_t max_sequence_length() const override { return info.max_position_embeddings - info.pad_token_id - 1; }

 protected:
  Tensor position_ids(const Tensor& ids) const override { return padding_offset_position_ids(ids, info.pad_token_id); }
  void extra_members(nn::Members& m) override {
    m.parameter("encoder.relative_attention_bias.weight", relative_bias, drelative_bias);
  }

  // bias (B*H, T, T): [b*H + h, i, j] = relative_bias[bucket(j - i), h], the same (H, T, T) block per sequence.
  Tensor attention_bias(int64_t B, int64_t T) const override {
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
    return bias;
  }
  // drelative_bias[bucket(j - i), h] += Σ_b d[b, h, i, j] (d already summed over layers), in a fixed order.
  void attention_bias_backward(const Tensor& d_in) override {
    const Tensor d = d_in.contiguous();
    const int64_t B = d.size(0), H = d.size(1), T = d.size(2);
    float* g = grad_buffer(drelative_bias, relative_bias)->data<float>();
    const float* pd = d.data<float>();
    for (int64_t i = 0; i < T; ++i)
      for (int64_t j = 0; j < T; ++j) {
        const int64_t bucket = relative_position_bucket(j - i, num_buckets);
        for (int64_t h = 0; h < H; ++h)
          for (int64_t b = 0; b < B; ++b) g[bucket * H + h] += pd[((b * H + h) * T + i) * T + j];
      }
  }
};

}  // namespace

std::unique_ptr<EncoderModel> load_mpnet(const HfConfig& cfg, const io::WeightStore& store) {
  const EncoderDims d = read_encoder_dims(cfg);
  auto m = std::make_unique<MPNet>();
  fill_info(m->info, cfg, d);
  m->info.pad_token_id = cfg.get_int("pad_token_id", 1, 0, 10'000'000);
  m->num_buckets = cfg.get_int("relative_attention_num_buckets", 32, 2, 4096);
  m->hf_class_stem = "MPNet";
  m->hf_base_prefix = "mpnet.";
  m->hf_checkpoint_prefix = detect_prefix(store, m->hf_base_prefix, "embeddings.word_embeddings.weight");
  Weights root(store, "");
  Weights w = root.sub(m->hf_checkpoint_prefix);
  m->embeddings = TokenEmbeddings::load(w, cfg, d.hidden, false);
  m->embeddings.word_embeddings.padding_idx = m->embeddings.position_embeddings.padding_idx = m->info.pad_token_id;
  m->layer_names = {"attention.attn.q",    "attention.attn.k",   "attention.attn.v", "attention.attn.o",
                    "attention.LayerNorm", "intermediate.dense", "output.dense",     "output.LayerNorm"};
  m->load_layers(w, d, d.layers, [](int64_t i) { return "encoder.layer." + std::to_string(i) + "."; });
  m->relative_bias = w.take("encoder.relative_attention_bias.weight", {m->num_buckets, d.heads}).contiguous();
  const double hidden_p = cfg.get_double("hidden_dropout_prob", 0.1);
  m->set_hf_dropout(hidden_p, cfg.get_double("attention_probs_dropout_prob", 0.1));
  if (w.has("pooler.dense.weight")) m->pooler = take_linear(w, "pooler.dense", d.hidden, d.hidden);
  m->sequence_head_layout = head_layout(ClassificationHead::Input::first_token, "classifier.dense",
                                        "classifier.out_proj", kernels::Act::tanh, hidden_p, hidden_p);
  m->masked_lm_layout = make_masked_lm_layout("lm_head.dense", "lm_head.layer_norm", "lm_head.decoder", "lm_head.bias",
                                              kernels::Act::gelu_erf, d.eps);
  m->select_head(cfg, root, hidden_p);
  w.finish();
  return m;
}

}  // namespace encore::models
