// MultiheadAttention as torch.nn.MultiheadAttention: packed or separate in-projections, masks, weights.
#include <cstring>

#include "nn/common.hpp"
#include "ops/backward.hpp"

namespace encore::nn {
// What self-attention backward needs from its forward.
struct MhaSaved {
  bool self_attention = false, packed_kv = false;  // packed_kv: cross-attention, key is value, packed weights
  Tensor x, kv_in, q, k, v, probs, heads;
  uint64_t seed = 0;
};
}  // namespace encore::nn

namespace encore::nn {

MultiheadAttention::MultiheadAttention(int64_t embed_dim_, int64_t num_heads_, double dropout_, bool bias,
                                       bool add_bias_kv, bool add_zero_attn, std::optional<int64_t> kdim_,
                                       std::optional<int64_t> vdim_, bool batch_first_)
    : embed_dim(embed_dim_),
      num_heads(num_heads_),
      kdim(kdim_.value_or(embed_dim_)),
      vdim(vdim_.value_or(embed_dim_)),
      dropout(dropout_),
      batch_first(batch_first_) {
  ENCORE_CHECK(embed_dim > 0 && num_heads > 0, "MultiheadAttention: embed_dim and num_heads must be positive, got ",
               embed_dim, " and ", num_heads);
  ENCORE_CHECK(embed_dim % num_heads == 0, "MultiheadAttention: embed_dim must be divisible by num_heads, got ",
               embed_dim, " and ", num_heads);
  ENCORE_CHECK(kdim > 0 && vdim > 0, "MultiheadAttention: kdim and vdim must be positive");
  ENCORE_CHECK(!add_bias_kv && !add_zero_attn,
               "MultiheadAttention: add_bias_kv and add_zero_attn are not supported (see docs/torch_differences.md)");
  ENCORE_CHECK(dropout >= 0.0 && dropout <= 1.0, "MultiheadAttention: dropout must be in [0, 1], got ", dropout);
  head_dim = embed_dim / num_heads;
  if (kdim == embed_dim && vdim == embed_dim) {
    in_proj_weight = Tensor::empty({3 * embed_dim, embed_dim});
  } else {
    q_proj_weight = Tensor::empty({embed_dim, embed_dim});
    k_proj_weight = Tensor::empty({embed_dim, kdim});
    v_proj_weight = Tensor::empty({embed_dim, vdim});
  }
  if (bias) in_proj_bias = Tensor::empty({3 * embed_dim});
  out_proj = Linear(embed_dim, embed_dim, bias);
  reset_parameters(detail::next_seed());
}

void MultiheadAttention::use_in_proj_rows(std::vector<Tensor> query_key_value) {
  ENCORE_CHECK(in_proj_weight.defined() && query_key_value.size() == 3,
               "MultiheadAttention: in-projection rows are query, key and value of a packed in_proj_weight");
  for (const Tensor& t : query_key_value) check_shape(t, "in-projection rows", {embed_dim, embed_dim});
  packed_in_proj.reset();  // a prepared copy of the weight being replaced would be stale
  in_proj_rows_ = std::move(query_key_value);
  in_proj_weight = Tensor();
  in_proj_freed_ = true;
}

Tensor MultiheadAttention::in_proj_rows(int64_t i0, int64_t i1) const {
  const int64_t E = embed_dim;
  if (!in_proj_freed_) return in_proj_weight.slice(0, i0 * E, i1 * E);
  Tensor out = Tensor::empty({(i1 - i0) * E, E});
  for (int64_t i = i0; i < i1; ++i) out.slice(0, (i - i0) * E, (i - i0 + 1) * E).copy_from(in_proj_rows_[i]);
  return out;
}

void MultiheadAttention::rebuild_in_proj() {
  if (!in_proj_freed_) return;
  in_proj_weight = in_proj_rows(0, 3);  // exact: nothing could change the weight while it did not exist
  in_proj_freed_ = false;
  for (const Tensor& t : in_proj_rows_) t.release_resident_pages();
}

bool MultiheadAttention::in_proj_equals_rows() const {
  const Tensor w = in_proj_weight.contiguous();
  const size_t bytes = static_cast<size_t>(embed_dim * embed_dim) * sizeof(float);
  for (int64_t i = 0; i < 3; ++i) {
    const Tensor r = in_proj_rows_[i].contiguous();
    if (std::memcmp(w.data<float>() + i * embed_dim * embed_dim, r.data<float>(), bytes) != 0) return false;
  }
  return true;
}

void MultiheadAttention::drop_own() {
  packed_in_proj.reset();
  rebuild_in_proj();
}

void MultiheadAttention::members(Members& m) {
  m.parameter("in_proj_weight", in_proj_weight, din_proj_weight);
  m.parameter("q_proj_weight", q_proj_weight, dq_proj_weight);
  m.parameter("k_proj_weight", k_proj_weight, dk_proj_weight);
  m.parameter("v_proj_weight", v_proj_weight, dv_proj_weight);
  m.parameter("in_proj_bias", in_proj_bias, din_proj_bias);
  m.child("out_proj", out_proj);
}

Tensor MultiheadAttention::backward(const Tensor& grad_output) {
  ENCORE_CHECK(grad_output.defined() && (grad_output.dim() == 2 || grad_output.dim() == 3),
               "MultiheadAttention.backward: grad_output must be 2-D or 3-D");
  const detail::BatchLayout io(grad_output, batch_first);
  return io.out(backward_batch_first(io.in(grad_output, "grad_output")));
}

Tensor MultiheadAttention::backward_batch_first(const Tensor& dout, Tensor* d_attn_mask, Tensor* d_key_value) {
  rebuild_in_proj();  // the gradient is taken with respect to in_proj_weight (a module put in training without train())
  auto sv = pop_saved<MhaSaved>("MultiheadAttention");
  ENCORE_CHECK(sv->self_attention || (sv->packed_kv && d_key_value),
               "MultiheadAttention.backward: only self-attention (query is key is value) or cross-attention on one "
               "memory (key is value), with the packed in-projection, is supported so far");
  ENCORE_CHECK(dout.shape() == sv->heads.shape(), "MultiheadAttention.backward: grad_output: expected shape ",
               sv->heads.shape_str(), ", got ", dout.shape_str());
  const int64_t E = embed_dim;
  // in the forward pass this was:  out = heads·out_projᵀ + b
  Tensor dheads;
  Tensor& dwo = grad_of(out_proj.dweight, out_proj.weight);
  Tensor* dbo = out_proj.bias.defined() ? &grad_of(out_proj.dbias, out_proj.bias) : nullptr;
  ops::linear_backward(&dheads, &dwo, dbo, dout.contiguous(), Tensor(), sv->heads, out_proj.weight);
  if (!sv->self_attention) {
    // in the forward pass this was:  q = x·W_qᵀ + b_q ; [k | v] = memory·W_kvᵀ + b_kv ; heads = attention(q, k, v)
    Tensor dq = Tensor::empty(sv->q.shape());
    Tensor dkv = Tensor::empty({sv->kv_in.size(0), sv->kv_in.size(1), 2 * E});
    Tensor dk = dkv.slice(2, 0, E), dv = dkv.slice(2, E, 2 * E);
    ops::attention_backward(&dq, &dk, &dv, d_attn_mask, dheads, sv->probs, sv->q, sv->k, sv->v, num_heads, dropout,
                            true, sv->seed);
    Tensor& dw = grad_of(din_proj_weight, in_proj_weight);
    Tensor dw_q = dw.slice(0, 0, E), dw_kv = dw.slice(0, E, 3 * E), db_q, db_kv;
    if (in_proj_bias.defined()) {
      Tensor& db = grad_of(din_proj_bias, in_proj_bias);
      db_q = db.slice(0, 0, E);
      db_kv = db.slice(0, E, 3 * E);
    }
    Tensor dx;
    ops::linear_backward(&dx, &dw_q, db_q.defined() ? &db_q : nullptr, dq, Tensor(), sv->x,
                         in_proj_weight.slice(0, 0, E));
    ops::linear_backward(d_key_value, &dw_kv, db_kv.defined() ? &db_kv : nullptr, dkv, Tensor(), sv->kv_in,
                         in_proj_weight.slice(0, E, 3 * E));
    return dx;
  }
  // in the forward pass this was:  heads = attention(q, k, v) with q, k, v views of qkv = x·in_projᵀ + b
  Tensor dqkv = Tensor::empty({sv->x.size(0), sv->x.size(1), 3 * E});
  Tensor dq = dqkv.slice(2, 0, E), dk = dqkv.slice(2, E, 2 * E), dv = dqkv.slice(2, 2 * E, 3 * E);
  ops::attention_backward(&dq, &dk, &dv, d_attn_mask, dheads, sv->probs, sv->q, sv->k, sv->v, num_heads, dropout, true,
                          sv->seed);
  Tensor dx;
  Tensor& dw = grad_of(din_proj_weight, in_proj_weight);
  Tensor* db = in_proj_bias.defined() ? &grad_of(din_proj_bias, in_proj_bias) : nullptr;
  ops::linear_backward(&dx, &dw, db, dqkv, Tensor(), sv->x, in_proj_weight);
  return dx;
}

void MultiheadAttention::prepare_own(DType dtype) {
  // Not held: stacked from the rows into a transient copy (a block of the caching allocator, which the next
  // layer's preparation on this thread takes again) that the packing reads and frees, or the lazy fp32 path keeps.
  const Tensor weight = in_proj_freed_ ? in_proj_rows(0, 3) : in_proj_weight.contiguous();
  if (weight.defined())
    packed_in_proj = kernels::PackedLinear::create(
        weight.data<float>(), in_proj_bias.defined() ? in_proj_bias.contiguous().data<float>() : nullptr,
        3 * embed_dim, embed_dim, detail::precision_of(dtype), detail::plain_weight(weight));
  if (in_proj_freed_) {
    for (const Tensor& t : in_proj_rows_) t.release_resident_pages();  // read once just now
    return;
  }
  if (in_proj_rows_.empty()) return;
  // Free the weight (forward() reads the prepared copy) only while it still equals the rows it can be rebuilt
  // from; a weight that training or load_state_dict changed stays, and the rows are forgotten.
  if (in_proj_equals_rows()) {
    in_proj_weight = Tensor();
    in_proj_freed_ = true;
  } else {
    in_proj_rows_.clear();
  }
  for (const Tensor& t : in_proj_rows_) t.release_resident_pages();  // read once more just now
}

static bool same_tensor(const Tensor& a, const Tensor& b) {
  return a.raw_data() == b.raw_data() && a.shape() == b.shape() && a.strides() == b.strides();
}

AttentionResult MultiheadAttention::forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                            const Tensor& key_padding_mask, bool need_weights,
                                            const Tensor& attn_mask, bool average_attn_weights,
                                            bool is_causal) const {
  ENCORE_CHECK(query.defined() && key.defined() && value.defined(), "MultiheadAttention: query, key and value are required");
  if (training_) clear_saved();
  ENCORE_CHECK(query.dim() == 2 || query.dim() == 3, "MultiheadAttention: query: expected 2-D (unbatched) or 3-D, got ",
               query.shape_str());
  if (query.dim() == 2) {  // unbatched (T, E): run as a batch of one
    ENCORE_CHECK(key.dim() == 2 && value.dim() == 2, "MultiheadAttention: unbatched query needs 2-D key and value, got ",
                 key.shape_str(), " and ", value.shape_str());
    Tensor kpm = key_padding_mask.defined() ? key_padding_mask.unsqueeze(0) : key_padding_mask;
    // unsqueeze keeps data pointers, so self-attention is still recognised as such.
    AttentionResult r = forward_batch_first(query.unsqueeze(0), key.unsqueeze(0), value.unsqueeze(0), kpm,
                                            need_weights, attn_mask, average_attn_weights, is_causal);
    r.output = r.output.select(0, 0).contiguous();
    if (r.weights.defined()) r.weights = r.weights.select(0, 0).contiguous();
    return r;
  }
  const bool self_kv = same_tensor(key, value), self_qk = same_tensor(query, key);
  Tensor q = detail::to_batch_first(query, batch_first, "query");
  Tensor k = self_qk ? q : detail::to_batch_first(key, batch_first, "key");
  Tensor v = self_kv ? k : detail::to_batch_first(value, batch_first, "value");
  AttentionResult r =
      forward_batch_first(q, k, v, key_padding_mask, need_weights, attn_mask, average_attn_weights, is_causal);
  r.output = detail::from_batch_first(r.output, batch_first);
  return r;
}

