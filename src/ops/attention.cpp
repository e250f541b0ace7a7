// Scaled dot-product attention:
//   scores = Q_bh · K_bhᵀ (T×S) ; P = softmax(scores·scale + masks) ; out_bh = P · V_bh (T×Dv), scale 1/√d unless
//   the caller sets it (torch's scaled_dot_product_attention(scale=))
// Two paths. Fused (inference without weights): one task per (sequence, head, query chunk) runs the fused
// kernel, which never holds more than a query tile x key tile block of scores. Unfused (weights wanted, or
// dropout): one (batch, head) pair per task with a T×S score buffer per thread (or the caller's probs tensor).
#include "encore/profiler.hpp"
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "kernels/kernels.hpp"
#include "ops/ops.hpp"
#include "runtime/parallel.hpp"

namespace encore::ops {

namespace {

bool attention_env_is(const char* value) {
  const char* v = std::getenv("ENCORE_ATTENTION");
  return v && std::strcmp(v, value) == 0;
}
bool unfused_requested() { return attention_env_is("unfused"); }

thread_local bool t_bf16_matmuls = false;  // AttentionPrecisionScope

// One sequence of a fused call: where its rows start in q, k, v and out, how many queries and keys count,
// and its additive key mask (null when its padding was turned into a shorter key range).
struct FusedSeq {
  const float *q, *k, *v;
  float* out;
  int64_t T, S;
  const float* key_mask;
};

// A key padding row that is 0 on a prefix and -inf after it (right padding, what tokenizers produce) is the
// same as attending to the prefix only: {prefix length, no mask}. Any other row is applied as a mask.
std::pair<int64_t, const float*> key_range(const float* row, int64_t S) {
  if (!row) return {S, nullptr};
  int64_t n = 0;
  while (n < S && row[n] == 0.f) ++n;
  for (int64_t j = n; j < S; ++j)
    if (row[j] != -std::numeric_limits<float>::infinity()) return {S, row};
  return {n, nullptr};
}

// Queries per fused call for a sequence of T: whole sequences, unless `pairs` (sequence, head) pairs are too few
// to give each of `threads` threads about 4 tasks; then kAttentionQueryTile multiples.
int64_t fused_chunk(int64_t T, int64_t pairs, int64_t threads) {
  const int64_t Q = kernels::kAttentionQueryTile, tiles = (T + Q - 1) / Q;
  const int64_t want_chunks = (4 * threads + pairs - 1) / std::max<int64_t>(pairs, 1);
  const int64_t chunks = std::clamp<int64_t>(want_chunks, 1, std::max<int64_t>(tiles, 1));
  return std::max<int64_t>(1, (tiles + chunks - 1) / chunks) * Q;  // an empty sequence still divides
}

// Runs the fused kernel over (sequence, head, query chunk) tasks. Each call transposes its keys once, so chunks
// are as long as possible: a whole sequence, split into kAttentionQueryTile multiples only when there are too few
// (sequence, head) pairs to keep every thread busy. Head h of a sequence reads columns [h·Dk, (h+1)·Dk) of q,
// [g·Dk, (g+1)·Dk) of k and [g·Dv, (g+1)·Dv) of v with g = h / group (its key/value head; group = 1 without
// grouped-query attention) and writes [h·Dv, (h+1)·Dv) of out; the bias of (sequence b, head h) is
// bias.plane(b, h), its rows ld_bias apart.
Tensor run_fused(Tensor out, const std::vector<FusedSeq>& seqs, int64_t H, int64_t group, int64_t Dk, int64_t Dv,
                 int64_t ld_q, int64_t ld_k, int64_t ld_v, int64_t ld_out, float scale,
                 const detail::AttnMaskPlanes& bias, int64_t ld_bias, bool causal) {
  const int64_t pairs = static_cast<int64_t>(seqs.size()) * H;
  double flops = 0;  // QKᵀ and PV, as attention_flops counts them
  for (const FusedSeq& sq : seqs) flops += 2.0 * static_cast<double>(H * sq.T * sq.S * (Dk + Dv));
  const int threads = runtime::threads_for_flops(flops);
  std::vector<int64_t> chunk(seqs.size()), first_task(seqs.size() + 1, 0);  // tasks of b: [first_task[b], ...)
  int64_t longest_chunk = 0;
  for (size_t b = 0; b < seqs.size(); ++b) {
    chunk[b] = fused_chunk(seqs[b].T, pairs, threads);
    longest_chunk = std::max(longest_chunk, chunk[b]);
    first_task[b + 1] = first_task[b] + H * ((seqs[b].T + chunk[b] - 1) / chunk[b]);
  }
  // A task costs about queries x keys. Sequences of a batch can differ in length (a server's batches mix them,
  // longest first), so the tasks are split between threads by cost, not by count: an even count gave the thread
  // with the long sequences most of the work. Part p of `parts` takes the tasks whose cost prefix starts in
  // [p, p + 1) x total / parts.
  const int64_t tasks = first_task.back();
  std::vector<double> cost_before(tasks + 1, 0.0);  // cost of tasks [0, t)
  for (size_t b = 0; b < seqs.size(); ++b) {
    const int64_t chunks = (first_task[b + 1] - first_task[b]) / H;
    for (int64_t local = 0; local < first_task[b + 1] - first_task[b]; ++local) {
      const int64_t i0 = (local % std::max<int64_t>(chunks, 1)) * chunk[b];
      const int64_t t = first_task[b] + local;
      cost_before[t + 1] = cost_before[t] + static_cast<double>(std::min(chunk[b], seqs[b].T - i0)) * (seqs[b].S + 16);
    }
  }
  const int64_t parts = std::max<int64_t>(1, std::min<int64_t>(threads, tasks));
  auto part_start = [&](int64_t p) {
    if (p >= parts) return tasks;
    const double target = cost_before[tasks] * static_cast<double>(p) / static_cast<double>(parts);
    return static_cast<int64_t>(std::lower_bound(cost_before.begin(), cost_before.end(), target) - cost_before.begin());
  };
  const auto& kt = kernels::kernels();
  const bool bf16 = attention_bf16_matmuls();
  const auto kernel = bf16 ? kt.attention_fused_bf16 : kt.attention_fused_f32;
  const int64_t scratch_floats = kernels::attention_fused_scratch_floats(longest_chunk, std::max(Dk, Dv), bf16);
  auto block_of = [&](int64_t t) {
    const int64_t b = std::upper_bound(first_task.begin(), first_task.end(), t) - first_task.begin() - 1;
    const FusedSeq& sq = seqs[b];
    const int64_t chunks = (sq.T + chunk[b] - 1) / chunk[b], local = t - first_task[b];
    const int64_t h = local / chunks, i0 = (local % chunks) * chunk[b];
    kernels::AttentionBlock a;
    a.q = sq.q + i0 * ld_q + h * Dk;
    a.k = sq.k + (h / group) * Dk;
    a.v = sq.v + (h / group) * Dv;
    a.out = sq.out + i0 * ld_out + h * Dv;
    a.ld_q = ld_q;
    a.ld_k = ld_k;
    a.ld_v = ld_v;
    a.ld_out = ld_out;
    a.T = std::min(chunk[b], sq.T - i0);
    a.S = sq.S;
    a.Dk = Dk;
    a.Dv = Dv;
    a.scale = scale;
    if (bias.data) {
      a.bias = bias.plane(b, h) + i0 * ld_bias;
      a.ld_bias = ld_bias;
    }
    a.key_mask = sq.key_mask;
    a.causal = causal;
    a.q_start = i0;
    return a;
  };
  // Every part's scratch in one block, allocated here: allocations from inside the region serialised the threads
  // on the allocator's lock (a futex sleep and wake per call, ~10 µs of a 12-head call on 2 threads).
  // (scratch_floats is a multiple of 16, so every part's scratch stays 64-byte aligned.)
  Tensor scratch = Tensor::empty({parts * scratch_floats});
  runtime::parallel_for(0, parts, 1, [&](int64_t p0, int64_t p1) {
    float* part_scratch = scratch.data<float>() + p0 * scratch_floats;
    const int64_t end = part_start(p1);
    for (int64_t t = part_start(p0); t < end; ++t) {
      // the next task's rows start loading while this one runs (a (T, 3E) buffer's rows are kilobytes apart)
      if (t + 1 < end) kernels::attention_prefetch_block(block_of(t + 1));
      kernel(block_of(t), part_scratch);
    }
  });
  return out;
}

// Padding-free batch (AttentionMasks::cu_seqlens): q, k, v are (1, N, E), d their checked shape.
Tensor attention_varlen(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionShape& d,
                        const AttentionMasks& masks, float scale) {
  const std::vector<int64_t>& cu = masks.cu_seqlens;
  const int64_t N = q.size(1), H = d.H, Eo = d.H * d.Dv, B = static_cast<int64_t>(cu.size()) - 1;
  ENCORE_CHECK(d.B == 1 && d.S == N, "attention: a padding-free batch needs q, k, v of shape (1, N, E), got ",
               q.shape_str(), ", ", k.shape_str(), ", ", v.shape_str());
  ENCORE_CHECK(B >= 1 && cu.front() == 0 && cu.back() == N, "attention: cu_seqlens must run from 0 to ", N);
  ENCORE_CHECK(!masks.key_padding_mask.defined(), "attention: a padding-free batch takes no key_padding_mask");
  int64_t longest = 0;
  for (int64_t b = 0; b < B; ++b) {
    ENCORE_CHECK(cu[b + 1] >= cu[b], "attention: cu_seqlens must not decrease");
    longest = std::max(longest, cu[b + 1] - cu[b]);
  }
  const Tensor& am = masks.attn_mask;
  int64_t P = 0;
  if (am.defined()) {
    P = am.size(-1);
    ENCORE_CHECK(P >= longest, "attention: attn_mask ", am.shape_str(), " is shorter than the longest sequence ",
                 longest);
  }
  Tensor out = Tensor::empty({1, N, Eo});
  std::vector<FusedSeq> seqs(B);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t r = cu[b], len = cu[b + 1] - cu[b];
    seqs[b] = {q.data<float>() + r * q.strides()[1], k.data<float>() + r * k.strides()[1],
               v.data<float>() + r * v.strides()[1], out.data<float>() + r * Eo, len, len, nullptr};
  }
  const detail::AttnMaskPlanes planes = detail::attn_mask_planes(am, B, H, P, P);
  return run_fused(out, seqs, H, d.group(), d.Dh, d.Dv, q.strides()[1], k.strides()[1], v.strides()[1], Eo, scale,
                   planes, P, masks.causal);
}

}  // namespace

