// Relative position bias (T5, and the bucketing MPNet shares): bucket(key - query) -> a learned per-head value.
// bias[h, i, j] depends on j - i only, so the fast kernels work per distance (T + S - 1 of them), the references
// per element.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/kernels.hpp"

namespace encore::kernels {

int64_t relative_position_bucket(int64_t rel, bool bidirectional, int64_t num_buckets, int64_t max_distance) {
  int64_t bucket = 0, n = num_buckets, distance = 0;
  if (bidirectional) {
    n /= 2;
    if (rel > 0) bucket += n;
    distance = rel < 0 ? -rel : rel;
  } else {
    distance = rel < 0 ? -rel : 0;  // -min(rel, 0)
  }
  const int64_t max_exact = n / 2;
  if (distance < max_exact) return bucket + distance;
  // max_exact + (log(distance / max_exact) / log(max_distance / max_exact) · (n - max_exact)).to(long), in float32:
  // torch divides the float32 tensor by max_exact, takes a float32 log, and divides by math.log(...) (a double
  // rounded to float32 as torch does with a Python scalar).
  const float ratio = static_cast<float>(distance) / static_cast<float>(max_exact);
  const float denom = static_cast<float>(std::log(static_cast<double>(max_distance) / static_cast<double>(max_exact)));
  const float large = std::log(ratio) / denom * static_cast<float>(n - max_exact);
  return bucket + std::min<int64_t>(max_exact + static_cast<int64_t>(large), n - 1);
}

void relative_position_bias_f32(float* bias, const float* table, int64_t H, int64_t T, int64_t S, int64_t num_buckets,
                                int64_t max_distance, bool bidirectional) {
  // diag[h][d + T - 1] = table[bucket(d), h] for d = j - i in [-(T-1), S-1]; row i of head h is diag[h][T-1-i ...]
  const int64_t D = T + S - 1;
  if (T == 0 || S == 0) return;
  std::vector<int64_t> bucket(static_cast<size_t>(D));
  for (int64_t d = 0; d < D; ++d) bucket[d] = relative_position_bucket(d - (T - 1), bidirectional, num_buckets, max_distance);
  std::vector<float> diag(static_cast<size_t>(D));
  for (int64_t h = 0; h < H; ++h) {
    for (int64_t d = 0; d < D; ++d) diag[d] = table[bucket[d] * H + h];
    for (int64_t i = 0; i < T; ++i)
      std::memcpy(bias + (h * T + i) * S, diag.data() + (T - 1 - i), static_cast<size_t>(S) * sizeof(float));
  }
}

void relative_position_bias_f32_ref(float* bias, const float* table, int64_t H, int64_t T, int64_t S,
                                    int64_t num_buckets, int64_t max_distance, bool bidirectional) {
  for (int64_t h = 0; h < H; ++h)
    for (int64_t i = 0; i < T; ++i)
      for (int64_t j = 0; j < S; ++j)
        bias[(h * T + i) * S + j] = table[relative_position_bucket(j - i, bidirectional, num_buckets, max_distance) * H + h];
}

void relative_position_bias_backward_f32(float* dtable, const float* dbias, int64_t H, int64_t T, int64_t S,
                                         int64_t num_buckets, int64_t max_distance, bool bidirectional) {
  // Sums run in double: a clamped bucket collects up to T·S values (a float sum of 20k terms drifts by ~1e-5).
  const int64_t D = T + S - 1;
  if (T == 0 || S == 0) return;
  std::vector<int64_t> bucket(static_cast<size_t>(D));
  for (int64_t d = 0; d < D; ++d) bucket[d] = relative_position_bucket(d - (T - 1), bidirectional, num_buckets, max_distance);
  std::vector<double> diag(static_cast<size_t>(D)), acc(static_cast<size_t>(num_buckets));
  for (int64_t h = 0; h < H; ++h) {
    // in the forward pass this was:  bias[h, i, j] = diag[h][j - i + T - 1]
    std::fill(diag.begin(), diag.end(), 0.0);
    for (int64_t i = 0; i < T; ++i) {
      const float* row = dbias + (h * T + i) * S;
      double* dd = diag.data() + (T - 1 - i);
      for (int64_t j = 0; j < S; ++j) dd[j] += row[j];
    }
    // in the forward pass this was:  diag[h][d] = table[bucket(d), h]
    std::fill(acc.begin(), acc.end(), 0.0);
    for (int64_t d = 0; d < D; ++d) acc[bucket[d]] += diag[d];
    for (int64_t k = 0; k < num_buckets; ++k)
      dtable[k * H + h] = static_cast<float>(dtable[k * H + h] + acc[k]);
  }
}

void relative_position_bias_backward_f32_ref(float* dtable, const float* dbias, int64_t H, int64_t T, int64_t S,
                                             int64_t num_buckets, int64_t max_distance, bool bidirectional) {
  std::vector<double> acc(static_cast<size_t>(num_buckets * H), 0.0);
  for (int64_t h = 0; h < H; ++h)
    for (int64_t i = 0; i < T; ++i)
      for (int64_t j = 0; j < S; ++j)
        acc[relative_position_bucket(j - i, bidirectional, num_buckets, max_distance) * H + h] += dbias[(h * T + i) * S + j];
  for (int64_t k = 0; k < num_buckets * H; ++k) dtable[k] = static_cast<float>(dtable[k] + acc[k]);
}

}  // namespace encore::kernels
