// MPNet: RoBERTa-style embeddings (positions from padding_idx + 1, no token types) and Post-LN layers named
// encoder.layer.N.attention.{attn.{q,k,v,o}, LayerNorm}, intermediate.dense, output.{dense,LayerNorm}, with a
// relative position bias shared by all layers: bias[h, i, j] = relative_attention_bias[bucket(j - i), h],
// added to the scaled scores before the softmax; its gradient sums the scores' gradients of every layer by bucket.
#include "models/model.hpp"
#include "ops/backward.hpp"
#include "ops/ops.hpp"

namespace encore::models {

namespace {

class MPNet : public StackedEncoder {
 public:
  Tensor relative_bias, drelative_bias;  // (num_buckets, heads)
  int64_t num_buckets = 32;
  static constexpr int64_t kMaxDistance = 128;  // transformers' MPNet fixes it

  int64_t max_sequence_length() const override { return info.max_position_embeddings - info.pad_token_id - 1; }

 protected:
  Tensor position_ids(const Tensor& ids) const override { return padding_offset_position_ids(ids, info.pad_token_id); }
  void extra_members(nn::Members& m) override {
    m.parameter("encoder.relative_attention_bias.weight", relative_bias, drelative_bias);
  }

  // bias (B*H, T, T): [b*H + h, i, j] = relative_bias[bucket(j - i), h] (T5's bidirectional buckets, max_distance
  // 128: ops::relative_position_bias_forward), the same (H, T, T) block per sequence.
  Tensor attention_bias(int64_t B, int64_t T) const override {
    const int64_t H = info.num_heads;
    const Tensor block = ops::relative_position_bias_forward(relative_bias, T, T, kMaxDistance);
    Tensor bias = Tensor::empty({B * H, T, T});
    for (int64_t b = 0; b < B; ++b) bias.slice(0, b * H, (b + 1) * H).copy_from(block);
    return bias;
  }
  // drelative_bias[bucket(j - i), h] += Σ_b d[b, h, i, j] (d already summed over layers): summed over b in order,
  // then scattered by bucket.
  void attention_bias_backward(const Tensor& d_in) override {
    const int64_t H = info.num_heads, T = d_in.size(-1);
    const Tensor d = d_in.contiguous().view({-1, H, T, T});  // (B, H, T, T) or (B*H, T, T)
    Tensor dblock = d.select(0, 0).contiguous();
    for (int64_t b = 1; b < d.size(0); ++b) ops::add_forward_(dblock, d.select(0, b));
    ops::relative_position_bias_backward(grad_buffer(drelative_bias, relative_bias), dblock, kMaxDistance);
  }
};

}  // namespace

std::unique_ptr<EncoderModel> load_mpnet(const HfConfig& cfg, const io::WeightStore& store) {
  const EncoderDims d = read_encoder_dims(cfg);
  auto m = std::make_unique<MPNet>();
  fill_info(m->info, cfg, d);
  m->info.pad_token_id = cfg.get_int("pad_token_id", 1, 0, 10'000'000);
  // Bidirectional T5 buckets: the log-spaced ones start at num_buckets/4, which must be >= 1 and below the fixed
  // max_distance (transformers divides by zero or takes the log of a number <= 1 otherwise).
  m->num_buckets = cfg.get_int("relative_attention_num_buckets", 32, 4, 4 * MPNet::kMaxDistance - 1);
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
