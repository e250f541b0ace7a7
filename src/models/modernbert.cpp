// ModernBERT (model_type "modernbert": answerdotai/ModernBERT-base/-large and the encoders fine-tuned from them),
// module for module as transformers' modeling_modernbert.py. The structs below are its modules and load from the
// checkpoint's names, so the prefix is the structure:
//   embeddings.tok_embeddings, embeddings.norm          ModernBertEmbeddings: LayerNorm(tok_embeddings[ids]); no
//                                                       position or token-type embeddings (RoPE in the layers)
//   layers.N.attn_norm (absent on layer 0: Identity), layers.N.attn.{Wqkv,Wo}, layers.N.mlp_norm, layers.N.mlp.{Wi,Wo}
//   final_norm
//   head.{dense,norm}, classifier                        ModernBertFor{Sequence,Token}Classification, ModernBertFor-
//                                                       QuestionAnswering (2 outputs: start, end) (base under "model.")
//   head.{dense,norm}, decoder                           ModernBertForMaskedLM (decoder tied to tok_embeddings by default)
// One layer (pre-norm):
//   h   = x + Wo(attention(rope(q), rope(k), v)),  [q | k | v] = Wqkv(attn_norm(x)), each (heads, head_dim)
//   out = h + Wo_mlp(act(a)·g),                     [a | g] = Wi(mlp_norm(h))      (GeGLU: act on the first half)
// Layer i attends globally with RoPE base global_rope_theta when layer_types[i] is "full_attention" (configs
// without layer_types: i % global_attn_every_n_layers == 0), otherwise within a window with base local_rope_theta:
// query i sees key j only when |i - j| <= local_attention / 2 (transformers' sliding_window, inclusive). LayerNorms,
// Wqkv/Wo and Wi/Wo carry biases per norm_bias, attention_bias and mlp_bias. hidden_states are the embeddings'
// output, then each layer's, the last one after final_norm (as transformers returns them).
// Windowed attention runs in query chunks over the keys each chunk can see, so its memory and work grow linearly
// with the length; global layers use the fused kernel (no T x T buffer). Training: forward_train saves what each
// module's backward needs (the attention probabilities (B, heads, T, T) per layer, a band mask for windowed
// layers); dropout at transformers' sites (embedding_dropout after the embeddings' norm, attention_dropout on the
// probabilities and on Wo's output, mlp_dropout on act(input)·gate, classifier_dropout after the head).
#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "encore/sentence_encoder.hpp"
#include "io/json_file.hpp"
#include "models/layer_stack.hpp"
#include "models/model.hpp"
#include "nn/common.hpp"
#include "ops/backward.hpp"
#include "ops/ops.hpp"

