// SparseEncoder: SPLADE max pooling over the masked-LM logits of SentenceEncoder's model.
#include "encore/sparse_encoder.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace encore {

SparseEncoder::SparseEncoder(SentenceEncoder encoder) : encoder_(std::move(encoder)) {}

SparseEncoder SparseEncoder::load(const std::string& model_dir, DType dtype) {
  SentenceEncoder enc = SentenceEncoder::load(model_dir, dtype);
  const ModelInfo& info = enc.model().info();
  if (info.head != "masked_lm")
    throw ModelFormatError("'" + model_dir + "' is a " + (info.architecture.empty() ? info.model_type : info.architecture) +
                           " checkpoint without a masked-LM head; SPLADE sparse embeddings need a *ForMaskedLM checkpoint");
  return SparseEncoder(std::move(enc));
}

int64_t SparseEncoder::dimension() const { return encoder_.model().info().vocab_size; }

std::vector<SparseVector> SparseEncoder::encode(const std::vector<std::string>& texts,
                                                const SparseEncodeOptions& options) const {
  ENCORE_CHECK_AS(UsageError, options.batch_size > 0, "batch_size must be positive, got ", options.batch_size);
  ENCORE_CHECK_AS(UsageError, !options.max_active_dims || *options.max_active_dims > 0,
                  "max_active_dims must be positive, got ", options.max_active_dims.value_or(0));
  const std::vector<Encoding> encodings = encoder_.tokenize(texts);
  const AutoModel& model = encoder_.model();
  const int64_t V = dimension();
  std::vector<SparseVector> out(texts.size());
  for_each_length_sorted_batch(encodings, options.batch_size, [&](const std::vector<const Encoding*>& batch,
                                                                  const std::vector<int64_t>& rows) {
    const PaddedBatch pb = pad_batch(batch, model);
    const Tensor logits = model.forward(pb.input_ids, pb.attention_mask, pb.token_type_ids).logits.contiguous();
    ENCORE_CHECK(logits.dim() == 3 && logits.size(2) == V, "sparse encode: the model's logits are not (B, T, ", V, ")");
    const int64_t T = logits.size(1);
    std::vector<float> pooled(static_cast<size_t>(V));
    for (size_t b = 0; b < batch.size(); ++b) {
      // max_t log1p(relu(x_t)) = log1p(relu(max_t x_t)): both functions are non-decreasing, so the max is taken
      // on the raw logits of the text's real tokens (padding would contribute log1p(relu(0)) = 0, never more)
      const float* x = logits.data<float>() + static_cast<int64_t>(b) * T * V;
      bool nonfinite = false;
      std::copy_n(x, V, pooled.begin());
      for (int64_t t = 0; t < static_cast<int64_t>(batch[b]->size()); ++t)
        for (int64_t v = 0; v < V; ++v) {
          const float xv = x[t * V + v];
          nonfinite |= !std::isfinite(xv);
          pooled[v] = std::max(pooled[v], xv);
        }
      if (nonfinite)
        throw NonFiniteError("sparse encode: the model's logits for text " + std::to_string(rows[b]) +
                             " hold NaN or Inf; check the weights and config");
      std::vector<int64_t> active;
      for (int64_t v = 0; v < V; ++v) {
        pooled[v] = pooled[v] > 0.f ? std::log1p(pooled[v]) : 0.f;
        if (pooled[v] > 0.f) active.push_back(v);
      }
      if (options.max_active_dims && static_cast<int64_t>(active.size()) > *options.max_active_dims) {
        const auto k = static_cast<std::ptrdiff_t>(*options.max_active_dims);
        std::partial_sort(active.begin(), active.begin() + k, active.end(), [&](int64_t a, int64_t c) {
          return pooled[a] != pooled[c] ? pooled[a] > pooled[c] : a < c;
        });
        active.resize(static_cast<size_t>(k));
        std::sort(active.begin(), active.end());
      }
      SparseVector& s = out[static_cast<size_t>(rows[b])];
      s.indices = active;
      for (int64_t v : active) s.values.push_back(pooled[v]);
    }
  });
  return out;
}

}  // namespace encore
