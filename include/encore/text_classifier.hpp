// encore::TextClassifier - a *ForSequenceClassification checkpoint as transformers' text-classification pipeline
// runs it: texts (or text pairs) in, {label, score} per text out, labels from config.json's id2label.
//
//   encore::TextClassifier clf = encore::TextClassifier::load("/path/to/distilbert-sst2");
//   for (const auto& top : clf.classify({"This movie is great!", "Dull."}))   // top_k = 1: the best label each
//     std::printf("%s %.3f\n", top[0].label.c_str(), top[0].score);
//   encore::Tensor all = clf.predict({"This movie is great!"});                 // (1, num_labels) scores
//
// Scores are the logits through the function transformers' pipeline applies by default (function_to_apply
// "default"): none for config.json problem_type "regression"; sigmoid for "multi_label_classification" or one
// label; softmax for "single_label_classification" or more labels. ClassifyOptions::function overrides it.
// Texts are tokenized as the checkpoint's tokenizer does (special tokens added; a pair gets token_type_ids 0/1)
// and truncated to max_seq_length() unless truncation is off (transformers' pipeline does not truncate by
// default, and a text longer than the model's positions fails there; here it is cut, or with truncate = false
// refused with an error naming the text). Batches are formed from texts sorted by length; results come in input
// order. Thread safety: predict() and classify() are const and may run concurrently.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "encore/sentence_encoder.hpp"
#include "encore/tensor.hpp"

namespace encore {

// transformers' ClassificationFunction (the pipeline's function_to_apply).
enum class ClassificationFunction { sigmoid, softmax, none };
// "sigmoid", "softmax" or "none" (case-insensitive, as the pipeline takes them); anything else is a UsageError.
ClassificationFunction parse_classification_function(const std::string& name);
const char* classification_function_name(ClassificationFunction f);

struct ClassifyOptions {
  int64_t batch_size = 32;
  std::optional<ClassificationFunction> function;  // unset: the model's default_function()
  bool truncate = true;  // false: a text (pair) longer than max_seq_length() tokens is an InputError
};

struct LabelScore {
  std::string label;  // id2label[id], "LABEL_<id>" where config.json names none (transformers' default)
  float score = 0.f;
  int64_t id = 0;
};

class TextClassifier {
 public:
  // dir: a Hugging Face *ForSequenceClassification directory (config.json, weights, tokenizer), e.g. what
  // `encore train --output DIR` writes; dtype as AutoModel::load. A checkpoint without a sequence-classification
  // head is a ModelFormatError naming its architecture.
  static TextClassifier load(const std::string& model_dir, DType dtype = DType::f32);

  // (n, num_labels) scores: row i for texts[i] (or pairs[i]: text and text_pair).
  Tensor predict(const std::vector<std::string>& texts, const ClassifyOptions& options = {}) const;
  Tensor predict(const std::vector<std::pair<std::string, std::string>>& pairs, const ClassifyOptions& options = {}) const;
  // Per text, its labels best first (equal scores keep label order, as the pipeline's stable sort), the top_k
  // best (top_k < 0: all; 0: none, as the pipeline's [:0]). top_k = 1 is the pipeline's default answer.
  std::vector<std::vector<LabelScore>> classify(const std::vector<std::string>& texts, int64_t top_k = 1,
                                                const ClassifyOptions& options = {}) const;
  std::vector<std::vector<LabelScore>> classify(const std::vector<std::pair<std::string, std::string>>& pairs,
                                                int64_t top_k = 1, const ClassifyOptions& options = {}) const;
  // Rows of scores (n, num_labels) as classify() returns them.
  std::vector<std::vector<LabelScore>> top_labels(const Tensor& scores, int64_t top_k) const;

  int64_t num_labels() const;
  const std::vector<std::string>& labels() const { return labels_; }  // num_labels() names, in id order
  ClassificationFunction default_function() const { return default_function_; }
  const std::string& problem_type() const { return problem_type_; }  // config.json's ("" when unset)
  int64_t max_seq_length() const { return encoder_.max_seq_length(); }
  void set_max_seq_length(int64_t length) { encoder_.set_max_seq_length(length); }
  const SentenceEncoder& encoder() const { return encoder_; }  // the tokenizer and model underneath

 private:
  TextClassifier(SentenceEncoder encoder, std::vector<std::string> labels, std::string problem_type,
                 ClassificationFunction function);
  Tensor scores(const std::vector<Encoding>& encodings, const ClassifyOptions& options) const;
  SentenceEncoder encoder_;
  std::vector<std::string> labels_;
  std::string problem_type_;
  ClassificationFunction default_function_;
};

}  // namespace encore
