// The avx2 instantiation of the SIMD kernel bodies. Standard headers are included before the target
// pragma so that their inline functions keep baseline code generation; only the code in namespace
// encore::kernels::avx2 is compiled for avx2, and it is only called after dispatch.cpp checked the CPU.
#include <immintrin.h>

#include <algorithm>
#include <cassert>
#include <cstdint>

#include "kernels/kernels.hpp"
#include "kernels/isa_target.hpp"

ENCORE_TARGET_BEGIN_AVX2

namespace encore::kernels::avx2 {
#include "kernels/simd/vec_avx2.inl"
#include "kernels/simd/math.inl"
#include "kernels/simd/kernels.inl"
#include "kernels/simd/attention_fused.inl"
}  // namespace encore::kernels::avx2

ENCORE_TARGET_END

namespace encore::kernels {
KernelTable make_avx2_table() {
  KernelTable t{};
  t.name = "avx2";
  t.linear_f32 = linear_f32_onednn;
  t.gemm_f32 = gemm_f32_onednn;
  t.softmax_masked_f32 = avx2::softmax_masked_f32;
  t.layernorm_forward_f32 = avx2::layernorm_forward_f32;
  t.rmsnorm_forward_f32 = avx2::rmsnorm_forward_f32;
  t.activation_f32 = avx2::activation_f32;
  t.gated_f32 = avx2::gated_f32;
  t.add_f32 = avx2::add_f32;
  t.attention_fused_f32 = avx2::attention_fused_f32;
  t.attention_fused_bf16 = avx2::attention_fused_f32;  // no bf16 dot product: exact fp32
  t.add_layernorm_f32 = avx2::add_layernorm_f32;
  t.convert_f32_to_bf16 = avx2::convert_f32_to_bf16;
  t.rotary_f32 = avx2::rotary_f32;
  return t;
}
}  // namespace encore::kernels
