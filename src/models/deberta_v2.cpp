// DeBERTa-v2 / DeBERTa-v3 (model_type "deberta-v2": microsoft/deberta-v3-{xsmall,small,base,large}, the v2
// checkpoints without a ConvLayer, and the classifiers / NLI models fine-tuned from them), module for module as
// transformers' modeling_deberta_v2.py. The structs below are its modules and load from the checkpoint's names:
//   embeddings.{word_embeddings, position_embeddings?, token_type_embeddings?, embed_proj?, LayerNorm}
//       DebertaV2Embeddings: LayerNorm(embed_proj(word[ids] (+ position[t] if position_biased_input)
//       (+ token_type[types] if type_vocab_size > 0))) · attention_mask
//   encoder.layer.N.attention.self.{query_proj, key_proj, value_proj, pos_key_proj?, pos_query_proj?}
//   encoder.layer.N.attention.output.{dense, LayerNorm}, encoder.layer.N.intermediate.dense,
//   encoder.layer.N.output.{dense, LayerNorm}                  (Post-LN, as BERT)
//   encoder.rel_embeddings, encoder.LayerNorm?                 (relative position embeddings, (2·span, C))
//   pooler.dense + classifier                                  DebertaV2ForSequenceClassification (ContextPooler)
//   classifier                                                 DebertaV2ForTokenClassification
//   qa_outputs                                                 DebertaV2ForQuestionAnswering (start, end logits)
//   cls.predictions.{transform.dense, transform.LayerNorm, bias} (legacy) or lm_predictions.lm_head.{dense,
//   LayerNorm, bias}                                           DebertaV2ForMaskedLM (decoder = word embeddings)
// The base model sits under "deberta." in task checkpoints.
//
// Disentangled self-attention (per head, d = head size, sf = 1 + [c2p] + [p2c], s = √(d·sf)):
//   scores[i, j] = q_i·k_j / s + (q_i·Kr[δ(i, j)] + k_j·Qr[δ(i, j)]) / s          (c2p term, p2c term)
//   Kr = pos_key_proj(rel), Qr = pos_query_proj(rel) (query_proj/key_proj themselves when share_att_key),
//   rel = LayerNorm(rel_embeddings) (norm_rel_ebd "layer_norm"), δ(i, j) = clamp(bucket(i - j) + span, 0, 2·span-1)
//   with bucket = transformers' make_log_bucket_position (identity when position_buckets <= 0) and span =
//   position_buckets, else max_relative_positions (-1: max_position_embeddings).
// (The p2c term is transformers' gather over key rows at -bucket(j - i), transposed; bucket is odd, so it is the
// index δ(i, j) above.) The two relative terms are one additive (heads, T, T) bias per sequence handed to the
// shared attention op (ops::attention_forward's attn_mask: the fused kernel at inference, its backward gives the
// bias's gradient in training), with the op's scale = 1/√(d·sf).
// Only the rows of rel the batch's distances reach are projected (δ over |i - j| < T).
// Padded query rows: transformers masks them entirely (softmax over finfo.min everywhere); encore lets them attend
// to the real keys. Real positions are unaffected either way; padded positions' outputs are not defined.
// encoder.conv (conv_kernel_size > 0: deberta-v2-xlarge/xxlarge's ConvLayer) is applied to layer 0's output (see
// ConvLayer). Not supported (refused at load): an even conv_kernel_size, attention_head_size other than
// hidden_size / num_attention_heads, pooler_hidden_size other than hidden_size,
// pos_att_type entries other than c2p and p2c.
#include <algorithm>
#include <cmath>
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

struct DebertaV2Config {
  int64_t hidden = 0, layers = 0, heads = 0, head_dim = 0, intermediate = 0, vocab = 0, max_positions = 0;
  int64_t embedding_size = 0, type_vocab = 0, pad_token_id = 0;
  double eps = 1e-7;
  std::string activation;                      // encore's name
  kernels::Act pooler_act = kernels::Act::gelu_erf;
  bool position_biased_input = true, relative_attention = false, c2p = false, p2c = false, share_att_key = false;
  bool norm_rel_ebd = false;                   // "layer_norm" in norm_rel_ebd
  int64_t position_buckets = -1, max_relative_positions = -1, span = 0;  // span: rel_embeddings has 2·span rows
  bool legacy = true;                          // the masked-LM head's layout
  int64_t conv_kernel_size = 0, conv_groups = 1;  // ConvLayer after layer 0 (deberta-v2-xlarge/xxlarge) when > 0
  kernels::Act conv_act = kernels::Act::tanh;
  double hidden_dropout = 0.1, attention_dropout = 0.1, pooler_dropout = 0.0, cls_dropout = 0.1;
};

std::vector<std::string> split_lower(const std::string& s) {
  std::vector<std::string> out;
  std::string cur;
  for (char ch : s + "|") {
    if (ch == '|') {
      const size_t a = cur.find_first_not_of(" \t"), b = cur.find_last_not_of(" \t");
      out.push_back(a == std::string::npos ? "" : cur.substr(a, b - a + 1));
      cur.clear();
    } else {
      cur += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    }
  }
  return out;
}

