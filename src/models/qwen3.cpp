// Qwen3 (model_type "qwen3": Qwen/Qwen3-Embedding-0.6B/-4B/-8B and the Qwen3 base models run as embedders), module
// for module as transformers' modeling_qwen3.py. The structs below are its modules and load from the checkpoint's
// names, so the prefix is the structure:
//   embed_tokens                                          Qwen3Model's token embeddings (no position embeddings:
//                                                         RoPE in the layers)
//   layers.N.input_layernorm, layers.N.self_attn.{q_proj,k_proj,v_proj,o_proj,q_norm,k_norm},
//   layers.N.post_attention_layernorm, layers.N.mlp.{gate_proj,up_proj,down_proj}
//   norm
//   score                                                 Qwen3ForSequenceClassification (last token) and
//                                                         Qwen3ForTokenClassification (every token) (base under "model.")
//   qa_outputs                                            Qwen3ForQuestionAnswering (2 outputs: start, end; base under
//                                                         "transformer.")
// One decoder layer (pre-norm, every norm an RMSNorm: x·rsqrt(mean(x²) + rms_norm_eps)·weight):
//   h   = x + o_proj(attention(rope(q_norm(q)), rope(k_norm(k)), v)),  q, k, v = q_proj, k_proj, v_proj of
//         input_layernorm(x), q in num_attention_heads heads of head_dim, k and v in num_key_value_heads (grouped-
//         query attention: query head h reads key/value head h / (heads / kv_heads)); q_norm/k_norm normalise each
//         head over head_dim before RoPE; attention is causal (key j <= query i) and masks padded keys
//   out = h + down_proj(act(gate_proj(y)) · up_proj(y)),  y = post_attention_layernorm(h)    (SwiGLU for silu)
// then the final norm. RoPE: Hugging Face's default rotary embedding (rotate_half) with base rope_theta over all
// head_dim dims, positions 0..T-1 of the padded batch as transformers gives them (position_ids = arange(T) whatever
// the padding side; a left-padded sequence's positions start at its pad count, which RoPE's relative form makes
// the same attention up to float rounding); the padding-free path restarts every sequence at 0.
// Inference runs q, k, v as one GEMM and gate, up as one (their weights stacked once by prepare_inference);
// training runs them separately on the checkpoint's tensors. Sliding-window layers (use_sliding_window /
// layer_types "sliding_attention") and RoPE scaling are refused at load.
#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "io/json_file.hpp"
#include "models/layer_stack.hpp"
#include "models/model.hpp"
#include "nn/common.hpp"
#include "ops/backward.hpp"
#include "ops/ops.hpp"

