// Tier 1: the fused attention kernel of every ISA table this CPU can run against its scalar twin
// attention_fused_f32_ref, on a table of cases: odd lengths, head dims with vector tails, single queries/keys,
// several key tiles (online-softmax rescaling), causal blocks that start mid-sequence, additive bias and key
// masks with -inf, fully masked queries, and q/k/v read as strided views of a packed (T, 3E) buffer; blocks
// without bias or causal mask run the one-pass softmax (row max from the scores), the others the two-pass one,
// so the table has both, including a first key tile that the key mask hides entirely.
// Tolerance: max |got - ref| / max(1, |ref|) <= 1e-5, STYLE's f32 kernel tolerance (f32 accumulation over up to
// 301 keys vs a double-accumulating reference measures 2.4e-6; a missing rescale of the accumulator gives O(1)).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "encore/tensor.hpp"
#include "kernels/kernels.hpp"
#include "ops/ops.hpp"
#include "test_backward_reference.hpp"

using namespace encore::kernels;
using bwdtest::randn;

namespace {

struct Case {
  int64_t T, S, D;
  bool causal;
  int64_t q_start;
  bool bias, key_mask, all_masked_query;
  float scale = 0.f;  // 0: 1/sqrt(D); else as set (T5 scores unscaled: 1)
  bool masked_first_tile = false;  // key_mask -inf on every key of the first key tile (kAttentionKeyTile keys)
};

const Case kCases[] = {
    {1, 1, 64, false, 0, false, false, false},     // length 1
    {7, 7, 32, false, 0, false, false, false},     // odd T, d_head 32
    {33, 33, 64, false, 0, true, true, false},     // query tile + 1, masks
    {128, 128, 64, false, 0, false, true, false},  // BERT-base shape, one key tile
    {65, 301, 64, false, 0, true, true, true},     // three key tiles: the running max rescales acc
    {17, 129, 9, false, 0, false, false, false},   // head-dim tail (d_model 36 / 4 heads), key tile + 1
    {31, 45, 11, true, 0, false, true, false},     // causal, tails everywhere
    {40, 300, 64, true, 200, true, false, false},  // causal block starting mid-sequence (a later query tile)
    {5, 3, 48, true, 0, false, false, false},      // causal with T > S: queries past the keys see all keys
    {20, 260, 80, false, 0, false, true, true},    // d_head 80 (vector + tail), fully masked query row
    {3, 1, 16, false, 0, true, false, false},      // one key
    {33, 140, 16, false, 0, true, true, false, 1.f},  // scale 1 (T5): unscaled, sharper scores, bias + mask
    {9, 70, 12, true, 0, true, false, false, 0.2357f},  // scale 1/sqrt(3·d) (DeBERTa), head-dim tail, causal
    // Blocks without bias or causal mask (encoders) take the one-pass softmax, its row max from the scores:
    {48, 48, 32, false, 0, false, true, false},     // MiniLM's head, a short key tile, key mask
    {100, 300, 64, false, 0, false, true, false},   // three key tiles (rescaling), key-tile tail 44, key mask
    {33, 256, 32, false, 0, false, false, false},   // two full key tiles, no masks
    {9, 200, 16, false, 0, false, true, false, 0.f, true},  // first key tile all masked: its p row is 0, m, l kept
};

// The block of case n: head 1 of two heads packed as (rows, 3E) = q | k | v, its bias and key mask.
struct CaseData {
  std::vector<float> qkv, bias, key_mask;
  AttentionBlock a;
};

CaseData make_case(const Case& c, int n) {
  const float neg_inf = -std::numeric_limits<float>::infinity();
  CaseData cd;
  const int64_t E = c.D * 2, ld = 3 * E;
  const int64_t rows = std::max(c.T, c.S);
  cd.qkv = randn(rows * ld, 11 + n, 1.5f);
  cd.bias = randn(c.T * (c.S + 3), 22 + n);
  cd.key_mask = randn(c.S, 33 + n);
  for (int64_t j = 1; j < c.S; j += 4) cd.key_mask[j] = neg_inf;
  if (c.masked_first_tile)
    for (int64_t j = 0; j < std::min(c.S, kAttentionKeyTile); ++j) cd.key_mask[j] = neg_inf;
  if (c.all_masked_query)  // query 2 (or the last) sees only -inf
    for (int64_t j = 0; j < c.S; ++j) cd.bias[std::min<int64_t>(2, c.T - 1) * (c.S + 3) + j] = neg_inf;
  AttentionBlock& a = cd.a;
  a.q = cd.qkv.data() + c.D;
  a.k = cd.qkv.data() + E + c.D;
  a.v = cd.qkv.data() + 2 * E + c.D;
  a.ld_q = a.ld_k = a.ld_v = ld;
  a.T = c.T;
  a.S = c.S;
  a.Dk = a.Dv = c.D;
  a.scale = c.scale != 0.f ? c.scale : 1.f / std::sqrt(static_cast<float>(c.D));
  a.bias = c.bias || c.all_masked_query ? cd.bias.data() : nullptr;
  a.ld_bias = c.S + 3;
  a.key_mask = c.key_mask ? cd.key_mask.data() : nullptr;
  a.causal = c.causal;
  a.q_start = c.q_start;
  a.ld_out = c.D + 5;
  return cd;
}

// Runs kernel on case c into rows of ld_out floats prefilled with 7 (the bytes past D must stay 7).
// The scratch is exactly what the kernel's precision is promised: an fp32 kernel gets no room for the bf16 tiles.
std::vector<float> run(void (*kernel)(const AttentionBlock&, float*), AttentionBlock a, const Case& c, bool bf16) {
  std::vector<float> out(c.T * a.ld_out, 7.f), scratch(attention_fused_scratch_floats(c.T, c.D, bf16));
  a.out = out.data();
  kernel(a, scratch.data());
  return out;
}

// max |got - want| / max(1, |want|) over the D columns; fails on non-finite values and writes past D.
double rel_err(const std::vector<float>& got, const std::vector<float>& want, const Case& c, int64_t ld_out,
               const std::string& what) {
  double err = 0;
  for (int64_t i = 0; i < c.T; ++i)
    for (int64_t d = 0; d < ld_out; ++d) {
      const float g = got[i * ld_out + d], w = want[i * ld_out + d];
      EXPECT_TRUE(std::isfinite(g)) << what << " at " << i << "," << d;
      if (d >= c.D) {
        EXPECT_EQ(g, 7.f) << "wrote outside its row: " << what;
        continue;
      }
      err = std::max(err, std::abs(double(g) - w) / std::max(1.0, std::abs(double(w))));
    }
  return err;
}

}  // namespace

