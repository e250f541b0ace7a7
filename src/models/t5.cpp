// T5 encoder (model_type "t5": T5EncoderModel, and the encoder of a T5Model / T5ForConditionalGeneration / mT5 /
// T5 v1.1 checkpoint, whose decoder.* and lm_head tensors are ignored), module for module as transformers'
// modeling_t5.py. The structs below are its modules and load from the checkpoint's names:
//   shared                                                   the token embedding (T5Stack.embed_tokens is tied to it)
//   encoder.block.N.layer.0.SelfAttention.{q,k,v,o}          T5Attention: no biases, scores NOT scaled (scale 1)
//   encoder.block.0.layer.0.SelfAttention.relative_attention_bias   (num_buckets, heads): block 0 only
//   encoder.block.N.layer.0.layer_norm                       T5LayerNorm = RMSNorm (no mean, no bias)
//   encoder.block.N.layer.1.DenseReluDense.{wi, wo}          relu / any act    (feed_forward_proj "relu", "gelu", ...)
//   encoder.block.N.layer.1.DenseReluDense.{wi_0, wi_1, wo}  act(wi_0 x)·wi_1 x ("gated-gelu" = gelu_new, "gated-silu")
//   encoder.block.N.layer.1.layer_norm
//   encoder.final_layer_norm
// (task checkpoints put all of it under "transformer.").
// The model (pre-norm; dropout_rate at every site transformers has):
//   x   = dropout(shared[ids])
//   bias[h, i, j] = relative_attention_bias[bucket(j - i), h]      computed once, added in every block (H, T, T)
//   h   = x + dropout(o(attention(q(n), k(n), v(n), scale 1, bias + key padding))),  n = layer_norm(x)
//   out = h + dropout(DenseReluDense(layer_norm(h)))
//   last_hidden_state = dropout(final_layer_norm(out of the last block))
// q, k, v are (heads · d_kv) wide, which need not be d_model (T5 v1.1 / mT5 configs). hidden_states are the
// embeddings, then each block's output, the last one after final_layer_norm (as transformers returns them).
// Training: forward_train saves what each module's backward needs; the bias's gradient is the sum over blocks of
// attention's dScores (attention_backward's d_attn_mask, accumulated into one (H, T, T) buffer), scattered into
// relative_attention_bias by bucket (ops::relative_position_bias_backward).
#include <cmath>
#include <limits>
#include <set>

#include "models/layer_stack.hpp"
#include "models/model.hpp"
#include "nn/common.hpp"
#include "ops/backward.hpp"
#include "ops/ops.hpp"