AttentionPrecisionScope::AttentionPrecisionScope(bool bf16_matmuls) : previous_(t_bf16_matmuls) {
  t_bf16_matmuls = bf16_matmuls;
}
AttentionPrecisionScope::~AttentionPrecisionScope() { t_bf16_matmuls = previous_; }
bool attention_bf16_matmuls() { return t_bf16_matmuls && !attention_env_is("f32"); }

AttentionShape attention_shape(const Tensor& q, const Tensor& k, const Tensor& v, int64_t heads) {
  ENCORE_CHECK(q.dim() == 3 && k.dim() == 3 && v.dim() == 3, "attention: expected 3-D q, k, v, got ", q.shape_str(),
               ", ", k.shape_str(), ", ", v.shape_str());
  AttentionShape d;
  d.B = q.size(0), d.T = q.size(1), d.S = k.size(1), d.H = heads;
  const int64_t E = q.size(2), Ek = k.size(2), Ev = v.size(2);
  ENCORE_CHECK(k.size(0) == d.B && v.size(0) == d.B && v.size(1) == d.S, "attention: q ", q.shape_str(), ", k ",
               k.shape_str(), ", v ", v.shape_str(), " do not agree");
  ENCORE_CHECK(heads > 0 && E % heads == 0, "attention: ", heads, " heads do not divide q's dim ", E);
  d.Dh = E / heads;
  ENCORE_CHECK(d.Dh > 0 && Ek % d.Dh == 0 && Ek > 0 && heads % (Ek / d.Dh) == 0, "attention: k's dim ", Ek,
               " is not a number of key/value heads of dim ", d.Dh, " dividing the ", heads, " query heads (q ",
               q.shape_str(), ", k ", k.shape_str(), ")");
  d.KV = Ek / d.Dh;
  ENCORE_CHECK(Ev % d.KV == 0, "attention: v's dim ", Ev, " is not divisible by the ", d.KV, " key/value heads");
  d.Dv = Ev / d.KV;
  ENCORE_CHECK(q.strides()[2] == 1 && k.strides()[2] == 1 && v.strides()[2] == 1,
               "attention: q, k, v need a contiguous last dimension");
  return d;
}

