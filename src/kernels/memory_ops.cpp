// Memory-bound kernels with one implementation each: embedding gather, positional tables, dropout.
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/kernels.hpp"

namespace encore::kernels {

void embedding_lookup_f32(float* out, const float* table, const int64_t* ids, int64_t n, int64_t C) {
  for (int64_t i = 0; i < n; ++i) std::memcpy(out + i * C, table + ids[i] * C, static_cast<size_t>(C) * sizeof(float));
}

void embedding_lookup_f32_ref(float* out, const float* table, const int64_t* ids, int64_t n, int64_t C) {
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < C; ++c) out[i * C + c] = table[ids[i] * C + c];
}

void sinusoidal_positions_f32(float* out, int64_t start, int64_t T, int64_t C) {
  for (int64_t t = 0; t < T; ++t) {
    const double pos = static_cast<double>(start + t);
    for (int64_t i = 0; i < C; i += 2) {
      // angle = pos / 10000^(i/C) for the pair (i, i+1)
      const double angle = pos * std::exp(-std::log(10000.0) * static_cast<double>(i) / static_cast<double>(C));
      out[t * C + i] = static_cast<float>(std::sin(angle));
      if (i + 1 < C) out[t * C + i + 1] = static_cast<float>(std::cos(angle));
    }
  }
}

void rotary_cos_sin_f32(float* cos, float* sin, const int64_t* positions, int64_t n, int64_t rotary_dim,
                        double theta) {
  const int64_t half = rotary_dim / 2;
  const float base = static_cast<float>(theta);
  std::vector<float> inv_freq(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    // inv_freq = 1.0 / (base ** (arange(0, R, 2).float() / R)), each step rounded to float32 as torch does
    const float e = static_cast<float>(2 * i) / static_cast<float>(rotary_dim);
    const float p = static_cast<float>(std::pow(static_cast<double>(base), static_cast<double>(e)));
    inv_freq[static_cast<size_t>(i)] = 1.f / p;
  }
  for (int64_t t = 0; t < n; ++t) {
    const float pos = static_cast<float>(positions[t]);
    for (int64_t i = 0; i < half; ++i) {
      const float angle = pos * inv_freq[static_cast<size_t>(i)];  // freqs = inv_freq @ position_ids.float()
      cos[t * half + i] = static_cast<float>(std::cos(static_cast<double>(angle)));
      sin[t * half + i] = static_cast<float>(std::sin(static_cast<double>(angle)));
    }
  }
}

// splitmix64: a well-mixed 64-bit hash of the counter, so keep[i] is a pure function of (seed, i).
static inline uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

void dropout_f32(float* out, uint8_t* mask, const float* in, int64_t n, float p, uint64_t seed, uint64_t offset) {
  const float scale = p < 1.f ? 1.f / (1.f - p) : 0.f;
  const uint64_t threshold = static_cast<uint64_t>(static_cast<double>(p) * 18446744073709551616.0);
  for (int64_t i = 0; i < n; ++i) {
    const bool keep = p < 1.f && splitmix64(seed ^ splitmix64(offset + static_cast<uint64_t>(i))) >= threshold;
    out[i] = keep ? in[i] * scale : 0.f;
    if (mask) mask[i] = keep;
  }
}

}  // namespace encore::kernels
