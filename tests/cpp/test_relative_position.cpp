// Tier 1 for the relative position bias (T5's relative_attention_bias): the bucket function against values worked
// out by hand from transformers' T5Attention._relative_position_bucket formula, the fast forward (per-distance
// rows) bitwise against its per-element _ref twin, and the backward against its _ref twin (1e-6 scaled: the two sum
// in different orders) and as the adjoint of the forward (<dbias, fwd(table)> = <bwd(dbias), table>, 1e-6
// relative). The model-level check against transformers is tests/python/test_t5.py.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kernels/kernels.hpp"
#include "ops/backward.hpp"
#include "ops/ops.hpp"
#include "test_backward_reference.hpp"

using namespace encore;
using bwdtest::randn;

TEST(RelativePosition, BucketsMatchTheFormulaByHand) {
  struct Case {
    int64_t rel;
    bool bidirectional;
    int64_t num_buckets, max_distance, want;
  };
  // bidirectional 32/128: 16 buckets per sign (rel > 0 from 16), 8 exact; beyond, 8 + trunc(log(d/8)/log(16)·8) <= 15
  // unidirectional 32/128: rel > 0 -> 0; 16 exact; beyond, 16 + trunc(log(d/16)/log(8)·16) <= 31
  // bidirectional 8/20: 4 per sign, 2 exact; beyond, 2 + trunc(log(d/2)/log(10)·2) <= 3
  const Case cases[] = {
      {0, true, 32, 128, 0},       {-1, true, 32, 128, 1},    {1, true, 32, 128, 17},
      {-7, true, 32, 128, 7},      {7, true, 32, 128, 23},    {-8, true, 32, 128, 8},
      {-12, true, 32, 128, 9},     // log(1.5)/log(16)·8 = 1.17
      {-16, true, 32, 128, 10},    // log(2)/log(16)·8 = 2 exactly: float32 steps must not give 1.999...
      {-64, true, 32, 128, 14},    // 6 exactly
      {-127, true, 32, 128, 15},   // 7.98
      {-128, true, 32, 128, 15},   // 16, clamped to 15
      {-5000, true, 32, 128, 15},  {5000, true, 32, 128, 31},
      {5, false, 32, 128, 0},      {-5, false, 32, 128, 5},   {-16, false, 32, 128, 16},
      {-32, false, 32, 128, 21},   // log(2)/log(8)·16 = 5.33
      {-3, true, 8, 20, 2},        // log(1.5)/log(10)·2 = 0.35
      {3, true, 8, 20, 6},         {-15, true, 8, 20, 3},     // log(7.5)/log(10)·2 = 1.75
      {-25, true, 8, 20, 3},       // 2.19, clamped to 3
  };
  for (const Case& c : cases)
    EXPECT_EQ(kernels::relative_position_bucket(c.rel, c.bidirectional, c.num_buckets, c.max_distance), c.want)
        << "rel " << c.rel << (c.bidirectional ? " bidirectional " : " unidirectional ") << c.num_buckets << "/"
        << c.max_distance;
}

namespace {
struct BiasCase {
  int64_t H, T, S, num_buckets, max_distance;
  bool bidirectional;
};
// T != S both ways, single rows/columns, lengths past max_distance (the clamped buckets), odd head counts
const BiasCase kBiasCases[] = {
    {2, 5, 5, 32, 128, true},  {3, 1, 7, 32, 128, true}, {1, 9, 1, 32, 128, true}, {4, 40, 33, 8, 20, true},
    {2, 150, 150, 32, 128, true}, {3, 17, 23, 16, 32, false}, {5, 3, 64, 6, 9, true},
};
}  // namespace

