// encore::LogisticRegression, classification_accuracy and pair_retrieval_accuracy (include/encore/evaluation.hpp).
// Oracles written here, independent of the solver: the optimum of the strictly convex objective is the unique
// point where its gradient is zero, so the gradient is recomputed in long double at the returned (w, b) and must
// vanish (|g|_inf <= 1e-7 * C * n: the solver's stopping rule is 1e-8 * C * n, in double); a 1-D case whose
// optimum is known in closed form; retrieval on vectors built so each row's nearest neighbour is known.
// (tests/python/test_task_accuracy.py checks the same functions against scikit-learn and numpy on real embeddings.)
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <string>

#include "encore/error.hpp"
#include "encore/evaluation.hpp"

namespace {

using encore::Tensor;

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const encore::Error& e) {
    return e.what();
  }
  return "";
}

struct Data {
  Tensor x;
  std::vector<int64_t> y;
};

// Two Gaussian clouds in d dims with overlapping classes (not separable: the optimum is finite even unpenalized).
Data clouds(int64_t n, int64_t d, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.f, 1.f);
  Data out{Tensor::empty({n, d}), {}};
  for (int64_t i = 0; i < n; ++i) {
    const int64_t label = i % 3 == 0;
    out.y.push_back(label);
    for (int64_t j = 0; j < d; ++j) out.x.data<float>()[i * d + j] = g(rng) + (label ? 0.4f : -0.2f) * (j % 2 ? 1 : -1);
  }
  return out;
}

// max |gradient| of 0.5|w|^2 + C sum log(1 + exp(-s_i (w.x_i + b))) at the fitted point, in long double.
long double gradient_norm(const Data& data, const encore::LogisticRegression& lr, double C) {
  const int64_t n = data.x.size(0), d = data.x.size(1);
  std::vector<long double> g(d + 1, 0);
  for (int64_t j = 0; j < d; ++j) g[j] = lr.coef[j];
  for (int64_t i = 0; i < n; ++i) {
    long double z = lr.intercept;
    for (int64_t j = 0; j < d; ++j) z += static_cast<long double>(lr.coef[j]) * data.x.data<float>()[i * d + j];
    const long double r = C * (1 / (1 + std::exp(-z)) - data.y[i]);
    for (int64_t j = 0; j < d; ++j) g[j] += r * data.x.data<float>()[i * d + j];
    g[d] += r;
  }
  long double m = 0;
  for (auto v : g) m = std::max(m, std::fabs(v));
  return m;
}

TEST(Evaluation, LogisticRegressionReachesTheOptimum) {
  struct Case { int64_t n, d; double C; };
  for (const Case c : {Case{200, 3, 1.0}, Case{500, 17, 1.0}, Case{300, 40, 10.0}, Case{64, 65, 0.1}}) {
    const Data data = clouds(c.n, c.d, 7);
    const auto lr = encore::LogisticRegression::fit(data.x, data.y, {.C = c.C});
    EXPECT_TRUE(lr.converged) << c.n << "x" << c.d;
    EXPECT_LE(lr.iterations, 30) << c.n << "x" << c.d;
    EXPECT_LE(gradient_norm(data, lr, c.C), 1e-7 * c.C * c.n) << c.n << "x" << c.d << " C=" << c.C;
    // And the classes are told apart better than chance on the training data.
    EXPECT_GT(encore::classification_accuracy(lr.predict(data.x), data.y), 0.7) << c.n << "x" << c.d;
  }
}

TEST(Evaluation, LogisticRegressionOneDimensionClosedForm) {
  // x = +1 (label 1) and -1 (label 0), once each: by symmetry b = 0 and w solves w = 2C / (1 + exp(w)).
  // With C = 1, w = 0.674...; found here by a damped fixed-point iteration in long double.
  const float xs[] = {1.f, -1.f};
  const Tensor x = Tensor::from_floats({2, 1}, xs);
  const auto lr = encore::LogisticRegression::fit(x, {1, 0});
  long double w = 0.5;
  for (int i = 0; i < 200; ++i) w = 2 / (1 + std::exp(w)) * 0.5L + w * 0.5L;  // damped fixed point
  EXPECT_NEAR(lr.coef[0], static_cast<double>(w), 1e-9);
  EXPECT_NEAR(lr.intercept, 0.0, 1e-9);
  EXPECT_EQ(lr.predict(x), (std::vector<int64_t>{1, 0}));
}

