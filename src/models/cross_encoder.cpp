// CrossEncoder: SentenceEncoder's tokenizer and model, read through the classification head instead of pooling.
#include "encore/cross_encoder.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "io/json_file.hpp"

namespace encore {

namespace fs = std::filesystem;

namespace {

// sentence-transformers' activation for predict(): config.json's sentence_transformers.activation_fn (or the
// pre-v4 key sbert_ce_default_activation_function) when it names a torch.* class, else sigmoid for one label and
// identity for more. A path outside torch.* is not trusted by sentence-transformers either: the default applies.
ScoreActivation read_activation(const std::string& model_dir, int64_t num_labels) {
  const fs::path file = fs::path(model_dir) / "config.json";
  const nlohmann::json j = io::read_json_file(file);
  std::string path;
  std::string pointer;
  if (j.contains("sentence_transformers") && j["sentence_transformers"].is_object() &&
      j["sentence_transformers"].contains("activation_fn")) {
    pointer = "/sentence_transformers/activation_fn";
    path = io::JsonAt(j["sentence_transformers"]["activation_fn"], file.string(), pointer).str();
  } else if (j.contains("sbert_ce_default_activation_function") && !j["sbert_ce_default_activation_function"].is_null()) {
    pointer = "/sbert_ce_default_activation_function";
    path = io::JsonAt(j["sbert_ce_default_activation_function"], file.string(), pointer).str();
  }
  if (path.rfind("torch.", 0) == 0) {
    const std::string name = path.substr(path.rfind('.') + 1);
    if (name == "Sigmoid") return ScoreActivation::sigmoid;
    if (name == "Identity") return ScoreActivation::identity;
    if (name == "Tanh") return ScoreActivation::tanh;
    throw ModelFormatError("'" + file.string() + "' " + pointer + ": activation '" + path +
                           "' is not supported (torch.nn Sigmoid, Identity or Tanh)");
  }
  return num_labels == 1 ? ScoreActivation::sigmoid : ScoreActivation::identity;
}

}  // namespace

void score_logits(float* logits, int64_t num_labels, ScoreActivation activation, bool softmax) {
  for (int64_t l = 0; l < num_labels; ++l) {
    const double x = logits[l];
    if (activation == ScoreActivation::sigmoid) logits[l] = static_cast<float>(1.0 / (1.0 + std::exp(-x)));
    if (activation == ScoreActivation::tanh) logits[l] = static_cast<float>(std::tanh(x));
  }
  if (!softmax || num_labels < 2) return;
  const double mx = *std::max_element(logits, logits + num_labels);
  double sum = 0;
  for (int64_t l = 0; l < num_labels; ++l) sum += std::exp(logits[l] - mx);
  for (int64_t l = 0; l < num_labels; ++l) logits[l] = static_cast<float>(std::exp(logits[l] - mx) / sum);
}

CrossEncoder::CrossEncoder(SentenceEncoder encoder, ScoreActivation activation)
    : encoder_(std::move(encoder)), activation_(activation) {}

CrossEncoder CrossEncoder::load(const std::string& model_dir, DType dtype) {
  SentenceEncoder enc = SentenceEncoder::load(model_dir, dtype);
  const ModelInfo& info = enc.model().info();
  if (info.head != "sequence_classification")
    throw ModelFormatError("'" + model_dir + "' is a " + info.architecture +
                           " checkpoint without a sequence-classification head; a cross-encoder needs a "
                           "*ForSequenceClassification checkpoint");
  const ScoreActivation activation = read_activation(model_dir, info.num_labels);
  return CrossEncoder(std::move(enc), activation);
}

int64_t CrossEncoder::num_labels() const { return encoder_.model().info().num_labels; }
const std::vector<std::string>& CrossEncoder::labels() const { return encoder_.model().info().id2label; }

Tensor classification_logits(const SentenceEncoder& encoder, const std::vector<Encoding>& encodings,
                             int64_t batch_size) {
  ENCORE_CHECK_AS(UsageError, batch_size > 0, "batch_size must be positive, got ", batch_size);
  const int64_t n = static_cast<int64_t>(encodings.size()), L = encoder.model().info().num_labels;
  Tensor out = Tensor::zeros({n, L});
  if (n == 0) return out;
  TokenizedEncodeOptions to;
  to.logits = true;
  for_each_length_sorted_batch(encodings, batch_size, [&](const std::vector<const Encoding*>& batch,
                                                          const std::vector<int64_t>& rows) {
    const Tensor logits = encoder.encode_tokenized(batch, to).logits.contiguous();
    for (size_t i = 0; i < rows.size(); ++i)
      std::copy_n(logits.data<float>() + i * L, L, out.data<float>() + rows[i] * L);
  });
  return out;
}

Tensor CrossEncoder::predict(const std::vector<std::pair<std::string, std::string>>& pairs,
                             const PredictOptions& options) const {
  ENCORE_CHECK_AS(UsageError, options.batch_size > 0, "batch_size must be positive, got ", options.batch_size);
  std::vector<Encoding> encodings;
  encodings.reserve(pairs.size());
  for (const auto& [first, second] : pairs) encodings.push_back(encoder_.tokenize_pair(first, second));
  Tensor scores = classification_logits(encoder_, encodings, options.batch_size);
  const int64_t L = num_labels();
  if (options.activation)
    for (int64_t i = 0; i < scores.size(0); ++i) score_logits(scores.data<float>() + i * L, L, activation_, options.apply_softmax);
  return scores;
}

std::vector<RankedDocument> CrossEncoder::rank(const std::string& query, const std::vector<std::string>& documents,
                                               int64_t top_k, const PredictOptions& options) const {
  ENCORE_CHECK_AS(UsageError, num_labels() == 1, "rank() needs a re-ranker (num_labels = 1); this model has ",
                  num_labels(), " labels: use predict() on the pairs");
  std::vector<std::pair<std::string, std::string>> pairs;
  pairs.reserve(documents.size());
  for (const auto& d : documents) pairs.emplace_back(query, d);
  const Tensor scores = predict(pairs, options);
  std::vector<RankedDocument> ranked(documents.size());
  for (size_t i = 0; i < documents.size(); ++i) ranked[i] = {static_cast<int64_t>(i), scores.data<float>()[i]};
  std::stable_sort(ranked.begin(), ranked.end(), [](const RankedDocument& a, const RankedDocument& b) { return a.score > b.score; });
  if (top_k >= 0 && top_k < static_cast<int64_t>(ranked.size())) ranked.resize(static_cast<size_t>(top_k));
  return ranked;
}

}  // namespace encore