DebertaV2Config read_config(const HfConfig& cfg) {
  DebertaV2Config c;
  const io::JsonAt root(cfg.json(), cfg.source());
  c.hidden = cfg.get_int("hidden_size", 1536, 1, 65536);
  c.layers = cfg.get_int("num_hidden_layers", 24, 1, 1000);
  c.heads = cfg.get_int("num_attention_heads", 24, 1, 4096);
  ENCORE_CHECK_AS(ModelFormatError, c.hidden % c.heads == 0, cfg.source(), ": hidden_size ", c.hidden,
                  " is not divisible by num_attention_heads ", c.heads);
  c.head_dim = c.hidden / c.heads;
  if (cfg.has("attention_head_size"))
    ENCORE_CHECK_AS(ModelFormatError, cfg.get_int("attention_head_size") == c.head_dim, cfg.source(),
                    ": attention_head_size ", cfg.get_int("attention_head_size"),
                    " differs from hidden_size/num_attention_heads = ", c.head_dim, " (not supported for deberta-v2)");
  c.intermediate = cfg.get_int("intermediate_size", 6144, 1, 1 << 20);
  c.vocab = cfg.get_int("vocab_size", 128100, 1, 10'000'000);
  c.max_positions = cfg.get_int("max_position_embeddings", 512, 1, 1 << 24);
  c.embedding_size = cfg.get_int("embedding_size", c.hidden, 1, 65536);
  c.type_vocab = cfg.get_int("type_vocab_size", 0, 0, 1 << 20);
  c.pad_token_id = cfg.has("pad_token_id") ? cfg.get_int("pad_token_id", 0, 0, c.vocab - 1) : 0;
  c.eps = cfg.get_double("layer_norm_eps", 1e-7);
  c.activation = activation_from_hf(cfg.get_string("hidden_act", "gelu"), cfg.source());
  const std::string pooler_act = cfg.get_string("pooler_hidden_act", "gelu");  // ContextPooler's ACT2FN name
  c.pooler_act = pooler_act == "tanh" ? kernels::Act::tanh : kernel_activation(pooler_act, cfg.source());
  if (cfg.has("pooler_hidden_size"))
    ENCORE_CHECK_AS(ModelFormatError, cfg.get_int("pooler_hidden_size") == c.hidden, cfg.source(),
                    ": pooler_hidden_size ", cfg.get_int("pooler_hidden_size"), " differs from hidden_size ", c.hidden,
                    " (not supported for deberta-v2)");
  c.conv_kernel_size =
      cfg.has("conv_kernel_size") ? std::max<int64_t>(0, cfg.get_int("conv_kernel_size", 0, -1, 1 << 10)) : 0;
  if (c.conv_kernel_size > 0) {
    ENCORE_CHECK_AS(ModelFormatError, c.conv_kernel_size % 2 == 1, cfg.source(), ": conv_kernel_size ",
                    c.conv_kernel_size, " is even (transformers' ConvLayer pads (k-1)/2 and then changes the length; ",
                    "only odd kernels are supported)");
    c.conv_groups = cfg.has("conv_groups") ? cfg.get_int("conv_groups", 1, 1, c.hidden) : 1;
    ENCORE_CHECK_AS(ModelFormatError, c.hidden % c.conv_groups == 0, cfg.source(), ": conv_groups ", c.conv_groups,
                    " does not divide hidden_size ", c.hidden);
    const std::string conv_act = cfg.has("conv_act") ? cfg.get_string("conv_act") : "tanh";  // ConvLayer's default
    c.conv_act = conv_act == "tanh" ? kernels::Act::tanh : kernel_activation(conv_act, cfg.source());
  }
  c.position_biased_input = root.get_or("position_biased_input", true);
  c.relative_attention = root.get_or("relative_attention", false);
  c.share_att_key = root.get_or("share_att_key", false);
  c.legacy = root.get_or("legacy", true);
  std::vector<std::string> types;
  if (cfg.has("pos_att_type")) {
    const auto& j = cfg.json()["pos_att_type"];
    if (j.is_string()) {
      types = split_lower(j.get<std::string>());
    } else {
      const io::JsonAt list(j, cfg.source(), "/pos_att_type");
      for (size_t i = 0; i < list.size(); ++i) types.push_back(list.at(i).str());
    }
  }
  for (const std::string& t : types) {
    ENCORE_CHECK_AS(ModelFormatError, t == "c2p" || t == "p2c", cfg.source(), ": pos_att_type '", t,
                    "' is not supported for deberta-v2 (c2p, p2c)");
    (t == "c2p" ? c.c2p : c.p2c) = true;
  }
  c.position_buckets = cfg.has("position_buckets") ? cfg.get_int("position_buckets", -1, -1, 1 << 20) : -1;
  c.max_relative_positions =
      cfg.has("max_relative_positions") ? cfg.get_int("max_relative_positions", -1, -1, 1 << 24) : -1;
  if (c.max_relative_positions < 1) c.max_relative_positions = c.max_positions;
  c.span = c.position_buckets > 0 ? c.position_buckets : c.max_relative_positions;
  if (c.relative_attention && c.position_buckets > 0)
    ENCORE_CHECK_AS(ModelFormatError, c.position_buckets >= 2 && c.max_relative_positions > c.position_buckets / 2 + 1,
                    cfg.source(), ": position_buckets ", c.position_buckets, " with max_relative_positions ",
                    c.max_relative_positions, " gives no log buckets (need buckets >= 2 and max > buckets/2 + 1)");
  for (const std::string& n : split_lower(cfg.has("norm_rel_ebd") ? cfg.get_string("norm_rel_ebd") : "none")) {
    ENCORE_CHECK_AS(ModelFormatError, n == "none" || n == "layer_norm", cfg.source(), ": norm_rel_ebd '", n,
                    "' is not supported for deberta-v2 (none, layer_norm)");
    if (n == "layer_norm") c.norm_rel_ebd = true;
  }
  c.hidden_dropout = cfg.get_double("hidden_dropout_prob", 0.1);
  c.attention_dropout = cfg.get_double("attention_probs_dropout_prob", 0.1);
  c.pooler_dropout = cfg.get_double("pooler_dropout", 0.0);
  c.cls_dropout = cfg.has("cls_dropout") ? cfg.get_double("cls_dropout") : c.hidden_dropout;
  return c;
}

kernels::Act act_of(const std::string& encore_name) { return nn::detail::pointwise_act(nn::parse_activation(encore_name)); }

nn::Linear take_linear_opt_bias(Weights& w, const std::string& name, int64_t out, int64_t in, bool bias) {
  nn::Linear l;
  l.weight = w.take(name + ".weight", {out, in});
  if (bias) l.bias = w.take(name + ".bias", {out});
  l.in_features = in;
  l.out_features = out;
  return l;
}

nn::LayerNorm take_norm(Weights& w, const std::string& name, int64_t C, double eps) {
  nn::LayerNorm n(C, eps, /*elementwise_affine=*/true, /*bias=*/true);
  n.weight = w.take(name + ".weight", {C});
  n.bias = w.take(name + ".bias", {C});
  return n;
}

// y[r] = 0 for every row r of y (B, T, C) contiguous whose mask (B, T) entry is 0 (mask undefined: none).
void zero_padded_rows(Tensor& y, const Tensor& mask) {
  if (!mask.defined()) return;
  const int64_t C = y.size(-1), rows = y.numel() / C;
  float* p = y.data<float>();
  for (int64_t r = 0; r < rows; ++r)
    if (mask.data<int64_t>()[r] == 0) std::fill(p + r * C, p + (r + 1) * C, 0.f);
}

// ---------------- relative positions ----------------

// transformers' make_log_bucket_position for one distance, in float32 as torch computes it there:
//   |r| <= mid: r ;  else sign(r)·(ceil(log(|r|/mid) / log((max_position-1)/mid) · (mid-1)) + mid),  mid = buckets/2
int64_t log_bucket(int64_t r, int64_t buckets, int64_t max_position) {
  const int64_t mid = buckets / 2, a = r < 0 ? -r : r;
  if (a <= mid) return r;  // torch: abs_pos <= mid keeps r (abs_pos is mid-1 inside (-mid, mid), also <= mid)
  const float ratio = static_cast<float>(a) / static_cast<float>(mid);
  const float denom = std::log(static_cast<float>(static_cast<double>(max_position - 1) / static_cast<double>(mid)));
  const float scaled = std::log(ratio) / denom * static_cast<float>(mid - 1);
  const int64_t v = static_cast<int64_t>(std::ceil(scaled) + static_cast<float>(mid));
  return r < 0 ? -v : v;
}

