// sentence-transformers Pooling: for each sequence, over the tokens the attention mask keeps:
//   cls:                   the first kept token
//   max:                   element-wise max over kept tokens
//   mean:                  sum(x·mask) / max(sum(mask), 1e-9)
//   mean_sqrt_len_tokens:  sum(x·mask) / sqrt(max(sum(mask), 1e-9))
//   weightedmean:          position weights w_t = t + 1 - (number of leading pads), sum(x·w·mask)/sum(w·mask)
//   lasttoken:             the last kept token (the last position when none is kept, multiplied by its mask)
// include_prompt = false drops the first prompt_length kept tokens (after any left padding).
#include <algorithm>
#include <cmath>
#include <limits>

#include "encore/sentence_encoder.hpp"
#include "runtime/parallel.hpp"

namespace encore {

Tensor pool_tokens(const Tensor& x_in, const Tensor& mask_in, const PoolingConfig& cfg, int64_t prompt_length) {
  ENCORE_CHECK(x_in.dim() == 3, "pooling: token embeddings must be (B, T, C), got ", x_in.shape_str());
  const int64_t B = x_in.size(0), T = x_in.size(1), C = x_in.size(2);
  Tensor x = x_in.contiguous();
  Tensor mask = mask_in.defined() ? mask_in.contiguous() : Tensor();
  if (mask.defined()) check_shape(mask, "attention_mask", {B, T});
  const int64_t M = static_cast<int64_t>(cfg.modes.size());
  ENCORE_CHECK(M > 0, "pooling: no pooling mode");
  static const char* kModes[] = {"cls", "max", "mean", "mean_sqrt_len_tokens", "weightedmean", "lasttoken"};
  for (const auto& mode : cfg.modes)  // validated here: nothing may throw inside the parallel region
    ENCORE_CHECK(std::find(std::begin(kModes), std::end(kModes), mode) != std::end(kModes), "pooling mode '", mode,
                 "' is not supported (cls, max, mean, mean_sqrt_len_tokens, weightedmean, lasttoken)");
  Tensor out = Tensor::zeros({B, M * C});
  runtime::parallel_for(0, B, 1, [&](int64_t b0, int64_t b1) {
    std::vector<double> acc(C);
    std::vector<int64_t> keep(T);
    for (int64_t b = b0; b < b1; ++b) {
      const float* xb = x.data<float>() + b * T * C;
      const int64_t* mb = mask.defined() ? mask.data<int64_t>() + b * T : nullptr;
      int64_t leading_pads = 0;
      while (mb && leading_pads < T && mb[leading_pads] == 0) ++leading_pads;
      for (int64_t t = 0; t < T; ++t) keep[t] = mb ? (mb[t] != 0) : 1;
      // original mask kept for weightedmean's pad offset; prompt tokens removed from what is pooled
      if (!cfg.include_prompt && prompt_length > 0) {
        const int64_t lp = leading_pads == T ? 0 : leading_pads;  // argmax of an all-zero mask is 0
        for (int64_t t = 0; t < std::min(T, lp + prompt_length); ++t) keep[t] = 0;
      }
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
            if (keep[t])
              for (int64_t c = 0; c < C; ++c) o[c] = std::max(o[c], xb[t * C + c]);
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

}  // namespace encore
