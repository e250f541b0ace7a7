// Backward of sentence-transformers' Pooling and Normalize (src/models/pooling.cpp), the pieces `encore train
// --task embedding` differentiates through:
//  * pool_tokens_backward vs central finite differences of pool_tokens itself, per mode and mask layout. Every
//    mode is piecewise linear in x (max: linear away from ties, and random inputs have gaps far above h), so the
//    differences are exact up to float rounding of the forward: error = max|grad - fd| / max|fd| <= 1e-4.
//  * normalize_rows_backward vs central differences of y = x / max(||x||, 1e-12) computed in double: 1e-6.
//  * bad shapes name the argument.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "encore/sentence_encoder.hpp"
#include "test_backward_reference.hpp"

using namespace encore;
using bwdtest::fd_grad;
using bwdtest::randn;
using bwdtest::rel_err;
using DVec = std::vector<double>;

namespace {

Tensor int_mask(const std::vector<int64_t>& v, int64_t B, int64_t T) {
  Tensor m = Tensor::empty({B, T}, DType::i64);
  std::copy(v.begin(), v.end(), m.data<int64_t>());
  return m;
}

struct PoolCase {
  const char* name;
  std::vector<std::string> modes;
  std::vector<int64_t> mask;  // (B=3, T=5) row-major; empty: no mask
  bool include_prompt = true;
  int64_t prompt_length = 0;
};

const std::vector<int64_t> kRight = {1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1, 0, 0, 0, 0};
const std::vector<int64_t> kLeft = {1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 0, 0, 0, 0, 1};
const std::vector<int64_t> kEmptyRow = {1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1};

const PoolCase kPoolCases[] = {
    {"mean, right padding", {"mean"}, kRight},
    {"mean, no mask", {"mean"}, {}},
    {"mean, a row with no tokens", {"mean"}, kEmptyRow},
    {"cls, left padding", {"cls"}, kLeft},
    {"cls, a row with no tokens", {"cls"}, kEmptyRow},
    {"max, right padding", {"max"}, kRight},
    {"mean_sqrt_len_tokens", {"mean_sqrt_len_tokens"}, kRight},
    {"weightedmean, left padding", {"weightedmean"}, kLeft},
    {"lasttoken, right padding", {"lasttoken"}, kRight},
    {"lasttoken, a row with no tokens", {"lasttoken"}, kEmptyRow},
    {"cls+mean+max", {"cls", "mean", "max"}, kRight},
    {"mean without a 2-token prompt", {"mean"}, kLeft, false, 2},
};

TEST(PoolingBackward, MatchesFiniteDifferences) {
  const int64_t B = 3, T = 5, C = 4;
  const std::vector<float> x0 = randn(B * T * C, 7);
  for (const PoolCase& c : kPoolCases) {
    PoolingConfig cfg;
    cfg.modes = c.modes;
    cfg.include_prompt = c.include_prompt;
    const Tensor mask = c.mask.empty() ? Tensor() : int_mask(c.mask, B, T);
    const int64_t D = C * static_cast<int64_t>(c.modes.size());
    const std::vector<float> w = randn(B * D, 11);  // L = Σ w·pool(x), so dL/dpooled = w
    auto L = [&](const DVec& xv) {
      std::vector<float> xf(xv.begin(), xv.end());
      Tensor out = pool_tokens(Tensor::from_floats({B, T, C}, xf.data()), mask, cfg, c.prompt_length);
      double s = 0;
      for (int64_t i = 0; i < B * D; ++i) s += static_cast<double>(w[i]) * out.data<float>()[i];
      return s;
    };
    const Tensor dx = pool_tokens_backward(Tensor::from_floats({B, D}, w.data()),
                                           Tensor::from_floats({B, T, C}, x0.data()), mask, cfg, c.prompt_length);
    ASSERT_EQ(dx.shape(), (Shape{B, T, C})) << c.name;
    const std::vector<float> got(dx.data<float>(), dx.data<float>() + dx.numel());
    EXPECT_LE(rel_err(got, fd_grad(L, DVec(x0.begin(), x0.end()), 1e-2)), 1e-4) << c.name;
  }
}

TEST(NormalizeBackward, MatchesFiniteDifferences) {
  const int64_t N = 4, C = 7;
  std::vector<float> x0 = randn(N * C, 3);
  for (int64_t c = 0; c < C; ++c) x0[3 * C + c] *= 1e-3f;  // a short row: the gradient scales with 1/||x||
  const std::vector<float> w = randn(N * C, 5);
  auto L = [&](const DVec& x) {  // Σ w·x/||x|| in double
    double s = 0;
    for (int64_t i = 0; i < N; ++i) {
      double sq = 0;
      for (int64_t c = 0; c < C; ++c) sq += x[i * C + c] * x[i * C + c];
      const double norm = std::max(std::sqrt(sq), 1e-12);
      for (int64_t c = 0; c < C; ++c) s += w[i * C + c] * x[i * C + c] / norm;
    }
    return s;
  };
  const Tensor x = Tensor::from_floats({N, C}, x0.data());
  const Tensor y = normalize_rows(x);
  for (int64_t i = 0; i < N; ++i) {
    double sq = 0;
    for (int64_t c = 0; c < C; ++c) sq += double(y.data<float>()[i * C + c]) * y.data<float>()[i * C + c];
    EXPECT_NEAR(sq, 1.0, 1e-6);
  }
  const Tensor dx = normalize_rows_backward(Tensor::from_floats({N, C}, w.data()), x);
  const std::vector<float> got(dx.data<float>(), dx.data<float>() + dx.numel());
  // per row: the short row's gradient is 1000x the others, so each row is measured against its own scale
  const DVec fd = fd_grad(L, DVec(x0.begin(), x0.end()), 1e-7);
  for (int64_t i = 0; i < N; ++i)
    EXPECT_LE(rel_err(std::vector<float>(got.begin() + i * C, got.begin() + (i + 1) * C),
                      DVec(fd.begin() + i * C, fd.begin() + (i + 1) * C)),
              1e-6)
        << "row " << i;
}

TEST(PoolingBackward, ShapeErrorsNameTheArgument) {
  PoolingConfig cfg;
  const Tensor x = Tensor::zeros({2, 3, 4});
  try {
    pool_tokens_backward(Tensor::zeros({2, 5}), x, Tensor(), cfg);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("d_pooled"), std::string::npos) << e.what();
  }
  try {
    normalize_rows_backward(Tensor::zeros({2, 5}), Tensor::zeros({2, 4}));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("d_normalized"), std::string::npos) << e.what();
  }
}

}  // namespace

// Max pooling keeps NaN, as sentence-transformers' torch.max does: a NaN in a kept token, first or later, makes
// that column NaN; a NaN in a masked-out token changes nothing.
TEST(Pooling, MaxKeepsNan) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const int64_t T = 4, C = 3;
  PoolingConfig max_pool;
  max_pool.modes = {"max"};
  for (int64_t at : {0, 2}) {
    Tensor x = Tensor::empty({1, T, C});
    for (int64_t i = 0; i < T * C; ++i) x.data<float>()[i] = static_cast<float>(i % 5);
    x.data<float>()[at * C + 1] = nan;   // column 1 of a kept token
    x.data<float>()[3 * C + 2] = nan;    // column 2 of the masked-out token 3
    const Tensor pooled = pool_tokens(x, int_mask({1, 1, 1, 0}, 1, T), max_pool);
    EXPECT_TRUE(std::isnan(pooled.data<float>()[1])) << at;
    EXPECT_FALSE(std::isnan(pooled.data<float>()[0])) << at;
    EXPECT_FALSE(std::isnan(pooled.data<float>()[2])) << at;
  }
}
