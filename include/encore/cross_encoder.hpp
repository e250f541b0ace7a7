// encore::CrossEncoder - a *ForSequenceClassification checkpoint that scores (query, document) pairs together, as
// sentence-transformers' CrossEncoder does (re-rankers such as ms-marco-MiniLM and bge-reranker, NLI models).
//
//   encore::CrossEncoder ce = encore::CrossEncoder::load("/path/to/ms-marco-MiniLM-L6-v2");
//   encore::Tensor s = ce.predict({{"how old is the moon", "The Moon formed 4.5 billion years ago."}});  // (1, 1)
//   for (const auto& r : ce.rank("how old is the moon", documents, /*top_k=*/3)) use(r.corpus_id, r.score);
//
// Pairs are tokenized as the checkpoint's tokenizer pairs them (token_type_ids 0/1, longest-first truncation to
// max_seq_length), sorted by length into batches (results in input order) and run through the model's
// classification head. The scores are the logits through the activation sentence-transformers would apply:
// config.json's sentence_transformers.activation_fn when it names one (torch.nn.Sigmoid, Identity, Tanh), else
// sigmoid for one label and identity for more. Thread safety: predict() and rank() are const and may run
// concurrently.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "encore/sentence_encoder.hpp"
#include "encore/tensor.hpp"

namespace encore {

enum class ScoreActivation { identity, sigmoid, tanh };

struct PredictOptions {
  int64_t batch_size = 32;
  // num_labels > 1: softmax over the labels instead of the activation (sentence-transformers' apply_softmax).
  bool apply_softmax = false;
  bool activation = true;  // false: the raw logits
};

// One pair's logits (num_labels of them) turned into scores in place: the activation on each, then, when
// softmax and num_labels > 1, softmax(x)_l = exp(x_l - max x) / sum_k exp(x_k - max x) over them. What
// predict() applies per row, and what encore serve's /predict and /rerank apply (TEI's sigmoid-or-softmax).
void score_logits(float* logits, int64_t num_labels, ScoreActivation activation, bool softmax);

// The sequence-classification head's logits (n, num_labels) for tokenized sequences (or pairs), run in
// length-sorted batches of batch_size (for_each_length_sorted_batch); row i belongs to encodings[i]. The encoder's
// model must have a sequence-classification head. What CrossEncoder::predict and TextClassifier::predict score.
Tensor classification_logits(const SentenceEncoder& encoder, const std::vector<Encoding>& encodings,
                             int64_t batch_size);

struct RankedDocument {
  int64_t corpus_id = 0;  // index into the documents given
  float score = 0.f;
};

class CrossEncoder {
 public:
  // dir: a Hugging Face *ForSequenceClassification directory (config.json, weights, tokenizer); dtype as
  // AutoModel::load. A checkpoint without a sequence-classification head is a ModelFormatError.
  static CrossEncoder load(const std::string& model_dir, DType dtype = DType::f32);

  // (n, num_labels) scores, row i for pairs[i].
  Tensor predict(const std::vector<std::pair<std::string, std::string>>& pairs, const PredictOptions& options = {}) const;
  // The documents scored against the query, best first (ties keep input order); top_k < 0: all. Needs
  // num_labels == 1 (a re-ranker), as sentence-transformers' rank().
  std::vector<RankedDocument> rank(const std::string& query, const std::vector<std::string>& documents,
                                   int64_t top_k = -1, const PredictOptions& options = {}) const;

  int64_t num_labels() const;
  ScoreActivation activation() const { return activation_; }
  int64_t max_seq_length() const { return encoder_.max_seq_length(); }
  void set_max_seq_length(int64_t length) { encoder_.set_max_seq_length(length); }
  const std::vector<std::string>& labels() const;  // config.json's id2label ("" where it names none)
  const SentenceEncoder& encoder() const { return encoder_; }  // the tokenizer and model underneath

 private:
  CrossEncoder(SentenceEncoder encoder, ScoreActivation activation);
  SentenceEncoder encoder_;
  ScoreActivation activation_;
};

}  // namespace encore
