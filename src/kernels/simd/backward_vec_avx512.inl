// AVX-512 primitives the backward kernel bodies (simd/backward.inl) need beyond simd/vec_avx512.inl. Included
// inside namespace encore::kernels::bwd_avx512 under ENCORE_TARGET_BEGIN_AVX512 (kernels/isa_target.hpp), see backward_avx512.cpp.

// x > 0 ? a : 0 (lane-wise; NaN x gives 0)
inline Vec where_positive(Vec x, Vec a) {
  return {_mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x.v, _mm512_setzero_ps(), _CMP_GT_OQ), a.v)};
}
