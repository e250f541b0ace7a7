// AVX2 integer primitives the int8 kernel bodies (simd/int8.inl) need beyond simd/vec_avx2.inl. Included
// inside namespace encore::kernels::int8_avx2 under ENCORE_TARGET_BEGIN_AVX2 (kernels/isa_target.hpp), see gemm_int8.cpp.

// float(acc[i] - zp·wsum[i]) for kWidth lanes (int32 arithmetic is exact: see the K limit in gemm_int8.cpp)
inline Vec compensated_i32_to_f32(const int32_t* acc, const int32_t* wsum, int32_t zp) {
  __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(acc));
  __m256i c = _mm256_mullo_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wsum)), _mm256_set1_epi32(zp));
  return {_mm256_cvtepi32_ps(_mm256_sub_epi32(a, c))};
}

// q[i] = clamp(round_half_even(y[i]) + zp, 0, qmax) as bytes (MXCSR rounding: nearest even, as nearbyint)
inline void store_u8(uint8_t* q, Vec y, int32_t zp, int32_t qmax) {
  __m256i v = _mm256_add_epi32(_mm256_cvtps_epi32(y.v), _mm256_set1_epi32(zp));
  v = _mm256_min_epi32(_mm256_max_epi32(v, _mm256_setzero_si256()), _mm256_set1_epi32(qmax));
  // values are in [0, 255]: the saturating packs only narrow
  __m128i w16 = _mm_packus_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  _mm_storel_epi64(reinterpret_cast<__m128i*>(q), _mm_packus_epi16(w16, w16));
}

// bit i set where a[i] > t (ordered compare: NaN lanes are not set)
inline unsigned greater_mask(Vec a, float t) {
  return static_cast<unsigned>(_mm256_movemask_ps(_mm256_cmp_ps(a.v, _mm256_set1_ps(t), _CMP_GT_OQ)));
}
// x[i], or 0 where bit i of mask is set
inline Vec zero_where(Vec x, unsigned mask) {
  const __m256i bits = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
  const __m256i hit = _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32(static_cast<int>(mask)), bits), bits);
  return {_mm256_andnot_ps(_mm256_castsi256_ps(hit), x.v)};
}

// kWidth int8 values widened to f32
inline Vec load_i8_as_f32(const int8_t* p) {
  return {_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))))};
}
