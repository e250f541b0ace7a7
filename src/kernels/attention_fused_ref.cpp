// Scalar reference twin of the fused attention kernel (simd/attention_fused.inl): the definition of what it
// computes, one query at a time, written for clarity. Its only buffer is one row of S scores.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/kernels.hpp"

namespace encore::kernels {

int64_t attention_fused_scratch_floats(int64_t T, int64_t Dk) {
  // K tile transposed (Dk, kAttentionKeyTile), scores (kAttentionQueryTile, kAttentionKeyTile), running max and
  // sum (T each); the key tile is a multiple of every vector width, so no padding is needed.
  return Dk * kAttentionKeyTile + kAttentionQueryTile * kAttentionKeyTile + 2 * T;
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
      m = std::max<double>(m, s);
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