// The rows of the relative embeddings a batch of sequences up to T long reaches: row(i - j) =
// clamp(bucket(i - j) + span, 0, 2·span - 1), kept as offsets into the used range [lo, lo + rows).
struct RelativePositions {
  ops::RelativeRows index;
  int64_t lo = 0;

  static RelativePositions plan(int64_t T, const DebertaV2Config& c) {
    RelativePositions p;
    std::vector<int64_t> rows(std::max<int64_t>(2 * T - 1, 0));
    int64_t lo = 2 * c.span, hi = 0;
    for (int64_t delta = -(T - 1); delta <= T - 1; ++delta) {
      const int64_t b = c.position_buckets > 0 ? log_bucket(delta, c.position_buckets, c.max_relative_positions) : delta;
      const int64_t r = std::clamp<int64_t>(b + c.span, 0, 2 * c.span - 1);
      rows[delta + T - 1] = r;
      lo = std::min(lo, r);
      hi = std::max(hi, r + 1);
    }
    p.lo = std::min(lo, hi);
    p.index.T = T;
    p.index.rows = hi - p.lo;
    for (int64_t r : rows) p.index.row.push_back(static_cast<int32_t>(r - p.lo));
    return p;
  }
  int64_t rows() const { return index.rows; }
};

// What every layer's attention reads besides its input.
struct AttentionContext {
  Tensor key_padding;                                // (B, T) additive, or undefined
  const std::vector<int64_t>* cu_seqlens = nullptr;  // padding-free: x is (1, N, C), sequence b in rows cu[b]..cu[b+1]
  RelativePositions rel;                             // relative attention only
  Tensor rel_rows;                                   // (R, C): rows [lo, hi) of LayerNorm(rel_embeddings)
  Tensor* drel = nullptr;                            // training backward: Σ over layers of d(rel_rows)
};

// Sequences per attention call in inference: their (heads, P, P) biases together within ~32 MB.
int64_t sequences_per_call(int64_t H, int64_t P) {
  return std::max<int64_t>(1, (int64_t{8} << 20) / std::max<int64_t>(1, H * P * P));
}

// ---------------- modules ----------------

struct DebertaV2Embeddings : nn::Module {
  nn::Embedding word_embeddings;
  std::optional<nn::Embedding> position_embeddings, token_type_embeddings;
  std::optional<nn::Linear> embed_proj;  // embedding_size -> hidden_size, no bias
  nn::LayerNorm LayerNorm;
  double dropout = 0.0;  // hidden_dropout_prob (training)

  // LayerNorm(embed_proj(word[ids] + position[t] + token_type[types])) · mask (mask (B, T) 1/0 or undefined)
  // proj_in, when non-null, receives embed_proj's input (training).
  Tensor forward(const Tensor& ids, const Tensor& types, const Tensor& mask, Tensor* proj_in = nullptr) const {
    const int64_t B = ids.size(0), T = ids.size(1);
    Tensor x = word_embeddings.apply(ids, "input_ids");
    if (position_embeddings) {
      Tensor pos = Tensor::empty({B, T}, DType::i64);
      for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < T; ++t) pos.data<int64_t>()[b * T + t] = t;
      ops::add_forward_(x, position_embeddings->apply(pos, "position_ids"));
    }
    if (token_type_embeddings) {
      const Tensor tt = types.defined() ? types : Tensor::zeros({B, T}, DType::i64);
      ops::add_forward_(x, token_type_embeddings->apply(tt, "token_type_ids"));
    }
    if (proj_in) *proj_in = x;
    if (embed_proj) x = nn::detail::linear(*embed_proj, x, is_training());
    Tensor y = LayerNorm.apply(x);
    zero_padded_rows(y, mask);
    return y;
  }

 protected:
  void members(nn::Members& m) override {
    m.child("word_embeddings", word_embeddings);
    if (position_embeddings) m.child("position_embeddings", *position_embeddings);
    if (token_type_embeddings) m.child("token_type_embeddings", *token_type_embeddings);
    if (embed_proj) m.child("embed_proj", *embed_proj);
    m.child("LayerNorm", LayerNorm);
  }
};

struct DisentangledSelfAttention : nn::Module {
  nn::Linear query_proj, key_proj, value_proj;
  std::optional<nn::Linear> pos_key_proj, pos_query_proj;  // absent when share_att_key
  int64_t heads = 0, head_dim = 0;
  bool relative = false, c2p = false, p2c = false, share_att_key = false;
  double dropout = 0.0, pos_dropout = 0.0;  // attention_probs_dropout_prob, hidden_dropout_prob (training)

  // 1 + one per pos_att_type entry (transformers counts them whether or not relative_attention is on)
  float scale_factor() const { return 1.f + (c2p ? 1.f : 0.f) + (p2c ? 1.f : 0.f); }
  // 1/√(d·sf) as transformers computes it (sqrt of a float32 product), applied to the relative terms
  float inv_scale() const { return 1.f / std::sqrt(static_cast<float>(head_dim) * scale_factor()); }
  const nn::Linear& pos_key() const { return share_att_key ? key_proj : *pos_key_proj; }
  const nn::Linear& pos_query() const { return share_att_key ? query_proj : *pos_query_proj; }
  nn::Linear& pos_key() { return share_att_key ? key_proj : *pos_key_proj; }
  nn::Linear& pos_query() { return share_att_key ? query_proj : *pos_query_proj; }

