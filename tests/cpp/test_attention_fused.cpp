// Tier 1: the fused attention kernel of every ISA table this CPU can run against its scalar twin
// attention_fused_f32_ref, on a table of cases: odd lengths, head dims with vector tails, single queries/keys,
// several key tiles (online-softmax rescaling), causal blocks that start mid-sequence, additive bias and key
// masks with -inf, fully masked queries, and q/k/v read as strided views of a packed (T, 3E) buffer.
// Tolerance: max |got - ref| / max(1, |ref|) <= 1e-5, STYLE's f32 kernel tolerance (f32 accumulation over up to
// 301 keys vs a double-accumulating reference measures 2.4e-6; a missing rescale of the accumulator gives O(1)).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
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
};

}  // namespace

TEST(AttentionFused, MatchesRefOnEveryIsa) {
  const float neg_inf = -std::numeric_limits<float>::infinity();
  std::vector<const KernelTable*> tables;
  for (Isa isa : {Isa::scalar, Isa::avx2, Isa::avx512})
    if (const KernelTable* t = kernels_for(isa)) tables.push_back(t);
  ASSERT_FALSE(tables.empty());
  int n = 0;
  for (const Case& c : kCases) {
    const int64_t E = c.D * 2, ld = 3 * E;  // two heads packed as (rows, 3E): q | k | v, use head 1
    const int64_t rows = std::max(c.T, c.S);
    auto qkv = randn(rows * ld, 11 + n, 1.5f);
    auto bias = randn(c.T * (c.S + 3), 22 + n);
    auto key_mask = randn(c.S, 33 + n);
    for (int64_t j = 1; j < c.S; j += 4) key_mask[j] = neg_inf;
    if (c.all_masked_query)  // query 2 (or the last) sees only -inf
      for (int64_t j = 0; j < c.S; ++j) bias[std::min<int64_t>(2, c.T - 1) * (c.S + 3) + j] = neg_inf;
    AttentionBlock a;
    a.q = qkv.data() + c.D;
    a.k = qkv.data() + E + c.D;
    a.v = qkv.data() + 2 * E + c.D;
    a.ld_q = a.ld_k = a.ld_v = ld;
    a.T = c.T;
    a.S = c.S;
    a.Dk = a.Dv = c.D;
    a.scale = c.scale != 0.f ? c.scale : 1.f / std::sqrt(static_cast<float>(c.D));
    a.bias = c.bias || c.all_masked_query ? bias.data() : nullptr;
    a.ld_bias = c.S + 3;
    a.key_mask = c.key_mask ? key_mask.data() : nullptr;
    a.causal = c.causal;
    a.q_start = c.q_start;
    a.ld_out = c.D + 5;
    std::vector<float> want(c.T * a.ld_out, 7.f), scratch(attention_fused_scratch_floats(c.T, c.D));
    a.out = want.data();
    attention_fused_f32_ref(a, nullptr);
    for (const KernelTable* t : tables) {
      std::vector<float> got(c.T * a.ld_out, 7.f);
      a.out = got.data();
      t->attention_fused_f32(a, scratch.data());
      double err = 0;
      for (int64_t i = 0; i < c.T; ++i)
        for (int64_t d = 0; d < a.ld_out; ++d) {
          const float g = got[i * a.ld_out + d], w = want[i * a.ld_out + d];
          ASSERT_TRUE(std::isfinite(g)) << t->name << " case " << n << " at " << i << "," << d;
          if (d >= c.D) {
            ASSERT_EQ(g, 7.f) << "wrote outside its row: " << t->name << " case " << n;
            continue;
          }
          err = std::max(err, std::abs(double(g) - w) / std::max(1.0, std::abs(double(w))));
        }
      EXPECT_LE(err, 1e-5) << t->name << " case " << n << " T=" << c.T << " S=" << c.S << " D=" << c.D;
    }
    if (c.all_masked_query) {
      for (int64_t d = 0; d < c.D; ++d) EXPECT_EQ(want[std::min<int64_t>(2, c.T - 1) * a.ld_out + d], 0.f);
    }
    ++n;
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
// sequence's output equals attention over that sequence alone, within 1e-6.
TEST(AttentionFused, PaddingFreeMixedLengthsMatchEachSequenceAlone) {
  using encore::Tensor;
  const int64_t H = 4, Dh = 16, E = H * Dh;
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
    const Tensor qb = Tensor::from_floats({1, n, E}, qv.data() + r * E), kb = Tensor::from_floats({1, n, E}, kv.data() + r * E),
                 vb = Tensor::from_floats({1, n, E}, vv.data() + r * E);
    const Tensor alone = encore::ops::attention_forward(qb, kb, vb, H, {}, nullptr, 0.0, false, 0).contiguous();
    double err = 0;
    for (int64_t i = 0; i < n * E; ++i)
      err = std::max(err, std::abs(double(out.data<float>()[r * E + i]) - alone.data<float>()[i]));
    EXPECT_LE(err, 1e-6) << "sequence " << b << " of length " << n;
  }
}