namespace detail {

float attention_scale(std::optional<double> scale, int64_t head_dim) {
  if (!scale) return static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
  ENCORE_CHECK(std::isfinite(*scale), "attention: scale must be finite, got ", *scale);
  return static_cast<float>(*scale);
}

AttnMaskPlanes attn_mask_planes(const Tensor& am, int64_t B, int64_t H, int64_t T, int64_t S) {
  AttnMaskPlanes p;
  if (!am.defined()) return p;
  check_dtype(am, "attn_mask", DType::f32);
  ENCORE_CHECK(am.is_contiguous(), "attention: attn_mask must be contiguous");
  if (am.dim() == 2) {
    check_shape(am, "attn_mask", {T, S});
  } else {
    ENCORE_CHECK(am.dim() == 3 && (am.size(0) == H || am.size(0) == B * H) && am.size(1) == T && am.size(2) == S,
                 "attention: attn_mask must be (", T, ", ", S, "), (", H, ", ", T, ", ", S, ") or (", B * H, ", ", T,
                 ", ", S, "), got ", am.shape_str());
    p.per_head = T * S;
    p.per_batch = am.size(0) == B * H ? H * T * S : 0;  // (H, T, S) is shared by every sequence
  }
  p.data = am.data<float>();
  return p;
}

}  // namespace detail