  // x (B, T, C), or (1, N, C) with ctx.cu_seqlens; weights, when non-null, receives (B, heads, T, T).
  Tensor forward(const Tensor& x, const AttentionContext& ctx, Tensor* weights) const {
    const int64_t B = x.size(0), T = x.size(1), C = heads * head_dim;
    const Tensor q = nn::detail::linear(query_proj, x, false), k = nn::detail::linear(key_proj, x, false),
                 v = nn::detail::linear(value_proj, x, false);
    ops::AttentionMasks masks;
    if (!relative) {
      if (ctx.cu_seqlens) masks.cu_seqlens = *ctx.cu_seqlens;
      else masks.key_padding_mask = ctx.key_padding;
      return ops::attention_forward(q, k, v, heads, masks, weights, 0.0, false, 0, inv_scale());
    }
    const Tensor kr = c2p ? nn::detail::linear(pos_key(), ctx.rel_rows, false) : Tensor();
    const Tensor qr = p2c ? nn::detail::linear(pos_query(), ctx.rel_rows, false) : Tensor();
    Tensor out = Tensor::empty({B, T, C});
    if (weights) *weights = Tensor::empty({B, heads, T, T});
    if (ctx.cu_seqlens) {  // padding-free: groups of whole sequences, each in the top-left block of its slot
      const std::vector<int64_t>& cu = *ctx.cu_seqlens;
      const int64_t S = static_cast<int64_t>(cu.size()) - 1;
      int64_t s0 = 0;
      while (s0 < S) {
        int64_t P = 0, s1 = s0;
        while (s1 < S) {
          const int64_t P1 = std::max(P, cu[s1 + 1] - cu[s1]);
          if (s1 > s0 && (s1 - s0 + 1) > sequences_per_call(heads, P1)) break;
          P = P1;
          ++s1;
        }
        std::vector<ops::DisentangledSeq> seqs;
        masks.cu_seqlens.clear();
        for (int64_t s = s0; s < s1; ++s) {
          seqs.push_back({0, cu[s], cu[s + 1] - cu[s]});
          masks.cu_seqlens.push_back(cu[s] - cu[s0]);
        }
        masks.cu_seqlens.push_back(cu[s1] - cu[s0]);
        Tensor bias = Tensor::zeros({(s1 - s0) * heads, P, P});
        ops::disentangled_bias_forward(bias, P, seqs, q, k, kr, qr, heads, ctx.rel.index, inv_scale());
        masks.attn_mask = bias;
        const int64_t r0 = cu[s0], r1 = cu[s1];
        if (r1 > r0)
          out.slice(1, r0, r1).copy_from(ops::attention_forward(q.slice(1, r0, r1), k.slice(1, r0, r1), v.slice(1, r0, r1),
                                                                heads, masks, nullptr, 0.0, false, 0, inv_scale()));
        s0 = s1;
      }
      return out;
    }
    const int64_t per_call = sequences_per_call(heads, T);
    for (int64_t b0 = 0; b0 < B; b0 += per_call) {
      const int64_t b1 = std::min(B, b0 + per_call);
      std::vector<ops::DisentangledSeq> seqs;
      for (int64_t b = b0; b < b1; ++b) seqs.push_back({b, 0, T});
      Tensor bias = Tensor::empty({(b1 - b0) * heads, T, T});
      ops::disentangled_bias_forward(bias, T, seqs, q, k, kr, qr, heads, ctx.rel.index, inv_scale());
      masks.attn_mask = bias;
      if (ctx.key_padding.defined()) masks.key_padding_mask = ctx.key_padding.slice(0, b0, b1).contiguous();
      Tensor w;
      out.slice(0, b0, b1).copy_from(ops::attention_forward(q.slice(0, b0, b1), k.slice(0, b0, b1),
                                                            v.slice(0, b0, b1), heads, masks, weights ? &w : nullptr,
                                                            0.0, false, 0, inv_scale()));
      if (weights) weights->slice(0, b0, b1).copy_from(w);
    }
    return out;
  }

  struct Saved {
    Tensor x, q, k, v, probs, rel, kr, qr;  // rel: the relative rows after pos_dropout; kr, qr: projected
    uint64_t seed_probs = 0, seed_pos = 0;
  };
  // Training (padded batch x (B, T, C)): dropout(softmax(q·kᵀ/√(d·sf) + bias + masks))·v, saving sv.
  Tensor forward_train(Saved& sv, const Tensor& x, const AttentionContext& ctx) const {
    const int64_t B = x.size(0), T = x.size(1);
    sv.x = x;
    sv.q = ops::linear_forward(x, query_proj.weight, query_proj.bias);
    sv.k = ops::linear_forward(x, key_proj.weight, key_proj.bias);
    sv.v = ops::linear_forward(x, value_proj.weight, value_proj.bias);
    ops::AttentionMasks masks;
    masks.key_padding_mask = ctx.key_padding;
    if (relative) {
      sv.seed_pos = nn::detail::next_seed();
      sv.rel = ops::dropout_forward(ctx.rel_rows, pos_dropout, true, sv.seed_pos);
      if (c2p) sv.kr = ops::linear_forward(sv.rel, pos_key().weight, pos_key().bias);
      if (p2c) sv.qr = ops::linear_forward(sv.rel, pos_query().weight, pos_query().bias);
      std::vector<ops::DisentangledSeq> seqs;
      for (int64_t b = 0; b < B; ++b) seqs.push_back({b, 0, T});
      Tensor bias = Tensor::empty({B * heads, T, T});
      ops::disentangled_bias_forward(bias, T, seqs, sv.q, sv.k, sv.kr, sv.qr, heads, ctx.rel.index, inv_scale());
      masks.attn_mask = bias;
    }
    sv.seed_probs = nn::detail::next_seed();
    return ops::attention_forward_train(&sv.probs, sv.q, sv.k, sv.v, heads, masks, dropout, true, sv.seed_probs,
                                        inv_scale());
  }
  // The gradient of x; accumulates the projections' gradients and, when relative, adds the gradient of the
  // relative rows (before pos_dropout) to *ctx.drel.
  Tensor backward(const Saved& sv, const Tensor& dout, const AttentionContext& ctx) {
    Tensor dq, dk, dv, dlogits;  // dlogits (B, H, T, T): the gradient of the bias as added to the scores
    ops::attention_backward(&dq, &dk, &dv, relative ? &dlogits : nullptr, dout, sv.probs, sv.q, sv.k, sv.v, heads,
                            dropout, true, sv.seed_probs, inv_scale());
    if (relative) {
      Tensor dkr = c2p ? Tensor::zeros(sv.kr.shape()) : Tensor(), dqr = p2c ? Tensor::zeros(sv.qr.shape()) : Tensor();
      ops::disentangled_bias_backward(&dq, &dk, &dkr, &dqr, dlogits, sv.q, sv.k, sv.kr, sv.qr, heads, ctx.rel.index,
                                      inv_scale());
      // in the forward pass this was:  Kr = pos_key(rel), Qr = pos_query(rel)
      Tensor dr = Tensor::zeros(sv.rel.shape());
      if (c2p) ops::add_forward_(dr, nn::detail::linear_backward(pos_key(), dkr, sv.rel));
      if (p2c) ops::add_forward_(dr, nn::detail::linear_backward(pos_query(), dqr, sv.rel));
      Tensor d;
      ops::dropout_backward(&d, dr, pos_dropout, true, sv.seed_pos);
      ops::add_forward_(*ctx.drel, d);
    }
    Tensor dx = nn::detail::linear_backward(query_proj, dq, sv.x);
    ops::add_forward_(dx, nn::detail::linear_backward(key_proj, dk, sv.x));
    ops::add_forward_(dx, nn::detail::linear_backward(value_proj, dv.contiguous(), sv.x));
    return dx;
  }