namespace encore::models {

namespace {

// ---------------- config.json ----------------

struct Qwen3Config {
  int64_t hidden = 0, layers = 0, heads = 0, kv_heads = 0, head_dim = 0, intermediate = 0, vocab = 0;
  int64_t max_positions = 0;
  std::optional<int64_t> pad_token_id;  // null in Qwen3's configs
  double eps = 1e-6, rope_theta = 10000.0, attention_dropout = 0.0;
  bool attention_bias = false;
  std::string hidden_act;  // encore's name
};

bool read_bool(const HfConfig& cfg, const char* key, bool fallback) {
  return io::JsonAt(cfg.json(), cfg.source()).get_or(key, fallback);
}

// rope_parameters.rope_theta (transformers 5 configs), else the older flat rope_theta (with rope_scaling null);
// only the default RoPE is implemented.
double read_rope_theta(const HfConfig& cfg) {
  ENCORE_CHECK_AS(ModelFormatError, !cfg.has("rope_scaling"), cfg.source(),
                  ": rope_scaling is not supported for qwen3 (default RoPE only)");
  if (cfg.has("rope_parameters")) {
    const io::JsonAt p(cfg.json()["rope_parameters"], cfg.source(), "/rope_parameters");
    p.expect_object();
    const std::string type = p.get_or("rope_type", "default");
    ENCORE_CHECK_AS(ModelFormatError, type == "default", cfg.source(), ": rope_parameters/rope_type '", type,
                    "' is not supported for qwen3 (default only)");
    if (p.has("rope_theta")) return p["rope_theta"].number(std::numeric_limits<double>::min());
  }
  const double theta = cfg.get_double("rope_theta", 10000.0);
  ENCORE_CHECK_AS(ModelFormatError, theta > 0, cfg.source(), ": rope_theta must be positive, got ", theta);
  return theta;
}

Qwen3Config read_config(const HfConfig& cfg) {
  Qwen3Config c;
  c.hidden = cfg.get_int("hidden_size", 4096, 1, 65536);
  c.layers = cfg.get_int("num_hidden_layers", 32, 1, 1000);
  c.heads = cfg.get_int("num_attention_heads", 32, 1, 4096);
  // transformers: absent means its default 32, null means num_attention_heads
  const bool kv_null = cfg.json().contains("num_key_value_heads") && cfg.json()["num_key_value_heads"].is_null();
  c.kv_heads = kv_null ? c.heads : cfg.get_int("num_key_value_heads", 32, 1, 4096);
  ENCORE_CHECK_AS(ModelFormatError, c.heads % c.kv_heads == 0, cfg.source(), ": num_attention_heads ", c.heads,
                  " is not a multiple of num_key_value_heads ", c.kv_heads);
  c.head_dim = cfg.get_int("head_dim", 128, 2, 4096);  // explicit (Qwen3-0.6B: 16 heads x 128 > hidden 1024)
  ENCORE_CHECK_AS(ModelFormatError, c.head_dim % 2 == 0, cfg.source(), ": head_dim ", c.head_dim,
                  " must be even for rotary embeddings");
  c.intermediate = cfg.get_int("intermediate_size", 22016, 1, 1 << 20);
  c.vocab = cfg.get_int("vocab_size", 151936, 1, 10'000'000);
  c.max_positions = cfg.get_int("max_position_embeddings", 32768, 1, 1 << 24);
  if (cfg.has("pad_token_id")) c.pad_token_id = cfg.get_int("pad_token_id", std::nullopt, 0, c.vocab - 1);
  c.eps = cfg.get_double("rms_norm_eps", 1e-6);
  ENCORE_CHECK_AS(ModelFormatError, c.eps >= 0, cfg.source(), ": rms_norm_eps must be >= 0, got ", c.eps);
  c.attention_bias = read_bool(cfg, "attention_bias", false);
  c.hidden_act = activation_from_hf(cfg.get_string("hidden_act", "silu"), cfg.source());
  c.attention_dropout = cfg.get_double("attention_dropout", 0.0);
  c.rope_theta = read_rope_theta(cfg);
  // Sliding-window attention (Qwen3's use_sliding_window, off in every released Qwen3 and Qwen3-Embedding) is not
  // implemented: refused rather than run as full attention.
  ENCORE_CHECK_AS(ModelFormatError, !read_bool(cfg, "use_sliding_window", false), cfg.source(),
                  ": use_sliding_window is not supported for qwen3 (full causal attention only)");
  if (cfg.has("layer_types")) {
    const io::JsonAt types(cfg.json()["layer_types"], cfg.source(), "/layer_types");
    ENCORE_CHECK_AS(ModelFormatError, static_cast<int64_t>(types.size()) == c.layers, cfg.source(),
                    ": layer_types has ", types.size(), " entries for num_hidden_layers ", c.layers);
    for (int64_t i = 0; i < c.layers; ++i) {
      const std::string t = types.at(i).str();
      ENCORE_CHECK_AS(ModelFormatError, t == "full_attention", cfg.source(), ": layer_types[", i, "] '", t,
                      "' is not supported for qwen3 (full_attention only)");
    }
  }
  return c;
}

nn::Linear take_linear(Weights& w, const std::string& name, int64_t out, int64_t in, bool bias) {
  nn::Linear l;
  l.weight = w.take(name + ".weight", {out, in});
  if (bias) l.bias = w.take(name + ".bias", {out});
  l.in_features = in;
  l.out_features = out;
  return l;
}

nn::RMSNorm take_norm(Weights& w, const std::string& name, int64_t C, double eps) {
  nn::RMSNorm n(C, eps);
  n.weight = w.take(name + ".weight", {C});
  return n;
}

// A Linear's parameters under name.weight / name.bias without making it a child module: the inference forward
// reads the stacked copy its owner prepares instead, so the Linear itself is never prepared.
void linear_parameters(nn::Members& m, const std::string& name, nn::Linear& l) {
  m.parameter(name + ".weight", l.weight, l.dweight);
  m.parameter(name + ".bias", l.bias, l.dbias);
}

// Linears sharing an input as one prepared GEMM: their weights (and biases) stacked by rows.
std::shared_ptr<const kernels::PackedLinear> stack_linears(const std::vector<const nn::Linear*>& parts, DType dtype) {
  std::vector<Tensor> weights, biases;
  for (const nn::Linear* l : parts) {
    weights.push_back(l->weight);
    if (l->bias.defined()) biases.push_back(l->bias);
  }
  const Tensor w = cat_rows(weights);
  const Tensor b = biases.empty() ? Tensor() : cat_rows(biases);
  return kernels::PackedLinear::create(w.data<float>(), b.defined() ? b.data<float>() : nullptr, w.size(0), w.size(1),
                                       nn::detail::precision_of(dtype));
}

// [a | b] (..., Fa + Fb) from a (..., Fa) and b (..., Fb).
Tensor cat_last(const Tensor& a, const Tensor& b) {
  Shape s = a.shape();
  const int64_t Fa = a.size(-1), Fb = b.size(-1);
  s.back() = Fa + Fb;
  Tensor out = Tensor::empty(s);
  const int64_t d = a.dim() - 1;
  out.slice(d, 0, Fa).copy_from(a);
  out.slice(d, Fa, Fa + Fb).copy_from(b);
  return out;
}

// What every layer's attention needs besides its input: the padding (a key mask, or the sequences' rows of a
// padding-free batch) and the rotary tables, (T, head_dim/2) or per token (1, N, head_dim/2).
struct AttentionContext {
  Tensor key_padding;                                  // (B, T) additive, or undefined
  const std::vector<int64_t>* cu_seqlens = nullptr;   // padding-free: x is (1, N, C), sequence b in rows cu[b]..cu[b+1]
  Tensor cos, sin;
  ops::AttentionMasks masks() const {
    ops::AttentionMasks m;
    m.causal = true;
    if (cu_seqlens)
      m.cu_seqlens = *cu_seqlens;
    else
      m.key_padding_mask = key_padding;
    return m;
  }
};

// ---------------- modules ----------------

struct Qwen3Attention : nn::Module {
  nn::Linear q_proj, k_proj, v_proj, o_proj;
  nn::RMSNorm q_norm, k_norm;  // over head_dim, per head, before RoPE
  int64_t heads = 0, kv_heads = 0, head_dim = 0;
  double dropout = 0.0;  // attention_dropout on the probabilities (training)
  std::shared_ptr<const kernels::PackedLinear> qkv;  // inference: [q_proj; k_proj; v_proj] as one GEMM