// The bf16-matmul kernel against its rounding twin attention_fused_bf16_ref on every table whose entry is a bf16
// kernel (avx512 with AVX512-BF16: vdpbf16ps; ref/scalar: the twin itself), and the fp32 fallback entries (avx2,
// avx512 without BF16) against attention_fused_f32_ref at the fp32 tolerance 1e-5. The bf16 kernel and its twin
// round the same operands but sum the scores in different orders (fp32 lanes vs double), so a p_j within ~1e-6
// of a bf16 rounding boundary can round the other way: that moves row i of the output by one bf16 ulp of p_j
// times v_j, <= 2^-7·max|v| (~0.05 here; measured once: 4.3e-3 in one row of the 128x128 case). Hence two bounds:
// every row within 1e-4 (measured <= 1.4e-5 outside such rows) except at most 1 in 20 rows (plus one), and no
// element beyond 2^-7·max|v|. A kernel that rounded nothing sits ~1e-2 off in most rows (the test below); one that
// skipped a rescale or dropped a key is O(1e-1..1) off.
TEST(AttentionFused, Bf16MatchesItsRefOnEveryIsa) {
  std::vector<const KernelTable*> tables;
  for (Isa isa : {Isa::scalar, Isa::avx2, Isa::avx512})
    if (const KernelTable* t = kernels_for(isa)) tables.push_back(t);
  int n = 0;
  int bf16_tables = 0;
  for (const Case& c : kCases) {
    CaseData cd = make_case(c, n);
    const std::vector<float> want_bf16 = run(attention_fused_bf16_ref, cd.a, c, true);
    const std::vector<float> want_f32 = run(attention_fused_f32_ref, cd.a, c, false);
    float max_v = 0.f;
    for (int64_t j = 0; j < c.S; ++j)
      for (int64_t d = 0; d < c.D; ++d) max_v = std::max(max_v, std::abs(cd.a.v[j * cd.a.ld_v + d]));
    for (const KernelTable* t : tables) {
      const bool fallback = t->attention_fused_bf16 == t->attention_fused_f32;
      const std::string what = std::string(t->name) + (fallback ? " (fp32 fallback)" : "") + " case " +
                               std::to_string(n) + " T=" + std::to_string(c.T) + " S=" + std::to_string(c.S) +
                               " D=" + std::to_string(c.D);
      const std::vector<float> got = run(t->attention_fused_bf16, cd.a, c, true);
      if (fallback) {
        EXPECT_LE(rel_err(got, want_f32, c, cd.a.ld_out, what), 1e-5) << what;
        continue;
      }
      if (n == 0) ++bf16_tables;
      int64_t rows_off = 0;
      double err = 0;
      for (int64_t i = 0; i < c.T; ++i) {
        const Case row{1, c.S, c.D, false, 0, false, false, false};
        const std::vector<float> g(got.begin() + i * cd.a.ld_out, got.begin() + (i + 1) * cd.a.ld_out),
            w(want_bf16.begin() + i * cd.a.ld_out, want_bf16.begin() + (i + 1) * cd.a.ld_out);
        const double e = rel_err(g, w, row, cd.a.ld_out, what + " row " + std::to_string(i));
        rows_off += e > 1e-4;
        err = std::max(err, e);
      }
      EXPECT_LE(rows_off, 1 + c.T / 20) << what << ": rows off by more than 1e-4";
      EXPECT_LE(err, std::ldexp(double(max_v), -7)) << what;
    }
    ++n;
  }
  EXPECT_GE(bf16_tables, 1);  // the scalar table's twin at least
  if (cpu_has_avx512_bf16()) {
    EXPECT_NE(kernels_for(Isa::avx512)->attention_fused_bf16, kernels_for(Isa::avx512)->attention_fused_f32);
  }
  // AVX2 has no bf16 dot product: its entry is the exact fp32 kernel (what an AVX2-only CPU runs)
  if (const KernelTable* t = kernels_for(Isa::avx2)) {
    EXPECT_EQ(t->attention_fused_bf16, t->attention_fused_f32);
  }
}

