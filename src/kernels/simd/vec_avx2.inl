// 8 x f32 vector for the AVX2+FMA instantiation of simd/*.inl. Included inside namespace
// encore::kernels::avx2 under ENCORE_TARGET_BEGIN_AVX2 (kernels/isa_target.hpp), see isa_avx2.cpp.
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
// r[i][j] <-> r[j][i]: the 8 x 8 block of floats transposed in registers
inline void transpose(Vec (&r)[8]) {
  __m256 t[8], u[8];
  for (int i = 0; i < 4; ++i) {  // pairs of rows interleaved per 128-bit lane
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i].v, r[2 * i + 1].v);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i].v, r[2 * i + 1].v);
  }
  for (int i = 0; i < 2; ++i) {  // 4 x 4 blocks within each 128-bit lane
    u[4 * i] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
    u[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0xee);
    u[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    u[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xee);
  }
  for (int i = 0; i < 4; ++i) {  // then the two 128-bit lanes
    r[i].v = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20);
    r[i + 4].v = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
  }
}
// f32 -> bf16 bits as convert_f32_to_bf16_ref (see vec_avx512.inl): rounded half to even, inf/NaN truncated,
// an empty-payload NaN quieted.
inline void store_bf16(uint16_t* p, Vec a) {
  const __m256i x = _mm256_castps_si256(a.v);
  const __m256i hi = _mm256_srli_epi32(x, 16);
  const __m256i lsb = _mm256_and_si256(hi, _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7fff)), lsb), 16);
  const __m256i zero = _mm256_setzero_si256();
  const __m256i exp_mask = _mm256_set1_epi32(0x7f800000);
  const __m256i special = _mm256_cmpeq_epi32(_mm256_and_si256(x, exp_mask), exp_mask);
  const __m256i empty_hi = _mm256_cmpeq_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x007f0000)), zero);
  const __m256i no_payload = _mm256_cmpeq_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x007fffff)), zero);
  const __m256i quiet = _mm256_andnot_si256(no_payload, _mm256_and_si256(special, empty_hi));
  const __m256i quieted = _mm256_or_si256(hi, _mm256_and_si256(quiet, _mm256_set1_epi32(0x40)));
  const __m256i r = _mm256_blendv_epi8(rounded, quieted, special);
  // every lane is in [0, 0xffff], so unsigned saturation packs exactly
  const __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), packed);
}