  // rope(norm(x viewed as (B, T, n, head_dim))) as (B, T, n·head_dim); the norm saves its input in training.
  Tensor norm_rotate(const nn::RMSNorm& norm, const Tensor& x, int64_t n, const AttentionContext& ctx) const {
    const int64_t B = x.size(0), T = x.size(1);
    return ops::rotary_forward(norm.apply(x.contiguous().view({B, T, n, head_dim})), ctx.cos, ctx.sin)
        .view({B, T, n * head_dim});
  }

  // x (B, T, C), or (1, N, C) with ctx.cu_seqlens; weights, when non-null, receives (B, heads, T, T).
  Tensor forward(const Tensor& x, const AttentionContext& ctx, Tensor* weights) const {
    const int64_t Q = heads * head_dim, K = kv_heads * head_dim;
    Tensor q, k, v;
    if (qkv) {
      const Tensor all = ops::linear_forward(x, *qkv);  // (B, T, Q + 2K) = [q | k | v]
      q = all.slice(2, 0, Q);
      k = all.slice(2, Q, Q + K);
      v = all.slice(2, Q + K, Q + 2 * K);
    } else {
      q = ops::linear_forward(x, q_proj.weight, q_proj.bias);
      k = ops::linear_forward(x, k_proj.weight, k_proj.bias);
      v = ops::linear_forward(x, v_proj.weight, v_proj.bias);
    }
    const Tensor out = ops::attention_forward(norm_rotate(q_norm, q, heads, ctx), norm_rotate(k_norm, k, kv_heads, ctx),
                                              v, heads, ctx.masks(), weights, 0.0, false, 0);
    return nn::detail::linear(o_proj, out, false);
  }

