// The avx512-bf16 instantiation of the fused attention with bf16 matmuls (simd/attention_fused_bf16.inl over the
// shared tile loops of simd/attention_fused.inl). A translation unit of its own because vdpbf16ps needs the
// avx512bf16 target, which the rest of the avx512 table must not assume: dispatch.cpp's avx512 table uses it only
// when cpu_has_avx512_bf16().
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cassert>
#include <cstdint>

#include "kernels/kernels.hpp"
#include "kernels/isa_target.hpp"

ENCORE_TARGET_BEGIN_AVX512_BF16

namespace encore::kernels::avx512_bf16 {
#include "kernels/simd/vec_avx512.inl"
#include "kernels/simd/math.inl"
#include "kernels/simd/attention_fused.inl"
#include "kernels/simd/attention_fused_bf16.inl"
}  // namespace encore::kernels::avx512_bf16

ENCORE_TARGET_END

namespace encore::kernels {
void attention_fused_bf16_avx512(const AttentionBlock& a, float* scratch) { avx512_bf16::attention_fused_bf16(a, scratch); }
}  // namespace encore::kernels