namespace encore::models {

namespace {

// ---------------- config.json ----------------

struct ModernBertConfig {
  int64_t hidden = 0, layers = 0, heads = 0, head_dim = 0, intermediate = 0, vocab = 0, max_positions = 0;
  int64_t pad_token_id = 0;
  double norm_eps = 1e-5;
  bool norm_bias = false, attention_bias = false, mlp_bias = false, classifier_bias = false, decoder_bias = true;
  std::string hidden_activation, classifier_activation;  // encore's names
  std::vector<bool> global;                               // per layer: full attention (else sliding window)
  int64_t window = 64;                                    // half window: |i - j| <= window (local_attention / 2)
  double global_theta = 160000.0, local_theta = 10000.0;
  std::string classifier_pooling = "cls";
  double embedding_dropout = 0, attention_dropout = 0, mlp_dropout = 0, classifier_dropout = 0;
};

bool read_bool(const HfConfig& cfg, const char* key, bool fallback) {
  return io::JsonAt(cfg.json(), cfg.source()).get_or(key, fallback);
}

// rope_parameters[layer_type].rope_theta (transformers 5 configs), else the older flat key, else its default;
// only the default RoPE (no scaling) is implemented.
double read_rope_theta(const HfConfig& cfg, const char* layer_type, const char* flat_key, double fallback) {
  ENCORE_CHECK_AS(ModelFormatError, !cfg.has("rope_scaling"), cfg.source(),
                  ": rope_scaling is not supported for modernbert (default RoPE only)");
  if (cfg.has("rope_parameters")) {
    const io::JsonAt rp(cfg.json()["rope_parameters"], cfg.source(), "/rope_parameters");
    rp.expect_object();
    if (rp.has(layer_type)) {
      const io::JsonAt p = rp[layer_type];
      p.expect_object();
      const std::string type = p.get_or("rope_type", "default");
      ENCORE_CHECK_AS(ModelFormatError, type == "default", cfg.source(), ": rope_parameters/", layer_type,
                      "/rope_type '", type, "' is not supported for modernbert (default only)");
      if (p.has("rope_theta")) return p["rope_theta"].number(std::numeric_limits<double>::min());
    }
  }
  const double theta = cfg.get_double(flat_key, fallback);
  ENCORE_CHECK_AS(ModelFormatError, theta > 0, cfg.source(), ": ", flat_key, " must be positive, got ", theta);
  return theta;
}

ModernBertConfig read_config(const HfConfig& cfg) {
  ModernBertConfig c;
  c.hidden = cfg.get_int("hidden_size", 768, 1, 65536);
  c.layers = cfg.get_int("num_hidden_layers", 22, 1, 1000);
  c.heads = cfg.get_int("num_attention_heads", 12, 1, 4096);
  ENCORE_CHECK_AS(ModelFormatError, c.hidden % c.heads == 0, cfg.source(), ": hidden_size ", c.hidden,
                  " is not divisible by num_attention_heads ", c.heads);
  c.head_dim = c.hidden / c.heads;
  ENCORE_CHECK_AS(ModelFormatError, c.head_dim % 2 == 0, cfg.source(), ": head dim hidden_size/num_attention_heads = ",
                  c.head_dim, " must be even for rotary embeddings");
  if (cfg.has("head_dim"))
    ENCORE_CHECK_AS(ModelFormatError, cfg.get_int("head_dim") == c.head_dim, cfg.source(), ": head_dim ",
                    cfg.get_int("head_dim"), " differs from hidden_size/num_attention_heads = ", c.head_dim,
                    " (not supported for modernbert)");
  c.intermediate = cfg.get_int("intermediate_size", 1152, 1, 1 << 20);
  c.vocab = cfg.get_int("vocab_size", 50368, 1, 10'000'000);
  c.max_positions = cfg.get_int("max_position_embeddings", 8192, 1, 1 << 24);
  c.pad_token_id = cfg.get_int("pad_token_id", 50283, 0, c.vocab - 1);  // a row of the embeddings, as in fill_info
  c.norm_eps = cfg.get_double("norm_eps", 1e-5);
  c.norm_bias = read_bool(cfg, "norm_bias", false);
  c.attention_bias = read_bool(cfg, "attention_bias", false);
  c.mlp_bias = read_bool(cfg, "mlp_bias", false);
  c.classifier_bias = read_bool(cfg, "classifier_bias", false);
  c.decoder_bias = read_bool(cfg, "decoder_bias", true);
  c.hidden_activation = activation_from_hf(cfg.get_string("hidden_activation", "gelu"), cfg.source());
  c.classifier_activation = activation_from_hf(cfg.get_string("classifier_activation", "gelu"), cfg.source());
  if (cfg.has("layer_types")) {
    const io::JsonAt types(cfg.json()["layer_types"], cfg.source(), "/layer_types");
    ENCORE_CHECK_AS(ModelFormatError, static_cast<int64_t>(types.size()) == c.layers, cfg.source(),
                    ": layer_types has ", types.size(), " entries for num_hidden_layers ", c.layers);
    for (int64_t i = 0; i < c.layers; ++i) {
      const std::string t = types.at(i).str();
      ENCORE_CHECK_AS(ModelFormatError, t == "full_attention" || t == "sliding_attention", cfg.source(),
                      ": layer_types[", i, "] '", t, "' is not supported (full_attention, sliding_attention)");
      c.global.push_back(t == "full_attention");
    }
  } else {
    const int64_t every = cfg.get_int("global_attn_every_n_layers", 3, 1, 1 << 20);
    for (int64_t i = 0; i < c.layers; ++i) c.global.push_back(i % every == 0);
  }
  c.window = cfg.get_int("local_attention", 128, 0, 1 << 24) / 2;  // transformers' config.sliding_window
  c.global_theta = read_rope_theta(cfg, "full_attention", "global_rope_theta", 160000.0);
  c.local_theta = read_rope_theta(cfg, "sliding_attention", "local_rope_theta", 10000.0);
  c.classifier_pooling = cfg.get_string("classifier_pooling", "cls");
  ENCORE_CHECK_AS(ModelFormatError, c.classifier_pooling == "cls" || c.classifier_pooling == "mean", cfg.source(),
                  ": classifier_pooling '", c.classifier_pooling, "' is not supported (cls, mean)");
  c.embedding_dropout = cfg.get_double("embedding_dropout", 0.0);
  c.attention_dropout = cfg.get_double("attention_dropout", 0.0);
  c.mlp_dropout = cfg.get_double("mlp_dropout", 0.0);
  c.classifier_dropout = cfg.get_double("classifier_dropout", 0.0);
  return c;
}

kernels::Act act_of(const std::string& encore_name) { return nn::detail::pointwise_act(nn::parse_activation(encore_name)); }

nn::Linear take_linear(Weights& w, const std::string& name, int64_t out, int64_t in, bool bias) {
  nn::Linear l;
  l.weight = w.take(name + ".weight", {out, in});
  if (bias) l.bias = w.take(name + ".bias", {out});
  l.in_features = in;
  l.out_features = out;
  return l;
}

nn::LayerNorm take_norm(Weights& w, const std::string& name, int64_t C, double eps, bool bias) {
  nn::LayerNorm n(C, eps, /*elementwise_affine=*/true, bias);
  n.weight = w.take(name + ".weight", {C});
  if (bias) n.bias = w.take(name + ".bias", {C});
  return n;
}

// ---------------- attention over a window ----------------

// Additive (rows, cols) mask for queries r0.. and keys c0..: 0 where |(r0 + i) - (c0 + j)| <= window, else -inf.
Tensor band_mask(int64_t r0, int64_t rows, int64_t c0, int64_t cols, int64_t window) {
  Tensor m = Tensor::empty({rows, cols});
  float* p = m.data<float>();
  const float neg_inf = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) p[i * cols + j] = std::abs((r0 + i) - (c0 + j)) <= window ? 0.f : neg_inf;
  return m;
}

// Queries per call of the windowed attention: each chunk of Q queries reads the Q + 2·window keys around it.
int64_t window_chunk(int64_t window) { return std::max<int64_t>(256, 2 * window); }

// Self-attention of one batch of sequences (q, k, v: (B, T, E) views, key_padding (B, T) or undefined) where
// query i sees key j only if |i - j| <= window. Short sequences run as one call with a (T, T) band mask; longer
// ones in chunks of queries [i0, i1) against keys [i0 - window, i1 + window), so nothing is T x T.
Tensor windowed_attention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t heads, int64_t window,
                          const Tensor& key_padding) {
  const int64_t B = q.size(0), T = q.size(1), Ev = v.size(2), Q = window_chunk(window);
  ops::AttentionMasks masks;
  if (T <= 2 * Q) {
    masks.attn_mask = band_mask(0, T, 0, T, window);
    masks.key_padding_mask = key_padding;
    return ops::attention_forward(q, k, v, heads, masks, nullptr, 0.0, false, 0);
  }
  Tensor out = Tensor::empty({B, T, Ev});
  for (int64_t i0 = 0; i0 < T; i0 += Q) {
    const int64_t i1 = std::min(T, i0 + Q), k0 = std::max<int64_t>(0, i0 - window), k1 = std::min(T, i1 + window);
    masks.attn_mask = band_mask(i0, i1 - i0, k0, k1 - k0, window);
    if (key_padding.defined()) masks.key_padding_mask = key_padding.slice(1, k0, k1).contiguous();
    out.slice(1, i0, i1).copy_from(ops::attention_forward(q.slice(1, i0, i1), k.slice(1, k0, k1), v.slice(1, k0, k1),
                                                          heads, masks, nullptr, 0.0, false, 0));
  }
  return out;
}

