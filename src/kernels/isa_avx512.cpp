// The avx512 instantiation of the SIMD kernel bodies. Standard headers are included before the target
// pragma so that their inline functions keep baseline code generation; only the code in namespace
// encore::kernels::avx512 is compiled for avx512, and it is only called after dispatch.cpp checked the CPU.
// GCC 12 warns spuriously inside its own AVX-512 intrinsic headers (GCC PR 105593).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cassert>
#include <cstdint>

#include "kernels/kernels.hpp"
#include "kernels/isa_target.hpp"

ENCORE_TARGET_BEGIN_AVX512

namespace encore::kernels::avx512 {
#include "kernels/simd/vec_avx512.inl"
#include "kernels/simd/math.inl"
#include "kernels/simd/kernels.inl"
#include "kernels/simd/attention_fused.inl"
}  // namespace encore::kernels::avx512

ENCORE_TARGET_END

namespace encore::kernels {
void attention_fused_bf16_avx512(const AttentionBlock& a, float* scratch);  // attention_bf16_avx512.cpp

KernelTable make_avx512_table() {
  KernelTable t{};
  t.name = "avx512";
  t.linear_f32 = linear_f32_onednn;
  t.gemm_f32 = gemm_f32_onednn;
  t.softmax_masked_f32 = avx512::softmax_masked_f32;
  t.layernorm_forward_f32 = avx512::layernorm_forward_f32;
  t.rmsnorm_forward_f32 = avx512::rmsnorm_forward_f32;
  t.activation_f32 = avx512::activation_f32;
  t.gated_f32 = avx512::gated_f32;
  t.add_f32 = avx512::add_f32;
  t.attention_fused_f32 = avx512::attention_fused_f32;
  t.attention_fused_bf16 = cpu_has_avx512_bf16() ? attention_fused_bf16_avx512 : avx512::attention_fused_f32;
  t.add_layernorm_f32 = avx512::add_layernorm_f32;
  t.convert_f32_to_bf16 = avx512::convert_f32_to_bf16;
  t.rotary_f32 = avx512::rotary_f32;
  return t;
}
}  // namespace encore::kernels