// The bf16 twin against exact attention (attention_fused_f32_ref): the rounding of q, k, v, p (relative 2^-9
// each) moves scores by ~2^-8·|scale·q·k| and outputs by ~1e-2 of |v| on these N(0, 1.5²) inputs (sharp
// softmaxes: |scale·q·k| reaches ~10). Measured 2.9e-3 .. 4.9e-2 (the unscaled T5 case 11), bound 6e-2; and the
// error must exceed 1e-4 on the 128x128 case, so the twin cannot silently be the fp32 reference.
TEST(AttentionFused, Bf16RefIsCloseToExactAndRounds) {
  int n = 0;
  for (const Case& c : kCases) {
    CaseData cd = make_case(c, n);
    const double err = rel_err(run(attention_fused_bf16_ref, cd.a, c, true), run(attention_fused_f32_ref, cd.a, c, false), c,
                               cd.a.ld_out, "case " + std::to_string(n));
    EXPECT_LE(err, 6e-2) << "case " << n;
    if (c.T == 128 && c.S == 128) {
      EXPECT_GT(err, 1e-4) << "the bf16 twin rounds nothing?";
    }
    ++n;
  }
}

// round_bf16_daz_ref: nearest even, ties to even, denormals to ±0, inf kept, NaN quiet.
TEST(AttentionFused, RoundBf16Daz) {
  auto bits = [](uint32_t u) {
    float f;
    std::memcpy(&f, &u, sizeof f);
    return round_bf16_daz_ref(f);
  };
  EXPECT_EQ(bits(0x3f800000u), 0x3f80);  // 1
  EXPECT_EQ(bits(0x3f808000u), 0x3f80);  // tie, even stays
  EXPECT_EQ(bits(0x3f818000u), 0x3f82);  // tie, odd rounds up
  EXPECT_EQ(bits(0x3f808001u), 0x3f81);  // above the tie
  EXPECT_EQ(bits(0x00400000u), 0x0000);  // denormal -> +0
  EXPECT_EQ(bits(0x80400000u), 0x8000);  // -denormal -> -0
  EXPECT_EQ(bits(0x7f800000u), 0x7f80);  // inf
  EXPECT_EQ(bits(0x7f800001u), 0x7fc0);  // signalling NaN payload in the dropped bits -> quiet NaN
  EXPECT_EQ(bits(0x7f7fffffu), 0x7f80);  // FLT_MAX rounds to inf, as vcvtneps2bf16 does
}

