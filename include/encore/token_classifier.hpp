// encore::TokenClassifier - a *ForTokenClassification checkpoint (NER, PII tagging, part-of-speech) read as
// transformers' pipeline("token-classification") / pipeline("ner") reads it, entities and all.
//
//   encore::TokenClassifier ner = encore::TokenClassifier::load("/path/to/bert-base-NER");
//   for (const encore::TokenEntity& e : ner.predict("My name is Wolfgang and I live in Berlin",
//                                                   {.aggregation = encore::Aggregation::simple}))
//     use(e.entity, e.score, e.word, e.start, e.end);   // e.g. "PER" "Wolfgang" 11 19, "LOC" "Berlin" 34 40
//
// What the pipeline (transformers 5.23, token_classification.py) does, step for step: each text is tokenized
// with its special tokens and truncated to the tokenizer's model_max_length (tokenizer_config.json; here also at
// most the model's positions); per token the scores are softmax(logits) over the labels; special tokens are
// dropped; then the aggregation strategy:
//   none    one entity per token: the arg-max label, its score, the token string ("##ing", "Ġworld"), `index`
//           (the token's position in the encoding, special tokens counted);
//   simple  the per-token arg-max labels grouped: a token joins the group before it when its tag (the label less
//           a "B-"/"I-" prefix) is the group's and it is not "B-"; the group's label is its first token's label
//           after the first '-' ("B-PER" -> "PER"), its score the mean of the tokens' scores;
//   first / average / max  tokens are first merged into words (a token continues a word when it is a sub-word:
//           with a continuing-subword prefix, when the token's length differs from its text's; otherwise when the
//           char before or at its start is not a space), the word's label from its first token's scores, from
//           the mean of its tokens' scores, or from the token with the highest score; then grouped as simple.
// An unknown token's word is its text. `word` of a group is the tokenizer's decoder applied to its members'
// words (transformers' convert_tokens_to_string: WordPiece drops "##" and joins with spaces, byte-level BPE maps
// its chars back to bytes). Labels in ignore_labels (default {"O"}) are left out at the end. start/end are offsets
// in Unicode code points of the text, as Python's str indexes it. A text longer than the limit is truncated (the
// pipeline's default) unless options.stride is set. Thread safety: predict() is const and may run concurrently.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "encore/model.hpp"
#include "encore/tensor.hpp"
#include "encore/tokenizer.hpp"

namespace encore {

// transformers' AggregationStrategy.
enum class Aggregation { none, simple, first, average, max };
// "none", "simple", "first", "average", "max" (any case, as transformers' AggregationStrategy[name.upper()]).
Aggregation parse_aggregation(std::string_view name);
std::string aggregation_name(Aggregation aggregation);

struct TokenEntity {
  std::string entity;  // the label (Aggregation::none: "entity") or the group's label (else: "entity_group")
  float score = 0.f;
  std::string word;
  int64_t start = 0, end = 0;  // [start, end) in code points of the text
  int64_t index = -1;          // Aggregation::none: the token's index in the encoding; -1 otherwise
};

struct TokenClassifyOptions {
  Aggregation aggregation = Aggregation::none;  // the pipeline's default
  std::vector<std::string> ignore_labels = {"O"};
  int64_t batch_size = 32;
  // The pipeline's stride=: a text longer than max_length is read whole, in windows of max_length tokens (special
  // tokens included) that overlap by `stride` tokens (each window starts max_length - specials - stride tokens after
  // the previous, as tokenizers' overflowing encodings); each window's entities are found alone, then, sorted by
  // start, an entity overlapping the one before replaces it when it is longer (or as long with a higher score).
  // Needs an aggregation other than none and 0 <= stride < max_length - specials. nullopt: truncate.
  std::optional<int64_t> stride;
};

class TokenClassifier {
 public:
  // dir: a Hugging Face *ForTokenClassification directory (config.json with id2label, weights, tokenizer); dtype as
  // AutoModel::load. A checkpoint without a token-classification head is a ModelFormatError.
  static TokenClassifier load(const std::string& model_dir, DType dtype = DType::f32);

  // Per text, its entities in text order.
  std::vector<std::vector<TokenEntity>> predict(const std::vector<std::string>& texts,
                                                const TokenClassifyOptions& options = {}) const;
  std::vector<TokenEntity> predict(const std::string& text, const TokenClassifyOptions& options = {}) const;

  // (tokens, num_labels) softmax scores of one text's tokens (special tokens included), with its encoding.
  Tensor token_scores(const std::string& text, Encoding* encoding = nullptr) const;

  int64_t num_labels() const { return static_cast<int64_t>(labels_.size()); }
  const std::vector<std::string>& labels() const { return labels_; }  // id2label ("LABEL_i" where it names none)
  int64_t max_length() const;  // tokens per text, special tokens included, after truncation
  const Tokenizer& tokenizer() const { return tokenizer_; }
  const AutoModel& model() const { return model_; }

 private:
  TokenClassifier(AutoModel model, Tokenizer tokenizer, std::vector<std::string> labels);
  // Scores (n_tokens, L) for each encoding, in batches of batch_size sorted by length.
  std::vector<std::vector<float>> score_encodings(const std::vector<Encoding>& encodings, int64_t batch_size) const;
  // Each text whole (untruncated) as the windows options.stride asks for; chunk_text[i] = the text of window i.
  std::vector<Encoding> windows(const std::vector<std::string>& texts, int64_t stride, std::vector<size_t>& chunk_text) const;
  AutoModel model_;
  Tokenizer tokenizer_;
  std::vector<std::string> labels_;
};

}  // namespace encore