namespace encore::models {

namespace {

// ---------------- config.json ----------------

struct T5Config {
  int64_t d_model = 512, d_kv = 64, d_ff = 2048, layers = 6, heads = 8, vocab = 32128;
  int64_t num_buckets = 32, max_distance = 128, max_positions = 512, pad_token_id = 0;
  double eps = 1e-6, dropout = 0.1;
  bool gated = false;
  kernels::Act act = kernels::Act::relu;
  std::string act_name;  // encore's name (ModelInfo::hidden_act)
};

T5Config read_config(const HfConfig& cfg) {
  T5Config c;
  c.d_model = cfg.get_int("d_model", 512, 1, 65536);
  c.d_kv = cfg.get_int("d_kv", 64, 1, 65536);
  c.d_ff = cfg.get_int("d_ff", 2048, 1, 1 << 20);
  c.layers = cfg.get_int("num_layers", 6, 1, 1000);
  c.heads = cfg.get_int("num_heads", 8, 1, 4096);
  c.vocab = cfg.get_int("vocab_size", 32128, 1, 10'000'000);
  c.num_buckets = cfg.get_int("relative_attention_num_buckets", 32, 4, 1 << 20);
  c.max_distance = cfg.get_int("relative_attention_max_distance", 128, 1, 1 << 30);
  // the log-spaced buckets start at num_buckets/4 (bidirectional) and need a larger max_distance to be defined
  ENCORE_CHECK_AS(ModelFormatError, c.max_distance > c.num_buckets / 4, cfg.source(),
                  ": relative_attention_max_distance ", c.max_distance,
                  " must exceed relative_attention_num_buckets/4 = ", c.num_buckets / 4);
  c.max_positions = cfg.get_int("n_positions", 512, 1, 1 << 24);  // not a model limit (relative positions): a default
  c.pad_token_id = cfg.get_int("pad_token_id", 0, 0, 10'000'000);
  c.eps = cfg.get_double("layer_norm_epsilon", 1e-6);
  c.dropout = cfg.get_double("dropout_rate", 0.1);
  ENCORE_CHECK_AS(ModelFormatError, c.dropout >= 0 && c.dropout < 1, cfg.source(), ": dropout_rate must be in [0, 1)");
  ENCORE_CHECK_AS(ModelFormatError, !cfg.has("is_decoder") || !cfg.json()["is_decoder"].is_boolean() ||
                                        !cfg.json()["is_decoder"].get<bool>(),
                  cfg.source(), ": is_decoder is true: a T5 decoder stack is not an encoder encore runs");
  // feed_forward_proj: "{act}" or "gated-{act}" (transformers' T5Config); "gated-gelu" means gelu_new (tanh)
  const std::string proj = cfg.get_string("feed_forward_proj", "relu");
  std::string act = proj;
  if (proj.rfind("gated-", 0) == 0) {
    c.gated = true;
    act = proj.substr(6);
  }
  ENCORE_CHECK_AS(ModelFormatError, !act.empty() && act.find('-') == std::string::npos, cfg.source(),
                  ": feed_forward_proj '", proj, "' is not '{ACT}' or 'gated-{ACT}'");
  if (proj == "gated-gelu") act = "gelu_new";
  try {
    c.act_name = activation_from_hf(act, cfg.source());
  } catch (const Error&) {
    ENCORE_CHECK_AS(ModelFormatError, false, cfg.source(), ": feed_forward_proj '", proj, "': activation '", act,
                    "' is not supported (relu, gelu, gelu_new, silu, each optionally 'gated-')");
  }
  c.act = nn::detail::pointwise_act(nn::parse_activation(c.act_name));
  return c;
}

nn::Linear take_linear_no_bias(Weights& w, const std::string& name, int64_t out, int64_t in) {
  nn::Linear l;
  l.weight = w.take(name + ".weight", {out, in});
  l.in_features = in;
  l.out_features = out;
  return l;
}

nn::RMSNorm take_norm(Weights& w, const std::string& name, int64_t C, double eps) {
  nn::RMSNorm n(C, eps);
  n.weight = w.take(name + ".weight", {C});
  return n;
}

// What every block's attention needs besides its input: the padding (a key mask, or the sequences' rows of a
// padding-free batch) and the relative position bias (H, T, T) ((H, P, P), P the longest sequence, when packed).
struct AttentionContext {
  Tensor key_padding;                                // (B, T) additive, or undefined
  const std::vector<int64_t>* cu_seqlens = nullptr;  // padding-free: x is (1, N, C)
  Tensor bias;                                       // (H, T, T)
  Tensor* dbias = nullptr;                           // training backward: Σ over blocks of d(bias)
};

// ---------------- modules ----------------

struct T5Attention : nn::Module {
  nn::Linear q, k, v, o;
  std::optional<nn::Embedding> relative_attention_bias;  // block 0 only (num_buckets, heads)
  int64_t heads = 0;
  double dropout = 0.0;  // on the probabilities (training)

  // x (B, T, C) or (1, N, C) with ctx.cu_seqlens; weights, when non-null, receives (B, heads, T, T).
  Tensor forward(const Tensor& x, const AttentionContext& ctx, Tensor* weights) const {
    const Tensor qh = nn::detail::linear(q, x, false), kh = nn::detail::linear(k, x, false),
                 vh = nn::detail::linear(v, x, false);
    ops::AttentionMasks masks;
    masks.attn_mask = ctx.bias;
    if (ctx.cu_seqlens)
      masks.cu_seqlens = *ctx.cu_seqlens;
    else
      masks.key_padding_mask = ctx.key_padding;
    const Tensor out = ops::attention_forward(qh, kh, vh, heads, masks, weights, 0.0, false, 0, /*scale=*/1.0);
    return nn::detail::linear(o, out, false);
  }

