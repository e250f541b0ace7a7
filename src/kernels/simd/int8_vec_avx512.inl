// AVX-512 integer primitives the int8 kernel bodies (simd/int8.inl) need beyond simd/vec_avx512.inl. Included
// inside namespace encore::kernels::int8_avx512 under ENCORE_TARGET_BEGIN_AVX512 (kernels/isa_target.hpp), see gemm_int8.cpp.

// float(acc[i] - zp·wsum[i]) for kWidth lanes (int32 arithmetic is exact: see the K limit in gemm_int8.cpp)
inline Vec compensated_i32_to_f32(const int32_t* acc, const int32_t* wsum, int32_t zp) {
  __m512i a = _mm512_loadu_si512(acc);
  __m512i c = _mm512_mullo_epi32(_mm512_loadu_si512(wsum), _mm512_set1_epi32(zp));
  return {_mm512_cvtepi32_ps(_mm512_sub_epi32(a, c))};
}

// q[i] = clamp(round_half_even(y[i]) + zp, 0, qmax) as bytes (MXCSR rounding: nearest even, as nearbyint)
inline void store_u8(uint8_t* q, Vec y, int32_t zp, int32_t qmax) {
  __m512i v = _mm512_add_epi32(_mm512_cvtps_epi32(y.v), _mm512_set1_epi32(zp));
  v = _mm512_min_epi32(_mm512_max_epi32(v, _mm512_setzero_si512()), _mm512_set1_epi32(qmax));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(q), _mm512_cvtepi32_epi8(v));
}

// bit i set where a[i] > t (ordered compare: NaN lanes are not set)
inline unsigned greater_mask(Vec a, float t) {
  return static_cast<unsigned>(_mm512_cmp_ps_mask(a.v, _mm512_set1_ps(t), _CMP_GT_OQ));
}
// x[i], or 0 where bit i of mask is set
inline Vec zero_where(Vec x, unsigned mask) { return {_mm512_maskz_mov_ps(static_cast<__mmask16>(~mask), x.v)}; }

// kWidth int8 values widened to f32
inline Vec load_i8_as_f32(const int8_t* p) {
  return {_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))))};
}