// What every layer's attention needs besides its input: the padding (a key mask, or the sequences' rows of a
// padding-free batch) and the rotary tables of both kinds of layer, (T, head_dim/2) or per token (1, N, head_dim/2).
struct AttentionContext {
  Tensor key_padding;                                  // (B, T) additive, or undefined
  const std::vector<int64_t>* cu_seqlens = nullptr;   // padding-free: x is (1, N, C), sequence b in rows cu[b]..cu[b+1]
  Tensor cos_global, sin_global, cos_local, sin_local;
};

// ---------------- modules ----------------

struct ModernBertEmbeddings : nn::Module {
  nn::Embedding tok_embeddings;
  nn::LayerNorm norm;
  double dropout = 0.0;  // embedding_dropout (training)

  Tensor forward(const Tensor& ids) const { return norm.apply(tok_embeddings.apply(ids, "input_ids")); }

 protected:
  void members(nn::Members& m) override { m.children({{"tok_embeddings", tok_embeddings}, {"norm", norm}}); }
};

struct ModernBertAttention : nn::Module {
  nn::Linear Wqkv, Wo;
  int64_t heads = 0, head_dim = 0;
  bool global = true;
  int64_t window = 0;     // sliding layers: |i - j| <= window
  double dropout = 0.0;   // attention_dropout (training: the probabilities and Wo's output)

  // x (B, T, C), or (1, N, C) with ctx.cu_seqlens; weights, when non-null, receives (B, heads, T, T).
  Tensor forward(const Tensor& x, const AttentionContext& ctx, Tensor* weights) const {
    const int64_t B = x.size(0), T = x.size(1), C = heads * head_dim;
    const Tensor qkv = nn::detail::linear(Wqkv, x, false);  // (B, T, 3C) = [q | k | v], head h at columns h·head_dim
    // q and k rotate alike per position: one pass over their 2·heads heads
    const Tensor& cos = global ? ctx.cos_global : ctx.cos_local;
    const Tensor& sin = global ? ctx.sin_global : ctx.sin_local;
    const Tensor qk =
        ops::rotary_forward(qkv.slice(2, 0, 2 * C).contiguous().view({B, T, 2 * heads, head_dim}), cos, sin)
            .view({B, T, 2 * C});
    const Tensor q = qk.slice(2, 0, C), k = qk.slice(2, C, 2 * C), v = qkv.slice(2, 2 * C, 3 * C);
    Tensor out;
    ops::AttentionMasks masks;
    if (weights || (global && !ctx.cu_seqlens)) {  // padded batch; weights need the (T, T) scores anyway
      masks.key_padding_mask = ctx.key_padding;
      if (!global) masks.attn_mask = band_mask(0, T, 0, T, window);
      out = ops::attention_forward(q, k, v, heads, masks, weights, 0.0, false, 0);
    } else if (global) {  // padding-free batch
      masks.cu_seqlens = *ctx.cu_seqlens;
      out = ops::attention_forward(q, k, v, heads, masks, nullptr, 0.0, false, 0);
    } else if (!ctx.cu_seqlens) {
      out = windowed_attention(q, k, v, heads, window, ctx.key_padding);
    } else {  // padding-free and windowed: short sequences in one call with a band mask, long ones one by one
      const std::vector<int64_t>& cu = *ctx.cu_seqlens;
      int64_t longest = 0;
      for (size_t b = 0; b + 1 < cu.size(); ++b) longest = std::max(longest, cu[b + 1] - cu[b]);
      if (longest <= 2 * window_chunk(window)) {
        masks.cu_seqlens = cu;
        masks.attn_mask = band_mask(0, longest, 0, longest, window);  // sequence b uses its top-left block
        out = ops::attention_forward(q, k, v, heads, masks, nullptr, 0.0, false, 0);
      } else {
        out = Tensor::empty({1, T, C});
        for (size_t b = 0; b + 1 < cu.size(); ++b) {
          const int64_t r0 = cu[b], r1 = cu[b + 1];
          if (r1 > r0)
            out.slice(1, r0, r1).copy_from(windowed_attention(q.slice(1, r0, r1), k.slice(1, r0, r1),
                                                              v.slice(1, r0, r1), heads, window, Tensor()));
        }
      }
    }
    return nn::detail::linear(Wo, out, false);
  }

