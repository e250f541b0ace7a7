// Task metrics on embeddings (include/encore/evaluation.hpp): binary logistic regression and pair retrieval.
#include "encore/evaluation.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "encore/error.hpp"
#include "encore/similarity.hpp"
#include "runtime/parallel.hpp"

namespace encore {

namespace {

void check_matrix(const char* fn, const char* name, const Tensor& x) {
  ENCORE_CHECK(x.defined() && x.dim() == 2, fn, ": expected ", name, " to be a 2-D (rows, dim) tensor, got ",
               x.defined() ? x.shape_str() : std::string("an undefined tensor"));
  ENCORE_CHECK(x.dtype() == DType::f32, fn, ": expected ", name, " to be float32, got ", dtype_name(x.dtype()));
}

// Rows of x in double with a trailing 1 (the intercept's column): (n, d + 1) row-major.
std::vector<double> augmented(const Tensor& x) {
  const Tensor c = x.contiguous();
  const int64_t n = x.size(0), d = x.size(1);
  std::vector<double> out(static_cast<size_t>(n * (d + 1)));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < d; ++j) out[i * (d + 1) + j] = c.data<float>()[i * d + j];
    out[i * (d + 1) + d] = 1.0;
  }
  return out;
}

// log(1 + exp(t)) without overflow.
double softplus(double t) { return t > 0 ? t + std::log1p(std::exp(-t)) : std::log1p(std::exp(t)); }
double sigmoid(double t) { return t >= 0 ? 1 / (1 + std::exp(-t)) : std::exp(t) / (1 + std::exp(t)); }

// Solves A x = b in place (b becomes x) for symmetric positive definite A (m, m), by Cholesky A = L L^T.
// Returns false when A is not numerically positive definite.
bool cholesky_solve(std::vector<double>& a, std::vector<double>& b, int64_t m) {
  for (int64_t j = 0; j < m; ++j) {
    double s = a[j * m + j];
    for (int64_t k = 0; k < j; ++k) s -= a[j * m + k] * a[j * m + k];
    if (!(s > 0)) return false;
    const double ljj = std::sqrt(s);
    a[j * m + j] = ljj;
    runtime::parallel_for(j + 1, m, 64, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        double t = a[i * m + j];
        for (int64_t k = 0; k < j; ++k) t -= a[i * m + k] * a[j * m + k];
        a[i * m + j] = t / ljj;
      }
    });
  }
  for (int64_t i = 0; i < m; ++i) {  // L y = b
    double t = b[i];
    for (int64_t k = 0; k < i; ++k) t -= a[i * m + k] * b[k];
    b[i] = t / a[i * m + i];
  }
  for (int64_t i = m - 1; i >= 0; --i) {  // L^T x = y
    double t = b[i];
    for (int64_t k = i + 1; k < m; ++k) t -= a[k * m + i] * b[k];
    b[i] = t / a[i * m + i];
  }
  return true;
}

}  // namespace