TEST(AttentionFused, MatchesRefOnEveryIsa) {
  std::vector<const KernelTable*> tables;
  for (Isa isa : {Isa::scalar, Isa::avx2, Isa::avx512})
    if (const KernelTable* t = kernels_for(isa)) tables.push_back(t);
  ASSERT_FALSE(tables.empty());
  int n = 0;
  for (const Case& c : kCases) {
    CaseData cd = make_case(c, n);
    const std::vector<float> want = run(attention_fused_f32_ref, cd.a, c, false);
    for (const KernelTable* t : tables) {
      const std::string what = std::string(t->name) + " case " + std::to_string(n) + " T=" + std::to_string(c.T) +
                               " S=" + std::to_string(c.S) + " D=" + std::to_string(c.D);
      EXPECT_LE(rel_err(run(t->attention_fused_f32, cd.a, c, false), want, c, cd.a.ld_out, what), 1e-5) << what;
    }
    if (c.all_masked_query) {
      for (int64_t d = 0; d < c.D; ++d) EXPECT_EQ(want[std::min<int64_t>(2, c.T - 1) * cd.a.ld_out + d], 0.f);
    }
    ++n;
  }
}

// A NaN score is not a mask: the query's output is NaN in every kernel and its twin, as PyTorch's eager attention
// gives (SDPA's fused CPU kernel gives finite values there; the reference is eager's formula). A NaN in query 1
// makes all its scores NaN; a NaN in key 5 makes key 5's score NaN for every query that sees it; and with every
// other key masked (-inf) the row max comes out -inf, where a max that drops NaN would call the query fully masked
// and give 0. Rows that see no NaN stay finite, and a row whose keys are all -inf still gives 0.
TEST(AttentionFused, NanScoreGivesNanQueryOnEveryIsa) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), neg_inf = -std::numeric_limits<float>::infinity();
  std::vector<const KernelTable*> tables;
  for (Isa isa : {Isa::scalar, Isa::avx2, Isa::avx512})
    if (const KernelTable* t = kernels_for(isa)) tables.push_back(t);
  struct NanCase {
    Case c;
    enum { query, key, key_only_unmasked } where;
  };
  const NanCase cases[] = {
      {{48, 48, 32, false, 0, false, true, false}, NanCase::query},  // one-pass softmax (encoders)
      {{33, 140, 16, false, 0, true, true, false}, NanCase::query},  // two-pass (bias), two key tiles
      {{48, 48, 32, false, 0, false, true, false}, NanCase::key},
      {{31, 45, 11, true, 0, false, true, false}, NanCase::key},     // causal: queries 0..4 never see key 5
      {{4, 20, 32, false, 0, false, true, false}, NanCase::key_only_unmasked},
      {{4, 20, 32, false, 0, true, true, false}, NanCase::key_only_unmasked},
      // a NaN key in the first of two key tiles: the second tile's finite scores must not reset the running sums
      {{9, 140, 16, false, 0, false, true, false}, NanCase::key},
      {{9, 140, 16, false, 0, true, true, false}, NanCase::key},
  };
  int n = 100;
  for (const NanCase& nc : cases) {
    const Case& c = nc.c;
    CaseData cd = make_case(c, n);
    const int64_t ld = 3 * 2 * c.D;
    std::vector<bool> nan_row(c.T, false);
    if (nc.where == NanCase::query) {
      cd.qkv[1 * ld + c.D + 3] = nan;  // q[1, 3]
      nan_row[1] = true;
    } else {
      cd.qkv[5 * ld + 3 * c.D + 1] = nan;  // k[5, 1] (k: the columns E + D .. E + 2D, E = 2D)
      for (int64_t i = 0; i < c.T; ++i) nan_row[i] = !c.causal || c.q_start + i >= 5;
      if (nc.where == NanCase::key_only_unmasked)
        for (int64_t j = 0; j < c.S; ++j) cd.key_mask[j] = j == 5 ? 0.f : neg_inf;
    }
    std::vector<std::pair<std::string, std::vector<float>>> outs;
    outs.emplace_back("f32 ref", run(attention_fused_f32_ref, cd.a, c, false));
    outs.emplace_back("bf16 ref", run(attention_fused_bf16_ref, cd.a, c, true));
    for (const KernelTable* t : tables) {
      outs.emplace_back(std::string(t->name) + " f32", run(t->attention_fused_f32, cd.a, c, false));
      outs.emplace_back(std::string(t->name) + " bf16", run(t->attention_fused_bf16, cd.a, c, true));
    }
    for (const auto& [what, out] : outs)
      for (int64_t i = 0; i < c.T; ++i)
        for (int64_t d = 0; d < c.D; ++d) {
          const float v = out[i * cd.a.ld_out + d];
          if (nan_row[i]) {
            EXPECT_TRUE(std::isnan(v)) << what << " case " << n << " row " << i << " col " << d << ": " << v;
          } else {
            EXPECT_TRUE(std::isfinite(v)) << what << " case " << n << " row " << i << " col " << d << ": " << v;
          }
        }
    ++n;
  }
}