  struct Saved {
    Tensor x, q, k, v, probs, attn;  // the projections' input, rotated q and k, v, probabilities, o_proj's input
    uint64_t seed = 0;
  };
  // Training (padded batch x (B, T, C)): o_proj(dropout(softmax(q·kᵀ/√d + masks))·v), saving sv.
  Tensor forward_train(Saved& sv, const Tensor& x, const AttentionContext& ctx) const {
    sv.x = x;
    sv.q = norm_rotate(q_norm, ops::linear_forward(x, q_proj.weight, q_proj.bias), heads, ctx);
    sv.k = norm_rotate(k_norm, ops::linear_forward(x, k_proj.weight, k_proj.bias), kv_heads, ctx);
    sv.v = ops::linear_forward(x, v_proj.weight, v_proj.bias);
    sv.seed = nn::detail::next_seed();
    sv.attn = ops::attention_forward_train(&sv.probs, sv.q, sv.k, sv.v, heads, ctx.masks(), dropout, true, sv.seed);
    return ops::linear_forward(sv.attn, o_proj.weight, o_proj.bias);
  }
  // The gradient of x; accumulates every projection's and norm's.
  Tensor backward(const Saved& sv, const Tensor& dout, const AttentionContext& ctx) {
    const int64_t B = sv.x.size(0), T = sv.x.size(1);
    // in the forward pass this was:  out = attn·o_projᵀ + b
    const Tensor dattn = nn::detail::linear_backward(o_proj, dout, sv.attn);
    Tensor dq, dk, dv;
    ops::attention_backward(&dq, &dk, &dv, nullptr, dattn, sv.probs, sv.q, sv.k, sv.v, heads, dropout, true, sv.seed);
    // in the forward pass this was:  q = rope(q_norm(q_proj(x))) per head (k alike with kv_heads)
    auto unrotate = [&](nn::RMSNorm& norm, const Tensor& d, int64_t n) {
      Tensor dn;
      ops::rotary_backward(&dn, d.view({B, T, n, head_dim}), ctx.cos, ctx.sin);
      return norm.backward(dn).view({B, T, n * head_dim});
    };
    const Tensor dk_proj = unrotate(k_norm, dk, kv_heads);
    const Tensor dq_proj = unrotate(q_norm, dq, heads);
    Tensor dx = nn::detail::linear_backward(q_proj, dq_proj, sv.x);
    ops::add_forward_(dx, nn::detail::linear_backward(k_proj, dk_proj, sv.x));
    ops::add_forward_(dx, nn::detail::linear_backward(v_proj, dv, sv.x));
    return dx;
  }

 protected:
  void members(nn::Members& m) override {
    linear_parameters(m, "q_proj", q_proj);
    linear_parameters(m, "k_proj", k_proj);
    linear_parameters(m, "v_proj", v_proj);
    m.children({{"o_proj", o_proj}, {"q_norm", q_norm}, {"k_norm", k_norm}});
  }
  void prepare_own(DType dtype) override { qkv = stack_linears({&q_proj, &k_proj, &v_proj}, dtype); }
  void drop_own() override { qkv.reset(); }
};

struct Qwen3MLP : nn::Module {
  nn::Linear gate_proj, up_proj, down_proj;
  kernels::Act act = kernels::Act::silu;
  std::shared_ptr<const kernels::PackedLinear> gate_up;  // inference: [gate_proj; up_proj] as one GEMM

  // down_proj(act(gate_proj(x)) · up_proj(x))
  Tensor forward(const Tensor& x) const {
    const Tensor gu = gate_up ? ops::linear_forward(x, *gate_up)
                              : cat_last(ops::linear_forward(x, gate_proj.weight, gate_proj.bias),
                                         ops::linear_forward(x, up_proj.weight, up_proj.bias));
    return nn::detail::linear(down_proj, ops::gated_forward(gu, act, kernels::Gate::first), false);
  }

  struct Saved {
    Tensor x, gu, hidden;  // the input, [gate | up], down_proj's input
  };
  Tensor forward_train(Saved& sv, const Tensor& x) const {
    sv.x = x;
    sv.gu = cat_last(ops::linear_forward(x, gate_proj.weight, gate_proj.bias),
                     ops::linear_forward(x, up_proj.weight, up_proj.bias));
    sv.hidden = ops::gated_forward(sv.gu, act, kernels::Gate::first);
    return ops::linear_forward(sv.hidden, down_proj.weight, down_proj.bias);
  }
  Tensor backward(const Saved& sv, const Tensor& dout) {
    // in the forward pass this was:  out = down_proj(act(g)·u), [g | u] = [gate_proj(x) | up_proj(x)]
    const Tensor dhidden = nn::detail::linear_backward(down_proj, dout, sv.hidden);
    Tensor dgu;
    ops::gated_backward(&dgu, dhidden, sv.gu, act, kernels::Gate::first);
    const int64_t F = gate_proj.out_features;
    Tensor dx = nn::detail::linear_backward(gate_proj, dgu.slice(-1, 0, F).contiguous(), sv.x);
    ops::add_forward_(dx, nn::detail::linear_backward(up_proj, dgu.slice(-1, F, 2 * F).contiguous(), sv.x));
    return dx;
  }

