// Fused (flash-style) attention over Vec, instantiated per ISA next to kernels.inl. Scalar meaning:
// attention_fused_f32_ref (attention_fused_ref.cpp); contract: AttentionBlock in kernels.hpp.
// The keys are visited in tiles of kAttentionKeyTile (each transposed once per call), and for each key tile
// the queries in tiles of kAttentionQueryTile:
//   s = scale·Q·K_tileᵀ + masks ; m' = max(m, rowmax s) ; p = exp(s - m') ;
//   l = l·exp(m - m') + rowsum p ; acc = acc·exp(m - m') + p·V_tile ; m = m'
// and finally out = acc / l, the output rows serving as accumulators. No T x S buffer exists: the scores
// live in one (query tile x key tile) block.

namespace attention_detail {

constexpr int64_t kQT = kAttentionQueryTile;
constexpr int64_t kKT = kAttentionKeyTile;
// Register blocks: kRows query rows x kCols vectors of accumulators: 4 x 4 (16 of AVX-512's 32 registers), 6 x 2 on
// AVX2 (12 of its 16, with the kCols loaded vectors and one broadcast: 15). Two FMA pipes of latency 4 need 8
// independent chains; 4 x 2 on AVX2 had exactly 8 and left no slack for the loads.
constexpr int kCols = kWidth == 16 ? 4 : 2;
constexpr int kRows = kWidth == 16 ? 4 : 6;

// Where a block of scores goes: s (rows kKT apart), and when kmask is set (one key tile's key_mask, -inf past its
// keys; rows without bias or causal limit) each row's running max of the scores it stores, lane by lane: rowmax
// (kWidth floats per row, reduced once by the softmax).
struct ScoreOut {
  float* s;
  const float* kmask;
  float* rowmax;
  ScoreOut rows_from(int64_t r) const { return {s + r * kKT, kmask, rowmax ? rowmax + r * kWidth : nullptr}; }
};

// s[r, c + x·W] = scale·acc[r][x] (+ kmask[c + x·W], and rowmax[r, :] = max(rowmax[r, :], those) when kmask is set)
template <int R, int NV>
inline void store_scores(const ScoreOut& o, Vec (&acc)[R][NV], int64_t c, float scale) {
  for (int r = 0; r < R; ++r) {
    Vec mx = o.kmask ? load(o.rowmax + r * kWidth) : set1(0.f);
    for (int x = 0; x < NV; ++x) {
      Vec y = mul(acc[r][x], set1(scale));
      if (o.kmask) {
        y = add(y, load(o.kmask + c + x * kWidth));
        mx = vmax(mx, y);
      }
      store(o.s + r * kKT + c + x * kWidth, y);
    }
    if (o.kmask) store(o.rowmax + r * kWidth, mx);
  }
}

// s[r, c + x·W] = scale · sum_d q[r, d]·kt[d, c + x·W]  for R rows and NV vectors of keys (kt: K tile transposed)
template <int R, int NV>
inline void score_block(const ScoreOut& o, const float* q, int64_t ld_q, const float* kt, int64_t Dk, int64_t c, float scale) {
  Vec acc[R][NV];
  for (int r = 0; r < R; ++r)
    for (int x = 0; x < NV; ++x) acc[r][x] = set1(0.f);
  for (int64_t d = 0; d < Dk; ++d) {
    Vec kv[NV];
    for (int x = 0; x < NV; ++x) kv[x] = load(kt + d * kKT + c + x * kWidth);
    for (int r = 0; r < R; ++r) {
      const Vec qv = set1(q[r * ld_q + d]);
      for (int x = 0; x < NV; ++x) acc[r][x] = fmadd(qv, kv[x], acc[r][x]);
    }
  }
  store_scores<R, NV>(o, acc, c, scale);
}

template <int R>
inline void score_rows(const ScoreOut& o, const float* q, int64_t ld_q, const float* kt, int64_t Dk, int64_t cols, float scale) {
  int64_t c = 0;
  for (; c + kCols * kWidth <= cols; c += kCols * kWidth) score_block<R, kCols>(o, q, ld_q, kt, Dk, c, scale);
  // the 1 .. kCols-1 vectors left as one block (e.g. 48 keys on AVX-512: 3 vectors), so R·3 accumulator chains
  // are in flight rather than R three times over
  if constexpr (kCols == 4) {
    if (cols - c == 3 * kWidth) return score_block<R, 3>(o, q, ld_q, kt, Dk, c, scale);
    if (cols - c == 2 * kWidth) return score_block<R, 2>(o, q, ld_q, kt, Dk, c, scale);
  }
  for (; c < cols; c += kWidth) score_block<R, 1>(o, q, ld_q, kt, Dk, c, scale);
}

// acc[r, c + x·W] += sum_{j < nk} p[r, j]·v[j, c + x·W]
template <int R, int NV>
inline void pv_block(float* acc, int64_t ld_acc, const float* p, const float* v, int64_t ld_v, int64_t nk, int64_t c) {
  Vec a[R][NV];
  for (int r = 0; r < R; ++r)
    for (int x = 0; x < NV; ++x) a[r][x] = load(acc + r * ld_acc + c + x * kWidth);
  for (int64_t j = 0; j < nk; ++j) {
    Vec vv[NV];
    for (int x = 0; x < NV; ++x) vv[x] = load(v + j * ld_v + c + x * kWidth);
    for (int r = 0; r < R; ++r) {
      const Vec pj = set1(p[r * kKT + j]);
      for (int x = 0; x < NV; ++x) a[r][x] = fmadd(pj, vv[x], a[r][x]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int x = 0; x < NV; ++x) store(acc + r * ld_acc + c + x * kWidth, a[r][x]);
}

template <int R>
inline void pv_rows(float* acc, int64_t ld_acc, int64_t Dv, const float* p, const float* v, int64_t ld_v, int64_t nk) {
  int64_t c = 0;
  for (; c + kCols * kWidth <= Dv; c += kCols * kWidth) pv_block<R, kCols>(acc, ld_acc, p, v, ld_v, nk, c);
  if constexpr (kCols > 2)  // e.g. Dv = 32 on AVX-512: two vectors per row keep 2·R accumulators in flight
    for (; c + 2 * kWidth <= Dv; c += 2 * kWidth) pv_block<R, 2>(acc, ld_acc, p, v, ld_v, nk, c);
  for (; c + kWidth <= Dv; c += kWidth) pv_block<R, 1>(acc, ld_acc, p, v, ld_v, nk, c);
  for (; c < Dv; ++c)  // head-dim tail narrower than a vector
    for (int r = 0; r < R; ++r) {
      float sum = 0.f;
      for (int64_t j = 0; j < nk; ++j) sum += p[r * kKT + j] * v[j * ld_v + c];
      acc[r * ld_acc + c] += sum;
    }
}

// body<R>(r0) for the R = rows in [1, Block] known only at run time.
template <int Block, typename Body>
inline void call_rows(int64_t r0, int64_t rows, Body& body) {
  if (rows == Block) return body.template operator()<Block>(r0);
  if constexpr (Block > 1) call_rows<Block - 1>(r0, rows, body);
  else assert(false && "call_rows: rows outside [1, Block]");
}

// Calls body<R>(r0) over rows [0, n) in blocks of Block rows and one remainder block of 1 .. Block-1 rows. On AVX2, a
// remainder under Block/2 after at least one whole block is merged with the last whole block and the two split
// evenly (32 rows in blocks of 6: 6·4 + 4 + 4, not 6·5 + 2, whose 2-row block has too few accumulator chains; measured
// there). AVX-512's blocks keep their remainder block (its speed with the merge was not measured).
template <int Block = 4, typename Body>
inline void for_row_blocks(int64_t n, Body&& body) {
  static_assert(Block >= 2);
  const int64_t tail = n % Block;
  const bool merge = kWidth == 8 && Block >= 4 && n > Block && tail > 0 && tail < Block / 2;
  const int64_t whole_end = n - tail - (merge ? Block : 0);
  int64_t r = 0;
  for (; r < whole_end; r += Block) body.template operator()<Block>(r);
  if (!merge) {
    if (r < n) call_rows<Block - 1>(r, n - r, body);
    return;
  }
  const int64_t half = (n - r) / 2;  // n - r = Block + tail: two blocks of (Block + tail)/2 rows, give or take one
  call_rows<Block - 1>(r, half, body);
  call_rows<Block - 1>(r + half, n - r - half, body);
}

// l = l·alpha + sum(p) ; acc = acc·alpha (nothing to rescale before the first tile with a finite score) ; m = m'
inline void update_running(float& m, float& l, float* acc, int64_t Dv, float m_new, float alpha, float sum) {
  l = l * alpha + sum;
  if (alpha != 1.f && m != -__builtin_inff()) {
    int64_t c = 0;
    for (; c + kWidth <= Dv; c += kWidth) store(acc + c, mul(load(acc + c), set1(alpha)));
    for (; c < Dv; ++c) acc[c] *= alpha;
  }
  m = m_new;
}

// One query row of the online softmax over a key tile (see the file comment): keys [0, limit) of the tile
// count, [limit, nk) are masked. When the tile leaves this query nothing to attend to, its p row is zeroed and
// m, l, acc stay as they were.
inline void online_softmax_row(float* row, int64_t nk, int64_t limit, const float* bias, const float* key_mask,
                               float& m, float& l, float* acc, int64_t Dv) {
  const float neg_inf = -__builtin_inff();
  // y = s + bias + key_mask ; mx = max(y)
  Vec vmx = set1(neg_inf);
  float mx = neg_inf;
  int64_t j = 0;
  for (; j + kWidth <= limit; j += kWidth) {
    Vec y = load(row + j);
    if (bias) y = add(y, load(bias + j));
    if (key_mask) y = add(y, load(key_mask + j));
    store(row + j, y);
    vmx = vmax(vmx, y);
  }
  for (; j < limit; ++j) {
    const float y = row[j] + (bias ? bias[j] : 0.f) + (key_mask ? key_mask[j] : 0.f);
    row[j] = y;
    mx = y > mx ? y : mx;
  }
  if (limit > 0) {
    const float vm = reduce_max(vmx);
    mx = vm > mx ? vm : mx;
  }
  if (mx == neg_inf && !any_nan(row, limit)) {  // fully masked in this tile
    for (j = 0; j < nk; ++j) row[j] = 0.f;
    return;
  }  // (with a NaN: p = exp(y - m') below is NaN where y is, and so are l and acc)
  // m' = max(m, mx) ; p = exp(y - m') ; alpha = exp(m - m')
  const float m_new = mx > m ? mx : m;
  const float alpha = m == neg_inf ? 0.f : __builtin_expf(m - m_new);
  Vec vsum = set1(0.f);
  float sum = 0.f;
  for (j = 0; j + kWidth <= limit; j += kWidth) {
    const Vec e = vexp(sub(load(row + j), set1(m_new)));
    store(row + j, e);
    vsum = add(vsum, e);
  }
  for (; j < limit; ++j) {
    row[j] = __builtin_expf(row[j] - m_new);
    sum += row[j];
  }
  for (j = limit; j < nk; ++j) row[j] = 0.f;
  sum += reduce_add(vsum);
  update_running(m, l, acc, Dv, m_new, alpha, sum);
}

// The online softmax of one query row when its scores came with their max (ScoreOut.kmask set: no bias, no
// causal limit; masked keys and the padding up to nk_pad are -inf): p = exp(y - m') over the padded tile in one
// pass, each vector of p handed to mm.put_p (the fp32 kernel keeps it in s, the bf16 kernel rounds it for P·V
// in the same pass). m, l, acc as online_softmax_row; a row whose scores are all -inf (no NaN) puts p = 0 and keeps
// them.
// Padding lanes give exp(-inf) = vexp's smallest result (<= 2^-149, 0 once rounded to bf16); P·V in fp32 reads
// only the nk keys.
template <typename Mm>
inline void online_softmax_row_premax(Mm& mm, float* row, int64_t r, int64_t nk_pad, float mx, float& m, float& l,
                                      float* acc, int64_t Dv) {
  const float neg_inf = -__builtin_inff();
  if (mx == neg_inf && !any_nan(row, nk_pad)) {
    for (int64_t j = 0; j < nk_pad; j += kWidth) mm.put_p(row, r, j, set1(0.f));
    return;
  }
  const float m_new = mx > m ? mx : m;
  const float alpha = m == neg_inf ? 0.f : __builtin_expf(m - m_new);
  Vec vsum = set1(0.f);
  for (int64_t j = 0; j < nk_pad; j += kWidth) {
    const Vec e = vexp(sub(load(row + j), set1(m_new)));
    mm.put_p(row, r, j, e);
    vsum = add(vsum, e);
  }
  update_running(m, l, acc, Dv, m_new, alpha, reduce_add(vsum));
}

// Floats of attention_fused_tiles' work buffer: the (kQT, kKT) score block, one key tile's key mask (kKT), the score
// block's row maxima (kQT, 16: a vector of lanes per row at most 16 wide) and the running max and sum (T each).
constexpr int64_t tile_work_floats(int64_t T) { return kQT * kKT + 2 * T + kKT + kQT * 16; }

// The tile loops and the online softmax, shared by the precisions: Mm supplies the two matmuls of a key tile,
//   mm.load_keys(j0, nk)        prepares K and V rows [j0, j0 + nk) (nk_pad = nk rounded up to kWidth)
//   mm.scores(o, i0, nq, nk)     o.s[r, j] = scale·(q[i0 + r]·k[j0 + j]) for r < nq, j < nk_pad, stored through
//                                store_scores (which adds o.kmask and keeps the row maxima when it is set)
//   mm.put_p(row, r, j, e)       keeps p[r, j .. j + kWidth) = e for pv (the one-pass softmax's output)
//   mm.pv(acc, s, nq, nk, put)   acc[r, :] += sum_{j < nk} p[r, j]·v[j0 + j, :] (acc rows ld_out apart), p from
//                                put_p when put, else the rows of s
// Blocks without bias or causal limit (encoders) get their row max from the scores' epilogue and run the
// softmax in one pass (online_softmax_row_premax); the others run online_softmax_row's two passes.
template <typename Mm>
void attention_fused_tiles(const AttentionBlock& a, Mm& mm, float* work) {
  const float neg_inf = -__builtin_inff();
  const int64_t Dv = a.Dv, T = a.T;
  // (vector-aligned where work is: the parts before m and l are multiples of 16 floats)
  float* s = work;                   // (kQT, kKT) scores, then probabilities
  float* kmask = s + kQT * kKT;      // (kKT) this key tile's key_mask, -inf past its keys
  float* rowmax = kmask + kKT;       // (kQT, kWidth) max of each row of the score block, lane by lane
  float* m = rowmax + kQT * 16;      // (T) running max
  float* l = m + T;                  // (T) running sum
  // The output rows are the accumulators.
  for (int64_t i = 0; i < T; ++i) {
    m[i] = neg_inf;
    l[i] = 0.f;
    for (int64_t c = 0; c < Dv; ++c) a.out[i * a.ld_out + c] = 0.f;
  }
  const bool premax = !a.causal && !a.bias;
  // with a causal mask, no query of this block sees keys at or past q_start + T
  const int64_t s_end = a.causal ? std::min(a.S, a.q_start + T) : a.S;
  for (int64_t j0 = 0; j0 < s_end; j0 += kKT) {
    const int64_t nk = std::min(kKT, s_end - j0), nk_pad = (nk + kWidth - 1) / kWidth * kWidth;
    mm.load_keys(j0, nk);
    if (premax)
      for (int64_t j = 0; j < nk_pad; ++j) kmask[j] = j >= nk ? neg_inf : a.key_mask ? a.key_mask[j0 + j] : 0.f;
    // causal: queries before i_first see none of this tile's keys
    const int64_t i_first = a.causal ? std::max<int64_t>(0, j0 - a.q_start) : 0;
    for (int64_t i0 = i_first; i0 < T; i0 += kQT) {
      const int64_t nq = std::min(kQT, T - i0);
      float* acc = a.out + i0 * a.ld_out;
      if (premax) {
        for (int64_t i = 0; i < nq * kWidth; ++i) rowmax[i] = neg_inf;
        mm.scores(ScoreOut{s, kmask, rowmax}, i0, nq, nk);  // s = scale·Q_tile·K_tileᵀ + key_mask, row maxima
        for (int64_t i = 0; i < nq; ++i)
          online_softmax_row_premax(mm, s + i * kKT, i, nk_pad, reduce_max(load(rowmax + i * kWidth)), m[i0 + i], l[i0 + i], acc + i * a.ld_out, Dv);
      } else {
        mm.scores(ScoreOut{s, nullptr, nullptr}, i0, nq, nk);  // s = scale·Q_tile·K_tileᵀ
        for (int64_t i = 0; i < nq; ++i) {
          const int64_t limit = a.causal ? std::min(nk, a.q_start + i0 + i + 1 - j0) : nk;
          online_softmax_row(s + i * kKT, nk, std::max<int64_t>(limit, 0),
                             a.bias ? a.bias + (i0 + i) * a.ld_bias + j0 : nullptr,
                             a.key_mask ? a.key_mask + j0 : nullptr, m[i0 + i], l[i0 + i], acc + i * a.ld_out, Dv);
        }
      }
      mm.pv(acc, s, nq, nk, premax);  // acc += P·V_tile
    }
  }
  // out = acc / l ; a query that attended to nothing (l = 0) gets zeros, one with a NaN score (l NaN) NaN
  for (int64_t i = 0; i < T; ++i) {
    float* o = a.out + i * a.ld_out;
    const float inv = l[i] == 0.f ? 0.f : 1.f / l[i];
    int64_t c = 0;
    for (; c + kWidth <= Dv; c += kWidth) store(o + c, mul(load(o + c), set1(inv)));
    for (; c < Dv; ++c) o[c] *= inv;
  }
}

// kt[d, j] = k[j, d] for j < nk, 0 for nk <= j < nk rounded up to kWidth (kt rows kKT apart): kWidth x kWidth
// blocks transposed in registers, the head-dim tail narrower than a vector one float at a time.
inline void transpose_key_tile(float* kt, const float* k, int64_t ld_k, int64_t nk, int64_t Dk) {
  for (int64_t j = 0; j < nk; j += kWidth) {
    const int64_t rows = std::min<int64_t>(kWidth, nk - j);
    int64_t d = 0;
    for (; d + kWidth <= Dk; d += kWidth) {
      Vec r[kWidth];
      for (int x = 0; x < kWidth; ++x) r[x] = x < rows ? load(k + (j + x) * ld_k + d) : set1(0.f);
      transpose(r);
      for (int x = 0; x < kWidth; ++x) store(kt + (d + x) * kKT + j, r[x]);
    }
    for (; d < Dk; ++d)
      for (int64_t x = 0; x < kWidth; ++x) kt[d * kKT + j + x] = x < rows ? k[(j + x) * ld_k + d] : 0.f;
  }
}

// fp32 matmuls: the key tile transposed once per tile, V read in place.
struct F32Tiles {
  const AttentionBlock& a;
  float* kt;  // (Dk, kKT): kt[d, j] = k[j0 + j, d], zero beyond nk
  const float* vt = nullptr;
  int64_t nk_pad = 0;

  void load_keys(int64_t j0, int64_t nk) {
    nk_pad = (nk + kWidth - 1) / kWidth * kWidth;
    transpose_key_tile(kt, a.k + j0 * a.ld_k, a.ld_k, nk, a.Dk);
    vt = a.v + j0 * a.ld_v;
  }
  void scores(const ScoreOut& o, int64_t i0, int64_t nq, int64_t /*nk*/) {
    const float* q = a.q + i0 * a.ld_q;
    for_row_blocks<kRows>(nq, [&]<int R>(int64_t r) { score_rows<R>(o.rows_from(r), q + r * a.ld_q, a.ld_q, kt, a.Dk, nk_pad, a.scale); });
  }
  void put_p(float* row, int64_t /*r*/, int64_t j, Vec e) { store(row + j, e); }
  void pv(float* acc, const float* s, int64_t nq, int64_t nk, bool /*put*/) {
    // A head of at most two vectors (Dv <= 32 on AVX-512) holds 2·R accumulators: 8 rows fill 16 registers.
    auto pv = [&]<int R>(int64_t r) { pv_rows<R>(acc + r * a.ld_out, a.ld_out, a.Dv, s + r * kKT, vt, a.ld_v, nk); };
    if (a.Dv <= 2 * kWidth && kCols > 2) for_row_blocks<8>(nq, pv);
    else for_row_blocks<kRows>(nq, pv);
  }
};

}  // namespace attention_detail

void attention_fused_f32(const AttentionBlock& a, float* scratch) {
  using namespace attention_detail;
  float* kt = scratch;  // (Dk, kKT): the key tile, transposed once per tile
  F32Tiles mm{a, kt};
  attention_fused_tiles(a, mm, kt + a.Dk * kKT);  // then the tile loop's work (tile_work_floats)
}