int64_t attention_fused_scratch_bytes(int64_t B, int64_t T, int64_t heads, int64_t Dk, int64_t threads, bool bf16_matmuls) {
  // the threads run_fused gives B sequences of T queries and keys (Dv = Dk)
  threads = runtime::threads_for_flops(2.0 * static_cast<double>(B * heads * T * T * 2 * Dk), static_cast<int>(threads));
  const int64_t chunk = fused_chunk(T, B * heads, threads), tasks = B * heads * ((T + chunk - 1) / chunk);
  return std::max<int64_t>(1, std::min(threads, tasks)) *
         kernels::attention_fused_scratch_floats(chunk, Dk, bf16_matmuls) * static_cast<int64_t>(sizeof(float));
}

double attention_flops(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMasks& masks) {
  if (q.dim() != 3 || k.dim() != 3 || v.dim() != 3 || k.size(2) == 0) return 0;
  // per (query, key) pair: H·Dh multiply-adds for the scores, H·Dv for P·V (H·Dv = v's dim · q's dim / k's dim)
  const double out_dim = static_cast<double>(v.size(2)) * static_cast<double>(q.size(2)) / static_cast<double>(k.size(2));
  const double per_pair = 2.0 * (static_cast<double>(q.size(2)) + out_dim);
  if (masks.cu_seqlens.empty())
    return per_pair * static_cast<double>(q.size(0)) * static_cast<double>(q.size(1)) * static_cast<double>(k.size(1));
  double pairs = 0;
  for (size_t b = 0; b + 1 < masks.cu_seqlens.size(); ++b) {
    const double length = static_cast<double>(masks.cu_seqlens[b + 1] - masks.cu_seqlens[b]);
    pairs += length * length;
  }
  return per_pair * pairs;
}