  void prepare(DType dtype) {
    for (nn::Linear* l : {&query_proj, &key_proj, &value_proj}) l->prepare_inference(dtype);
    if (pos_key_proj) pos_key_proj->prepare_inference(dtype);
    if (pos_query_proj) pos_query_proj->prepare_inference(dtype);
  }

 protected:
  void members(nn::Members& m) override {
    m.children({{"query_proj", query_proj}, {"key_proj", key_proj}, {"value_proj", value_proj}});
    if (pos_key_proj) m.child("pos_key_proj", *pos_key_proj);
    if (pos_query_proj) m.child("pos_query_proj", *pos_query_proj);
  }
};

// DebertaV2Layer: Post-LN as BERT, with the disentangled attention.
//   h   = LayerNorm1(dense1(attention(x)) + x)          attention.output.{dense, LayerNorm}
//   out = LayerNorm2(dense3(act(dense2(h))) + h)        intermediate.dense, output.{dense, LayerNorm}
struct DebertaV2Layer : nn::Module, nn::AnnouncedLayer {  // layer_stack_backward announces it
  DisentangledSelfAttention attention;   // attention.self
  nn::Linear attention_dense;            // attention.output.dense
  nn::LayerNorm attention_norm;          // attention.output.LayerNorm
  nn::Linear intermediate, output;       // intermediate.dense, output.dense
  nn::LayerNorm output_norm;             // output.LayerNorm
  kernels::Act act = kernels::Act::gelu_erf;
  double dropout = 0.0;                  // hidden_dropout_prob after each dense (training)

  Tensor forward(const Tensor& x, const AttentionContext& ctx, Tensor* weights) const {
    Tensor a = nn::detail::linear(attention_dense, attention.forward(x, ctx, weights), false);
    const Tensor h = attention_norm.add_apply(a, x, false);  // LayerNorm(a + x)
    Tensor o = nn::detail::linear(output, nn::detail::linear(intermediate, h, false, act), false);
    return output_norm.add_apply(o, h, false);
  }

  struct Saved {
    DisentangledSelfAttention::Saved attn;
    Tensor attn_out, h, pre, hidden;  // attention.output.dense's input, LayerNorm1's output, dense2's pre-act and output
    uint64_t seed1 = 0, seed2 = 0;
  };
  Tensor forward_train(Saved& sv, const Tensor& x, const AttentionContext& ctx) const {
    sv.attn_out = attention.forward_train(sv.attn, x, ctx);
    sv.seed1 = nn::detail::next_seed();
    Tensor a = ops::dropout_forward(ops::linear_forward(sv.attn_out, attention_dense.weight, attention_dense.bias),
                                    dropout, true, sv.seed1);
    a = a.clone();
    ops::add_forward_(a, x);
    sv.h = attention_norm.apply(a);
    sv.hidden = ops::linear_forward_train(&sv.pre, sv.h, intermediate.weight, intermediate.bias, act);
    sv.seed2 = nn::detail::next_seed();
    Tensor o = ops::dropout_forward(ops::linear_forward(sv.hidden, output.weight, output.bias), dropout, true, sv.seed2);
    o = o.clone();
    ops::add_forward_(o, sv.h);
    return output_norm.apply(o);
  }
  Tensor backward(Saved& sv, const Tensor& dout, const AttentionContext& ctx) {
    // in the forward pass this was:  out = LayerNorm2(dropout(output(act(intermediate(h)))) + h)
    const Tensor dsum2 = output_norm.backward(dout);
    Tensor d;
    ops::dropout_backward(&d, dsum2, dropout, true, sv.seed2);
    Tensor dh = nn::detail::linear_backward(intermediate, nn::detail::linear_backward(output, d, sv.hidden), sv.h,
                                            sv.pre, act);
    ops::add_forward_(dh, dsum2);
    // in the forward pass this was:  h = LayerNorm1(dropout(attention_dense(attn)) + x)
    const Tensor dsum1 = attention_norm.backward(dh);
    ops::dropout_backward(&d, dsum1, dropout, true, sv.seed1);
    Tensor dx = attention.backward(sv.attn, nn::detail::linear_backward(attention_dense, d, sv.attn_out), ctx);
    ops::add_forward_(dx, dsum1);
    return dx;
  }

  void prepare(DType dtype) {
    attention.prepare(dtype);
    for (nn::Linear* l : {&attention_dense, &intermediate, &output}) l->prepare_inference(dtype);
  }

 protected:
  void members(nn::Members& m) override {
    m.children({{"attention.self", attention}, {"attention.output.dense", attention_dense},
                {"attention.output.LayerNorm", attention_norm}, {"intermediate.dense", intermediate},
                {"output.dense", output}, {"output.LayerNorm", output_norm}});
  }
};

// ConvLayer (encoder.conv, deberta-v2-xlarge/xxlarge), applied once, to layer 0's output:
//   out = LayerNorm(layer0 + act(dropout(conv(e) with padded rows 0))) · mask
// where e is the encoder's input (the embeddings' output) and conv a Conv1d over tokens (kernel k, padding
// (k-1)/2, conv_groups) within each sequence (padded rows of e are 0, so the padded batch gives the same).
struct ConvLayer : nn::Module {
  nn::Parameter weight, bias;  // conv.weight (C, C/groups, k), conv.bias (C)
  Tensor dweight, dbias;
  int64_t groups = 1;
  nn::LayerNorm LayerNorm;
  kernels::Act act = kernels::Act::tanh;
  double dropout = 0.0;  // hidden_dropout_prob (training)

  // mask (B, T) 1/0 or undefined; cu_seqlens: e and layer0 packed (1, N, C).
  Tensor forward(const Tensor& e, const Tensor& layer0, const Tensor& mask, const std::vector<int64_t>* cu) const {
    Tensor out = ops::conv1d_forward(e.contiguous(), weight, bias, groups, cu);
    zero_padded_rows(out, mask);
    ops::activation_forward_(out, act);
    Tensor y = LayerNorm.add_apply(out, layer0, false);  // LayerNorm(out + layer0)
    zero_padded_rows(y, mask);
    return y;
  }

