// sentence-transformers Pooling: for each sequence, over the tokens the attention mask keeps:
//   cls:                   the first kept token
//   max:                   element-wise max over kept tokens
//   mean:                  sum(x·mask) / max(sum(mask), 1e-9)
//   mean_sqrt_len_tokens:  sum(x·mask) / sqrt(max(sum(mask), 1e-9))
//   weightedmean:          position weights w_t = t + 1 - (number of leading pads), sum(x·w·mask)/sum(w·mask)
//   lasttoken:             the last kept token (the last position when none is kept, multiplied by its mask)
// include_prompt = false drops the first prompt_length kept tokens (after any left padding).
#include "encore/profiler.hpp"
#include <algorithm>
#include <cmath>
#include <limits>

#include "encore/sentence_encoder.hpp"
#include "runtime/parallel.hpp"

namespace encore {

namespace {

// keep[t] = 1 for the tokens row b pools; returns the number of leading pads (weightedmean's offset).
int64_t kept_tokens(const Tensor& mask, int64_t b, int64_t T, const PoolingConfig& cfg, int64_t prompt_length,
                    std::vector<int64_t>& keep) {
  const int64_t* mb = mask.defined() ? mask.data<int64_t>() + b * T : nullptr;
  int64_t leading_pads = 0;
  while (mb && leading_pads < T && mb[leading_pads] == 0) ++leading_pads;
  for (int64_t t = 0; t < T; ++t) keep[t] = mb ? (mb[t] != 0) : 1;
  // original mask kept for weightedmean's pad offset; prompt tokens removed from what is pooled
  if (!cfg.include_prompt && prompt_length > 0) {
    const int64_t lp = leading_pads == T ? 0 : leading_pads;  // argmax of an all-zero mask is 0
    for (int64_t t = 0; t < std::min(T, lp + prompt_length); ++t) keep[t] = 0;
  }
  return leading_pads;
}

void check_modes(const PoolingConfig& cfg) {
  ENCORE_CHECK(!cfg.modes.empty(), "pooling: no pooling mode");
  static const char* kModes[] = {"cls", "max", "mean", "mean_sqrt_len_tokens", "weightedmean", "lasttoken"};
  for (const auto& mode : cfg.modes)  // validated here: nothing may throw inside the parallel region
    ENCORE_CHECK(std::find(std::begin(kModes), std::end(kModes), mode) != std::end(kModes), "pooling mode '", mode,
                 "' is not supported (cls, max, mean, mean_sqrt_len_tokens, weightedmean, lasttoken)");
}

}  // namespace

Tensor pool_tokens(const Tensor& x_in, const Tensor& mask_in, const PoolingConfig& cfg, int64_t prompt_length) {
  profiler::Scope profile("pooling");
  ENCORE_CHECK(x_in.dim() == 3, "pooling: token embeddings must be (B, T, C), got ", x_in.shape_str());
  const int64_t B = x_in.size(0), T = x_in.size(1), C = x_in.size(2);
  Tensor x = x_in.contiguous();
  Tensor mask = mask_in.defined() ? mask_in.contiguous() : Tensor();
  if (mask.defined()) check_shape(mask, "attention_mask", {B, T});
  check_modes(cfg);
  const int64_t M = static_cast<int64_t>(cfg.modes.size());
  Tensor out = Tensor::zeros({B, M * C});
  runtime::parallel_for(0, B, 1, [&](int64_t b0, int64_t b1) {
    std::vector<double> acc(C);
    std::vector<int64_t> keep(T);
    for (int64_t b = b0; b < b1; ++b) {
      const float* xb = x.data<float>() + b * T * C;
      const int64_t leading_pads = kept_tokens(mask, b, T, cfg, prompt_length, keep);
      float* ob = out.data<float>() + b * M * C;
      for (int64_t mi = 0; mi < M; ++mi) {
        const std::string& mode = cfg.modes[mi];
        float* o = ob + mi * C;
        if (mode == "cls") {
          int64_t first = 0;  // argmax of the mask: first kept position, 0 if none
          while (first < T && !keep[first]) ++first;
          if (first == T) first = 0;
          for (int64_t c = 0; c < C; ++c) o[c] = xb[first * C + c];
        } else if (mode == "max") {
          for (int64_t c = 0; c < C; ++c) o[c] = -std::numeric_limits<float>::infinity();
          for (int64_t t = 0; t < T; ++t)
            if (keep[t])  // NaN kept, as torch.max: a NaN token value makes the pooled value NaN
              for (int64_t c = 0; c < C; ++c) {
                const float v = xb[t * C + c];
                if (!std::isnan(o[c]) && (std::isnan(v) || v > o[c])) o[c] = v;
              }
        } else if (mode == "mean" || mode == "mean_sqrt_len_tokens") {
          std::fill(acc.begin(), acc.end(), 0.0);
          double n = 0;
          for (int64_t t = 0; t < T; ++t)
            if (keep[t]) {
              n += 1;
              for (int64_t c = 0; c < C; ++c) acc[c] += xb[t * C + c];
            }
          double denom = std::max(n, 1e-9);
          if (mode != "mean") denom = std::sqrt(denom);
          for (int64_t c = 0; c < C; ++c) o[c] = static_cast<float>(acc[c] / denom);
        } else if (mode == "weightedmean") {
          std::fill(acc.begin(), acc.end(), 0.0);
          double wsum = 0;
          const int64_t offset = leading_pads == T ? 0 : leading_pads;
          for (int64_t t = 0; t < T; ++t)
            if (keep[t]) {
              const double w = static_cast<double>(t + 1 - offset);
              wsum += w;
              for (int64_t c = 0; c < C; ++c) acc[c] += w * xb[t * C + c];
            }
          for (int64_t c = 0; c < C; ++c) o[c] = static_cast<float>(acc[c] / std::max(wsum, 1e-9));
        } else if (mode == "lasttoken") {
          int64_t last = T - 1;
          while (last >= 0 && !keep[last]) --last;
          const bool none = last < 0;
          if (none) last = T - 1;
          for (int64_t c = 0; c < C; ++c) o[c] = none ? 0.f : xb[last * C + c];
        }
      }
    }
  });
  return out;
}

Tensor pool_tokens_backward(const Tensor& dy_in, const Tensor& x_in, const Tensor& mask_in, const PoolingConfig& cfg,
                            int64_t prompt_length) {
  profiler::Scope profile("pooling backward");
  ENCORE_CHECK(x_in.dim() == 3, "pooling backward: token embeddings must be (B, T, C), got ", x_in.shape_str());
  const int64_t B = x_in.size(0), T = x_in.size(1), C = x_in.size(2);
  check_modes(cfg);
  const int64_t M = static_cast<int64_t>(cfg.modes.size());
  Tensor x = x_in.contiguous(), dy = dy_in.contiguous();
  check_shape(dy, "d_pooled", {B, M * C});
  Tensor mask = mask_in.defined() ? mask_in.contiguous() : Tensor();
  if (mask.defined()) check_shape(mask, "attention_mask", {B, T});
  Tensor dx = Tensor::zeros({B, T, C});
  runtime::parallel_for(0, B, 1, [&](int64_t b0, int64_t b1) {
    std::vector<int64_t> keep(T);
    std::vector<double> w(T);
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t leading_pads = kept_tokens(mask, b, T, cfg, prompt_length, keep);
      const float* xb = x.data<float>() + b * T * C;
      float* dxb = dx.data<float>() + b * T * C;
      for (int64_t mi = 0; mi < M; ++mi) {
        const std::string& mode = cfg.modes[mi];
        const float* g = dy.data<float>() + b * M * C + mi * C;
        if (mode == "max") {
          // in the forward pass this was:  o[c] = max over kept t of x[t][c]
          for (int64_t c = 0; c < C; ++c) {
            int64_t arg = -1;
            for (int64_t t = 0; t < T; ++t)  // the forward's choice: the first NaN, else the first max
              if (keep[t] && (arg < 0 || (!std::isnan(xb[arg * C + c]) &&
                                          (std::isnan(xb[t * C + c]) || xb[t * C + c] > xb[arg * C + c]))))
                arg = t;
            if (arg >= 0) dxb[arg * C + c] += g[c];
          }
          continue;
        }
        // every other mode is linear: o = sum_t w[t]·x[t], so dx[t] += w[t]·do
        std::fill(w.begin(), w.end(), 0.0);
        if (mode == "cls") {
          int64_t first = 0;
          while (first < T && !keep[first]) ++first;
          w[first == T ? 0 : first] = 1;
        } else if (mode == "lasttoken") {
          int64_t last = T - 1;
          while (last >= 0 && !keep[last]) --last;
          if (last >= 0) w[last] = 1;  // nothing kept: the forward output is the constant 0
        } else if (mode == "mean" || mode == "mean_sqrt_len_tokens") {
          double n = 0;
          for (int64_t t = 0; t < T; ++t) n += keep[t];
          double denom = std::max(n, 1e-9);
          if (mode != "mean") denom = std::sqrt(denom);
          for (int64_t t = 0; t < T; ++t) w[t] = keep[t] / denom;
        } else {  // weightedmean
          const int64_t offset = leading_pads == T ? 0 : leading_pads;
          double wsum = 0;
          for (int64_t t = 0; t < T; ++t) wsum += keep[t] ? static_cast<double>(t + 1 - offset) : 0.0;
          for (int64_t t = 0; t < T; ++t) w[t] = keep[t] ? static_cast<double>(t + 1 - offset) / std::max(wsum, 1e-9) : 0;
        }
        for (int64_t t = 0; t < T; ++t)
          if (w[t] != 0)
            for (int64_t c = 0; c < C; ++c) dxb[t * C + c] += static_cast<float>(w[t] * g[c]);
      }
    }
  });
  return dx;
}