  struct Saved {
    Tensor x, q, k, v, probs, attn;  // the projections' input and outputs, probabilities, o's input
    uint64_t seed = 0;
  };
  Tensor forward_train(Saved& sv, const Tensor& x, const AttentionContext& ctx) const {
    sv.x = x;
    sv.q = ops::linear_forward(x, q.weight, q.bias);
    sv.k = ops::linear_forward(x, k.weight, k.bias);
    sv.v = ops::linear_forward(x, v.weight, v.bias);
    ops::AttentionMasks masks;
    masks.attn_mask = ctx.bias;
    masks.key_padding_mask = ctx.key_padding;
    sv.seed = nn::detail::next_seed();
    sv.attn = ops::attention_forward_train(&sv.probs, sv.q, sv.k, sv.v, heads, masks, dropout, true, sv.seed, 1.0);
    return ops::linear_forward(sv.attn, o.weight, o.bias);
  }
  // The gradient of x; accumulates q/k/v/o's and adds the bias's gradient into *ctx.dbias.
  Tensor backward(const Saved& sv, const Tensor& dout, const AttentionContext& ctx) {
    // in the forward pass this was:  out = attn·oᵀ
    const Tensor dattn = nn::detail::linear_backward(o, dout, sv.attn);
    Tensor dq, dk, dv;
    // in the forward pass this was:  attn = softmax(q·kᵀ·1 + bias + key padding)·v  (per head)
    ops::attention_backward(&dq, &dk, &dv, ctx.dbias, dattn, sv.probs, sv.q, sv.k, sv.v, heads, dropout, true, sv.seed,
                            1.0);
    // in the forward pass this was:  q = x·W_qᵀ ; k = x·W_kᵀ ; v = x·W_vᵀ
    Tensor dx = nn::detail::linear_backward(q, dq, sv.x);
    ops::add_forward_(dx, nn::detail::linear_backward(k, dk, sv.x));
    ops::add_forward_(dx, nn::detail::linear_backward(v, dv, sv.x));
    return dx;
  }

 protected:
  void members(nn::Members& m) override {
    m.children({{"q", q}, {"k", k}, {"v", v}, {"o", o}});
    if (relative_attention_bias) m.child("relative_attention_bias", *relative_attention_bias);
  }
};

// T5DenseActDense (wo(dropout(act(wi x)))) or T5DenseGatedActDense (wo(dropout(act(wi_0 x)·wi_1 x))).
struct T5DenseReluDense : nn::Module {
  std::optional<nn::Linear> wi, wi_0, wi_1;
  nn::Linear wo;
  kernels::Act act = kernels::Act::relu;
  double dropout = 0.0;

  // [wi_0 x | wi_1 x] (…, 2F), what ops::gated_forward(Gate::first) reads
  Tensor gate_and_up(const Tensor& x, bool training) const {
    const Tensor a = training ? ops::linear_forward(x, wi_0->weight, wi_0->bias) : nn::detail::linear(*wi_0, x, false);
    const Tensor b = training ? ops::linear_forward(x, wi_1->weight, wi_1->bias) : nn::detail::linear(*wi_1, x, false);
    const int64_t F = a.size(-1), last = a.dim() - 1;
    Shape s = a.shape();
    s.back() = 2 * F;
    Tensor ab = Tensor::empty(s);
    ab.slice(last, 0, F).copy_from(a);
    ab.slice(last, F, 2 * F).copy_from(b);
    return ab;
  }

  Tensor forward(const Tensor& x) const {
    if (wi) return nn::detail::linear(wo, nn::detail::linear(*wi, x, false, act), false);
    return nn::detail::linear(wo, ops::gated_forward(gate_and_up(x, false), act, kernels::Gate::first), false);
  }