TEST(RelativePosition, ForwardMatchesRefBitwise) {
  int n = 0;
  for (const BiasCase& c : kBiasCases) {
    const auto table = randn(c.num_buckets * c.H, 500 + n++);
    std::vector<float> fast(c.H * c.T * c.S, 7.f), ref(c.H * c.T * c.S, -7.f);
    kernels::relative_position_bias_f32(fast.data(), table.data(), c.H, c.T, c.S, c.num_buckets, c.max_distance,
                                        c.bidirectional);
    kernels::relative_position_bias_f32_ref(ref.data(), table.data(), c.H, c.T, c.S, c.num_buckets, c.max_distance,
                                            c.bidirectional);
    EXPECT_EQ(fast, ref) << "H=" << c.H << " T=" << c.T << " S=" << c.S;
  }
}

TEST(RelativePosition, BackwardMatchesRefAndIsTheForwardsAdjoint) {
  int n = 0;
  for (const BiasCase& c : kBiasCases) {
    SCOPED_TRACE("H=" + std::to_string(c.H) + " T=" + std::to_string(c.T) + " S=" + std::to_string(c.S));
    const int64_t nt = c.num_buckets * c.H, nb = c.H * c.T * c.S;
    const auto table = randn(nt, 600 + n), dbias = randn(nb, 700 + n), start = randn(nt, 800 + n);
    ++n;
    // accumulates: both start from the same non-zero gradient
    std::vector<float> fast(start), ref(start);
    kernels::relative_position_bias_backward_f32(fast.data(), dbias.data(), c.H, c.T, c.S, c.num_buckets,
                                                 c.max_distance, c.bidirectional);
    kernels::relative_position_bias_backward_f32_ref(ref.data(), dbias.data(), c.H, c.T, c.S, c.num_buckets,
                                                     c.max_distance, c.bidirectional);
    EXPECT_LE(bwdtest::max_scaled_err(fast, ref), 1e-6);
    // adjoint: <dbias, bias(table)> = <dtable, table> with dtable the backward of dbias from zero
    std::vector<float> bias(nb), dtable(nt, 0.f);
    kernels::relative_position_bias_f32_ref(bias.data(), table.data(), c.H, c.T, c.S, c.num_buckets, c.max_distance,
                                            c.bidirectional);
    kernels::relative_position_bias_backward_f32(dtable.data(), dbias.data(), c.H, c.T, c.S, c.num_buckets,
                                                 c.max_distance, c.bidirectional);
    double lhs = 0, rhs = 0, scale = 0;
    for (int64_t i = 0; i < nb; ++i) lhs += double(dbias[i]) * bias[i], scale += std::abs(double(dbias[i]) * bias[i]);
    for (int64_t i = 0; i < nt; ++i) rhs += double(dtable[i]) * table[i];
    EXPECT_LE(std::abs(lhs - rhs), 1e-6 * scale) << lhs << " vs " << rhs;
  }
}

TEST(RelativePosition, OpsShapesAndErrors) {
  const auto tv = randn(8 * 3, 901);
  Tensor table = Tensor::empty({8, 3});
  std::copy(tv.begin(), tv.end(), table.data<float>());
  const Tensor bias = ops::relative_position_bias_forward(table, 4, 6, 20);
  ASSERT_EQ(bias.shape(), (Shape{3, 4, 6}));
  // bias[h, i, j] = table[bucket(j - i), h]
  const float* b = bias.data<float>();
  for (int64_t h = 0; h < 3; ++h)
    for (int64_t i = 0; i < 4; ++i)
      for (int64_t j = 0; j < 6; ++j)
        EXPECT_EQ(b[(h * 4 + i) * 6 + j], tv[kernels::relative_position_bucket(j - i, true, 8, 20) * 3 + h]);
  Tensor dtable = Tensor::zeros({8, 3});
  ops::relative_position_bias_backward(&dtable, Tensor::full({3, 4, 6}, 1.f), 20);
  double total = 0;
  for (int64_t i = 0; i < 24; ++i) total += dtable.data<float>()[i];
  EXPECT_EQ(total, 3.0 * 4 * 6);  // every position lands in exactly one bucket
  EXPECT_THROW(ops::relative_position_bias_backward(&dtable, Tensor::zeros({2, 4, 6}), 20), Error);
  EXPECT_THROW(ops::relative_position_bias_forward(Tensor::zeros({1, 3}), 4, 4, 20), Error);
}