 protected:
  void members(nn::Members& m) override {
    linear_parameters(m, "gate_proj", gate_proj);
    linear_parameters(m, "up_proj", up_proj);
    m.child("down_proj", down_proj);
  }
  void prepare_own(DType dtype) override { gate_up = stack_linears({&gate_proj, &up_proj}, dtype); }
  void drop_own() override { gate_up.reset(); }
};

struct Qwen3DecoderLayer : nn::Module, nn::AnnouncedLayer {  // layer_stack_backward announces it
  nn::RMSNorm input_layernorm, post_attention_layernorm;
  Qwen3Attention self_attn;
  Qwen3MLP mlp;

  Tensor forward(const Tensor& x, const AttentionContext& ctx, Tensor* weights) const {
    Tensor h = self_attn.forward(input_layernorm.apply(x), ctx, weights);
    ops::add_forward_(h, x);  // h = x + self_attn(input_layernorm(x))
    Tensor out = mlp.forward(post_attention_layernorm.apply(h));
    ops::add_forward_(out, h);  // out = h + mlp(post_attention_layernorm(h))
    return out;
  }

  struct Saved {
    Qwen3Attention::Saved attn;
    Qwen3MLP::Saved mlp;
  };
  // The norms save their inputs on their own stacks (one use per forward).
  Tensor forward_train(Saved& sv, const Tensor& x, const AttentionContext& ctx) const {
    Tensor h = self_attn.forward_train(sv.attn, input_layernorm.apply(x), ctx);
    ops::add_forward_(h, x);
    Tensor out = mlp.forward_train(sv.mlp, post_attention_layernorm.apply(h));
    ops::add_forward_(out, h);
    return out;
  }
  Tensor backward(const Saved& sv, const Tensor& dout, const AttentionContext& ctx) {
    // in the forward pass this was:  out = h + mlp(post_attention_layernorm(h))
    Tensor dh = post_attention_layernorm.backward(mlp.backward(sv.mlp, dout));
    ops::add_forward_(dh, dout);
    // in the forward pass this was:  h = x + self_attn(input_layernorm(x))
    Tensor dx = input_layernorm.backward(self_attn.backward(sv.attn, dh, ctx));
    ops::add_forward_(dx, dh);
    return dx;
  }

 protected:
  void members(nn::Members& m) override {
    m.children({{"self_attn", self_attn}, {"mlp", mlp}, {"input_layernorm", input_layernorm},
                {"post_attention_layernorm", post_attention_layernorm}});
  }
};

// ---------------- the model ----------------

class Qwen3 : public EncoderModel {
 public:
  Qwen3Config config;
  nn::Embedding embed_tokens;
  std::vector<Qwen3DecoderLayer> layers;
  nn::RMSNorm norm;
  // Qwen3ForSequenceClassification: logits = score(last_hidden_state) at each sequence's last token whose id is not
  // pad_token_id (transformers' rule, for either padding side); without a pad_token_id, at the attention mask's
  // last token.
  // Qwen3ForTokenClassification: logits = score(dropout(last_hidden_state)) on every token; Qwen3ForQuestionAnswering:
  // qa_outputs(last_hidden_state) on every token, (B, T, 2) = start, end.
  std::optional<nn::Linear> score;
  std::string head_name = "score";       // the head Linear's checkpoint name: score or qa_outputs
  double classifier_dropout = 0.0;       // token classification, training only
  std::string checkpoint_prefix;         // "" (Qwen3Model), "model." or "transformer." (a task model's checkpoint)
  std::string task_prefix = "model.";    // the base model's prefix in this task's checkpoints (export)