Tensor normalize_rows(const Tensor& x_in) {
  profiler::Scope profile("normalize");
  ENCORE_CHECK(x_in.dim() == 2, "normalize: expected (N, C), got ", x_in.shape_str());
  Tensor x = x_in.contiguous();
  const int64_t N = x.size(0), C = x.size(1);
  Tensor y = Tensor::empty({N, C});
  for (int64_t i = 0; i < N; ++i) {
    const float* xi = x.data<float>() + i * C;
    double sq = 0;
    for (int64_t c = 0; c < C; ++c) sq += static_cast<double>(xi[c]) * xi[c];
    const double norm = std::max(std::sqrt(sq), 1e-12);  // y = x / max(||x||, 1e-12)
    for (int64_t c = 0; c < C; ++c) y.data<float>()[i * C + c] = static_cast<float>(xi[c] / norm);
  }
  return y;
}

Tensor normalize_rows_backward(const Tensor& dy_in, const Tensor& x_in) {
  profiler::Scope profile("normalize backward");
  ENCORE_CHECK(x_in.dim() == 2, "normalize backward: expected (N, C), got ", x_in.shape_str());
  Tensor x = x_in.contiguous(), dy = dy_in.contiguous();
  check_shape(dy, "d_normalized", x.shape());
  const int64_t N = x.size(0), C = x.size(1);
  Tensor dx = Tensor::empty({N, C});
  for (int64_t i = 0; i < N; ++i) {
    const float* xi = x.data<float>() + i * C;
    const float* gi = dy.data<float>() + i * C;
    double sq = 0, dot = 0;
    for (int64_t c = 0; c < C; ++c) sq += static_cast<double>(xi[c]) * xi[c];
    const double norm = std::sqrt(sq);
    if (norm > 1e-12) {
      // in the forward pass this was:  y = x / ||x||  ->  dx = (dy - y·(y·dy)) / ||x||
      for (int64_t c = 0; c < C; ++c) dot += xi[c] / norm * gi[c];
      for (int64_t c = 0; c < C; ++c) dx.data<float>()[i * C + c] = static_cast<float>((gi[c] - xi[c] / norm * dot) / norm);
    } else {
      for (int64_t c = 0; c < C; ++c) dx.data<float>()[i * C + c] = static_cast<float>(gi[c] / 1e-12);
    }
  }
  return dx;
}

}  // namespace encore
