// The backward kernel tables, and the backward kernels with a single implementation (memory-bound: residual
// add, dropout, embedding scatter-add). No second dispatch decision is made here: the backward table is the
// twin of the forward table dispatch.cpp chose (ENCORE_KERNELS=ref -> "ref", ENCORE_ISA caps the ISA).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "kernels/backward.hpp"

namespace encore::kernels {

BackwardKernelTable make_backward_avx2_table();
BackwardKernelTable make_backward_avx512_table();

float act_grad_scalar(float x, Act act) {
  switch (act) {
    case Act::none: return 1.f;
    case Act::relu: return x > 0.f ? 1.f : 0.f;
    case Act::gelu_erf:  // Φ(x) + x·φ(x)
      return 0.5f * (1.f + std::erf(x * 0.70710678118654752f)) + x * std::exp(-0.5f * x * x) * 0.39894228040143267794f;
    case Act::gelu_tanh: {  // (1 + t)/2 + x/2·(1 - t²)·√(2/π)·(1 + 3·0.044715x²), t = tanh(u)
      // t = 1 - 2r, 1 - t² = 4r·(e·r), e = exp(2u) (capped below overflow), r = 1/(1 + e): no cancellation
      const float u = 0.79788456080286536f * (x + 0.044715f * x * x * x);
      const float e = std::exp(std::min(2.f * u, 80.f)), r = 1.f / (1.f + e);
      const float t = 1.f - 2.f * r, sech2 = 4.f * r * (e * r);
      return 0.5f * (1.f + t) + 0.5f * x * sech2 * 0.79788456080286536f * (1.f + 3.f * 0.044715f * x * x);
    }
    case Act::silu: {  // s·(1 + x·(1 - s)), 1 - s = e·s, e = exp(-x)
      const float e = std::exp(std::min(-x, 80.f)), s = 1.f / (1.f + e);
      return s * (1.f + x * (e * s));
    }
    case Act::tanh: {  // 1 - tanh(x)² = 4r·(e·r), e = exp(2x), r = 1/(1 + e)
      const float e = std::exp(std::min(2.f * x, 80.f)), r = 1.f / (1.f + e);
      return 4.f * r * (e * r);
    }
  }
  return 1.f;
}

namespace {

BackwardKernelTable make_ref_table(const char* name) {
  BackwardKernelTable t{};
  t.name = name;
  t.activation_backward_f32 = activation_backward_f32_ref;
  t.gated_backward_f32 = gated_backward_f32_ref;
  t.layernorm_backward_f32 = layernorm_backward_f32_ref;
  t.rmsnorm_backward_f32 = rmsnorm_backward_f32_ref;
  t.softmax_backward_f32 = softmax_backward_f32_ref;
  t.bias_backward_f32 = bias_backward_f32_ref;
  return t;
}

const BackwardKernelTable& table_ref() {
  static const BackwardKernelTable t = make_ref_table("ref");
  return t;
}
const BackwardKernelTable& table_scalar() {
  static const BackwardKernelTable t = make_ref_table("scalar");
  return t;
}
const BackwardKernelTable& table_avx2() {
  static const BackwardKernelTable t = make_backward_avx2_table();
  return t;
}
const BackwardKernelTable& table_avx512() {
  static const BackwardKernelTable t = make_backward_avx512_table();
  return t;
}

}  // namespace

const BackwardKernelTable& backward_kernels() {
  static const BackwardKernelTable& t = [&]() -> const BackwardKernelTable& {
    const std::string forward = kernels().name;
    if (forward == "avx512") return table_avx512();
    if (forward == "avx2") return table_avx2();
    if (forward == "ref") return table_ref();
    return table_scalar();
  }();
  return t;
}

const BackwardKernelTable& backward_kernels_ref() { return table_ref(); }

const BackwardKernelTable* backward_kernels_for(Isa isa) {
  if (!kernels_for(isa)) return nullptr;  // this CPU lacks the ISA
  switch (isa) {
    case Isa::avx512: return &table_avx512();
    case Isa::avx2: return &table_avx2();
    case Isa::scalar: return &table_scalar();
  }
  return nullptr;
}

void add_backward_f32(float* da, float* db, const float* dout, int64_t n) {
  // forward: out = a + b
  if (da && da != dout) std::memcpy(da, dout, static_cast<size_t>(n) * sizeof(float));
  if (db && db != dout) std::memcpy(db, dout, static_cast<size_t>(n) * sizeof(float));
}

void dropout_backward_f32(float* dx, const float* dout, const uint8_t* mask, int64_t n, float p, uint64_t seed,
                          uint64_t offset) {
  if (!mask) {  // dropout is linear in its input: its backward is the same draw applied to dout
    dropout_f32(dx, nullptr, dout, n, p, seed, offset);
    return;
  }
  const float scale = p < 1.f ? 1.f / (1.f - p) : 0.f;
  // forward: out[i] = keep[i] ? in[i]·scale : 0
  for (int64_t i = 0; i < n; ++i) dx[i] = mask[i] ? dout[i] * scale : 0.f;
}

void embedding_backward_f32(float* dtable, const float* dout, const int64_t* ids, int64_t n, int64_t C, int64_t ld,
                            int64_t padding_idx) {
  for (int64_t i = 0; i < n; ++i) {
    if (ids[i] == padding_idx) continue;
    // forward: out[i] = table[ids[i]]  (a plain loop over one row: vectorized by the compiler)
    float* __restrict dst = dtable + ids[i] * ld;
    const float* __restrict src = dout + i * ld;
    for (int64_t c = 0; c < C; ++c) dst[c] += src[c];
  }
}

}  // namespace encore::kernels
