// The fused attention with bf16 matmuls (AVX512-BF16 vdpbf16ps), included after attention_fused.inl in the
// avx512-bf16 instantiation (attention_bf16_avx512.cpp). Scalar meaning and contract: attention_fused_bf16_ref and
// attention_fused_bf16 in kernels.hpp. The tile loops and the fp32 online softmax are attention_fused_tiles; only
// the two matmuls change: their inputs are rounded to bf16 (vcvtneps2bf16) and laid out in pairs, since
// vdpbf16ps multiplies pairs of bf16 and adds both products into one fp32 lane:
//   acc[lane] += a[2·lane]·b[2·lane] + a[2·lane + 1]·b[2·lane + 1]
//   scores: a = (q[i, 2p], q[i, 2p+1]) broadcast, b = (k[j, 2p], k[j, 2p+1]) for 16 keys j  -> kt2 (Dk2, kKT)
//   P·V:    a = (p[i, 2p], p[i, 2p+1]) broadcast, b = (v[2p, c], v[2p+1, c]) for 16 columns c -> vt2 (kKT/2, Dv16)

namespace attention_detail {

inline __mmask16 first_lanes(int64_t n) {
  return n >= 16 ? __mmask16(0xffff) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1u);
}

// bf16 bits of p[0, n) (n <= 16) in 16 u16 lanes, zero beyond n: round to nearest even, denormals to ±0
// (vcvtneps2bf16; round_bf16_daz_ref is its scalar twin).
inline __m256i bf16_of(const float* p, int64_t n) {
  return (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(first_lanes(n), p));
}

// (bf16(lo[c]), bf16(hi[c])) pairs for c < 16 as 16 u32 lanes, from 16 floats each (n of them loaded, zero beyond):
// vcvtne2ps2bf16 gives [bf16(lo) | bf16(hi)] in 32 u16 lanes, vpermw interleaves the halves.
inline __m512i bf16_pairs(const float* lo, const float* hi, int64_t n) {
  const __mmask16 m = first_lanes(n);
  const __m512 l = _mm512_maskz_loadu_ps(m, lo), h = hi ? _mm512_maskz_loadu_ps(m, hi) : _mm512_setzero_ps();
  const __m512i both = (__m512i)_mm512_cvtne2ps_pbh(h, l);  // u16 lanes 0-15: bf16(l), 16-31: bf16(h)
  const __m512i interleave = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6,
                                              21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  return _mm512_permutexvar_epi16(interleave, both);
}

inline __m512 dot_pairs(__m512 acc, __m512i a, __m512i b) {
  return _mm512_dpbf16_ps(acc, (__m512bh)a, (__m512bh)b);
}

// row[0, 2·n2) = bf16(x[0, n)), zero in [n, 2·n2)
inline void bf16_row(uint16_t* row, const float* x, int64_t n, int64_t n2) {
  for (int64_t c = 0; c < 2 * n2; c += 16) {
    const __m256i b = bf16_of(x + c, std::max<int64_t>(0, std::min<int64_t>(16, n - c)));
    _mm256_mask_storeu_epi16(row + c, first_lanes(2 * n2 - c), b);
  }
}

// s[r, c + 16x] = scale · sum_p qb[r, p]·kt2[p, c + 16x] (pairs), R rows x NV vectors of keys
template <int R, int NV>
inline void score_block_bf16(const ScoreOut& o, const uint32_t* qb, int64_t ld_qb, const uint32_t* kt2, int64_t Dk2, int64_t c,
                             float scale) {
  Vec acc[R][NV];
  for (int r = 0; r < R; ++r)
    for (int x = 0; x < NV; ++x) acc[r][x].v = _mm512_setzero_ps();
  for (int64_t p = 0; p < Dk2; ++p) {
    __m512i kv[NV];
    for (int x = 0; x < NV; ++x) kv[x] = _mm512_loadu_si512(kt2 + p * kKT + c + x * 16);
    for (int r = 0; r < R; ++r) {
      const __m512i qv = _mm512_set1_epi32(static_cast<int>(qb[r * ld_qb + p]));
      for (int x = 0; x < NV; ++x) acc[r][x].v = dot_pairs(acc[r][x].v, qv, kv[x]);
    }
  }
  store_scores<R, NV>(o, acc, c, scale);
}