  ModelOutput forward(const Tensor& ids, const Tensor& mask, const Tensor& types,
                      const ForwardOptions& opt) const override {
    auto [B, T] = check_inputs(ids, mask, types);  // token_type_ids: Qwen3 has none; ignored
    ENCORE_CHECK(T <= config.max_positions, "input length ", T, " exceeds max_position_embeddings ",
                 config.max_positions);
    if (training_) clear_saved();
    auto sv = training_ ? std::make_shared<Saved>() : nullptr;
    ModelOutput out;
    Tensor x = embed_tokens.apply(ids, "input_ids");
    const Tensor kpm = key_padding_from_attention_mask(mask, B, T);
    const std::optional<PackedBatch> packed =
        opt.output_attentions ? std::nullopt : PackedBatch::plan(kpm, opt, training_);
    AttentionContext ctx;
    Tensor positions;
    if (packed) {  // every sequence's positions restart at 0
      x = packed->gather(x);
      ctx.cu_seqlens = &packed->cu_seqlens;
      positions = Tensor::empty({1, packed->cu_seqlens.back()}, DType::i64);
      for (size_t b = 0; b + 1 < packed->cu_seqlens.size(); ++b)
        for (int64_t r = packed->cu_seqlens[b]; r < packed->cu_seqlens[b + 1]; ++r)
          positions.data<int64_t>()[r] = r - packed->cu_seqlens[b];
    } else {  // transformers' default position_ids: arange(T) for every row
      ctx.key_padding = kpm;
      positions = Tensor::empty({T}, DType::i64);
      for (int64_t t = 0; t < T; ++t) positions.data<int64_t>()[t] = t;
    }
    ctx.cos = ops::rotary_cos_sin(positions, config.head_dim, config.rope_theta, &ctx.sin);

    x = run_layer_stack(layers, x, ctx, StackRecorder{opt, packed ? &*packed : nullptr, out},
                        sv ? &sv->stack : nullptr, gradient_checkpointing);
    x = norm.apply(x);
    out.last_hidden_state = packed ? packed->scatter(x) : x;
    if (opt.output_hidden_states) out.hidden_states.back() = out.last_hidden_state;  // transformers' last entry
    if (score && opt.compute_logits && info.head != "sequence_classification") {  // every token
      Tensor features = out.last_hidden_state;
      if (sv) {
        sv->seed_head = nn::detail::next_seed();
        features = ops::dropout_forward(features, classifier_dropout, true, sv->seed_head);
        sv->features = features;
        sv->logits = true;
      }
      out.logits = ops::linear_forward(features.contiguous(), score->weight, score->bias);
    } else if (score && opt.compute_logits) {
      const std::vector<int64_t> last = last_tokens(ids, mask);
      const int64_t C = config.hidden;
      Tensor features = Tensor::empty({B, C});
      for (int64_t b = 0; b < B; ++b)
        features.select(0, b).copy_from(out.last_hidden_state.select(0, b).select(0, last[b]));
      out.logits = ops::linear_forward(features, score->weight, score->bias);
      if (sv) {
        sv->features = features;
        sv->last_tokens = last;
        sv->logits = true;
      }
    }
    if (sv) {
      sv->ctx = std::move(ctx);
      sv->ctx.cu_seqlens = nullptr;  // training never packs
      sv->last = out.last_hidden_state;
      push_saved(sv);
    }
    return out;
  }

  void backward(const Tensor& d_last, const Tensor& d_pooler, const Tensor& d_logits) override {
    auto sv = pop_saved<Saved>("qwen3");
    ENCORE_CHECK(!d_pooler.defined(), "backward: d_pooler given but qwen3 has no pooler");
    const Tensor& last = sv->last;
    Tensor dlast = d_last.defined() ? d_last.contiguous().clone() : Tensor::zeros(last.shape());
    check_shape(dlast, "d_last_hidden_state", last.shape());
    if (d_logits.defined()) {
      ENCORE_CHECK(score && sv->logits, "backward: d_logits given but no logits were computed");
      // in the forward pass this was:  logits = score(last_hidden_state[b, last_tokens[b]]), or on every token
      // score(dropout(last_hidden_state)) (token classification; question answering without dropout)
      const Tensor dfeatures = nn::detail::linear_backward(*score, d_logits, sv->features);
      if (info.head != "sequence_classification") {
        Tensor d;
        ops::dropout_backward(&d, dfeatures, classifier_dropout, true, sv->seed_head);
        ops::add_forward_(dlast, d);
      }
      for (size_t b = 0; b < sv->last_tokens.size(); ++b) {
        Tensor row = dlast.select(0, static_cast<int64_t>(b)).select(0, sv->last_tokens[b]);
        row.copy_from(ops::add_forward(row.contiguous(), dfeatures.select(0, static_cast<int64_t>(b)).contiguous()));
      }
    }
    Tensor d = norm.backward(dlast);
    d = layer_stack_backward(sv->stack, layers, d, sv->ctx);
    embed_tokens.backward(d);
  }

