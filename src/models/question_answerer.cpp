// QuestionAnswerer: the tokenizer's question/context windows, the *ForQuestionAnswering model's start and end logits,
// and transformers' question-answering pipeline post-processing (select_starts_ends, decode_spans, get_indices and
// the answer merging of its postprocess), one function per step of it.
#include "encore/question_answerer.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "encore/sentence_encoder.hpp"
#include "io/json_file.hpp"
#include "models/model.hpp"
#include "tokenizer/unicode.hpp"

namespace encore {

namespace {

constexpr int64_t kPipelineMaxSeqLen = 384;  // the pipeline's max_seq_len cap
constexpr int64_t kPipelineDocStride = 128;  // and doc_stride's

// One window's probabilities after select_starts_ends, and what decode_spans needs.
struct WindowScores {
  std::vector<float> start, end;  // softmax over the window, non-context tokens at exp(-10000 - max) = 0, token 0 zeroed
  std::vector<char> answerable;   // context tokens and the cls token: where a span may start and end
  float null_score = 0;           // start[0]·end[0] before token 0 was zeroed
};

// select_starts_ends: logits of tokens that cannot be in the answer become -10000, then softmax per window.
WindowScores window_scores(const Encoding& e, const float* logits, std::optional<int64_t> cls_id) {
  const size_t n = e.size();
  WindowScores w;
  w.answerable.resize(n);
  for (size_t t = 0; t < n; ++t)
    w.answerable[t] = (e.sequence_ids[t] == 1 || (cls_id && e.ids[t] == *cls_id)) && e.attention_mask[t] != 0;
  auto softmax = [&](int column, std::vector<float>& p) {
    p.resize(n);
    for (size_t t = 0; t < n; ++t) p[t] = w.answerable[t] ? logits[2 * t + column] : -10000.f;
    const float mx = *std::max_element(p.begin(), p.end());
    double sum = 0;
    // p_t = exp(x_t - max x) / sum_k exp(x_k - max x)
    for (float& v : p) sum += (v = std::exp(v - mx));
    for (float& v : p) v = static_cast<float>(v / sum);
  };
  softmax(0, w.start);
  softmax(1, w.end);
  w.null_score = w.start[0] * w.end[0];
  w.start[0] = w.end[0] = 0.f;  // the pipeline masks the first token ("CLS") after taking the null score
  return w;
}

struct Span {
  int64_t s, e;
  float score;
};

// decode_spans: the k best (s, e) of the (n, n) matrix start[s]·end[e] with e in [s, s + max_answer_len - 1] (0
// elsewhere), best first, ties in row-major order; then those whose start and end are both answerable.
std::vector<Span> decode_spans(const WindowScores& w, int64_t k, int64_t max_answer_len) {
  const auto n = static_cast<int64_t>(w.start.size());
  std::vector<Span> cand;
  for (int64_t s = 0; s < n; ++s)
    for (int64_t e = s; e < std::min(n, s + max_answer_len); ++e) cand.push_back({s, e, w.start[s] * w.end[e]});
  if (static_cast<int64_t>(cand.size()) < k)  // fewer spans than asked: the matrix's zeros outside the band too
    for (int64_t s = 0; s < n; ++s)
      for (int64_t e = 0; e < n; ++e)
        if (e < s || e >= s + max_answer_len) cand.push_back({s, e, 0.f});
  auto better = [n](const Span& a, const Span& b) {
    return a.score != b.score ? a.score > b.score : a.s * n + a.e < b.s * n + b.e;
  };
  const auto keep = std::min<size_t>(static_cast<size_t>(k), cand.size());
  std::partial_sort(cand.begin(), cand.begin() + static_cast<std::ptrdiff_t>(keep), cand.end(), better);
  cand.resize(keep);
  std::erase_if(cand, [&](const Span& c) { return !w.answerable[c.s] || !w.answerable[c.e]; });
  return cand;
}

// tokenizers' Encoding.word_to_chars(word, sequence_index=1) as byte offsets: from the first to the last token of
// the context's word (scanning the context's tokens while their word is <= word); nullopt when the word has none.
std::optional<std::pair<int64_t, int64_t>> word_to_bytes(const Encoding& e, int64_t word) {
  std::optional<size_t> first, last;
  for (size_t t = 0; t < e.size(); ++t) {
    if (e.sequence_ids[t] != 1) continue;
    if (e.word_ids[t] > word) break;
    if (e.word_ids[t] != word) continue;
    if (!first) first = t;
    last = t;
  }
  if (!first) return std::nullopt;
  return std::pair{e.offsets[*first].first, e.offsets[*last].second};
}

// get_indices: the span's byte range in the context, aligned to whole words when asked and possible, else the
// tokens' own offsets (as the pipeline falls back when a token has no word).
std::pair<int64_t, int64_t> span_bytes(const Encoding& e, int64_t s, int64_t t, bool align_to_words) {
  if (align_to_words && e.word_ids[s] >= 0 && e.word_ids[t] >= 0) {
    const auto a = word_to_bytes(e, e.word_ids[s]), b = word_to_bytes(e, e.word_ids[t]);
    if (a && b) return {a->first, b->second};
  }
  return {e.offsets[s].first, e.offsets[t].second};
}

int64_t code_points_before(const std::string& text, int64_t byte) {
  int64_t n = 0;
  for (int64_t i = 0; i < byte && i < static_cast<int64_t>(text.size()); ++i)
    n += (static_cast<unsigned char>(text[i]) & 0xC0) != 0x80;
  return n;
}

// The pipeline's postprocess over one question's windows: spans to answers merged by case-insensitive text (scores
// summed), the empty answer with the least null score when asked, the top_k by score.
std::vector<Answer> answers_of(const std::string& context, const std::vector<const Encoding*>& windows,
                               const std::vector<const std::vector<float>*>& logits, std::optional<int64_t> cls_id,
                               const QuestionAnswerOptions& o) {
  std::vector<Answer> answers;
  std::vector<std::string> lowered;  // of answers[i].answer (Python's str.lower for the pipeline's get_answer)
  double min_null_score = 1000000;   // the pipeline's "large and positive" start
  const int64_t k = o.align_to_words ? o.top_k * 2 + 10 : o.top_k;  // spans align_to_words may merge are spares
  for (size_t i = 0; i < windows.size(); ++i) {
    const Encoding& e = *windows[i];
    const WindowScores w = window_scores(e, logits[i]->data(), cls_id);
    if (o.handle_impossible_answer) min_null_score = std::min(min_null_score, static_cast<double>(w.null_score));
    for (const Span& span : decode_spans(w, k, o.max_answer_len)) {
      const auto [b, c] = span_bytes(e, span.s, span.e, o.align_to_words);
      std::string text = b < c ? context.substr(static_cast<size_t>(b), static_cast<size_t>(c - b)) : std::string();
      std::string low = tok::to_lower(text);
      const auto same = std::find(lowered.begin(), lowered.end(), low);
      if (same != lowered.end()) {
        answers[static_cast<size_t>(same - lowered.begin())].score += span.score;
        continue;
      }
      answers.push_back({span.score, code_points_before(context, b), code_points_before(context, c), std::move(text)});
      lowered.push_back(std::move(low));
    }
  }
  if (o.handle_impossible_answer) answers.push_back({min_null_score, 0, 0, ""});
  std::stable_sort(answers.begin(), answers.end(), [](const Answer& a, const Answer& b) { return a.score > b.score; });
  if (static_cast<int64_t>(answers.size()) > o.top_k) answers.resize(static_cast<size_t>(o.top_k));
  return answers;
}

std::string read_padding_side(const std::string& model_dir) {
  const std::string file = model_dir + "/tokenizer_config.json";
  if (!std::filesystem::exists(file)) return "right";
  const nlohmann::json j = io::read_json_file(file);
  return j.is_object() && j.contains("padding_side") && j["padding_side"].is_string() ? j["padding_side"].get<std::string>()
                                                                                     : "right";
}

}  // namespace

QuestionAnswerer::QuestionAnswerer(AutoModel model, Tokenizer tokenizer, std::optional<int64_t> model_max_length,
                                   std::optional<int64_t> cls_token_id)
    : model_(std::move(model)), tokenizer_(std::move(tokenizer)), model_max_length_(model_max_length),
      cls_token_id_(cls_token_id) {}

QuestionAnswerer QuestionAnswerer::load(const std::string& model_dir, DType dtype) {
  AutoModel model = AutoModel::load(model_dir, dtype);
  const ModelInfo& info = model.info();
  if (info.head != "question_answering")
    throw ModelFormatError("'" + model_dir + "' is a " + (info.architecture.empty() ? info.model_type : info.architecture) +
                           " checkpoint without a question-answering head; question answering needs a "
                           "*ForQuestionAnswering checkpoint");
  // The pipeline puts the question first when the tokenizer pads on the right (every family encore runs); a
  // left-padding tokenizer would put the context first.
  const std::string side = read_padding_side(model_dir);
  ENCORE_CHECK_AS(ModelFormatError, side == "right", "'", model_dir, "': tokenizer_config.json's padding_side is '", side,
                  "'; question answering reads question-first pairs (padding_side 'right')");
  Tokenizer tok = Tokenizer::load(model_dir);
  tok.set_padding(std::nullopt);  // the pipeline's padding="do_not_pad"; truncation is set per call
  tok.set_truncation(std::nullopt);
  const std::string cls = models::configured_special_token(model_dir, "cls_token");
  const std::optional<int64_t> cls_id = cls.empty() ? std::nullopt : tok.token_to_id(cls);
  return QuestionAnswerer(std::move(model), std::move(tok), models::read_model_max_length(model_dir), cls_id);
}

int64_t QuestionAnswerer::default_max_seq_len() const {
  return std::min({model_max_length_.value_or(kPipelineMaxSeqLen), kPipelineMaxSeqLen, model_.max_sequence_length()});
}

std::vector<Encoding> QuestionAnswerer::windows(const std::string& question, const std::string& context,
                                                const QuestionAnswerOptions& o) const {
  ENCORE_CHECK_AS(UsageError, !question.empty(), "question answering: the question cannot be empty");
  ENCORE_CHECK_AS(UsageError, !context.empty(), "question answering: the context cannot be empty");
  const int64_t max_seq_len = o.max_seq_len.value_or(default_max_seq_len());
  ENCORE_CHECK_AS(UsageError, max_seq_len >= 1 && max_seq_len <= model_.max_sequence_length(), "max_seq_len ",
                  max_seq_len, " must be in 1..", model_.max_sequence_length(), " (the model's positions)");
  const int64_t doc_stride = o.doc_stride.value_or(std::min(max_seq_len / 2, kPipelineDocStride));
  ENCORE_CHECK_AS(UsageError, doc_stride >= 0 && doc_stride <= max_seq_len, "doc_stride (", doc_stride,
                  ") must be in 0..max_seq_len (", max_seq_len, ")");
  Tokenizer tok = tokenizer_;
  TruncationOptions t;
  t.max_length = max_seq_len;
  t.strategy = TruncationStrategy::only_second;
  t.stride = doc_stride;
  t.return_overflowing = true;
  tok.set_truncation(t);
  Encoding first;
  try {
    first = tok.encode_pair(question, context);
  } catch (const UsageError& e) {  // the windows cannot move forward: the stride fills them
    throw UsageError(std::string("question answering: ") + e.what() + "; lower doc_stride (" +
                     std::to_string(doc_stride) + ") or shorten the question, or raise max_seq_len (" +
                     std::to_string(max_seq_len) + ")");
  } catch (const Error& e) {  // the question alone does not fit
    throw UsageError(std::string("question answering: ") + e.what() + " (the question is never truncated; max_seq_len " +
                     std::to_string(max_seq_len) + ")");
  }
  std::vector<Encoding> out;
  std::vector<Encoding> rest = std::move(first.overflowing);
  first.overflowing.clear();
  out.push_back(std::move(first));
  for (Encoding& w : rest) out.push_back(std::move(w));
  return out;
}

std::vector<Answer> QuestionAnswerer::answer(const std::string& question, const std::string& context,
                                             const QuestionAnswerOptions& options) const {
  return answer(std::vector<std::pair<std::string, std::string>>{{question, context}}, options).at(0);
}

std::vector<std::vector<Answer>> QuestionAnswerer::answer(const std::vector<std::pair<std::string, std::string>>& pairs,
                                                          const QuestionAnswerOptions& o) const {
  ENCORE_CHECK_AS(UsageError, o.top_k >= 1, "top_k parameter should be >= 1 (got ", o.top_k, ")");
  ENCORE_CHECK_AS(UsageError, o.max_answer_len >= 1, "max_answer_len parameter should be >= 1 (got ", o.max_answer_len, ")");
  ENCORE_CHECK_AS(UsageError, o.max_question_len >= 1, "max_question_len must be >= 1 (got ", o.max_question_len, ")");
  ENCORE_CHECK_AS(UsageError, o.batch_size >= 1, "batch_size must be >= 1 (got ", o.batch_size, ")");
  std::vector<Encoding> all;
  std::vector<size_t> first_window(pairs.size() + 1, 0);
  for (size_t i = 0; i < pairs.size(); ++i) {
    first_window[i] = all.size();
    for (Encoding& w : windows(pairs[i].first, pairs[i].second, o)) all.push_back(std::move(w));
  }
  first_window[pairs.size()] = all.size();
  // Each window's (n, 2) start/end logits, batched by length.
  std::vector<std::vector<float>> logits(all.size());
  ForwardOptions fo;
  fo.compute_logits = true;
  for_each_length_sorted_batch(all, o.batch_size, [&](const std::vector<const Encoding*>& batch,
                                                      const std::vector<int64_t>& rows) {
    const PaddedBatch in = pad_batch(batch, model_);
    const Tensor out = model_.forward(in.input_ids, in.attention_mask, in.token_type_ids, fo).logits.contiguous();
    ENCORE_CHECK(out.dim() == 3 && out.size(2) == 2, "question answering: the head gave logits of shape ",
                 out.shape_str(), ", expected (B, T, 2)");
    const int64_t T = out.size(1);
    for (size_t b = 0; b < batch.size(); ++b) {
      const auto n = static_cast<int64_t>(batch[b]->size());
      const float* x = out.data<float>() + static_cast<int64_t>(b) * T * 2;
      if (std::any_of(x, x + 2 * n, [](float v) { return !std::isfinite(v); }))
        throw NonFiniteError("question answering: the model gave NaN or Inf logits (window " + std::to_string(rows[b]) +
                             "); check the weights and config");
      logits[static_cast<size_t>(rows[b])].assign(x, x + 2 * n);
    }
  });
  std::vector<std::vector<Answer>> result;
  for (size_t i = 0; i < pairs.size(); ++i) {
    std::vector<const Encoding*> ws;
    std::vector<const std::vector<float>*> ls;
    for (size_t w = first_window[i]; w < first_window[i + 1]; ++w) ws.push_back(&all[w]), ls.push_back(&logits[w]);
    result.push_back(answers_of(pairs[i].second, ws, ls, cls_token_id_, o));
  }
  return result;
}

}  // namespace encore
