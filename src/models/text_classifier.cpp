// TextClassifier: transformers' text-classification pipeline over SentenceEncoder's tokenizer and model, read
// through the sequence-classification head (classification_logits, shared with CrossEncoder).
#include "encore/text_classifier.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>

#include "encore/cross_encoder.hpp"
#include "io/json_file.hpp"

namespace encore {

namespace fs = std::filesystem;

ClassificationFunction parse_classification_function(const std::string& name) {
  std::string lower = name;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "sigmoid") return ClassificationFunction::sigmoid;
  if (lower == "softmax") return ClassificationFunction::softmax;
  if (lower == "none") return ClassificationFunction::none;
  throw UsageError("function_to_apply '" + name + "': expected sigmoid, softmax or none");
}

const char* classification_function_name(ClassificationFunction f) {
  switch (f) {
    case ClassificationFunction::sigmoid: return "sigmoid";
    case ClassificationFunction::softmax: return "softmax";
    case ClassificationFunction::none: return "none";
  }
  return "none";
}

namespace {

// config.json's problem_type ("" when absent or null), one of transformers' three values.
std::string read_problem_type(const std::string& model_dir) {
  const fs::path file = fs::path(model_dir) / "config.json";
  const nlohmann::json j = io::read_json_file(file);
  const io::JsonAt root(j, file.string());
  if (!root.has("problem_type")) return "";
  const std::string p = root["problem_type"].str();
  if (p != "regression" && p != "single_label_classification" && p != "multi_label_classification")
    root["problem_type"].fail("regression, single_label_classification or multi_label_classification");
  return p;
}

// The pipeline's function_to_apply "default", in its order: regression -> none; multi-label or one label ->
// sigmoid; single-label or several labels -> softmax.
ClassificationFunction default_function_for(const std::string& problem_type, int64_t num_labels) {
  if (problem_type == "regression") return ClassificationFunction::none;
  if (problem_type == "multi_label_classification" || num_labels == 1) return ClassificationFunction::sigmoid;
  return ClassificationFunction::softmax;
}

}  // namespace

TextClassifier::TextClassifier(SentenceEncoder encoder, std::vector<std::string> labels, std::string problem_type,
                               ClassificationFunction function)
    : encoder_(std::move(encoder)),
      labels_(std::move(labels)),
      problem_type_(std::move(problem_type)),
      default_function_(function) {}

TextClassifier TextClassifier::load(const std::string& model_dir, DType dtype) {
  SentenceEncoder enc = SentenceEncoder::load(model_dir, dtype);
  const ModelInfo& info = enc.model().info();
  if (info.head != "sequence_classification")
    throw ModelFormatError("'" + model_dir + "' is a " + (info.architecture.empty() ? info.model_type : info.architecture) +
                           " checkpoint without a sequence-classification head; text classification needs a "
                           "*ForSequenceClassification checkpoint");
  std::vector<std::string> labels(static_cast<size_t>(info.num_labels));
  for (size_t i = 0; i < labels.size(); ++i)
    labels[i] = i < info.id2label.size() && !info.id2label[i].empty() ? info.id2label[i] : "LABEL_" + std::to_string(i);
  std::string problem_type = read_problem_type(model_dir);
  const ClassificationFunction f = default_function_for(problem_type, info.num_labels);
  return TextClassifier(std::move(enc), std::move(labels), std::move(problem_type), f);
}

int64_t TextClassifier::num_labels() const { return static_cast<int64_t>(labels_.size()); }

Tensor TextClassifier::scores(const std::vector<Encoding>& encodings, const ClassifyOptions& options) const {
  ENCORE_CHECK_AS(UsageError, options.batch_size > 0, "batch_size must be positive, got ", options.batch_size);
  for (size_t i = 0; i < encodings.size(); ++i)
    ENCORE_CHECK_AS(InputError, encodings[i].size() <= static_cast<size_t>(max_seq_length()), "text ", i, " is ",
                    encodings[i].size(), " tokens long, more than max_seq_length ", max_seq_length(),
                    " (truncation is off)");
  Tensor out = classification_logits(encoder_, encodings, options.batch_size);
  const ClassificationFunction f = options.function.value_or(default_function_);
  if (f == ClassificationFunction::none) return out;
  const int64_t L = num_labels();
  for (int64_t i = 0; i < out.size(0); ++i) {
    float* row = out.data<float>() + i * L;
    // score_logits leaves one label alone under softmax (sentence-transformers' rule); the pipeline's softmax over
    // one logit is exp(x - x) = 1 (NaN for a non-finite x)
    if (f == ClassificationFunction::softmax && L == 1) row[0] = std::exp(row[0] - row[0]);
    score_logits(row, L, f == ClassificationFunction::sigmoid ? ScoreActivation::sigmoid : ScoreActivation::identity,
                 f == ClassificationFunction::softmax);
  }
  return out;
}

Tensor TextClassifier::predict(const std::vector<std::string>& texts, const ClassifyOptions& options) const {
  TokenizeOptions to;
  to.truncate = options.truncate;
  return scores(encoder_.tokenize(texts, to), options);
}

Tensor TextClassifier::predict(const std::vector<std::pair<std::string, std::string>>& pairs,
                               const ClassifyOptions& options) const {
  TokenizeOptions to;
  to.truncate = options.truncate;
  std::vector<Encoding> encodings;
  encodings.reserve(pairs.size());
  for (const auto& [text, text_pair] : pairs) encodings.push_back(encoder_.tokenize_pair(text, text_pair, to));
  return scores(encodings, options);
}

std::vector<std::vector<LabelScore>> TextClassifier::top_labels(const Tensor& scores, int64_t top_k) const {
  const int64_t L = num_labels();
  ENCORE_CHECK(scores.dim() == 2 && scores.size(1) == L, "top_labels: scores must be (n, ", L, ")");
  const Tensor s = scores.contiguous();
  const size_t keep = static_cast<size_t>(top_k < 0 ? L : std::min(top_k, L));
  std::vector<std::vector<LabelScore>> out(static_cast<size_t>(s.size(0)));
  for (int64_t i = 0; i < s.size(0); ++i) {
    std::vector<LabelScore>& row = out[static_cast<size_t>(i)];
    for (int64_t l = 0; l < L; ++l) row.push_back({labels_[static_cast<size_t>(l)], s.data<float>()[i * L + l], l});
    std::stable_sort(row.begin(), row.end(), [](const LabelScore& a, const LabelScore& b) { return a.score > b.score; });
    row.resize(keep);
  }
  return out;
}

std::vector<std::vector<LabelScore>> TextClassifier::classify(const std::vector<std::string>& texts, int64_t top_k,
                                                              const ClassifyOptions& options) const {
  return top_labels(predict(texts, options), top_k);
}

std::vector<std::vector<LabelScore>> TextClassifier::classify(const std::vector<std::pair<std::string, std::string>>& pairs,
                                                              int64_t top_k, const ClassifyOptions& options) const {
  return top_labels(predict(pairs, options), top_k);
}

}  // namespace encore