  struct Saved {
    Tensor x, pre, hidden;  // wi's input, its pre-activation (or [wi_0 x | wi_1 x]), wo's input
    uint64_t seed = 0;
  };
  Tensor forward_train(Saved& sv, const Tensor& x) const {
    sv.x = x;
    Tensor h;
    if (wi) {
      h = ops::linear_forward_train(&sv.pre, x, wi->weight, wi->bias, act);
    } else {
      sv.pre = gate_and_up(x, true);
      h = ops::gated_forward(sv.pre, act, kernels::Gate::first);
    }
    sv.seed = nn::detail::next_seed();
    sv.hidden = ops::dropout_forward(h, dropout, true, sv.seed);
    return ops::linear_forward(sv.hidden, wo.weight, wo.bias);
  }
  Tensor backward(const Saved& sv, const Tensor& dout) {
    // in the forward pass this was:  out = dropout(h)·woᵀ
    Tensor dh;
    ops::dropout_backward(&dh, nn::detail::linear_backward(wo, dout, sv.hidden), dropout, true, sv.seed);
    // in the forward pass this was:  h = act(x·wiᵀ)
    if (wi) return nn::detail::linear_backward(*wi, dh, sv.x, sv.pre, act);
    // in the forward pass this was:  h = act(a)·b, [a | b] = [x·wi_0ᵀ | x·wi_1ᵀ]
    Tensor dab;
    ops::gated_backward(&dab, dh, sv.pre, act, kernels::Gate::first);
    const int64_t F = dh.size(-1), last = dab.dim() - 1;
    Tensor dx = nn::detail::linear_backward(*wi_0, dab.slice(last, 0, F).contiguous(), sv.x);
    ops::add_forward_(dx, nn::detail::linear_backward(*wi_1, dab.slice(last, F, 2 * F).contiguous(), sv.x));
    return dx;
  }

 protected:
  void members(nn::Members& m) override {
    if (wi) m.child("wi", *wi);
    if (wi_0) m.children({{"wi_0", *wi_0}, {"wi_1", *wi_1}});
    m.child("wo", wo);
  }
};

// T5Block: layer.0 = T5LayerSelfAttention (layer_norm, SelfAttention), layer.1 = T5LayerFF (layer_norm,
// DenseReluDense); each residual adds dropout(sublayer(layer_norm(x))).
struct T5Block : nn::Module, nn::AnnouncedLayer {  // layer_stack_backward announces it
  nn::RMSNorm attn_norm;  // layer.0.layer_norm
  T5Attention attn;       // layer.0.SelfAttention
  nn::RMSNorm ff_norm;    // layer.1.layer_norm
  T5DenseReluDense ff;    // layer.1.DenseReluDense
  double dropout = 0.0;   // on both sublayers' outputs (training)

  Tensor forward(const Tensor& x, const AttentionContext& ctx, Tensor* weights) const {
    Tensor h = attn.forward(attn_norm.apply(x), ctx, weights);
    ops::add_forward_(h, x);  // h = x + attn(layer_norm(x))
    Tensor out = ff.forward(ff_norm.apply(h));
    ops::add_forward_(out, h);  // out = h + ff(layer_norm(h))
    return out;
  }

  struct Saved {
    T5Attention::Saved attn;
    T5DenseReluDense::Saved ff;
    uint64_t seed_attn = 0, seed_ff = 0;
  };
  // The norms save their inputs on their own stacks (one use per forward).
  Tensor forward_train(Saved& sv, const Tensor& x, const AttentionContext& ctx) const {
    Tensor a = attn.forward_train(sv.attn, attn_norm.apply(x), ctx);
    sv.seed_attn = nn::detail::next_seed();
    Tensor h = ops::dropout_forward(a, dropout, true, sv.seed_attn);
    h = ops::add_forward(h, x);
    Tensor f = ff.forward_train(sv.ff, ff_norm.apply(h));
    sv.seed_ff = nn::detail::next_seed();
    Tensor out = ops::dropout_forward(f, dropout, true, sv.seed_ff);
    return ops::add_forward(out, h);
  }
  Tensor backward(const Saved& sv, const Tensor& dout, const AttentionContext& ctx) {
    // in the forward pass this was:  out = h + dropout(ff(ff_norm(h)))
    Tensor df;
    ops::dropout_backward(&df, dout, dropout, true, sv.seed_ff);
    Tensor dh = ff_norm.backward(ff.backward(sv.ff, df));
    ops::add_forward_(dh, dout);
    // in the forward pass this was:  h = x + dropout(attn(attn_norm(x)))
    Tensor da;
    ops::dropout_backward(&da, dh, dropout, true, sv.seed_attn);
    Tensor dx = attn_norm.backward(attn.backward(sv.attn, da, ctx));
    ops::add_forward_(dx, dh);
    return dx;
  }

