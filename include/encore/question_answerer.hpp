// encore::QuestionAnswerer - extractive question answering with a *ForQuestionAnswering checkpoint (SQuAD-style
// BERT, RoBERTa, DistilBERT, ALBERT, ELECTRA, MPNet, XLM-R, ModernBERT), read as transformers'
// pipeline("question-answering") reads it (transformers 4.x; 5.x no longer ships that pipeline).
//
//   encore::QuestionAnswerer qa = encore::QuestionAnswerer::load("/path/to/distilbert-base-cased-distilled-squad");
//   for (const encore::Answer& a : qa.answer("Where do I live?", "My name is Wolfgang and I live in Berlin"))
//     use(a.score, a.start, a.end, a.answer);   // e.g. 0.98 34 40 "Berlin"
//
// What the pipeline does, step for step: the question and the context are tokenized as a pair (question first),
// truncating only the context to max_seq_len tokens; a context that does not fit is read in several windows, each
// repeating doc_stride tokens of the one before (the tokenizer's overflowing encodings), each with the whole
// question. Per window, the model's start and end logits at tokens that are not the context's (question, special
// tokens, padding) are set to -10000 - the first special token ([CLS], <s>) excepted - and each is softmaxed over the
// window; a span (s, e) scores start[s]·end[e] for s <= e <= s + max_answer_len - 1, the window's first token
// excepted (its probabilities are zeroed after the null score start[0]·end[0] is taken). The best
// top_k (2·top_k + 10 with align_to_words) spans of each window whose start and end are context tokens become
// character spans of the context: with align_to_words, from the first char of the start token's word to the last of
// the end token's word (words as the tokenizer's pre-tokenizer splits them), else the tokens' own offsets. Answers
// with the same text (case-insensitive) across spans and windows are one answer whose score is the sum. With
// handle_impossible_answer, the empty answer {score: the least null score of the windows, start 0, end 0} joins
// them. The top_k answers by score are returned, best first (ties: first found first). Spans whose score is 0 (only
// reached when a window has fewer candidates than asked for) are taken in span order, where numpy's order is
// unspecified. Offsets are in Unicode code points of the context, as Python's str indexes it.
// Thread safety: answer() is const and may run concurrently.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "encore/model.hpp"
#include "encore/tensor.hpp"
#include "encore/tokenizer.hpp"

namespace encore {

struct Answer {
  double score = 0;            // the span's probability (summed over spans with the same text)
  int64_t start = 0, end = 0;  // [start, end) in code points of the context
  std::string answer;          // the context's text in [start, end)
};

// transformers' QuestionAnsweringPipeline arguments, with its defaults.
struct QuestionAnswerOptions {
  int64_t top_k = 1;
  std::optional<int64_t> doc_stride;   // tokens each window repeats from the one before; default min(max_seq_len/2, 128)
  int64_t max_answer_len = 15;         // tokens
  std::optional<int64_t> max_seq_len;  // tokens per window, special tokens included; default min(model_max_length, 384)
  // The pipeline's max_question_len truncates the question only with a slow (Python) tokenizer; encore's tokenizer
  // is a fast one, so, as the pipeline does with those, the question is never truncated (must be >= 1).
  int64_t max_question_len = 64;
  bool handle_impossible_answer = false;
  bool align_to_words = true;
  int64_t batch_size = 32;  // windows per forward pass
};

class QuestionAnswerer {
 public:
  // dir: a Hugging Face *ForQuestionAnswering directory (config.json, weights, tokenizer); dtype as AutoModel::load.
  // A checkpoint without a question-answering head is a ModelFormatError.
  static QuestionAnswerer load(const std::string& model_dir, DType dtype = DType::f32);

  // The top_k answers (fewer when the context has fewer), best first. An empty question or context is a UsageError
  // (the pipeline's "`question` cannot be empty"), as are options out of range.
  std::vector<Answer> answer(const std::string& question, const std::string& context,
                             const QuestionAnswerOptions& options = {}) const;
  // (question, context) pairs, their windows batched together; one answer list per pair, in order.
  std::vector<std::vector<Answer>> answer(const std::vector<std::pair<std::string, std::string>>& pairs,
                                          const QuestionAnswerOptions& options = {}) const;

  // The windows a pair is read in (the tokenizer's pair encodings with only_second truncation and overflow).
  std::vector<Encoding> windows(const std::string& question, const std::string& context,
                                const QuestionAnswerOptions& options = {}) const;
  int64_t default_max_seq_len() const;  // min(model_max_length of tokenizer_config.json, 384, the model's positions)
  const Tokenizer& tokenizer() const { return tokenizer_; }
  const AutoModel& model() const { return model_; }

 private:
  QuestionAnswerer(AutoModel model, Tokenizer tokenizer, std::optional<int64_t> model_max_length,
                   std::optional<int64_t> cls_token_id);
  AutoModel model_;
  Tokenizer tokenizer_;
  std::optional<int64_t> model_max_length_;
  std::optional<int64_t> cls_token_id_;  // the tokenizer's cls_token, kept answerable as the pipeline keeps it
};

}  // namespace encore
