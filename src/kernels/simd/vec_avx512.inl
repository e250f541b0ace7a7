// 16 x f32 vector for the AVX-512 instantiation of simd/*.inl. Included inside namespace
// encore::kernels::avx512 under ENCORE_TARGET_BEGIN_AVX512 (kernels/isa_target.hpp), see isa_avx512.cpp.
struct Vec {
  __m512 v;
};
constexpr int kWidth = 16;
inline Vec load(const float* p) { return {_mm512_loadu_ps(p)}; }
inline void store(float* p, Vec a) { _mm512_storeu_ps(p, a.v); }
inline Vec set1(float x) { return {_mm512_set1_ps(x)}; }
inline Vec add(Vec a, Vec b) { return {_mm512_add_ps(a.v, b.v)}; }
inline Vec sub(Vec a, Vec b) { return {_mm512_sub_ps(a.v, b.v)}; }
inline Vec mul(Vec a, Vec b) { return {_mm512_mul_ps(a.v, b.v)}; }
inline Vec div(Vec a, Vec b) { return {_mm512_div_ps(a.v, b.v)}; }
inline Vec fmadd(Vec a, Vec b, Vec c) { return {_mm512_fmadd_ps(a.v, b.v, c.v)}; }  // a·b + c
inline Vec vmax(Vec a, Vec b) { return {_mm512_max_ps(a.v, b.v)}; }
inline Vec vmin(Vec a, Vec b) { return {_mm512_min_ps(a.v, b.v)}; }
inline Vec vabs(Vec a) { return {_mm512_abs_ps(a.v)}; }
inline Vec copysign_of(Vec mag, Vec sign) {  // |mag| with the sign of sign
  const __m512i sign_bit = _mm512_set1_epi32(static_cast<int>(0x80000000u));
  __m512i s = _mm512_and_si512(_mm512_castps_si512(sign.v), sign_bit);
  return {_mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(vabs(mag).v), s))};
}
inline float reduce_add(Vec a) { return _mm512_reduce_add_ps(a.v); }
inline float reduce_max(Vec a) { return _mm512_reduce_max_ps(a.v); }
// 2^n · p for integral-valued n; scalef underflows cleanly to 0 for very negative n.
inline Vec scale_pow2(Vec p, Vec n) { return {_mm512_scalef_ps(p.v, n.v)}; }
inline Vec round_nearest(Vec a) { return {_mm512_roundscale_ps(a.v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)}; }
// r[i][j] <-> r[j][i]: the 16 x 16 block of 32-bit lanes transposed in registers (4 rounds of 16 shuffles)
inline void transpose(Vec (&r)[16]) {
  __m512 t[16];
  for (int i = 0; i < 8; ++i) {  // pairs of rows interleaved: (r0[0] r1[0] r0[1] r1[1] | ...) per 128-bit lane
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i].v, r[2 * i + 1].v);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i].v, r[2 * i + 1].v);
  }
  __m512 u[16];
  for (int i = 0; i < 4; ++i) {  // 4 x 4 blocks within each 128-bit lane
    u[4 * i] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
    u[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0xee);
    u[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    u[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xee);
  }
  for (int i = 0; i < 4; ++i) {  // then the 128-bit lanes: 4 x 4 blocks of them
    t[i] = _mm512_shuffle_f32x4(u[i], u[i + 4], 0x88);
    t[i + 4] = _mm512_shuffle_f32x4(u[i], u[i + 4], 0xdd);
    t[i + 8] = _mm512_shuffle_f32x4(u[i + 8], u[i + 12], 0x88);
    t[i + 12] = _mm512_shuffle_f32x4(u[i + 8], u[i + 12], 0xdd);
  }
  for (int i = 0; i < 8; ++i) {
    r[i].v = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
    r[i + 8].v = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xdd);
  }
}
// f32 -> bf16 bits as convert_f32_to_bf16_ref: bits + 0x7fff + lsb(bits >> 16), upper half; exponent all ones
// (inf/NaN) truncates, and a NaN whose payload sat only in the dropped bits gets the quiet bit 0x40.
// (Not vcvtne2ps2bf16: it flushes denormals to zero, which the reference does not.)
inline void store_bf16(uint16_t* p, Vec a) {
  const __m512i x = _mm512_castps_si512(a.v);
  const __m512i hi = _mm512_srli_epi32(x, 16);
  const __m512i lsb = _mm512_and_si512(hi, _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(x, _mm512_set1_epi32(0x7fff)), lsb), 16);
  const __m512i exp_mask = _mm512_set1_epi32(0x7f800000);
  const __mmask16 special = _mm512_cmpeq_epi32_mask(_mm512_and_si512(x, exp_mask), exp_mask);
  const __mmask16 empty_hi = _mm512_testn_epi32_mask(x, _mm512_set1_epi32(0x007f0000));
  const __mmask16 nan = _mm512_test_epi32_mask(x, _mm512_set1_epi32(0x007fffff));
  const __m512i quieted = _mm512_mask_or_epi32(hi, special & empty_hi & nan, hi, _mm512_set1_epi32(0x40));
  const __m512i r = _mm512_mask_blend_epi32(special, rounded, quieted);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(r));
}
