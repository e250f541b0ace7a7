// AVX2 primitives the backward kernel bodies (simd/backward.inl) need beyond simd/vec_avx2.inl. Included
// inside namespace encore::kernels::bwd_avx2 under ENCORE_TARGET_BEGIN_AVX2 (kernels/isa_target.hpp), see backward_avx2.cpp.

// x > 0 ? a : 0 (lane-wise; NaN x gives 0)
inline Vec where_positive(Vec x, Vec a) {
  return {_mm256_and_ps(_mm256_cmp_ps(x.v, _mm256_setzero_ps(), _CMP_GT_OQ), a.v)};
}