  // A new Qwen3ForSequenceClassification score (Linear(hidden, num_labels), no bias) initialised as transformers
  // does: normal(0, 0.02) weights drawn from mt19937_64(seed).
  void add_sequence_classifier(int64_t num_labels, uint64_t seed) override {
    ENCORE_CHECK(num_labels > 0, "add_sequence_classifier: num_labels must be positive");
    const int64_t C = config.hidden;
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal(0.f, 0.02f);
    nn::Linear l;
    l.weight = Tensor::empty({num_labels, C});
    for (int64_t i = 0; i < num_labels * C; ++i) l.weight.data<float>()[i] = normal(rng);
    l.in_features = C;
    l.out_features = num_labels;
    l.train(training_);
    score = std::move(l);
    head_name = "score";
    task_prefix = "model.";
    info.head = "sequence_classification";
    info.num_labels = num_labels;
  }
  void set_dropout(double p) override {
    if (info.head == "token_classification") classifier_dropout = p;
    for (auto& l : layers) l.self_attn.dropout = p;
  }
  void for_each_layer(const std::function<void(nn::TransformerEncoderLayer&)>&) override {}
  void prepare_inference_weights(DType dtype) override {  // layers in parallel, as EncoderModel's (model.cpp)
    prepare_layers_in_parallel(layers, [&](auto& layer) { layer.prepare_inference(dtype); });
  }

  HfExport export_hf() override {
    HfExport e;
    const bool task = score.has_value();
    e.architecture = std::string("Qwen3") + (info.head == "sequence_classification" ? "ForSequenceClassification"
                                             : info.head == "token_classification"  ? "ForTokenClassification"
                                             : info.head == "question_answering"    ? "ForQuestionAnswering"
                                                                                    : "Model");
    std::vector<nn::ParamRef> base;
    nn::ParameterList list(task ? task_prefix : "", base);
    base_members(list);
    for (auto& r : base) e.tensors.emplace_back(r.name, r.param->contiguous());
    if (task) {
      e.tensors.emplace_back(head_name + ".weight", score->weight.contiguous());
      if (score->bias.defined()) e.tensors.emplace_back(head_name + ".bias", score->bias.contiguous());
    }
    return e;
  }

  std::vector<std::string> layer_linear_weight_names() override {
    std::vector<std::string> out;
    for (size_t i = 0; i < layers.size(); ++i)
      for (const char* name : {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                               "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"})
        out.push_back(checkpoint_prefix + "layers." + std::to_string(i) + "." + name + ".weight");
    return out;
  }

 protected:
  void members(nn::Members& m) override {
    base_members(m);
    if (score) m.child(head_name, *score);
  }

 private:
  struct Saved {
    LayerStackSaved<Qwen3DecoderLayer> stack;
    AttentionContext ctx;
    Tensor last, features;  // features: the head's input (after dropout for token classification)
    uint64_t seed_head = 0;
    std::vector<int64_t> last_tokens;
    bool logits = false;
  };
  // Per sequence, the position the score reads: the last whose id is not pad_token_id (0 when every id is;
  // transformers' argmax of position·(id != pad)), or without a pad_token_id the attention mask's last 1.
  std::vector<int64_t> last_tokens(const Tensor& ids, const Tensor& mask) const {
    const int64_t B = ids.size(0), T = ids.size(1);
    const Tensor id = ids.contiguous();
    const Tensor m = mask.defined() ? mask.contiguous() : Tensor();
    std::vector<int64_t> last(B, 0);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t) {
        const bool real = config.pad_token_id ? id.data<int64_t>()[b * T + t] != *config.pad_token_id
                                              : !m.defined() || m.data<int64_t>()[b * T + t] != 0;
        if (real) last[b] = t;
      }
    return last;
  }
  void base_members(nn::Members& m) {
    m.child("embed_tokens", embed_tokens);
    for (size_t i = 0; i < layers.size(); ++i) m.child("layers." + std::to_string(i), layers[i]);
    m.child("norm", norm);
  }
};

}  // namespace

