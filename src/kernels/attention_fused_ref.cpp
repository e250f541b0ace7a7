// Scalar reference twin of the fused attention kernel (simd/attention_fused.inl): the definition of what it
// computes, one query at a time, written for clarity. Its only buffer is one row of S scores.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/kernels.hpp"

namespace encore::kernels {

int64_t attention_fused_scratch_floats(int64_t T, int64_t D, bool bf16_matmuls) {
  // K tile transposed (D, kAttentionKeyTile), scores (kAttentionQueryTile, kAttentionKeyTile), running max and
  // sum (T each), one key tile's key mask (kAttentionKeyTile) and the score block's row maxima
  // (kAttentionQueryTile x 16 lanes); the key tile is a multiple of every vector width, so no padding is needed. The bf16 kernel keeps
  // its K tile, (ceil(D/2), kAttentionKeyTile) u32 bf16 pairs, in the fp32 K tile's place and adds, in u32 bf16
  // pairs: the V tile (kAttentionKeyTile/2, D rounded up to 16), Q (T, ceil(D/2)) and the probabilities
  // (kAttentionQueryTile, kAttentionKeyTile/2).
  const int64_t kKT = kAttentionKeyTile, kQT = kAttentionQueryTile, D2 = (D + 1) / 2;
  // Rounded up to 16 floats, so that scratches laid end to end (one per thread) all stay 64-byte aligned.
  auto whole_lines = [](int64_t n) { return (n + 15) / 16 * 16; };
  const int64_t f32 = D * kKT + kQT * kKT + 2 * T + kKT + kQT * 16;
  if (!bf16_matmuls) return whole_lines(f32);
  return whole_lines(f32 + kKT / 2 * ((D + 15) / 16 * 16) + T * D2 + kQT * kKT / 2);
}

void attention_prefetch_block(const AttentionBlock& a) {
  // one prefetch per 64-byte line of each row; locality 2: to L2 (a block's rows are 24-130 KB, more than L1)
  auto rows = [](const float* p, int64_t n, int64_t ld, int64_t cols) {
    for (int64_t r = 0; r < n; ++r)
      for (int64_t c = 0; c < cols; c += 16) __builtin_prefetch(p + r * ld + c, 0, 2);
  };
  // The first key tile only (at most 128 rows of k and v, <= 128 KB at head dims of 128): the kernel reads the tiles
  // in order, and prefetching all S rows of a long sequence (512 KB at S = 512, Dk = 64) would evict what the
  // current task still uses. The measured gain was at S <= 128, where this is every key.
  const int64_t keys = std::min(a.causal ? std::min(a.S, a.q_start + a.T) : a.S, kAttentionKeyTile);
  rows(a.q, a.T, a.ld_q, a.Dk);
  rows(a.k, keys, a.ld_k, a.Dk);
  rows(a.v, keys, a.ld_v, a.Dv);
  for (int64_t r = 0; r < a.T; ++r)  // the output rows, which the call writes first (with intent to write)
    for (int64_t c = 0; c < a.Dv; c += 16) __builtin_prefetch(a.out + r * a.ld_out + c, 1, 2);
}

uint16_t round_bf16_daz_ref(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  if ((u & 0x7f800000u) == 0) return static_cast<uint16_t>((u >> 16) & 0x8000u);  // zero or denormal: ±0
  if ((u & 0x7f800000u) == 0x7f800000u)  // inf stays inf, NaN stays a (quiet) NaN
    return static_cast<uint16_t>((u >> 16) | ((u & 0x007fffffu) ? 0x40u : 0u));
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);  // round to nearest even
}