  struct Saved {
    Tensor e, pre;  // the conv's input; the activation's input (after dropout)
    uint64_t seed = 0;
  };
  Tensor forward_train(Saved& sv, const Tensor& e, const Tensor& layer0, const Tensor& mask) const {
    sv.e = e.contiguous();
    Tensor out = ops::conv1d_forward(sv.e, weight, bias, groups);
    zero_padded_rows(out, mask);
    sv.seed = nn::detail::next_seed();
    sv.pre = ops::dropout_forward(out, dropout, true, sv.seed).contiguous();
    Tensor sum = ops::activation_forward(sv.pre, act);
    ops::add_forward_(sum, layer0);
    Tensor y = LayerNorm.apply(sum).contiguous().clone();
    zero_padded_rows(y, mask);
    return y;
  }
  // dy: the gradient of the output; returns the gradient of layer0 and writes the gradient of e to *de.
  Tensor backward(Saved& sv, const Tensor& dy, const Tensor& mask, Tensor* de) {
    // in the forward pass this was:  y = LayerNorm(act(dropout(mask0(conv(e)))) + layer0) · mask
    Tensor d = dy.contiguous().clone();
    zero_padded_rows(d, mask);
    const Tensor dsum = LayerNorm.backward(d);
    Tensor dpre, dout;
    ops::activation_backward(&dpre, dsum, sv.pre, act);
    ops::dropout_backward(&dout, dpre, dropout, true, sv.seed);
    dout = dout.contiguous().clone();
    zero_padded_rows(dout, mask);
    ops::conv1d_backward(de, &Module::grad_of(dweight, weight), &Module::grad_of(dbias, bias), dout, sv.e, weight,
                         groups);
    return dsum;
  }

 protected:
  void members(nn::Members& m) override {
    m.parameter("conv.weight", weight, dweight);
    m.parameter("conv.bias", bias, dbias);
    m.child("LayerNorm", LayerNorm);
  }
};

// ---------------- the model ----------------

class DebertaV2 : public EncoderModel {
 public:
  DebertaV2Config config;
  DebertaV2Embeddings embeddings;
  std::vector<DebertaV2Layer> layers;
  std::optional<nn::Embedding> rel_embeddings;  // encoder.rel_embeddings (relative_attention)
  std::optional<nn::LayerNorm> rel_norm;        // encoder.LayerNorm (norm_rel_ebd "layer_norm")
  std::optional<ConvLayer> conv;                // encoder.conv (conv_kernel_size > 0), after layer 0
  // DebertaV2ForSequenceClassification: classifier(dropout(act(pooler.dense(dropout(x[:, 0]))))) (ContextPooler);
  // DebertaV2ForTokenClassification: classifier(dropout(x)) on every token.
  std::optional<ClassificationHead> head;
  std::optional<MaskedLMHead> masked_lm;  // DebertaV2ForMaskedLM (inference; not a parameter)
  std::string checkpoint_prefix;          // "" (DebertaV2Model) or "deberta." (a task model's checkpoint)

  ModelOutput forward(const Tensor& ids, const Tensor& mask, const Tensor& types,
                      const ForwardOptions& opt) const override {
    auto [B, T] = check_inputs(ids, mask, types);
    if (config.position_biased_input)
      ENCORE_CHECK(T <= config.max_positions, "input length ", T, " exceeds max_position_embeddings ",
                   config.max_positions);
    if (training_) clear_saved();
    auto sv = training_ ? std::make_shared<Saved>() : nullptr;
    ModelOutput out;
    Tensor x = embeddings.forward(ids, types, mask, sv ? &sv->embed_in : nullptr);
    if (sv) {
      sv->seed_embeddings = nn::detail::next_seed();
      x = ops::dropout_forward(x, embeddings.dropout, true, sv->seed_embeddings);
    }
    const Tensor kpm = key_padding_from_attention_mask(mask, B, T);
    const std::optional<PackedBatch> packed = PackedBatch::plan(kpm, opt, training_);
    AttentionContext ctx;
    if (packed) {
      x = packed->gather(x);
      ctx.cu_seqlens = &packed->cu_seqlens;
    } else {
      ctx.key_padding = kpm;
    }
    if (config.relative_attention) {
      ctx.rel = RelativePositions::plan(T, config);
      Tensor rows = Tensor::empty({ctx.rel.rows()}, DType::i64);
      for (int64_t r = 0; r < ctx.rel.rows(); ++r) rows.data<int64_t>()[r] = ctx.rel.lo + r;
      ctx.rel_rows = rel_embeddings->apply(rows, "relative positions");
      if (rel_norm) ctx.rel_rows = rel_norm->apply(ctx.rel_rows);
    }

    const Tensor encoder_input = x;  // the ConvLayer's input
    auto conv_after_layer0 = [&](size_t i, Tensor& h) {
      if (i != 0 || !conv) return;
      h = sv ? conv->forward_train(sv->conv, encoder_input, h, mask)
             : conv->forward(encoder_input, h, packed ? Tensor() : mask, ctx.cu_seqlens);
    };
    x = run_layer_stack(layers, x, ctx, StackRecorder{opt, packed ? &*packed : nullptr, out}, sv ? &sv->stack : nullptr,
                        gradient_checkpointing, conv_after_layer0);
    out.last_hidden_state = packed ? packed->scatter(x) : x;
    if (opt.output_hidden_states) out.hidden_states.back() = out.last_hidden_state;
    if (head && opt.compute_logits) {
      const Tensor features =
          head->input == ClassificationHead::Input::every_token ? out.last_hidden_state : first_token(out.last_hidden_state);
      out.logits = head->forward(features, sv ? &sv->head : nullptr);
      if (sv) sv->logits = true;
    }
    if (masked_lm && opt.compute_logits && !sv)  // the training forward leaves masked-LM logits undefined
      out.logits = masked_lm->forward(out.last_hidden_state, embeddings.word_embeddings.weight);
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
    auto sv = pop_saved<Saved>("deberta-v2");
    ENCORE_CHECK(!d_pooler.defined(), "backward: d_pooler given but deberta-v2 has no pooler output");
    const Tensor& last = sv->last;
    Tensor dlast = d_last.defined() ? d_last.contiguous().clone() : Tensor::zeros(last.shape());
    check_shape(dlast, "d_last_hidden_state", last.shape());
    if (d_logits.defined()) {
      ENCORE_CHECK(head && sv->logits, "backward: d_logits given but no logits were computed");
      const Tensor dfeatures = head->backward(sv->head, d_logits.contiguous());
      if (head->input == ClassificationHead::Input::every_token) {
        ops::add_forward_(dlast, dfeatures);
      } else {  // dlast[:, 0] += d
        Tensor first = dlast.select(1, 0);
        first.copy_from(ops::add_forward(first.contiguous(), dfeatures));
      }
    }
    Tensor drel = config.relative_attention ? Tensor::zeros(sv->ctx.rel_rows.shape()) : Tensor();
    sv->ctx.drel = &drel;
    Tensor dconv_input;
    Tensor d = layer_stack_backward(sv->stack, layers, dlast, sv->ctx, [&](size_t i, Tensor& dy) {
      if (i == 0 && conv) dy = conv->backward(sv->conv, dy, sv->mask, &dconv_input);
    });
    if (conv) ops::add_forward_(d, dconv_input);  // in the forward pass the encoder's input fed layer 0 and the conv
    if (config.relative_attention) {
      // in the forward pass this was:  rel_rows = rel_norm(rel_embeddings[lo:hi])
      rel_embeddings->backward(rel_norm ? rel_norm->backward(drel) : drel);
    }
    // in the forward pass this was:  x = dropout(LayerNorm(embed_proj(word + position + type)) · mask)
    Tensor dnorm;
    ops::dropout_backward(&dnorm, d, embeddings.dropout, true, sv->seed_embeddings);
    dnorm = dnorm.contiguous().clone();
    zero_padded_rows(dnorm, sv->mask);
    Tensor demb = embeddings.LayerNorm.backward(dnorm);
    if (embeddings.embed_proj) demb = nn::detail::linear_backward(*embeddings.embed_proj, demb, sv->embed_in);
    // the tables were looked up in this order in the forward; each Embedding pops its own saved ids
    if (embeddings.token_type_embeddings) embeddings.token_type_embeddings->backward(demb);
    if (embeddings.position_embeddings) embeddings.position_embeddings->backward(demb);
    embeddings.word_embeddings.backward(demb);
  }