TEST(Evaluation, LogisticRegressionIsDeterministicAndViewsWork) {
  const Data data = clouds(300, 12, 3);
  const auto a = encore::LogisticRegression::fit(data.x, data.y);
  const auto b = encore::LogisticRegression::fit(data.x, data.y);
  EXPECT_EQ(a.coef, b.coef);
  EXPECT_EQ(a.intercept, b.intercept);
  const Tensor t = data.x.transpose(0, 1).contiguous().transpose(0, 1);  // same values, column-major strides
  ASSERT_FALSE(t.is_contiguous());
  EXPECT_EQ(encore::LogisticRegression::fit(t, data.y).coef, a.coef);
}

TEST(Evaluation, LogisticRegressionBadInputs) {
  const Data data = clouds(10, 2, 1);
  EXPECT_NE(error_of([&] { encore::LogisticRegression::fit(data.x, {0, 1}); }).find("10 rows but 2 labels"),
            std::string::npos);
  std::vector<int64_t> y(10, 0);
  EXPECT_NE(error_of([&] { encore::LogisticRegression::fit(data.x, y); }).find("needs both classes"), std::string::npos);
  y[3] = 2;
  EXPECT_NE(error_of([&] { encore::LogisticRegression::fit(data.x, y); }).find("label 3 is 2"), std::string::npos);
  EXPECT_NE(error_of([&] { encore::LogisticRegression::fit(data.x, data.y, {.C = 0}); }).find("C must be > 0"),
            std::string::npos);
  Tensor nan = data.x.contiguous();
  nan = Tensor::from_floats({10, 2}, nan.data<float>());
  nan.data<float>()[5] = std::nanf("");
  EXPECT_NE(error_of([&] { encore::LogisticRegression::fit(nan, data.y); }).find("NaN"), std::string::npos);
  const auto lr = encore::LogisticRegression::fit(data.x, data.y);
  EXPECT_NE(error_of([&] { lr.predict(Tensor::zeros({3, 5})); }).find("width 2"), std::string::npos);
  EXPECT_NE(error_of([&] { encore::classification_accuracy({1}, {1, 0}); }).find("1 predictions for 2 labels"),
            std::string::npos);
}

TEST(Evaluation, PairRetrieval) {
  // Pairs sit on their own axis (a[i] = e_i, b[i] = e_i + small noise on another axis): every text finds its pair.
  const int64_t n = 5, d = 8;
  Tensor a = Tensor::zeros({n, d}), b = Tensor::zeros({n, d});
  for (int64_t i = 0; i < n; ++i) {
    a.data<float>()[i * d + i] = 1.f;
    b.data<float>()[i * d + i] = 1.f;
    b.data<float>()[i * d + 7] = 0.3f;
  }
  EXPECT_EQ(encore::pair_retrieval_accuracy(a, b), 1.0);
  // Turn b[0] to -e_0: a[0] and b[0] now have cosine 0 with every other row but each other (-1), so both take
  // the first zero-cosine row (ties to the lower index) and miss; the other 2n - 2 still hit.
  b.data<float>()[0 * d + 0] = -1.f;
  b.data<float>()[0 * d + 7] = 0.f;
  EXPECT_DOUBLE_EQ(encore::pair_retrieval_accuracy(a, b), static_cast<double>(2 * n - 2) / (2 * n));
  EXPECT_NE(error_of([&] { encore::pair_retrieval_accuracy(a, Tensor::zeros({4, d})); }).find("same shape"),
            std::string::npos);
  EXPECT_NE(error_of([&] { encore::pair_retrieval_accuracy(Tensor::zeros({1, d}), Tensor::zeros({1, d})); })
                .find("at least 2 pairs"),
            std::string::npos);
}

}  // namespace
