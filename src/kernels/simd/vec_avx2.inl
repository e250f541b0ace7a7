// 8 x f32 vector for the AVX2+FMA instantiation of simd/*.inl. Included inside namespace
// encore::kernels::avx2 under #pragma GCC target(avx2,fma), see isa_avx2.cpp.
struct Vec {
  __m256 v;
};
constexpr int kWidth = 8;
inline Vec load(const float* p) { return {_mm256_loadu_ps(p)}; }
inline void store(float* p, Vec a) { _mm256_storeu_ps(p, a.v); }
inline Vec set1(float x) { return {_mm256_set1_ps(x)}; }
inline Vec add(Vec a, Vec b) { return {_mm256_add_ps(a.v, b.v)}; }
inline Vec sub(Vec a, Vec b) { return {_mm256_sub_ps(a.v, b.v)}; }
inline Vec mul(Vec a, Vec b) { return {_mm256_mul_ps(a.v, b.v)}; }
inline Vec div(Vec a, Vec b) { return {_mm256_div_ps(a.v, b.v)}; }
inline Vec fmadd(Vec a, Vec b, Vec c) { return {_mm256_fmadd_ps(a.v, b.v, c.v)}; }  // a·b + c
inline Vec vmax(Vec a, Vec b) { return {_mm256_max_ps(a.v, b.v)}; }
inline Vec vmin(Vec a, Vec b) { return {_mm256_min_ps(a.v, b.v)}; }
inline Vec vabs(Vec a) { return {_mm256_andnot_ps(_mm256_set1_ps(-0.f), a.v)}; }
inline Vec copysign_of(Vec mag, Vec sign) {  // |mag| with the sign of sign
  __m256 s = _mm256_and_ps(sign.v, _mm256_set1_ps(-0.f));
  return {_mm256_or_ps(vabs(mag).v, s)};
}
inline float reduce_add(Vec a) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(a.v), _mm256_extractf128_ps(a.v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
inline float reduce_max(Vec a) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(a.v), _mm256_extractf128_ps(a.v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
// 2^n · p for integral-valued n in [-126, 127]; below -126 the result is flushed to 0.
inline Vec scale_pow2(Vec p, Vec n) {
  __m256 below = _mm256_cmp_ps(n.v, _mm256_set1_ps(-126.f), _CMP_LT_OQ);
  __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(vmax(n, set1(-126.f)).v),
                                                 _mm256_set1_epi32(127)), 23);
  __m256 r = _mm256_mul_ps(p.v, _mm256_castsi256_ps(e));
  return {_mm256_andnot_ps(below, r)};
}
inline Vec round_nearest(Vec a) { return {_mm256_round_ps(a.v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)}; }