LogisticRegression LogisticRegression::fit(const Tensor& x, const std::vector<int64_t>& labels,
                                           const LogisticRegressionOptions& options) {
  check_matrix("LogisticRegression::fit", "x", x);
  const int64_t n = x.size(0), d = x.size(1), m = d + 1;
  ENCORE_CHECK(static_cast<int64_t>(labels.size()) == n, "LogisticRegression::fit: ", n, " rows but ",
               labels.size(), " labels");
  ENCORE_CHECK(options.C > 0 && std::isfinite(options.C), "LogisticRegression::fit: C must be > 0, got ", options.C);
  ENCORE_CHECK(options.max_iter >= 1, "LogisticRegression::fit: max_iter must be >= 1, got ", options.max_iter);
  int64_t ones = 0;
  for (size_t i = 0; i < labels.size(); ++i) {
    ENCORE_CHECK(labels[i] == 0 || labels[i] == 1, "LogisticRegression::fit: label ", i, " is ", labels[i],
                 " (two classes: 0 or 1)");
    ones += labels[i];
  }
  ENCORE_CHECK(ones > 0 && ones < n, "LogisticRegression::fit: needs both classes, the ", n, " labels are all ",
               ones ? 1 : 0);
  const std::vector<double> xa = augmented(x);
  for (double v : xa) ENCORE_CHECK(std::isfinite(v), "LogisticRegression::fit: x holds a NaN or infinity");
  const double C = options.C;
  std::vector<double> w(static_cast<size_t>(m), 0.0), z(static_cast<size_t>(n));

  auto margins = [&](const std::vector<double>& v) {  // z_i = w.x~_i
    runtime::parallel_for(0, n, 256, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        double s = 0;
        for (int64_t j = 0; j < m; ++j) s += v[j] * xa[i * m + j];
        z[i] = s;
      }
    });
  };
  // f(w) = 0.5 |w[:d]|^2 + C sum_i softplus(-s_i z_i)
  auto objective = [&](const std::vector<double>& v) {
    margins(v);
    double f = 0;
    for (int64_t j = 0; j < d; ++j) f += 0.5 * v[j] * v[j];
    for (int64_t i = 0; i < n; ++i) f += C * softplus(labels[i] ? -z[i] : z[i]);
    return f;
  };

  LogisticRegression out;
  double f = objective(w);
  const double gtol = options.tol * std::max(1.0, C * static_cast<double>(n));
  std::vector<double> g(static_cast<size_t>(m)), h(static_cast<size_t>(m * m)), p(static_cast<size_t>(n));
  for (int it = 0; it < options.max_iter; ++it) {
    // z holds the margins of w here. p_i = sigmoid(z_i); gradient = w' + C sum_i (p_i - y_i) x~_i
    for (int64_t i = 0; i < n; ++i) p[i] = sigmoid(z[i]);
    std::fill(g.begin(), g.end(), 0.0);
    for (int64_t i = 0; i < n; ++i) {
      const double r = C * (p[i] - static_cast<double>(labels[i]));
      for (int64_t j = 0; j < m; ++j) g[j] += r * xa[i * m + j];
    }
    for (int64_t j = 0; j < d; ++j) g[j] += w[j];
    double gmax = 0;
    for (double v : g) gmax = std::max(gmax, std::abs(v));
    if (gmax <= gtol) {
      out.converged = true;
      break;
    }
    // Hessian = diag(1 (d times), 0) + C sum_i p_i (1 - p_i) x~_i x~_i^T, row by row (rows split over threads).
    // Blocks of 64 examples (400 KB at d = 768) stay in cache while each thread adds them to its rows.
    runtime::parallel_for(0, m, 8, [&](int64_t begin, int64_t end) {
      std::fill(h.begin() + begin * m, h.begin() + end * m, 0.0);
      for (int64_t i0 = 0; i0 < n; i0 += 64)
        for (int64_t j = begin; j < end; ++j) {
          double* row = &h[j * m];
          for (int64_t i = i0; i < std::min(n, i0 + 64); ++i) {
            const double* xi = &xa[i * m];
            const double a = C * p[i] * (1 - p[i]) * xi[j];
            for (int64_t k = 0; k < m; ++k) row[k] += a * xi[k];
          }
        }
      for (int64_t j = std::max<int64_t>(begin, 0); j < std::min(end, d); ++j) h[j * m + j] += 1.0;
    });
    std::vector<double> step = g;
    ENCORE_CHECK(cholesky_solve(h, step, m),
                 "LogisticRegression::fit: the Hessian is not positive definite (a constant column with a "
                 "separable intercept?)");
    // Backtracking (Armijo) along -step: accept when f decreases by at least 1e-4 * t * g.step.
    double gs = 0;
    for (int64_t j = 0; j < m; ++j) gs += g[j] * step[j];
    std::vector<double> trial(static_cast<size_t>(m));
    double t = 1.0, ft = f;
    for (int ls = 0; ls < 50; ++ls, t *= 0.5) {
      for (int64_t j = 0; j < m; ++j) trial[j] = w[j] - t * step[j];
      ft = objective(trial);
      if (ft <= f - 1e-4 * t * gs) break;
    }
    out.iterations = it + 1;
    if (!(ft < f)) {  // no decrease at all: at the optimum to machine precision
      out.converged = true;
      break;
    }
    w = trial;
    f = ft;
  }
  out.coef.assign(w.begin(), w.begin() + d);
  out.intercept = w[d];
  return out;
}

std::vector<double> LogisticRegression::decision_function(const Tensor& x) const {
  check_matrix("LogisticRegression::decision_function", "x", x);
  const int64_t n = x.size(0), d = x.size(1);
  ENCORE_CHECK(d == static_cast<int64_t>(coef.size()), "LogisticRegression: fitted on vectors of width ",
               coef.size(), ", got ", x.shape_str());
  const Tensor c = x.contiguous();
  std::vector<double> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    double s = intercept;
    for (int64_t j = 0; j < d; ++j) s += coef[j] * c.data<float>()[i * d + j];
    out[i] = s;
  }
  return out;
}

std::vector<int64_t> LogisticRegression::predict(const Tensor& x) const {
  std::vector<int64_t> out;
  for (double s : decision_function(x)) out.push_back(s > 0 ? 1 : 0);
  return out;
}

double classification_accuracy(const std::vector<int64_t>& predicted, const std::vector<int64_t>& truth) {
  ENCORE_CHECK(!truth.empty(), "classification_accuracy: no labels");
  ENCORE_CHECK(predicted.size() == truth.size(), "classification_accuracy: ", predicted.size(),
               " predictions for ", truth.size(), " labels");
  int64_t hits = 0;
  for (size_t i = 0; i < truth.size(); ++i) hits += predicted[i] == truth[i];
  return static_cast<double>(hits) / static_cast<double>(truth.size());
}

double pair_retrieval_accuracy(const Tensor& a, const Tensor& b) {
  check_matrix("pair_retrieval_accuracy", "a", a);
  check_matrix("pair_retrieval_accuracy", "b", b);
  ENCORE_CHECK(a.size(0) == b.size(0) && a.size(1) == b.size(1), "pair_retrieval_accuracy: a ", a.shape_str(),
               " and b ", b.shape_str(), " must have the same shape (row i of a pairs with row i of b)");
  const int64_t n = a.size(0), d = a.size(1), total = 2 * n;
  ENCORE_CHECK(n >= 2, "pair_retrieval_accuracy: needs at least 2 pairs, got ", n);
  Tensor pool = Tensor::empty({total, d});
  const Tensor ca = a.contiguous(), cb = b.contiguous();
  std::copy_n(ca.data<float>(), n * d, pool.data<float>());
  std::copy_n(cb.data<float>(), n * d, pool.data<float>() + n * d);
  const Tensor sim = cos_sim(pool, pool);
  int64_t hits = 0;
  for (int64_t i = 0; i < total; ++i) {
    const float* row = sim.data<float>() + i * total;
    int64_t best = -1;
    for (int64_t j = 0; j < total; ++j)
      if (j != i && (best < 0 || row[j] > row[best])) best = j;
    hits += best == (i < n ? i + n : i - n);
  }
  return static_cast<double>(hits) / static_cast<double>(total);
}

}  // namespace encore