 protected:
  void members(nn::Members& m) override {
    m.children({{"layer.0.layer_norm", attn_norm},
                {"layer.0.SelfAttention", attn},
                {"layer.1.layer_norm", ff_norm},
                {"layer.1.DenseReluDense", ff}});
  }
};

// ---------------- the model ----------------

class T5Encoder : public EncoderModel {
 public:
  T5Config config;
  nn::Embedding shared;
  std::vector<T5Block> blocks;
  nn::RMSNorm final_layer_norm;
  std::string checkpoint_prefix;  // "" or "transformer." (a task model's checkpoint)
  double dropout = 0.0;           // after the embeddings and after final_layer_norm (training)
  // T5ForTokenClassification's head: dropout(classifier_dropout) + "classifier" on every token (the encoder under
  // "transformer.")
  std::optional<ClassificationHead> head;

  int64_t max_sequence_length() const override { return config.max_positions; }

  ModelOutput forward(const Tensor& ids, const Tensor& mask, const Tensor& types,
                      const ForwardOptions& opt) const override {
    auto [B, T] = check_inputs(ids, mask, types);  // token_type_ids: T5 has none; ignored as transformers'
    if (training_) clear_saved();
    auto sv = training_ ? std::make_shared<Saved>() : nullptr;
    ModelOutput out;
    Tensor x = shared.apply(ids, "input_ids");  // (saving the ids in training)
    if (sv) {
      sv->seed_embeddings = nn::detail::next_seed();
      x = ops::dropout_forward(x, dropout, true, sv->seed_embeddings);
    }
    const Tensor kpm = key_padding_from_attention_mask(mask, B, T);
    const std::optional<PackedBatch> packed = PackedBatch::plan(kpm, opt, training_);
    AttentionContext ctx;
    int64_t P = T;  // the bias's side: the longest sequence when packed (each uses its top-left block)
    if (packed) {
      x = packed->gather(x);
      ctx.cu_seqlens = &packed->cu_seqlens;
      P = 0;
      for (size_t b = 0; b + 1 < packed->cu_seqlens.size(); ++b)
        P = std::max(P, packed->cu_seqlens[b + 1] - packed->cu_seqlens[b]);
    } else {
      ctx.key_padding = kpm;
    }
    ctx.bias = ops::relative_position_bias_forward(relative_table(), P, P, config.max_distance);

    x = run_layer_stack(blocks, x, ctx, StackRecorder{opt, packed ? &*packed : nullptr, out},
                        sv ? &sv->stack : nullptr, gradient_checkpointing);
    x = final_layer_norm.apply(x);
    if (sv) {
      sv->seed_final = nn::detail::next_seed();
      x = ops::dropout_forward(x, dropout, true, sv->seed_final);
    }
    out.last_hidden_state = packed ? packed->scatter(x) : x;
    if (head && opt.compute_logits) out.logits = head->forward(out.last_hidden_state, sv ? &sv->head : nullptr);
    if (opt.output_hidden_states) out.hidden_states.back() = out.last_hidden_state;  // transformers' last entry
    if (sv) {
      sv->ctx = std::move(ctx);
      sv->ctx.cu_seqlens = nullptr;  // training never packs
      sv->last = out.last_hidden_state;
      push_saved(sv);
    }
    return out;
  }

