// FillMask: transformers' fill-mask pipeline over SentenceEncoder's tokenizer and model, read through the
// masked-LM head (AutoModel's logits (B, T, vocab) for a *ForMaskedLM checkpoint).
#include "encore/fill_mask.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>

#include "io/json_file.hpp"
#include "models/model.hpp"

namespace encore {

namespace fs = std::filesystem;

FillMask::FillMask(SentenceEncoder encoder, std::string mask_token, int64_t mask_token_id)
    : encoder_(std::move(encoder)), mask_token_(std::move(mask_token)), mask_token_id_(mask_token_id) {}

FillMask FillMask::load(const std::string& model_dir, DType dtype) {
  SentenceEncoder enc = SentenceEncoder::load(model_dir, dtype);
  const ModelInfo& info = enc.model().info();
  if (info.head != "masked_lm")
    throw ModelFormatError("'" + model_dir + "' is a " + (info.architecture.empty() ? info.model_type : info.architecture) +
                           " checkpoint without a masked-LM head; fill-mask needs a *ForMaskedLM checkpoint");
  std::string mask = models::configured_special_token(model_dir, "mask_token");
  const Tokenizer& tok = enc.tokenizer();
  if (mask.empty())
    for (const char* guess : {"[MASK]", "<mask>"})
      if (tok.token_to_id(guess)) {
        mask = guess;
        break;
      }
  ENCORE_CHECK_AS(ModelFormatError, !mask.empty(), "'", model_dir, "': the tokenizer has no mask token (no mask_token "
                  "in tokenizer_config.json or special_tokens_map.json, and neither [MASK] nor <mask> in the vocabulary)");
  const std::optional<int64_t> id = tok.token_to_id(mask);
  ENCORE_CHECK_AS(ModelFormatError, id.has_value(), "'", model_dir, "': the mask token '", mask,
                  "' is not in the tokenizer's vocabulary");
  return FillMask(std::move(enc), mask, *id);
}

std::vector<std::vector<std::vector<FillMaskCandidate>>> FillMask::predict(const std::vector<std::string>& texts,
                                                                           const FillMaskOptions& options) const {
  ENCORE_CHECK_AS(UsageError, options.top_k > 0, "top_k must be positive, got ", options.top_k);
  ENCORE_CHECK_AS(UsageError, options.batch_size > 0, "batch_size must be positive, got ", options.batch_size);
  TokenizeOptions to;
  to.truncate = options.truncate;
  const std::vector<Encoding> encodings = encoder_.tokenize(texts, to);
  std::vector<std::vector<int64_t>> masks(texts.size());  // mask positions per text
  for (size_t i = 0; i < encodings.size(); ++i) {
    const Encoding& e = encodings[i];
    ENCORE_CHECK_AS(InputError, options.truncate || e.size() <= static_cast<size_t>(max_seq_length()), "text ", i,
                    " is ", e.size(), " tokens long, more than max_seq_length ", max_seq_length(), " (truncation is off)");
    for (size_t t = 0; t < e.size(); ++t)
      if (e.ids[t] == mask_token_id_) masks[i].push_back(static_cast<int64_t>(t));
    ENCORE_CHECK_AS(InputError, !masks[i].empty(), "text ", i, " has no mask token ", mask_token_,
                    e.size() == static_cast<size_t>(max_seq_length()) ? " (after truncation to max_seq_length)" : "");
  }
  const Tokenizer& tok = encoder_.tokenizer();
  const AutoModel& model = encoder_.model();
  const int64_t V = model.info().vocab_size;
  const int64_t k = std::min(options.top_k, V);
  const int64_t pad_id = model.info().pad_token_id;
  std::vector<std::vector<std::vector<FillMaskCandidate>>> out(texts.size());
  for_each_length_sorted_batch(encodings, options.batch_size, [&](const std::vector<const Encoding*>& batch,
                                                                  const std::vector<int64_t>& rows) {
    const PaddedBatch pb = pad_batch(batch, model);
    const Tensor logits = model.forward(pb.input_ids, pb.attention_mask, pb.token_type_ids).logits.contiguous();
    ENCORE_CHECK(logits.dim() == 3 && logits.size(2) == V, "fill-mask: the model's logits are not (B, T, ", V, ")");
    const int64_t T = logits.size(1);
    std::vector<double> probs(static_cast<size_t>(V));
    std::vector<int64_t> order(static_cast<size_t>(V));
    for (size_t b = 0; b < batch.size(); ++b) {
      const size_t text = static_cast<size_t>(rows[b]);
      const Encoding& e = *batch[b];
      const bool single = masks[text].size() == 1;
      for (int64_t pos : masks[text]) {
        // p = softmax(logits[b, pos, :]) = exp(x - max x) / sum exp(x - max x)
        const float* x = logits.data<float>() + (static_cast<int64_t>(b) * T + pos) * V;
        const double mx = *std::max_element(x, x + V);
        double sum = 0;
        for (int64_t v = 0; v < V; ++v) sum += probs[v] = std::exp(static_cast<double>(x[v]) - mx);
        std::iota(order.begin(), order.end(), 0);
        std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int64_t a, int64_t c) {
          return probs[a] != probs[c] ? probs[a] > probs[c] : a < c;
        });
        std::vector<FillMaskCandidate> cands;
        for (int64_t r = 0; r < k; ++r) {
          const int64_t id = order[r];
          std::vector<int64_t> ids = e.ids;
          ids[pos] = id;
          // the pipeline drops padding ids from the sequence (a predicted pad token included)
          ids.erase(std::remove(ids.begin(), ids.end(), pad_id), ids.end());
          cands.push_back({static_cast<float>(probs[id] / sum), id, tok.decode({id}, false), tok.decode(ids, single)});
        }
        out[text].push_back(std::move(cands));
      }
    }
  });
  return out;
}

}  // namespace encore