  void add_sequence_classifier(int64_t num_labels, uint64_t seed) override {
    ENCORE_CHECK(num_labels > 0, "add_sequence_classifier: num_labels must be positive");
    add_head(sequence_layout(), num_labels, seed);
    info.head = "sequence_classification";
  }
  void add_token_classifier(int64_t num_labels, uint64_t seed) override {
    ENCORE_CHECK(num_labels > 0, "add_token_classifier: num_labels must be positive");
    add_head(token_layout(), num_labels, seed);
    info.head = "token_classification";
  }
  void set_dropout(double p) override {
    embeddings.dropout = p;
    for (auto& l : layers) l.dropout = l.attention.dropout = l.attention.pos_dropout = p;
    if (conv) conv->dropout = p;
    config.pooler_dropout = config.cls_dropout = config.hidden_dropout = p;  // what add_*_classifier builds
    if (head) {
      head->dropout_in = head->input_dropout_site ? p : 0.0;
      head->dropout_hidden = head->dense ? p : 0.0;
    }
  }
  void for_each_layer(const std::function<void(nn::TransformerEncoderLayer&)>&) override {}
  void prepare_inference_weights(DType dtype) override {  // layers in parallel, as EncoderModel's (model.cpp)
    prepare_layers_in_parallel(layers, [&](auto& layer) { layer.prepare(dtype); });
    if (embeddings.embed_proj) embeddings.embed_proj->prepare_inference(dtype);
  }

  HfExport export_hf() override {
    HfExport e;
    const bool task = head.has_value();
    e.architecture = std::string("DebertaV2") + (info.head == "sequence_classification" ? "ForSequenceClassification"
                                                 : info.head == "token_classification" ? "ForTokenClassification"
                                                 : info.head == "question_answering"   ? "ForQuestionAnswering"
                                                                                        : "Model");
    std::vector<nn::ParamRef> base;
    nn::ParameterList list(task ? "deberta." : "", base);
    base_members(list);
    for (auto& r : base) e.tensors.emplace_back(r.name, r.param->contiguous());
    if (task) {
      std::vector<nn::ParamRef> own;
      nn::ParameterList heads("", own);
      head->members(heads, "");
      for (auto& r : own) e.tensors.emplace_back(r.name, r.param->contiguous());
    }
    return e;
  }

  std::vector<std::string> layer_linear_weight_names() override {
    std::vector<std::string> out;
    for (size_t i = 0; i < layers.size(); ++i)
      for (const char* name : {"attention.self.query_proj", "attention.self.key_proj", "attention.self.value_proj",
                               "attention.output.dense", "intermediate.dense", "output.dense"})
        out.push_back(checkpoint_prefix + "encoder.layer." + std::to_string(i) + "." + name + ".weight");
    return out;
  }

  ClassificationHead sequence_layout() const {
    return head_layout(ClassificationHead::Input::first_token, "pooler.dense", "classifier",
                       config.pooler_act, config.pooler_dropout, config.cls_dropout);
  }
  ClassificationHead qa_layout() const {  // DebertaV2ForQuestionAnswering: no dropout before qa_outputs
    ClassificationHead h = head_layout(ClassificationHead::Input::every_token, "", "qa_outputs", kernels::Act::none,
                                       0.0, 0.0);
    h.input_dropout_site = false;
    return h;
  }
  ClassificationHead token_layout() const {
    return head_layout(ClassificationHead::Input::every_token, "", "classifier", kernels::Act::none,
                       config.hidden_dropout, 0.0);
  }

 protected:
  void members(nn::Members& m) override {
    base_members(m);
    if (head) head->members(m, "");
  }

 private:
  struct Saved {
    uint64_t seed_embeddings = 0;
    LayerStackSaved<DebertaV2Layer> stack;
    ConvLayer::Saved conv;
    AttentionContext ctx;
    Tensor mask, last, embed_in;
    ClassificationHead::Saved head;
    bool logits = false;
  };
  void add_head(ClassificationHead c, int64_t num_labels, uint64_t seed) {
    const int64_t C = config.hidden;
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal(0.f, 0.02f);
    auto init = [&](nn::Linear& l, int64_t out) {
      l = nn::Linear();
      l.weight = Tensor::empty({out, C});
      for (int64_t i = 0; i < out * C; ++i) l.weight.data<float>()[i] = normal(rng);
      l.bias = Tensor::zeros({out});
      l.in_features = C;
      l.out_features = out;
    };
    init(c.out, num_labels);
    if (c.dense) init(*c.dense, C);
    head = std::move(c);
    masked_lm.reset();  // a classifier replaces a masked-LM head
    info.num_labels = num_labels;
  }
  void base_members(nn::Members& m) {
    m.child("embeddings", embeddings);
    for (size_t i = 0; i < layers.size(); ++i) m.child("encoder.layer." + std::to_string(i), layers[i]);
    if (rel_embeddings) m.child("encoder.rel_embeddings", *rel_embeddings);
    if (rel_norm) m.child("encoder.LayerNorm", *rel_norm);
    if (conv) m.child("encoder.conv", *conv);
  }
};

}  // namespace