AttentionResult MultiheadAttention::forward_batch_first(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
                                                        const Tensor& key_padding_mask, bool need_weights,
                                                        const Tensor& attn_mask, bool average_attn_weights,
                                                        bool is_causal, const std::vector<int64_t>* cu_seqlens) const {
  const int64_t E = embed_dim;
  check_shape(q_in, "query", {-1, -1, E});
  check_shape(k_in, "key", {q_in.size(0), -1, kdim});
  check_shape(v_in, "value", {q_in.size(0), k_in.size(1), vdim});
  const bool packed = in_proj_weight.defined() || in_proj_freed_;
  auto bias_part = [&](int64_t i) { return in_proj_bias.defined() ? in_proj_bias.slice(0, i * E, (i + 1) * E) : Tensor(); };
  auto weight_part = [&](int64_t i0, int64_t i1) { return in_proj_rows(i0, i1); };

  Tensor q, k, v;
  if (packed && same_tensor(q_in, k_in) && same_tensor(k_in, v_in)) {
    // Self-attention: one GEMM for Q, K and V; heads read strided views of the packed (B, T, 3E) result.
    Tensor qkv = packed_in_proj && !training_ ? ops::linear_forward(q_in, *packed_in_proj)
                                              : ops::linear_forward(q_in, weight_part(0, 3), in_proj_bias);
    observe("qkv", qkv);
    q = qkv.slice(2, 0, E);
    k = qkv.slice(2, E, 2 * E);
    v = qkv.slice(2, 2 * E, 3 * E);
  } else {
    q = ops::linear_forward(q_in, packed ? weight_part(0, 1) : Tensor(q_proj_weight), bias_part(0));
    if (packed && same_tensor(k_in, v_in)) {  // cross-attention on one memory: K and V in one GEMM
      Tensor kv_bias = in_proj_bias.defined() ? in_proj_bias.slice(0, E, 3 * E) : Tensor();
      Tensor kv = ops::linear_forward(k_in, weight_part(1, 3), kv_bias);
      k = kv.slice(2, 0, E);
      v = kv.slice(2, E, 2 * E);
    } else {
      k = ops::linear_forward(k_in, packed ? weight_part(1, 2) : Tensor(k_proj_weight), bias_part(1));
      v = ops::linear_forward(v_in, packed ? weight_part(2, 3) : Tensor(v_proj_weight), bias_part(2));
    }
  }

  // Per head, as torch computes them: (B, H, T, head_dim) views (copies only while an observer is installed).
  auto per_head = [&](const Tensor& t) {
    return t.contiguous().view({t.size(0), t.size(1), num_heads, t.size(2) / num_heads}).transpose(1, 2);
  };
  if (detail::observing()) {
    observe("q_heads", per_head(q));
    observe("k_heads", per_head(k));
    observe("v_heads", per_head(v));
  }

  ops::AttentionMasks masks;
  masks.attn_mask = ops::additive_mask(attn_mask, "attn_mask");
  masks.key_padding_mask = ops::additive_mask(key_padding_mask, "key_padding_mask");
  masks.causal = is_causal && !attn_mask.defined();
  if (cu_seqlens) {
    ENCORE_CHECK(!training_ && !need_weights && same_tensor(q_in, k_in) && same_tensor(k_in, v_in),
                 "MultiheadAttention: a padding-free batch (cu_seqlens) is for self-attention inference without "
                 "weights");
    masks.cu_seqlens = *cu_seqlens;
  }
  Tensor probs;
  const uint64_t seed = detail::next_seed();
  std::shared_ptr<MhaSaved> sv;
  Tensor heads;
  if (training_) {  // save what backward needs; probabilities before dropout
    sv = std::make_shared<MhaSaved>();
    sv->self_attention = packed && same_tensor(q_in, k_in) && same_tensor(k_in, v_in);
    sv->packed_kv = packed && !sv->self_attention && same_tensor(k_in, v_in);
    sv->x = q_in;
    sv->kv_in = k_in;
    sv->q = q;
    sv->k = k;
    sv->v = v;
    sv->seed = seed;
    heads = ops::attention_forward_train(&sv->probs, q, k, v, num_heads, masks, dropout, true, seed);
    if (need_weights) probs = sv->probs;
    sv->heads = heads;
    push_saved(sv);
  } else {
    heads = ops::attention_forward(q, k, v, num_heads, masks, need_weights ? &probs : nullptr, dropout, false, seed);
  }
  if (detail::observing()) observe("attn_heads", per_head(heads));  // softmax(q kᵀ / sqrt(d) + mask) v per head
  observe("heads", heads);  // the heads concatenated: (B, T, embed_dim)
  AttentionResult r;
  r.output = detail::linear(out_proj, heads, training_);
  observe("out", r.output);
  if (need_weights) {
    if (average_attn_weights) {  // mean over heads: (B, H, T, S) -> (B, T, S)
      const int64_t B = probs.size(0), H = probs.size(1), T = probs.size(2), S = probs.size(3);
      r.weights = Tensor::zeros({B, T, S});
      const float* p = probs.data<float>();
      float* w = r.weights.data<float>();
      for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t i = 0; i < T * S; ++i) w[b * T * S + i] += p[(b * H + h) * T * S + i] / static_cast<float>(H);
    } else {
      r.weights = probs;
    }
  }
  return r;
}

}  // namespace encore::nn