  struct Saved {
    Tensor x, qkv, qk, probs, attn;  // Wqkv's input and output, rotated [q | k], probabilities, Wo's input
    uint64_t seed_probs = 0, seed_out = 0;
  };
  // Training (padded batch x (B, T, C)): dropout(Wo(dropout(softmax(q·kᵀ/√d + masks))·v)), saving sv.
  Tensor forward_train(Saved& sv, const Tensor& x, const AttentionContext& ctx) const {
    const int64_t B = x.size(0), T = x.size(1), C = heads * head_dim;
    sv.x = x;
    sv.qkv = ops::linear_forward(x, Wqkv.weight, Wqkv.bias);
    sv.qk = ops::rotary_forward(sv.qkv.slice(2, 0, 2 * C).contiguous().view({B, T, 2 * heads, head_dim}),
                                global ? ctx.cos_global : ctx.cos_local, global ? ctx.sin_global : ctx.sin_local)
                .view({B, T, 2 * C});
    ops::AttentionMasks masks;
    masks.key_padding_mask = ctx.key_padding;
    if (!global) masks.attn_mask = band_mask(0, T, 0, T, window);
    sv.seed_probs = nn::detail::next_seed();
    sv.attn = ops::attention_forward_train(&sv.probs, sv.qk.slice(2, 0, C), sv.qk.slice(2, C, 2 * C),
                                           sv.qkv.slice(2, 2 * C, 3 * C), heads, masks, dropout, true, sv.seed_probs);
    sv.seed_out = nn::detail::next_seed();
    return ops::dropout_forward(ops::linear_forward(sv.attn, Wo.weight, Wo.bias), dropout, true, sv.seed_out);
  }
  // The gradient of x; accumulates Wqkv's and Wo's.
  Tensor backward(const Saved& sv, const Tensor& dout, const AttentionContext& ctx) {
    const int64_t B = sv.x.size(0), T = sv.x.size(1), C = heads * head_dim;
    Tensor d;
    ops::dropout_backward(&d, dout, dropout, true, sv.seed_out);
    // in the forward pass this was:  out = attn·Woᵀ + b
    const Tensor dattn = nn::detail::linear_backward(Wo, d, sv.attn);
    Tensor dqkv = Tensor::empty({B, T, 3 * C}), dqk = Tensor::empty({B, T, 2 * C});
    Tensor dq = dqk.slice(2, 0, C), dk = dqk.slice(2, C, 2 * C), dv = dqkv.slice(2, 2 * C, 3 * C);
    ops::attention_backward(&dq, &dk, &dv, nullptr, dattn, sv.probs, sv.qk.slice(2, 0, C), sv.qk.slice(2, C, 2 * C),
                            sv.qkv.slice(2, 2 * C, 3 * C), heads, dropout, true, sv.seed_probs);
    // in the forward pass this was:  [q | k] = rope(qkv[..., :2C]) - the gradient is the inverse rotation
    Tensor dqk_in;
    ops::rotary_backward(&dqk_in, dqk.view({B, T, 2 * heads, head_dim}), global ? ctx.cos_global : ctx.cos_local,
                         global ? ctx.sin_global : ctx.sin_local);
    dqkv.slice(2, 0, 2 * C).copy_from(dqk_in.view({B, T, 2 * C}));
    return nn::detail::linear_backward(Wqkv, dqkv, sv.x);
  }

 protected:
  void members(nn::Members& m) override { m.children({{"Wqkv", Wqkv}, {"Wo", Wo}}); }
};

struct ModernBertMLP : nn::Module {
  nn::Linear Wi, Wo;
  kernels::Act act = kernels::Act::gelu_erf;
  double dropout = 0.0;  // mlp_dropout (training)