std::unique_ptr<EncoderModel> load_deberta_v2(const HfConfig& cfg, const io::WeightStore& store) {
  auto m = std::make_unique<DebertaV2>();
  const DebertaV2Config c = m->config = read_config(cfg);
  const int64_t C = c.hidden, E = c.embedding_size;
  m->checkpoint_prefix = detect_prefix(store, "deberta.", "embeddings.word_embeddings.weight");
  Weights root(store, "");
  Weights w = root.sub(m->checkpoint_prefix);
  DebertaV2Embeddings& emb = m->embeddings;
  emb.word_embeddings = nn::Embedding(w.take("embeddings.word_embeddings.weight", {c.vocab, E}), c.pad_token_id);
  if (c.position_biased_input)
    emb.position_embeddings = nn::Embedding(w.take("embeddings.position_embeddings.weight", {c.max_positions, E}));
  if (c.type_vocab > 0)
    emb.token_type_embeddings = nn::Embedding(w.take("embeddings.token_type_embeddings.weight", {c.type_vocab, E}));
  if (E != C) emb.embed_proj = take_linear_opt_bias(w, "embeddings.embed_proj", C, E, false);
  emb.LayerNorm = take_norm(w, "embeddings.LayerNorm", C, c.eps);
  emb.dropout = c.hidden_dropout;
  for (int64_t i = 0; i < c.layers; ++i) {
    const std::string p = "encoder.layer." + std::to_string(i) + ".";
    DebertaV2Layer l;
    DisentangledSelfAttention& a = l.attention;
    a.query_proj = take_linear(w, p + "attention.self.query_proj", C, C);
    a.key_proj = take_linear(w, p + "attention.self.key_proj", C, C);
    a.value_proj = take_linear(w, p + "attention.self.value_proj", C, C);
    a.heads = c.heads;
    a.head_dim = c.head_dim;
    a.relative = c.relative_attention;
    a.c2p = c.c2p;
    a.p2c = c.p2c;
    a.share_att_key = c.share_att_key;
    if (c.relative_attention && !c.share_att_key) {
      if (c.c2p) a.pos_key_proj = take_linear(w, p + "attention.self.pos_key_proj", C, C);
      if (c.p2c) a.pos_query_proj = take_linear(w, p + "attention.self.pos_query_proj", C, C);
    }
    a.dropout = c.attention_dropout;
    a.pos_dropout = c.hidden_dropout;
    l.attention_dense = take_linear(w, p + "attention.output.dense", C, C);
    l.attention_norm = take_norm(w, p + "attention.output.LayerNorm", C, c.eps);
    l.intermediate = take_linear(w, p + "intermediate.dense", c.intermediate, C);
    l.output = take_linear(w, p + "output.dense", C, c.intermediate);
    l.output_norm = take_norm(w, p + "output.LayerNorm", C, c.eps);
    l.act = act_of(c.activation);
    l.dropout = c.hidden_dropout;
    m->layers.push_back(std::move(l));
  }
  if (c.relative_attention) {
    m->rel_embeddings = nn::Embedding(w.take("encoder.rel_embeddings.weight", {2 * c.span, C}));
    if (c.norm_rel_ebd) m->rel_norm = take_norm(w, "encoder.LayerNorm", C, c.eps);
  }
  if (c.conv_kernel_size > 0) {
    ConvLayer& conv = m->conv.emplace();
    conv.weight = w.take("encoder.conv.conv.weight", {C, C / c.conv_groups, c.conv_kernel_size});
    conv.bias = w.take("encoder.conv.conv.bias", {C});
    conv.groups = c.conv_groups;
    conv.LayerNorm = take_norm(w, "encoder.conv.LayerNorm", C, c.eps);
    conv.act = c.conv_act;
    conv.dropout = c.hidden_dropout;
  }

  ModelInfo& info = m->info;
  info.hidden_size = C;
  const bool seq = architecture_ends_with(cfg, "ForSequenceClassification");
  const bool tok = architecture_ends_with(cfg, "ForTokenClassification");
  if ((seq || tok) && root.has("classifier.weight")) {
    read_labels(cfg, info);
    info.head = seq ? "sequence_classification" : "token_classification";
    m->head = take_head(root, seq ? m->sequence_layout() : m->token_layout(), info.num_labels, C);
  } else if (architecture_ends_with(cfg, "ForQuestionAnswering") && root.has("qa_outputs.weight")) {
    read_question_answering_labels(cfg, info);  // qa_outputs on every token: start and end logits
    info.head = "question_answering";
    m->head = take_head(root, m->qa_layout(), info.num_labels, C);
  } else if (architecture_ends_with(cfg, "ForMaskedLM")) {
    // legacy (transformers' default): cls.predictions.transform.{dense, LayerNorm} (hidden -> embedding_size) and
    // the decoder, tied to the word embeddings unless stored; else lm_predictions.lm_head.{dense, LayerNorm}
    // (hidden -> hidden) with the word embeddings as decoder (so embedding_size must be hidden_size there)
    const kernels::Act act = act_of(c.activation);
    const MaskedLMHead layout =
        c.legacy ? make_masked_lm_layout("cls.predictions.transform.dense", "cls.predictions.transform.LayerNorm",
                                         "cls.predictions.decoder", "cls.predictions.bias", act, c.eps)
                 : make_masked_lm_layout("lm_predictions.lm_head.dense", "lm_predictions.lm_head.LayerNorm",
                                         "lm_predictions.lm_head.decoder", "lm_predictions.lm_head.bias", act, c.eps);
    const bool tied = !c.legacy || !cfg.has("tie_word_embeddings") || cfg.json()["tie_word_embeddings"] == true;
    ENCORE_CHECK_AS(ModelFormatError, c.legacy || E == C, cfg.source(), ": a non-legacy masked-LM head needs ",
                    "embedding_size == hidden_size (transformers multiplies hidden states by the word embeddings)");
    m->masked_lm = take_masked_lm_head(root, layout, C, c.legacy ? E : C, c.vocab, tied);
    if (m->masked_lm) info.head = "masked_lm";
  }
  w.finish();

  info.num_layers = c.layers;
  info.num_heads = c.heads;
  info.intermediate_size = c.intermediate;
  info.hidden_act = c.activation;
  info.vocab_size = c.vocab;
  info.max_position_embeddings = c.max_positions;
  info.pad_token_id = c.pad_token_id;
  for (auto& l : m->layers) info.num_parameters += l.num_parameters();  // the encoder layers' (as every family)
  return m;
}

}  // namespace encore::models