namespace {

// max(a, b), NaN if either is: a NaN score makes its query's output NaN (the fast kernels' exp keeps NaN), rather
// than leaving the row as if that key were masked.
template <class T>
T max_keeping_nan(T a, T b) {
  return std::isnan(a) || std::isnan(b) ? std::numeric_limits<T>::quiet_NaN() : std::max(a, b);
}

float bf16_value(float x) {
  const uint32_t u = static_cast<uint32_t>(round_bf16_daz_ref(x)) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

}  // namespace

void attention_fused_bf16_ref(const AttentionBlock& a, float* /*scratch*/) {
  const float neg_inf = -std::numeric_limits<float>::infinity();
  const int64_t kKT = kAttentionKeyTile;
  const int64_t s_end = a.causal ? std::min(a.S, a.q_start + a.T) : a.S;
  std::vector<float> y(static_cast<size_t>(kKT)), acc(static_cast<size_t>(a.Dv));
  for (int64_t i = 0; i < a.T; ++i) {
    float m = neg_inf, l = 0.f;
    std::fill(acc.begin(), acc.end(), 0.f);
    for (int64_t j0 = 0; j0 < s_end; j0 += kKT) {
      const int64_t nk = std::min(kKT, s_end - j0);
      const int64_t limit = std::clamp<int64_t>(a.causal ? a.q_start + i + 1 - j0 : nk, 0, nk);
      // y_j = scale·(bf16(q_i)·bf16(k_j)) + bias[i,j] + key_mask[j] ; mx = max_j y_j
      float mx = neg_inf;
      for (int64_t j = 0; j < limit; ++j) {
        double dot = 0.0;
        for (int64_t d = 0; d < a.Dk; ++d)
          dot += static_cast<double>(bf16_value(a.q[i * a.ld_q + d])) * bf16_value(a.k[(j0 + j) * a.ld_k + d]);
        float s = static_cast<float>(dot) * a.scale;
        if (a.bias) s += a.bias[i * a.ld_bias + j0 + j];
        if (a.key_mask) s += a.key_mask[j0 + j];
        y[j] = s;
        mx = max_keeping_nan(mx, s);
      }
      if (mx == neg_inf) continue;  // nothing to attend to in this tile
      // m' = max(m, mx) ; p_j = exp(y_j - m') ; l = l·exp(m - m') + sum_j p_j ;
      // acc = acc·exp(m - m') + sum_j bf16(p_j)·bf16(v_j)
      const float m_new = max_keeping_nan(m, mx);  // a NaN max stays: the later tiles must not reset acc
      const float alpha = m == neg_inf ? 0.f : std::exp(m - m_new);
      float sum = 0.f;
      for (int64_t j = 0; j < limit; ++j) {
        y[j] = std::exp(y[j] - m_new);
        sum += y[j];
      }
      l = l * alpha + sum;
      for (int64_t d = 0; d < a.Dv; ++d) {
        double pv = 0.0;
        for (int64_t j = 0; j < limit; ++j)
          pv += static_cast<double>(bf16_value(y[j])) * bf16_value(a.v[(j0 + j) * a.ld_v + d]);
        acc[d] = (m == neg_inf ? 0.f : acc[d] * alpha) + static_cast<float>(pv);
      }
      m = m_new;
    }
    // out = acc / l ; zeros when the query attended to nothing (l = 0), NaN when l is
    float* o = a.out + i * a.ld_out;
    const float inv = l == 0.f ? 0.f : 1.f / l;
    for (int64_t d = 0; d < a.Dv; ++d) o[d] = acc[d] * inv;
  }
}

void attention_fused_f32_ref(const AttentionBlock& a, float* /*scratch*/) {
  const float neg_inf = -std::numeric_limits<float>::infinity();
  std::vector<double> p(static_cast<size_t>(std::max<int64_t>(a.S, 1)));
  for (int64_t i = 0; i < a.T; ++i) {
    const int64_t limit = a.causal ? std::min(a.S, a.q_start + i + 1) : a.S;
    // s_j = scale·(q_i·k_j) + bias[i,j] + key_mask[j] ; m = max_j s_j
    double m = neg_inf;
    for (int64_t j = 0; j < limit; ++j) {
      double dot = 0.0;
      for (int64_t d = 0; d < a.Dk; ++d) dot += static_cast<double>(a.q[i * a.ld_q + d]) * a.k[j * a.ld_k + d];
      float s = static_cast<float>(dot) * a.scale + (a.bias ? a.bias[i * a.ld_bias + j] : 0.f) +
                (a.key_mask ? a.key_mask[j] : 0.f);
      p[j] = s;
      m = max_keeping_nan<double>(m, s);
    }
    float* o = a.out + i * a.ld_out;
    if (m == neg_inf) {  // nothing to attend to: zeros, not NaN
      for (int64_t d = 0; d < a.Dv; ++d) o[d] = 0.f;
      continue;
    }
    // p_j = exp(s_j - m) / sum ; out = sum_j p_j·v_j
    double sum = 0.0;
    for (int64_t j = 0; j < limit; ++j) {
      p[j] = std::exp(p[j] - m);
      sum += p[j];
    }
    for (int64_t d = 0; d < a.Dv; ++d) {
      double acc = 0.0;
      for (int64_t j = 0; j < limit; ++j) acc += p[j] * a.v[j * a.ld_v + d];
      o[d] = static_cast<float>(acc / sum);
    }
  }
}

}  // namespace encore::kernels
