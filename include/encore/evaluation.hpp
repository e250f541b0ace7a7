// Task metrics on embeddings - what `encore accuracy --classify-train/--classify-eval/--pairs` reports, so that
// "quality kept" by a dtype is a task score, not only a cosine.
//
//   Tensor xtr = enc.encode(train_texts), xev = enc.encode(eval_texts);   // (n, d), (m, d)
//   auto lr = encore::LogisticRegression::fit(xtr, train_labels);          // labels 0 / 1
//   double acc = encore::classification_accuracy(lr.predict(xev), eval_labels);
//   double top1 = encore::pair_retrieval_accuracy(enc.encode(a), enc.encode(b));   // a[i] pairs with b[i]
//
// LogisticRegression is scikit-learn's LogisticRegression(C=1.0) for two classes (penalty l2, intercept fitted
// and not penalized): it minimizes
//   0.5 * |w|^2 + C * sum_i log(1 + exp(-s_i * (w.x_i + b))),   s_i = +1 for label 1, -1 for label 0,
// a strictly convex objective, so the optimum is unique and any solver that converges finds it. Here: Newton's
// method (Hessian I' + C X~^T diag(p(1-p)) X~, solved by Cholesky, all in double) with a backtracking line
// search, from w = 0, until max|gradient| <= tol. Deterministic: the same inputs give the same bits.
// Inputs are float32 2-D tensors (rows are vectors), contiguous or not. fit() returns a new object; predict() and
// decision_function() are const and may run on several threads at once.
#pragma once
#include <cstdint>
#include <vector>

#include "encore/tensor.hpp"

namespace encore {

struct LogisticRegressionOptions {
  double C = 1.0;        // inverse regularization strength, as scikit-learn's C (> 0)
  int max_iter = 100;    // Newton iterations at most (each is one Hessian); 100 is scikit-learn's default
  double tol = 1e-8;     // stop when max|gradient of the objective| <= tol * max(1, C * n)
};

struct LogisticRegression {
  std::vector<double> coef;  // (d,) w
  double intercept = 0;      // b
  int iterations = 0;        // Newton steps taken
  bool converged = false;    // the gradient reached tol within max_iter

  // x (n, d) float32, labels (n,) each 0 or 1, both classes present.
  static LogisticRegression fit(const Tensor& x, const std::vector<int64_t>& labels,
                                const LogisticRegressionOptions& options = {});
  // w.x_i + b for each row of x (m, d).
  std::vector<double> decision_function(const Tensor& x) const;
  // 1 where w.x_i + b > 0, else 0 (scikit-learn's rule).
  std::vector<int64_t> predict(const Tensor& x) const;
};

// Share of positions where predicted == truth (same lengths, not empty).
double classification_accuracy(const std::vector<int64_t>& predicted, const std::vector<int64_t>& truth);

// Top-1 retrieval on pairs: the 2n rows of a (n, d) and b (n, d) form one pool; a row is a hit when its most
// cosine-similar other row (itself excluded; ties to the lower index, a's rows before b's) is its pair
// (a[i] <-> b[i]). Returns hits / 2n. n >= 2.
double pair_retrieval_accuracy(const Tensor& a, const Tensor& b);

}  // namespace encore