Tensor attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, int64_t heads,
                         const AttentionMasks& masks, Tensor* probs, double dropout_p, bool training,
                         uint64_t seed, std::optional<double> scale_opt) {
  profiler::Scope profile("attention", attention_flops(q, k, v, masks));
  const AttentionShape d = attention_shape(q, k, v, heads);
  if (!masks.cu_seqlens.empty()) {
    ENCORE_CHECK(!probs && !(training && dropout_p > 0.0),
                 "attention: a padding-free batch (cu_seqlens) returns no weights and applies no dropout");
    return attention_varlen(q, k, v, d, masks, detail::attention_scale(scale_opt, d.Dh));
  }
  const int64_t B = d.B, T = d.T, S = d.S, H = d.H, Dh = d.Dh, Dv = d.Dv, group = d.group(), Ev = H * Dv;
  const float scale = detail::attention_scale(scale_opt, Dh);
  const detail::AttnMaskPlanes am = detail::attn_mask_planes(masks.attn_mask, B, H, T, S);
  if (masks.key_padding_mask.defined()) check_shape(masks.key_padding_mask, "key_padding_mask", {B, S});

  Tensor out = Tensor::empty({B, T, Ev});
  if (!probs && !(training && dropout_p > 0.0) && !unfused_requested()) {
    const float* kpm = masks.key_padding_mask.defined() ? masks.key_padding_mask.data<float>() : nullptr;
    std::vector<FusedSeq> seqs(B);
    for (int64_t b = 0; b < B; ++b) {
      auto [keys, key_mask] = key_range(kpm ? kpm + b * S : nullptr, S);
      seqs[b] = {q.data<float>() + b * q.strides()[0], k.data<float>() + b * k.strides()[0],
                 v.data<float>() + b * v.strides()[0], out.data<float>() + b * T * Ev, T, keys, key_mask};
    }
    return run_fused(out, seqs, H, group, Dh, Dv, q.strides()[1], k.strides()[1], v.strides()[1], Ev, scale, am, S,
                     masks.causal);
  }
  if (probs) *probs = Tensor::empty({B, H, T, S});

  const auto& kt = kernels::kernels();
  const float* qp = q.data<float>();
  const float* kp = k.data<float>();
  const float* vp = v.data<float>();
  const int64_t qB = q.strides()[0], qT = q.strides()[1];
  const int64_t kB = k.strides()[0], kT = k.strides()[1];
  const int64_t vB = v.strides()[0], vT = v.strides()[1];
  const float* kpm_p = masks.key_padding_mask.defined() ? masks.key_padding_mask.data<float>() : nullptr;

  const int threads = runtime::threads_for_flops(2.0 * static_cast<double>(B * H * T * S * (Dh + Dv)));
  runtime::parallel_for(0, B * H, 1, [&](int64_t p0, int64_t p1) {
    // One score buffer per task range (i.e. per thread), unless the caller keeps the probabilities.
    Tensor scratch = probs ? Tensor() : Tensor::empty({T * S});
    for (int64_t bh = p0; bh < p1; ++bh) {
      const int64_t b = bh / H, h = bh % H, g = h / group;  // g: its key/value head
      float* scores = probs ? probs->data<float>() + bh * T * S : scratch.data<float>();
      // scores = Q_bh · K_bgᵀ
      kt.gemm_f32(false, true, T, S, Dh, 1.f, qp + b * qB + h * Dh, qT, kp + b * kB + g * Dh, kT, 0.f, scores, S);
      for (int64_t t = 0; t < T; ++t) {
        const float* mask_a = am.data ? am.plane(b, h) + t * S : nullptr;
        const float* mask_b = kpm_p ? kpm_p + b * S : nullptr;
        const int64_t limit = masks.causal ? std::min<int64_t>(S, t + 1) : S;
        kt.softmax_masked_f32(scores + t * S, S, scale, mask_a, mask_b, limit);
      }
      if (training && dropout_p > 0.0)
        kernels::dropout_f32(scores, nullptr, scores, T * S, static_cast<float>(dropout_p), seed,
                             static_cast<uint64_t>(bh * T * S));
      // out_bh = P · V_bg
      kt.gemm_f32(false, false, T, Dv, S, 1.f, scores, S, vp + b * vB + g * Dv, vT, 0.f,
                  out.data<float>() + b * T * Ev + h * Dv, Ev);
    }
  }, threads);
  return out;
}

}  // namespace encore::ops
