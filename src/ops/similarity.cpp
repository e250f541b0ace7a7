// cos_sim / pairwise_cos_sim (include/encore/similarity.hpp).
#include "encore/similarity.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "encore/error.hpp"

namespace encore {

namespace {

void check_rows(const char* fn, const Tensor& a, const Tensor& b) {
  ENCORE_CHECK(a.dim() == 2 && b.dim() == 2, fn, ": expected 2-D (rows, dim) tensors, got ", a.shape_str(), " and ",
               b.shape_str());
  ENCORE_CHECK(a.dtype() == DType::f32 && b.dtype() == DType::f32, fn, ": expected float32 tensors, got ",
               dtype_name(a.dtype()), " and ", dtype_name(b.dtype()));
  ENCORE_CHECK(a.size(1) == b.size(1), fn, ": the vectors' widths differ: ", a.shape_str(), " and ", b.shape_str());
}

// Rows of x (contiguous copy) and their norms max(|x_i|, 1e-12).
struct Rows {
  Tensor data;
  std::vector<double> norm;
};
Rows rows_of(const Tensor& x) {
  Rows r{x.contiguous(), std::vector<double>(static_cast<size_t>(x.size(0)))};
  const int64_t n = x.size(0), d = x.size(1);
  const float* p = r.data.data<float>();
  for (int64_t i = 0; i < n; ++i) {
    double s = 0;
    for (int64_t c = 0; c < d; ++c) s += double(p[i * d + c]) * p[i * d + c];
    r.norm[i] = std::max(std::sqrt(s), 1e-12);
  }
  return r;
}

double dot(const float* x, const float* y, int64_t d) {
  double s = 0;
  for (int64_t c = 0; c < d; ++c) s += double(x[c]) * y[c];
  return s;
}

}  // namespace

Tensor cos_sim(const Tensor& a, const Tensor& b) {
  check_rows("cos_sim", a, b);
  const Rows ra = rows_of(a), rb = rows_of(b);
  const int64_t n = a.size(0), m = b.size(0), d = a.size(1);
  Tensor out = Tensor::empty({n, m});
  const float *pa = ra.data.data<float>(), *pb = rb.data.data<float>();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < m; ++j)
      out.data<float>()[i * m + j] = static_cast<float>(dot(pa + i * d, pb + j * d, d) / (ra.norm[i] * rb.norm[j]));
  return out;
}

Tensor pairwise_cos_sim(const Tensor& a, const Tensor& b) {
  check_rows("pairwise_cos_sim", a, b);
  ENCORE_CHECK(a.size(0) == b.size(0), "pairwise_cos_sim: the row counts differ: ", a.shape_str(), " and ",
               b.shape_str());
  const Rows ra = rows_of(a), rb = rows_of(b);
  const int64_t n = a.size(0), d = a.size(1);
  Tensor out = Tensor::empty({n});
  for (int64_t i = 0; i < n; ++i)
    out.data<float>()[i] = static_cast<float>(
        dot(ra.data.data<float>() + i * d, rb.data.data<float>() + i * d, d) / (ra.norm[i] * rb.norm[i]));
  return out;
}

}  // namespace encore