  // Wo(act(input) · gate) with input, gate = Wi(x).chunk(2)
  Tensor forward(const Tensor& x) const {
    return nn::detail::linear(Wo, ops::gated_forward(nn::detail::linear(Wi, x, false), act, kernels::Gate::first),
                              false);
  }

  struct Saved {
    Tensor x, wi_out, hidden;  // Wi's input and output, Wo's input
    uint64_t seed = 0;
  };
  Tensor forward_train(Saved& sv, const Tensor& x) const {
    sv.x = x;
    sv.wi_out = ops::linear_forward(x, Wi.weight, Wi.bias);
    sv.seed = nn::detail::next_seed();
    sv.hidden = ops::dropout_forward(ops::gated_forward(sv.wi_out, act, kernels::Gate::first), dropout, true, sv.seed);
    return ops::linear_forward(sv.hidden, Wo.weight, Wo.bias);
  }
  Tensor backward(const Saved& sv, const Tensor& dout) {
    // in the forward pass this was:  out = Wo(dropout(act(input)·gate)), [input | gate] = Wi(x)
    const Tensor dhidden = nn::detail::linear_backward(Wo, dout, sv.hidden);
    Tensor dgated, dwi;
    ops::dropout_backward(&dgated, dhidden, dropout, true, sv.seed);
    ops::gated_backward(&dwi, dgated, sv.wi_out, act, kernels::Gate::first);
    return nn::detail::linear_backward(Wi, dwi, sv.x);
  }

 protected:
  void members(nn::Members& m) override { m.children({{"Wi", Wi}, {"Wo", Wo}}); }
};

struct ModernBertEncoderLayer : nn::Module, nn::AnnouncedLayer {  // layer_stack_backward announces it
  std::optional<nn::LayerNorm> attn_norm;  // none on layer 0 (transformers: nn.Identity)
  ModernBertAttention attn;
  nn::LayerNorm mlp_norm;
  ModernBertMLP mlp;

  Tensor forward(const Tensor& x, const AttentionContext& ctx, Tensor* weights) const {
    Tensor h = attn.forward(attn_norm ? attn_norm->apply(x) : x, ctx, weights);
    ops::add_forward_(h, x);  // h = x + attn(attn_norm(x))
    Tensor out = mlp.forward(mlp_norm.apply(h));
    ops::add_forward_(out, h);  // out = h + mlp(mlp_norm(h))
    return out;
  }

  struct Saved {
    ModernBertAttention::Saved attn;
    ModernBertMLP::Saved mlp;
  };
  // The norms save their inputs on their own stacks (one use per forward).
  Tensor forward_train(Saved& sv, const Tensor& x, const AttentionContext& ctx) const {
    Tensor h = attn.forward_train(sv.attn, attn_norm ? attn_norm->apply(x) : x, ctx);
    ops::add_forward_(h, x);
    Tensor out = mlp.forward_train(sv.mlp, mlp_norm.apply(h));
    ops::add_forward_(out, h);
    return out;
  }
  Tensor backward(const Saved& sv, const Tensor& dout, const AttentionContext& ctx) {
    // in the forward pass this was:  out = h + mlp(mlp_norm(h))
    Tensor dh = mlp_norm.backward(mlp.backward(sv.mlp, dout));
    ops::add_forward_(dh, dout);
    // in the forward pass this was:  h = x + attn(attn_norm(x))
    const Tensor da = attn.backward(sv.attn, dh, ctx);
    Tensor dx = attn_norm ? attn_norm->backward(da) : da;
    ops::add_forward_(dx, dh);
    return dx;
  }

 protected:
  void members(nn::Members& m) override {
    if (attn_norm) m.child("attn_norm", *attn_norm);
    m.children({{"attn", attn}, {"mlp_norm", mlp_norm}, {"mlp", mlp}});
  }
};

// ModernBertPredictionHead: norm(act(dense(x))), under the task models' "head."
struct ModernBertPredictionHead : nn::Module {
  nn::Linear dense;
  kernels::Act act = kernels::Act::gelu_erf;
  nn::LayerNorm norm;

  Tensor forward(const Tensor& x) const { return norm.apply(nn::detail::linear(dense, x, false, act)); }

 protected:
  void members(nn::Members& m) override { m.children({{"dense", dense}, {"norm", norm}}); }
};

// ---------------- the model ----------------

class ModernBert : public EncoderModel {
 public:
  ModernBertConfig config;
  ModernBertEmbeddings embeddings;
  std::vector<ModernBertEncoderLayer> layers;
  nn::LayerNorm final_norm;
  // ModernBertFor{Sequence,Token}Classification, ModernBertForQuestionAnswering: head then classifier (dropout between, in training)
  std::optional<ModernBertPredictionHead> head;
  std::optional<nn::Linear> classifier;
  // ModernBertForMaskedLM: logits = decoder(head(x)) over every token (inference), its weight the token-embedding
  // table when tie_word_embeddings (transformers' default; the checkpoint then stores no decoder.weight)
  std::optional<nn::Linear> decoder;
  bool decoder_tied = false;
  std::string checkpoint_prefix;  // "" (ModernBertModel) or "model." (a task model's checkpoint)