std::unique_ptr<EncoderModel> load_qwen3(const HfConfig& cfg, const io::WeightStore& store) {
  auto m = std::make_unique<Qwen3>();
  const Qwen3Config c = m->config = read_config(cfg);
  const int64_t C = c.hidden, Q = c.heads * c.head_dim, K = c.kv_heads * c.head_dim;
  const bool qa = architecture_ends_with(cfg, "ForQuestionAnswering");  // transformers' base prefix there: transformer.
  m->task_prefix = qa ? "transformer." : "model.";
  m->checkpoint_prefix = detect_prefix(store, m->task_prefix, "embed_tokens.weight");
  Weights root(store, "");
  Weights w = root.sub(m->checkpoint_prefix);
  m->embed_tokens = nn::Embedding(w.take("embed_tokens.weight", {c.vocab, C}), c.pad_token_id);
  const kernels::Act act = nn::detail::pointwise_act(nn::parse_activation(c.hidden_act));
  for (int64_t i = 0; i < c.layers; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    Qwen3DecoderLayer l;
    l.input_layernorm = take_norm(w, p + "input_layernorm", C, c.eps);
    Qwen3Attention& a = l.self_attn;
    a.q_proj = take_linear(w, p + "self_attn.q_proj", Q, C, c.attention_bias);
    a.k_proj = take_linear(w, p + "self_attn.k_proj", K, C, c.attention_bias);
    a.v_proj = take_linear(w, p + "self_attn.v_proj", K, C, c.attention_bias);
    a.o_proj = take_linear(w, p + "self_attn.o_proj", C, Q, c.attention_bias);
    a.q_norm = take_norm(w, p + "self_attn.q_norm", c.head_dim, c.eps);
    a.k_norm = take_norm(w, p + "self_attn.k_norm", c.head_dim, c.eps);
    a.heads = c.heads;
    a.kv_heads = c.kv_heads;
    a.head_dim = c.head_dim;
    a.dropout = c.attention_dropout;
    l.post_attention_layernorm = take_norm(w, p + "post_attention_layernorm", C, c.eps);
    l.mlp.gate_proj = take_linear(w, p + "mlp.gate_proj", c.intermediate, C, false);
    l.mlp.up_proj = take_linear(w, p + "mlp.up_proj", c.intermediate, C, false);
    l.mlp.down_proj = take_linear(w, p + "mlp.down_proj", C, c.intermediate, false);
    l.mlp.act = act;
    m->layers.push_back(std::move(l));
  }
  m->norm = take_norm(w, "norm", C, c.eps);

  ModelInfo& info = m->info;
  if (architecture_ends_with(cfg, "ForSequenceClassification") && root.has("score.weight")) {
    read_labels(cfg, info);
    info.head = "sequence_classification";
    m->score = take_linear(root, "score", info.num_labels, C, /*bias=*/false);
  } else if (architecture_ends_with(cfg, "ForTokenClassification") && root.has("score.weight")) {
    read_labels(cfg, info);
    info.head = "token_classification";
    m->score = take_linear(root, "score", info.num_labels, C, read_bool(cfg, "token_classification_bias", true));
    // transformers' GenericForTokenClassification: classifier_dropout, else hidden_dropout, else 0.1
    m->classifier_dropout = cfg.has("classifier_dropout") ? cfg.get_double("classifier_dropout")
                            : cfg.has("hidden_dropout")   ? cfg.get_double("hidden_dropout")
                                                          : 0.1;
  } else if (qa && root.has("qa_outputs.weight")) {
    read_question_answering_labels(cfg, info);
    info.head = "question_answering";
    m->head_name = "qa_outputs";
    m->score = take_linear(root, "qa_outputs", info.num_labels, C, /*bias=*/true);
  }
  w.finish();

  info.hidden_size = C;
  info.num_layers = c.layers;
  info.num_heads = c.heads;
  info.intermediate_size = c.intermediate;
  info.hidden_act = c.hidden_act;
  info.vocab_size = c.vocab;
  info.max_position_embeddings = c.max_positions;
  info.pad_token_id = c.pad_token_id.value_or(0);
  for (auto& l : m->layers) info.num_parameters += l.num_parameters();  // the decoder layers' (as every family)
  return m;
}

}  // namespace encore::models