// softmax_masked's twins on the same rule: a NaN entry makes the row NaN, alone among -inf entries too; a row of
// -inf entries is zeros.
TEST(AttentionFused, SoftmaxNanRowIsNanOnEveryIsa) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), neg_inf = -std::numeric_limits<float>::infinity();
  std::vector<void (*)(float*, int64_t, float, const float*, const float*, int64_t)> softmaxes{softmax_masked_f32_ref};
  for (Isa isa : {Isa::scalar, Isa::avx2, Isa::avx512})
    if (const KernelTable* t = kernels_for(isa)) softmaxes.push_back(t->softmax_masked_f32);
  for (auto softmax : softmaxes) {
    for (int64_t at : {0, 3, 17}) {  // in the vector part and in the tail
      std::vector<float> partial(21), lone(21, neg_inf), none(21, neg_inf);
      for (int64_t j = 0; j < 21; ++j) partial[j] = 0.1f * static_cast<float>(j);
      partial[at] = nan;
      lone[at] = nan;
      softmax(partial.data(), 21, 1.f, nullptr, nullptr, 21);
      softmax(lone.data(), 21, 1.f, nullptr, nullptr, 21);
      softmax(none.data(), 21, 1.f, nullptr, nullptr, 21);
      for (int64_t j = 0; j < 21; ++j) {
        EXPECT_TRUE(std::isnan(partial[j])) << at << " " << j;
        EXPECT_TRUE(std::isnan(lone[j])) << at << " " << j;
        EXPECT_EQ(none[j], 0.f) << at << " " << j;
      }
    }
  }
}