  void backward(const Tensor& d_last, const Tensor& d_pooler, const Tensor& d_logits) override {
    auto sv = pop_saved<Saved>(info.model_type.c_str());
    ENCORE_CHECK(!d_pooler.defined(), "backward: d_pooler given but ", info.model_type, " has no pooler");
    ENCORE_CHECK(!d_logits.defined() || head, "backward: d_logits given but this ", info.model_type,
                 " encoder has no head");
    Tensor dlast = d_last.defined() ? d_last.contiguous() : Tensor::zeros(sv->last.shape());
    if (d_logits.defined()) {
      check_shape(dlast, "d_last_hidden_state", sv->last.shape());
      // in the forward pass this was:  logits = classifier(dropout(last))
      dlast = ops::add_forward(dlast, head->backward(sv->head, d_logits));
    }
    check_shape(dlast, "d_last_hidden_state", sv->last.shape());
    // in the forward pass this was:  last = dropout(final_layer_norm(x))
    Tensor d;
    ops::dropout_backward(&d, dlast, dropout, true, sv->seed_final);
    d = final_layer_norm.backward(d);
    Tensor dbias = Tensor::zeros(sv->ctx.bias.shape());  // Σ over blocks of d(bias)
    sv->ctx.dbias = &dbias;
    d = layer_stack_backward(sv->stack, blocks, d, sv->ctx);
    // in the forward pass this was:  bias[h, i, j] = relative_attention_bias[bucket(j - i), h]
    nn::Embedding& rb = *blocks[0].attn.relative_attention_bias;
    ops::relative_position_bias_backward(&grad_of(rb.dweight, rb.weight), dbias, config.max_distance);
    // in the forward pass this was:  x = dropout(shared[ids])
    Tensor demb;
    ops::dropout_backward(&demb, d, dropout, true, sv->seed_embeddings);
    shared.backward(demb);
  }

  void add_sequence_classifier(int64_t, uint64_t) override {
    throw Error("add_sequence_classifier: not supported for model_type 't5' (the T5 encoder has no classification "
                "head; T5ForSequenceClassification runs the decoder)");
  }
  void set_dropout(double p) override {
    dropout = p;
    for (auto& b : blocks) b.dropout = b.attn.dropout = b.ff.dropout = p;
    if (head) head->dropout_in = p;
  }
  void for_each_layer(const std::function<void(nn::TransformerEncoderLayer&)>&) override {}
  void prepare_inference_weights(DType dtype) override {  // blocks in parallel, as EncoderModel's layers (model.cpp)
    prepare_layers_in_parallel(blocks, [&](auto& block) {
      block.attn.prepare_inference(dtype);
      block.ff.prepare_inference(dtype);
    });
  }

  HfExport export_hf() override {
    HfExport e;
    e.architecture = std::string(info.model_type == "mt5" ? "MT5" : "T5") + (head ? "ForTokenClassification" : "EncoderModel");
    std::set<const Tensor*> head_params;
    if (head) {
      std::vector<nn::ParamRef> hrefs;
      nn::ParameterList hlist("", hrefs);
      head->members(hlist, "");
      for (auto& r : hrefs) head_params.insert(r.param);
    }
    std::vector<nn::ParamRef> refs;
    nn::ParameterList list("", refs);
    members(list);
    for (auto& r : refs)  // a token-classification model keeps the encoder under "transformer."
      e.tensors.emplace_back((head && !head_params.count(r.param) ? "transformer." : "") + r.name, r.param->contiguous());
    return e;
  }

  std::vector<std::string> layer_linear_weight_names() override {
    std::vector<std::string> out;
    for (size_t i = 0; i < blocks.size(); ++i) {
      const std::string p = checkpoint_prefix + "encoder.block." + std::to_string(i) + ".";
      for (const char* n : {"q", "k", "v", "o"}) out.push_back(p + "layer.0.SelfAttention." + n + ".weight");
      const std::vector<std::string> ff = blocks[i].ff.wi ? std::vector<std::string>{"wi", "wo"}
                                                          : std::vector<std::string>{"wi_0", "wi_1", "wo"};
      for (const std::string& n : ff) out.push_back(p + "layer.1.DenseReluDense." + n + ".weight");
    }
    return out;
  }

 protected:
  void members(nn::Members& m) override {
    m.child("shared", shared);
    for (size_t i = 0; i < blocks.size(); ++i) m.child("encoder.block." + std::to_string(i), blocks[i]);
    m.child("encoder.final_layer_norm", final_layer_norm);
    if (head) head->members(m, "");
  }

