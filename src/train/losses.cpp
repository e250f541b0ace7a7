// Losses with their gradients. Row-wise log-softmax in double for stability: loss = logsumexp(z) - z[label].
#include <cmath>
#include <limits>

#include "encore/train.hpp"

namespace encore::train {

double cross_entropy_loss(const Tensor& logits_in, const Tensor& labels_in, Tensor* grad, int64_t ignore_index) {
  ENCORE_CHECK(logits_in.dim() == 2, "cross_entropy: logits must be (N, C), got ", logits_in.shape_str());
  const int64_t N = logits_in.size(0), C = logits_in.size(1);
  check_shape(labels_in, "labels", {N});
  check_dtype(labels_in, "labels", DType::i64);
  Tensor logits = logits_in.contiguous(), labels = labels_in.contiguous();
  const float* z = logits.data<float>();
  const int64_t* y = labels.data<int64_t>();
  int64_t count = 0;
  for (int64_t i = 0; i < N; ++i) {
    if (y[i] == ignore_index) continue;
    ENCORE_CHECK(y[i] >= 0 && y[i] < C, "cross_entropy: label ", y[i], " at ", i, " is outside [0, ", C, ")");
    ++count;
  }
  if (grad) *grad = Tensor::zeros({N, C});
  if (count == 0) return std::numeric_limits<double>::quiet_NaN();  // torch: mean over nothing is NaN
  double total = 0;
  for (int64_t i = 0; i < N; ++i) {
    if (y[i] == ignore_index) continue;
    const float* row = z + i * C;
    double mx = row[0];
    for (int64_t c = 1; c < C; ++c) mx = std::max(mx, static_cast<double>(row[c]));
    double sum = 0;
    for (int64_t c = 0; c < C; ++c) sum += std::exp(row[c] - mx);
    const double lse = mx + std::log(sum);
    total += lse - row[y[i]];
    if (grad) {  // d(mean loss)/dz = (softmax(z) - onehot(y)) / count
      float* g = grad->data<float>() + i * C;
      for (int64_t c = 0; c < C; ++c)
        g[c] = static_cast<float>((std::exp(row[c] - lse) - (c == y[i] ? 1.0 : 0.0)) / static_cast<double>(count));
    }
  }
  return total / static_cast<double>(count);
}

double mse_loss(const Tensor& pred_in, const Tensor& target_in, Tensor* grad) {
  ENCORE_CHECK(pred_in.shape() == target_in.shape(), "mse_loss: pred ", pred_in.shape_str(), " and target ",
               target_in.shape_str(), " differ");
  Tensor pred = pred_in.contiguous(), target = target_in.contiguous();
  const int64_t n = pred.numel();
  ENCORE_CHECK(n > 0, "mse_loss: empty input");
  if (grad) *grad = Tensor::empty(pred.shape());
  double total = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(pred.data<float>()[i]) - target.data<float>()[i];
    total += d * d;
    if (grad) grad->data<float>()[i] = static_cast<float>(2.0 * d / static_cast<double>(n));  // d/dp mean(d²)
  }
  return total / static_cast<double>(n);
}

double binary_cross_entropy_with_logits_loss(const Tensor& logits_in, const Tensor& targets_in, Tensor* grad) {
  ENCORE_CHECK(logits_in.shape() == targets_in.shape(), "binary_cross_entropy_with_logits_loss: logits ",
               logits_in.shape_str(), " and targets ", targets_in.shape_str(), " differ");
  Tensor z = logits_in.contiguous(), y = targets_in.contiguous();
  const int64_t n = z.numel();
  ENCORE_CHECK(n > 0, "binary_cross_entropy_with_logits_loss: empty input");
  if (grad) *grad = Tensor::empty(z.shape());
  double total = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double zi = z.data<float>()[i], yi = y.data<float>()[i];
    total += std::max(zi, 0.0) - zi * yi + std::log1p(std::exp(-std::abs(zi)));
    // d/dz = σ(z) - y, per element of the mean
    if (grad) grad->data<float>()[i] = static_cast<float>((1.0 / (1.0 + std::exp(-zi)) - yi) / static_cast<double>(n));
  }
  return total / static_cast<double>(n);
}

double multiple_negatives_ranking_loss(const Tensor& a_in, const Tensor& p_in, double scale, Tensor* da,
                                       Tensor* dp) {
  ENCORE_CHECK(a_in.dim() == 2 && a_in.shape() == p_in.shape(), "multiple_negatives_ranking_loss: anchors ",
               a_in.shape_str(), " and positives ", p_in.shape_str(), " must both be (B, D)");
  const int64_t B = a_in.size(0), D = a_in.size(1);
  Tensor a = a_in.contiguous(), p = p_in.contiguous();
  // unit vectors: u = a/||a||, w = p/||p|| (norm clamped at 1e-8 as torch's cos_sim normalisation does)
  std::vector<double> na(B), np_(B);
  for (int64_t i = 0; i < B; ++i) {
    double sa = 0, sp = 0;
    for (int64_t d = 0; d < D; ++d) {
      sa += double(a.data<float>()[i * D + d]) * a.data<float>()[i * D + d];
      sp += double(p.data<float>()[i * D + d]) * p.data<float>()[i * D + d];
    }
    na[i] = std::max(std::sqrt(sa), 1e-12);
    np_[i] = std::max(std::sqrt(sp), 1e-12);
  }
  // scores[i][j] = scale · u_i·w_j ; loss = mean_i CE(scores[i], i)
  Tensor scores = Tensor::empty({B, B});
  for (int64_t i = 0; i < B; ++i)
    for (int64_t j = 0; j < B; ++j) {
      double dot = 0;
      for (int64_t d = 0; d < D; ++d) dot += double(a.data<float>()[i * D + d]) * p.data<float>()[j * D + d];
      scores.data<float>()[i * B + j] = static_cast<float>(scale * dot / (na[i] * np_[j]));
    }
  Tensor labels = Tensor::empty({B}, DType::i64);
  for (int64_t i = 0; i < B; ++i) labels.data<int64_t>()[i] = i;
  Tensor ds;
  const double loss = cross_entropy_loss(scores, labels, da || dp ? &ds : nullptr);
  if (da || dp) {
    // s_ij = scale·(a_i·p_j)/(|a_i||p_j|): ds/da_i = scale·(w_j - cos_ij·u_i)/|a_i|, symmetric for p_j
    if (da) *da = Tensor::zeros({B, D});
    if (dp) *dp = Tensor::zeros({B, D});
    for (int64_t i = 0; i < B; ++i)
      for (int64_t j = 0; j < B; ++j) {
        const double g = ds.data<float>()[i * B + j];
        if (g == 0) continue;
        const double cos = scores.data<float>()[i * B + j] / scale;
        for (int64_t d = 0; d < D; ++d) {
          const double u = a.data<float>()[i * D + d] / na[i], w = p.data<float>()[j * D + d] / np_[j];
          if (da) da->data<float>()[i * D + d] += static_cast<float>(g * scale * (w - cos * u) / na[i]);
          if (dp) dp->data<float>()[j * D + d] += static_cast<float>(g * scale * (u - cos * w) / np_[j]);
        }
      }
  }
  return loss;
}

}  // namespace encore::train