// The reference itself against a direct softmax(QKᵀ)V written out here for one small causal case, so a
// shared misunderstanding of the contract cannot hide in both kernels.
TEST(AttentionFused, RefMatchesDirectFormula) {
  const int64_t T = 4, S = 4, D = 3;
  auto q = randn(T * D, 1), k = randn(S * D, 2), v = randn(S * D, 3);
  AttentionBlock a;
  std::vector<float> out(T * D);
  a.out = out.data();
  a.q = q.data();
  a.k = k.data();
  a.v = v.data();
  a.ld_out = a.ld_q = a.ld_k = a.ld_v = D;
  a.T = T;
  a.S = S;
  a.Dk = a.Dv = D;
  a.scale = 0.5f;
  a.causal = true;
  attention_fused_f32_ref(a, nullptr);
  for (int64_t i = 0; i < T; ++i) {
    std::vector<double> w(i + 1);
    double sum = 0;
    for (int64_t j = 0; j <= i; ++j) {
      double s = 0;
      for (int64_t d = 0; d < D; ++d) s += q[i * D + d] * k[j * D + d];
      w[j] = std::exp(0.5 * s);
      sum += w[j];
    }
    for (int64_t d = 0; d < D; ++d) {
      double o = 0;
      for (int64_t j = 0; j <= i; ++j) o += w[j] / sum * v[j * D + d];
      EXPECT_NEAR(out[i * D + d], o, 1e-6) << i << "," << d;
    }
  }
}

// A padding-free batch of mixed lengths, longest first (as the server's batcher orders them): run_fused splits its
// (sequence, head, query chunk) tasks between threads by cost; every task must run once whatever the split. Each
// sequence's output equals attention over that sequence alone, within 1e-6, for both kernels (fp32, and bf16
// matmuls inside an AttentionPrecisionScope) at head dims 16 and 32 (MiniLM's).
TEST(AttentionFused, PaddingFreeMixedLengthsMatchEachSequenceAlone) {
  using encore::Tensor;
  for (const bool bf16 : {false, true})
    for (const int64_t Dh : {16, 32}) {
      encore::ops::AttentionPrecisionScope precision(bf16);
      const int64_t H = 4, E = H * Dh;
      const std::vector<int64_t> lengths = {200, 97, 64, 33, 5, 1, 1};
      std::vector<int64_t> cu = {0};
      for (int64_t n : lengths) cu.push_back(cu.back() + n);
      const int64_t N = cu.back();
      auto qv = randn(N * E, 71), kv = randn(N * E, 72), vv = randn(N * E, 73);
      const Tensor q = Tensor::from_floats({1, N, E}, qv.data()), k = Tensor::from_floats({1, N, E}, kv.data()),
                   v = Tensor::from_floats({1, N, E}, vv.data());
      encore::ops::AttentionMasks packed;
      packed.cu_seqlens = cu;
      const Tensor out = encore::ops::attention_forward(q, k, v, H, packed, nullptr, 0.0, false, 0).contiguous();
      for (size_t b = 0; b < lengths.size(); ++b) {
        const int64_t n = lengths[b], r = cu[b];
        const Tensor qb = Tensor::from_floats({1, n, E}, qv.data() + r * E),
                     kb = Tensor::from_floats({1, n, E}, kv.data() + r * E),
                     vb = Tensor::from_floats({1, n, E}, vv.data() + r * E);
        const Tensor alone = encore::ops::attention_forward(qb, kb, vb, H, {}, nullptr, 0.0, false, 0).contiguous();
        double err = 0;
        for (int64_t i = 0; i < n * E; ++i)
          err = std::max(err, std::abs(double(out.data<float>()[r * E + i]) - alone.data<float>()[i]));
        EXPECT_LE(err, 1e-6) << (bf16 ? "bf16" : "f32") << " Dh " << Dh << " sequence " << b << " of length " << n;
      }
    }
}
