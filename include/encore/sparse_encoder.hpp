// encore::SparseEncoder - SPLADE sparse embeddings from a masked-LM checkpoint, as sentence-transformers'
// SparseEncoder (MLMTransformer + SpladePooling "max", relu activation) computes them:
//   weight[v] = max over the text's tokens t of log(1 + relu(logits[t, v]))      (v over the vocabulary)
// then, with max_active_dims = k, only the k largest weights are kept (the rest are 0).
//
//   encore::SparseEncoder splade = encore::SparseEncoder::load("/path/to/splade-v3");
//   for (const encore::SparseVector& s : splade.encode({"how old is the moon"}))
//     for (size_t i = 0; i < s.indices.size(); ++i) use(s.indices[i], s.values[i]);   // token id, weight
//
// Texts are tokenized as the checkpoint's tokenizer does and cut to max_seq_length(); batches are formed from
// texts sorted by length (the logits of a batch are (batch, tokens, vocabulary) floats: batch_size bounds that
// memory); results come in input order. Thread safety: encode() is const and may run concurrently.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "encore/sentence_encoder.hpp"

namespace encore {

struct SparseEncodeOptions {
  int64_t batch_size = 8;
  std::optional<int64_t> max_active_dims;  // keep the k largest weights per text (ties: lower index); unset: all
};

// One text's non-zero weights, indices (vocabulary ids) ascending: a CSR row.
struct SparseVector {
  std::vector<int64_t> indices;
  std::vector<float> values;
};

class SparseEncoder {
 public:
  // dir: a *ForMaskedLM checkpoint with its tokenizer (a SPLADE model's MLM); dtype as AutoModel::load. A
  // checkpoint without a masked-LM head is a ModelFormatError naming its architecture.
  static SparseEncoder load(const std::string& model_dir, DType dtype = DType::f32);

  std::vector<SparseVector> encode(const std::vector<std::string>& texts, const SparseEncodeOptions& options = {}) const;

  int64_t dimension() const;  // the vocabulary size
  int64_t max_seq_length() const { return encoder_.max_seq_length(); }
  void set_max_seq_length(int64_t length) { encoder_.set_max_seq_length(length); }
  const SentenceEncoder& encoder() const { return encoder_; }  // the tokenizer and model underneath

 private:
  explicit SparseEncoder(SentenceEncoder encoder);
  SentenceEncoder encoder_;
};

}  // namespace encore