// acc[r, c + 16x] += sum_p pb[r, p]·vt2[p, c + 16x] (pairs) over np pairs of keys; columns past Dv masked
template <int R, int NV>
inline void pv_block_bf16(float* acc, int64_t ld_acc, const uint32_t* pb, const uint32_t* vt2, int64_t Dv16,
                          int64_t np, int64_t c, int64_t Dv) {
  __m512 a[R][NV];
  __mmask16 lanes[NV];
  for (int x = 0; x < NV; ++x) lanes[x] = first_lanes(Dv - c - x * 16);
  for (int r = 0; r < R; ++r)
    for (int x = 0; x < NV; ++x) a[r][x] = _mm512_maskz_loadu_ps(lanes[x], acc + r * ld_acc + c + x * 16);
  for (int64_t p = 0; p < np; ++p) {
    __m512i vv[NV];
    for (int x = 0; x < NV; ++x) vv[x] = _mm512_loadu_si512(vt2 + p * Dv16 + c + x * 16);
    for (int r = 0; r < R; ++r) {
      const __m512i pv = _mm512_set1_epi32(static_cast<int>(pb[r * (kKT / 2) + p]));
      for (int x = 0; x < NV; ++x) a[r][x] = dot_pairs(a[r][x], pv, vv[x]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int x = 0; x < NV; ++x) _mm512_mask_storeu_ps(acc + r * ld_acc + c + x * 16, lanes[x], a[r][x]);
}

struct Bf16Tiles {
  const AttentionBlock& a;
  uint32_t* kt2;  // (Dk2, kKT): kt2[p, j] = bf16 pair (k[j0+j, 2p], k[j0+j, 2p+1]), zero beyond nk
  uint32_t* vt2;  // (kKT/2, Dv16): vt2[p, c] = bf16 pair (v[j0+2p, c], v[j0+2p+1, c]), zero beyond nk and Dv
  uint32_t* qb;   // (T, Dk2): q rounded to bf16, pairs; the dims padded to even with 0
  uint32_t* pb;   // (kQT, kKT/2): probabilities rounded to bf16, pairs of keys
  int64_t Dk2 = 0, Dv16 = 0, nk_pad = 0;

  // kt2 takes the fp32 kernel's key tile region (D·kKT floats), the rest follows the running max and sum
  Bf16Tiles(const AttentionBlock& blk, float* key_tile, float* extra) : a(blk) {
    Dk2 = (a.Dk + 1) / 2;
    Dv16 = (a.Dv + 15) / 16 * 16;
    kt2 = reinterpret_cast<uint32_t*>(key_tile);
    float* f = extra;
    vt2 = reinterpret_cast<uint32_t*>(f);
    f += kKT / 2 * Dv16;
    qb = reinterpret_cast<uint32_t*>(f);
    f += a.T * Dk2;
    pb = reinterpret_cast<uint32_t*>(f);
    for (int64_t i = 0; i < a.T; ++i) bf16_row(reinterpret_cast<uint16_t*>(qb + i * Dk2), a.q + i * a.ld_q, a.Dk, Dk2);
  }

  void load_keys(int64_t j0, int64_t nk) {
    nk_pad = (nk + 15) / 16 * 16;
    // Start the loads of the tile's K and V rows now (they come from a QKV buffer larger than L2, rows 3E floats
    // apart), so the transposition and the packing below do not wait on each row in turn.
    for (int64_t j = 0; j < nk; ++j) {
      for (int64_t c = 0; c < a.Dk; c += 16) _mm_prefetch(reinterpret_cast<const char*>(a.k + (j0 + j) * a.ld_k + c), _MM_HINT_T0);
      for (int64_t c = 0; c < a.Dv; c += 16) _mm_prefetch(reinterpret_cast<const char*>(a.v + (j0 + j) * a.ld_v + c), _MM_HINT_T0);
    }
    // kt2[p, j] = (bf16(k[j0+j, 2p]), bf16(k[j0+j, 2p+1])): 16 key rows of 32 dims rounded to 16 u32 pairs each
    // (vcvtne2ps2bf16 keeps the row order, so u32 lane p is the pair (2p, 2p+1)), then the 16 x 16 block of
    // pairs transposed in registers. Dims past Dk and keys past nk are 0.
    for (int64_t j = 0; j < nk_pad; j += 16) {
      const int64_t rows = std::min<int64_t>(16, nk - j);
      for (int64_t p0 = 0; p0 < Dk2; p0 += 16) {
        const int64_t d0 = 2 * p0;
        const __mmask16 lo = first_lanes(a.Dk - d0), hi = first_lanes(a.Dk - d0 - 16);
        Vec r[16];
        for (int x = 0; x < 16; ++x) {
          const float* kr = a.k + (j0 + j + x) * a.ld_k + d0;
          r[x].v = x < rows ? (__m512)_mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(hi, kr + 16), _mm512_maskz_loadu_ps(lo, kr))
                            : _mm512_setzero_ps();
        }
        transpose(r);
        for (int64_t x = 0; x < std::min<int64_t>(16, Dk2 - p0); ++x) _mm512_storeu_ps(reinterpret_cast<float*>(kt2 + (p0 + x) * kKT + j), r[x].v);
      }
    }
    for (int64_t p = 0; 2 * p < nk; ++p) {
      const float* v0 = a.v + (j0 + 2 * p) * a.ld_v;
      const float* v1 = 2 * p + 1 < nk ? v0 + a.ld_v : nullptr;
      for (int64_t c = 0; c < Dv16; c += 16) _mm512_storeu_si512(vt2 + p * Dv16 + c, bf16_pairs(v0 + c, v1 ? v1 + c : nullptr, a.Dv - c));
    }
  }

  void scores(const ScoreOut& so, int64_t i0, int64_t nq, int64_t /*nk*/) {
    for_row_blocks(nq, [&]<int R>(int64_t r) {
      const ScoreOut o = so.rows_from(r);
      const uint32_t* q = qb + (i0 + r) * Dk2;
      int64_t c = 0;
      for (; c + 64 <= nk_pad; c += 64) score_block_bf16<R, 4>(o, q, Dk2, kt2, Dk2, c, a.scale);
      switch ((nk_pad - c) / 16) {  // the rest as one block: R·NV chains in flight (a short key tile, e.g. 48)
        case 3: score_block_bf16<R, 3>(o, q, Dk2, kt2, Dk2, c, a.scale); break;
        case 2: score_block_bf16<R, 2>(o, q, Dk2, kt2, Dk2, c, a.scale); break;
        case 1: score_block_bf16<R, 1>(o, q, Dk2, kt2, Dk2, c, a.scale); break;
        default: break;
      }
    });
  }

  // p[r, j .. j + 16) rounded to bf16 straight into the pairs P·V reads (pb rows are kKT u16 long)
  void put_p(float* /*row*/, int64_t r, int64_t j, Vec e) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(reinterpret_cast<uint16_t*>(pb + r * (kKT / 2)) + j), (__m256i)_mm512_cvtneps_pbh(e.v));
  }

  void pv(float* acc, const float* s, int64_t nq, int64_t nk, bool put) {
    const int64_t np = (nk + 1) / 2;
    if (!put)  // the two-pass softmax left p in s
      for (int64_t r = 0; r < nq; ++r) bf16_row(reinterpret_cast<uint16_t*>(pb + r * (kKT / 2)), s + r * kKT, nk, np);
    auto rows = [&]<int R>(int64_t r) {
      float* o = acc + r * a.ld_out;
      const uint32_t* p = pb + r * (kKT / 2);
      int64_t c = 0;
      for (; c + 64 <= Dv16; c += 64) pv_block_bf16<R, 4>(o, a.ld_out, p, vt2, Dv16, np, c, a.Dv);
      for (; c + 32 <= Dv16; c += 32) pv_block_bf16<R, 2>(o, a.ld_out, p, vt2, Dv16, np, c, a.Dv);
      for (; c < Dv16; c += 16) pv_block_bf16<R, 1>(o, a.ld_out, p, vt2, Dv16, np, c, a.Dv);
    };
    // A head of at most two vectors (Dv <= 32) holds 2·R accumulators: 8 rows fill 16 registers.
    if (Dv16 <= 32) for_row_blocks<8>(nq, rows);
    else for_row_blocks(nq, rows);
  }
};

}  // namespace attention_detail

void attention_fused_bf16(const AttentionBlock& a, float* scratch) {
  using namespace attention_detail;
  const int64_t D = std::max(a.Dk, a.Dv);
  float* work = scratch + D * kKT;  // the tile loop's work (tile_work_floats), as the fp32 kernel lays it out
  Bf16Tiles mm(a, scratch, work + tile_work_floats(a.T));
  attention_fused_tiles(a, mm, work);
}