  double classifier_dropout = 0.0;  // after the head, training only

  ModelOutput forward(const Tensor& ids, const Tensor& mask, const Tensor& types,
                      const ForwardOptions& opt) const override {
    auto [B, T] = check_inputs(ids, mask, types);  // token_type_ids: ModernBERT has none; ignored as transformers'
    ENCORE_CHECK(T <= config.max_positions, "input length ", T, " exceeds max_position_embeddings ",
                 config.max_positions);
    if (training_) clear_saved();
    auto sv = training_ ? std::make_shared<Saved>() : nullptr;
    ModelOutput out;
    Tensor x = embeddings.forward(ids);  // (saving for backward in training)
    if (sv) {
      sv->seed_embeddings = nn::detail::next_seed();
      x = ops::dropout_forward(x, embeddings.dropout, true, sv->seed_embeddings);
    }
    const Tensor kpm = key_padding_from_attention_mask(mask, B, T);
    const std::optional<PackedBatch> packed = PackedBatch::plan(kpm, opt, training_);
    AttentionContext ctx;
    Tensor positions;
    if (packed) {  // every sequence's positions restart at 0
      x = packed->gather(x);
      ctx.cu_seqlens = &packed->cu_seqlens;
      positions = Tensor::empty({1, packed->cu_seqlens.back()}, DType::i64);
      for (size_t b = 0; b + 1 < packed->cu_seqlens.size(); ++b)
        for (int64_t r = packed->cu_seqlens[b]; r < packed->cu_seqlens[b + 1]; ++r)
          positions.data<int64_t>()[r] = r - packed->cu_seqlens[b];
    } else {
      ctx.key_padding = kpm;
      positions = Tensor::empty({T}, DType::i64);
      for (int64_t t = 0; t < T; ++t) positions.data<int64_t>()[t] = t;
    }
    const bool any_global = std::count(config.global.begin(), config.global.end(), true) > 0;
    const bool any_local = std::count(config.global.begin(), config.global.end(), false) > 0;
    if (any_global) ctx.cos_global = ops::rotary_cos_sin(positions, config.head_dim, config.global_theta, &ctx.sin_global);
    if (any_local) ctx.cos_local = ops::rotary_cos_sin(positions, config.head_dim, config.local_theta, &ctx.sin_local);

    x = run_layer_stack(layers, x, ctx, StackRecorder{opt, packed ? &*packed : nullptr, out},
                        sv ? &sv->stack : nullptr, gradient_checkpointing);
    x = final_norm.apply(x);
    out.last_hidden_state = packed ? packed->scatter(x) : x;
    if (opt.output_hidden_states) out.hidden_states.back() = out.last_hidden_state;  // transformers' last entry
    if (classifier && opt.compute_logits) {
      Tensor features = out.last_hidden_state;  // token classification: every token
      if (info.head == "sequence_classification")  // cls: x[:, 0]; mean: over attention_mask's tokens
        features = config.classifier_pooling == "cls" ? first_token(features)
                                                      : pool_tokens(features, mask, classifier_pooling());
      if (sv) {
        // logits = classifier(dropout(norm(act(dense(features)))))
        sv->features = features;
        Tensor a = ops::linear_forward_train(&sv->head_pre, features, head->dense.weight, head->dense.bias, head->act);
        sv->seed_head = nn::detail::next_seed();
        sv->head_out = ops::dropout_forward(head->norm.apply(a), classifier_dropout, true, sv->seed_head);
        out.logits = ops::linear_forward(sv->head_out, classifier->weight, classifier->bias);
        sv->logits = true;
      } else {
        out.logits = nn::detail::linear(*classifier, head->forward(features), false);
      }
    }
    if (decoder && opt.compute_logits && !sv)  // the training forward leaves masked-LM logits undefined
      out.logits = ops::linear_forward(head->forward(out.last_hidden_state),
                                       decoder_tied ? embeddings.tok_embeddings.weight : decoder->weight, decoder->bias);
    if (sv) {
      sv->ctx = std::move(ctx);
      sv->ctx.cu_seqlens = nullptr;  // training never packs
      sv->mask = mask;
      sv->last = out.last_hidden_state;
      push_saved(sv);
    }
    return out;
  }