 private:
  struct Saved {
    uint64_t seed_embeddings = 0, seed_final = 0;
    LayerStackSaved<T5Block> stack;
    AttentionContext ctx;
    Tensor last;
    ClassificationHead::Saved head;
  };
  const Tensor& relative_table() const { return blocks[0].attn.relative_attention_bias->weight; }
};

}  // namespace

std::unique_ptr<EncoderModel> load_t5(const HfConfig& cfg, const io::WeightStore& store) {
  auto m = std::make_unique<T5Encoder>();
  const T5Config c = m->config = read_config(cfg);
  // T5's task heads encore does not run: *ForSequenceClassification and *ForQuestionAnswering read the decoder's
  // output, *ForTokenClassification has a classifier encore does not load. Loaded as the encoder, and said so (the
  // generic warning stays quiet for these suffixes, which other families run).
  const bool token_head = architecture_ends_with(cfg, "ForTokenClassification") && store.contains("classifier.weight");
  for (const char* head : {"ForSequenceClassification", "ForQuestionAnswering", "ForTokenClassification"})
    if (architecture_ends_with(cfg, head) && !token_head)
      warn(cfg.source() + ": a T5 *" + head + " checkpoint: encore runs only the T5 encoder (no logits); " +
           "its head and decoder weights are ignored");
  const int64_t C = c.d_model, inner = c.heads * c.d_kv;
  // T5EncoderModel / T5Model / T5ForConditionalGeneration: "shared.weight" at the top; task models: "transformer."
  m->checkpoint_prefix = detect_prefix(store, "transformer.", "encoder.final_layer_norm.weight");
  Weights root(store, "");
  Weights w = root.sub(m->checkpoint_prefix);
  if (token_head) {
    read_labels(cfg, m->info);
    m->info.head = "token_classification";
    m->head = take_head(root, head_layout(ClassificationHead::Input::every_token, "", "classifier", kernels::Act::none,
                                          cfg.get_double("classifier_dropout", 0.0), 0.0),
                        m->info.num_labels, C);
  }
  // the token table is "shared" (encoder.embed_tokens is tied to it and usually not stored)
  const std::string table = w.has("shared.weight") || !w.has("encoder.embed_tokens.weight") ? "shared.weight"
                                                                                             : "encoder.embed_tokens.weight";
  m->shared = nn::Embedding(w.take(table, {c.vocab, C}));
  for (int64_t i = 0; i < c.layers; ++i) {
    const std::string p = "encoder.block." + std::to_string(i) + ".";
    T5Block b;
    b.attn_norm = take_norm(w, p + "layer.0.layer_norm", C, c.eps);
    const std::string a = p + "layer.0.SelfAttention.";
    b.attn.q = take_linear_no_bias(w, a + "q", inner, C);
    b.attn.k = take_linear_no_bias(w, a + "k", inner, C);
    b.attn.v = take_linear_no_bias(w, a + "v", inner, C);
    b.attn.o = take_linear_no_bias(w, a + "o", C, inner);
    if (i == 0)
      b.attn.relative_attention_bias =
          nn::Embedding(w.take(a + "relative_attention_bias.weight", {c.num_buckets, c.heads}));
    b.attn.heads = c.heads;
    b.ff_norm = take_norm(w, p + "layer.1.layer_norm", C, c.eps);
    const std::string f = p + "layer.1.DenseReluDense.";
    if (c.gated) {
      b.ff.wi_0 = take_linear_no_bias(w, f + "wi_0", c.d_ff, C);
      b.ff.wi_1 = take_linear_no_bias(w, f + "wi_1", c.d_ff, C);
    } else {
      b.ff.wi = take_linear_no_bias(w, f + "wi", c.d_ff, C);
    }
    b.ff.wo = take_linear_no_bias(w, f + "wo", C, c.d_ff);
    b.ff.act = c.act;
    m->blocks.push_back(std::move(b));
  }
  m->final_layer_norm = take_norm(w, "encoder.final_layer_norm", C, c.eps);
  w.finish();
  m->set_dropout(c.dropout);
  if (m->head) m->head->dropout_in = cfg.get_double("classifier_dropout", 0.0);

  ModelInfo& info = m->info;
  info.hidden_size = C;
  info.num_layers = c.layers;
  info.num_heads = c.heads;
  info.intermediate_size = c.d_ff;
  info.hidden_act = c.gated ? "gated-" + c.act_name : c.act_name;
  info.vocab_size = c.vocab;
  info.max_position_embeddings = c.max_positions;
  info.pad_token_id = c.pad_token_id;
  for (auto& b : m->blocks) info.num_parameters += b.num_parameters();  // the encoder blocks' (as every family)
  return m;
}

}  // namespace encore::models