  void backward(const Tensor& d_last, const Tensor& d_pooler, const Tensor& d_logits) override {
    auto sv = pop_saved<Saved>("modernbert");
    ENCORE_CHECK(!d_pooler.defined(), "backward: d_pooler given but modernbert has no pooler");
    const Tensor& last = sv->last;
    Tensor dlast = d_last.defined() ? d_last.contiguous().clone() : Tensor::zeros(last.shape());
    check_shape(dlast, "d_last_hidden_state", last.shape());
    if (d_logits.defined()) {
      ENCORE_CHECK(classifier && sv->logits, "backward: d_logits given but no logits were computed");
      // in the forward pass this was:  logits = classifier(dropout(norm(act(dense(features)))))
      Tensor dhead;
      ops::dropout_backward(&dhead, nn::detail::linear_backward(*classifier, d_logits, sv->head_out),
                            classifier_dropout, true, sv->seed_head);
      const Tensor dfeatures = nn::detail::linear_backward(head->dense, head->norm.backward(dhead), sv->features,
                                                           sv->head_pre, head->act);
      if (info.head != "sequence_classification") {  // token classification, question answering: every token
        ops::add_forward_(dlast, dfeatures);
      } else if (config.classifier_pooling == "mean") {
        ops::add_forward_(dlast, pool_tokens_backward(dfeatures, last, sv->mask, classifier_pooling()));
      } else {  // dlast[:, 0] += d
        Tensor first = dlast.select(1, 0);
        first.copy_from(ops::add_forward(first.contiguous(), dfeatures));
      }
    }
    Tensor d = final_norm.backward(dlast);
    d = layer_stack_backward(sv->stack, layers, d, sv->ctx);
    // in the forward pass this was:  x = dropout(norm(tok_embeddings[ids]))
    Tensor dnorm;
    ops::dropout_backward(&dnorm, d, embeddings.dropout, true, sv->seed_embeddings);
    embeddings.tok_embeddings.backward(embeddings.norm.backward(dnorm));
  }

  // A new ModernBertFor{Sequence,Token}Classification head (head.dense, head.norm, classifier) initialised as the
  // interface promises: normal(0, 0.02) weights drawn from mt19937_64(seed) (classifier first, then dense), zero
  // biases, unit norm scale.
  void add_sequence_classifier(int64_t num_labels, uint64_t seed) override {
    add_head("sequence_classification", num_labels, seed);
  }
  void add_token_classifier(int64_t num_labels, uint64_t seed) override {
    add_head("token_classification", num_labels, seed);
  }
  void set_dropout(double p) override {
    embeddings.dropout = classifier_dropout = p;
    for (auto& l : layers) l.attn.dropout = l.mlp.dropout = p;
  }
  void for_each_layer(const std::function<void(nn::TransformerEncoderLayer&)>&) override {}
  void prepare_inference_weights(DType dtype) override {  // layers in parallel, as EncoderModel's (model.cpp)
    prepare_layers_in_parallel(layers, [&](auto& layer) {
      layer.attn.prepare_inference(dtype);
      layer.mlp.prepare_inference(dtype);
    });
  }

  HfExport export_hf() override {
    HfExport e;
    const bool task = !info.head.empty();
    e.architecture = std::string("ModernBert") + (info.head == "sequence_classification" ? "ForSequenceClassification"
                                                  : info.head == "token_classification" ? "ForTokenClassification"
                                                  : info.head == "question_answering"   ? "ForQuestionAnswering"
                                                  : info.head == "masked_lm"            ? "ForMaskedLM"
                                                                                         : "Model");
    std::vector<nn::ParamRef> base;
    nn::ParameterList list(task ? "model." : "", base);
    base_members(list);
    for (auto& r : base) e.tensors.emplace_back(r.name, r.param->contiguous());
    if (task) {
      std::vector<nn::ParamRef> own;
      nn::ParameterList heads("", own);
      head_members(heads);
      for (auto& r : own) e.tensors.emplace_back(r.name, r.param->contiguous());
    }
    return e;
  }

  std::vector<std::string> layer_linear_weight_names() override {
    std::vector<std::string> out;
    for (size_t i = 0; i < layers.size(); ++i)
      for (const char* name : {"attn.Wqkv", "attn.Wo", "mlp.Wi", "mlp.Wo"})
        out.push_back(checkpoint_prefix + "layers." + std::to_string(i) + "." + name + ".weight");
    return out;
  }

 protected:
  void members(nn::Members& m) override {
    base_members(m);
    head_members(m);
  }

 private:
  void add_head(const char* kind, int64_t num_labels, uint64_t seed) {
    ENCORE_CHECK(num_labels > 0, "add_", kind == std::string("token_classification") ? "token" : "sequence",
                 "_classifier: num_labels must be positive");
    const int64_t C = config.hidden;
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal(0.f, 0.02f);
    auto init = [&](int64_t out, bool bias) {
      nn::Linear l;
      l.weight = Tensor::empty({out, C});
      for (int64_t i = 0; i < out * C; ++i) l.weight.data<float>()[i] = normal(rng);
      if (bias) l.bias = Tensor::zeros({out});
      l.in_features = C;
      l.out_features = out;
      return l;
    };
    classifier = init(num_labels, true);
    decoder.reset();  // a classifier replaces a masked-LM head
    ModernBertPredictionHead h;
    h.dense = init(C, config.classifier_bias);
    h.act = act_of(config.classifier_activation);
    h.norm = nn::LayerNorm(C, config.norm_eps, true, config.norm_bias);
    h.norm.weight = Tensor::full({C}, 1.f);
    if (config.norm_bias) h.norm.bias = Tensor::zeros({C});
    head = std::move(h);
    head->train(training_);
    classifier->train(training_);
    info.head = kind;
    info.num_labels = num_labels;
  }
  struct Saved {
    uint64_t seed_embeddings = 0, seed_head = 0;
    LayerStackSaved<ModernBertEncoderLayer> stack;
    AttentionContext ctx;
    Tensor mask, last, features, head_pre, head_out;
    bool logits = false;
  };
  PoolingConfig classifier_pooling() const {
    PoolingConfig p;
    p.modes = {config.classifier_pooling};
    return p;
  }
  void base_members(nn::Members& m) {
    m.child("embeddings", embeddings);
    for (size_t i = 0; i < layers.size(); ++i) m.child("layers." + std::to_string(i), layers[i]);
    m.child("final_norm", final_norm);
  }
  void head_members(nn::Members& m) {
    if (head) m.child("head", *head);
    if (classifier) m.child("classifier", *classifier);
    if (decoder && !decoder_tied) m.child("decoder", *decoder);
    if (decoder && decoder_tied && decoder->bias.defined()) m.parameter("decoder.bias", decoder->bias, decoder->dbias);
  }
};

}  // namespace

std::unique_ptr<EncoderModel> load_modernbert(const HfConfig& cfg, const io::WeightStore& store) {
  auto m = std::make_unique<ModernBert>();
  const ModernBertConfig c = m->config = read_config(cfg);
  const int64_t C = c.hidden;
  m->checkpoint_prefix = detect_prefix(store, "model.", "embeddings.tok_embeddings.weight");
  Weights root(store, "");
  Weights w = root.sub(m->checkpoint_prefix);
  m->embeddings.tok_embeddings = nn::Embedding(w.take("embeddings.tok_embeddings.weight", {c.vocab, C}), c.pad_token_id);
  m->embeddings.norm = take_norm(w, "embeddings.norm", C, c.norm_eps, c.norm_bias);
  m->embeddings.dropout = c.embedding_dropout;
  m->classifier_dropout = c.classifier_dropout;
  for (int64_t i = 0; i < c.layers; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    ModernBertEncoderLayer l;
    if (i > 0) l.attn_norm = take_norm(w, p + "attn_norm", C, c.norm_eps, c.norm_bias);
    l.attn.Wqkv = take_linear(w, p + "attn.Wqkv", 3 * C, C, c.attention_bias);
    l.attn.Wo = take_linear(w, p + "attn.Wo", C, C, c.attention_bias);
    l.attn.heads = c.heads;
    l.attn.head_dim = c.head_dim;
    l.attn.global = c.global[i];
    l.attn.window = c.window;
    l.attn.dropout = c.attention_dropout;
    l.mlp_norm = take_norm(w, p + "mlp_norm", C, c.norm_eps, c.norm_bias);
    l.mlp.Wi = take_linear(w, p + "mlp.Wi", 2 * c.intermediate, C, c.mlp_bias);
    l.mlp.Wo = take_linear(w, p + "mlp.Wo", C, c.intermediate, c.mlp_bias);
    l.mlp.act = act_of(c.hidden_activation);
    l.mlp.dropout = c.mlp_dropout;
    m->layers.push_back(std::move(l));
  }
  m->final_norm = take_norm(w, "final_norm", C, c.norm_eps, c.norm_bias);

  ModelInfo& info = m->info;
  const bool seq = architecture_ends_with(cfg, "ForSequenceClassification");
  const bool tok = architecture_ends_with(cfg, "ForTokenClassification");
  const bool qa = architecture_ends_with(cfg, "ForQuestionAnswering");
  auto take_head = [&] {
    ModernBertPredictionHead h;
    h.dense = take_linear(root, "head.dense", C, C, c.classifier_bias);
    h.act = act_of(c.classifier_activation);
    h.norm = take_norm(root, "head.norm", C, c.norm_eps, c.norm_bias);
    m->head = std::move(h);
  };
  if ((seq || tok || qa) && root.has("classifier.weight")) {
    if (qa)  // ModernBertForQuestionAnswering: head, dropout, classifier (2 outputs: start, end) on every token
      read_question_answering_labels(cfg, info);
    else
      read_labels(cfg, info);
    info.head = seq ? "sequence_classification" : tok ? "token_classification" : "question_answering";
    take_head();
    m->classifier = take_linear(root, "classifier", info.num_labels, C, /*bias=*/true);
  } else if (architecture_ends_with(cfg, "ForMaskedLM") && root.has("head.dense.weight")) {
    info.head = "masked_lm";
    take_head();
    m->decoder_tied = read_bool(cfg, "tie_word_embeddings", true);
    nn::Linear d;
    if (!m->decoder_tied) d.weight = root.take("decoder.weight", {c.vocab, C});
    if (c.decoder_bias) d.bias = root.take("decoder.bias", {c.vocab});
    d.in_features = C;
    d.out_features = c.vocab;
    m->decoder = std::move(d);
  }
  w.finish();

  info.hidden_size = C;
  info.num_layers = c.layers;
  info.num_heads = c.heads;
  info.intermediate_size = c.intermediate;
  info.hidden_act = c.hidden_activation;
  info.vocab_size = c.vocab;
  info.max_position_embeddings = c.max_positions;
  info.pad_token_id = c.pad_token_id;
  for (auto& l : m->layers) info.num_parameters += l.num_parameters();  // the encoder layers' (as every family)
  return m;
}

}  // namespace encore::models
