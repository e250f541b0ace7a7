// TokenClassifier: the tokenizer and a *ForTokenClassification model, read through transformers' token-classification
// pipeline post-processing (gather_pre_entities, aggregate, aggregate_words, group_entities in its
// token_classification.py), one function per step of it.
#include "encore/token_classifier.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <optional>

#include "encore/sentence_encoder.hpp"
#include "io/json_file.hpp"
#include "models/model.hpp"

namespace encore {

namespace fs = std::filesystem;

Aggregation parse_aggregation(std::string_view name) {
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  for (Aggregation a : {Aggregation::none, Aggregation::simple, Aggregation::first, Aggregation::average, Aggregation::max})
    if (lower == aggregation_name(a)) return a;
  throw UsageError("aggregation strategy '" + std::string(name) + "' is not one of none, simple, first, average, max");
}

std::string aggregation_name(Aggregation aggregation) {
  switch (aggregation) {
    case Aggregation::none: return "none";
    case Aggregation::simple: return "simple";
    case Aggregation::first: return "first";
    case Aggregation::average: return "average";
    case Aggregation::max: return "max";
  }
  return "none";
}

namespace {

// One token before aggregation (the pipeline's pre_entity).
struct PreEntity {
  std::string word;           // the token string, or the text it covers for the unknown token
  const float* scores;        // num_labels softmax scores
  int64_t start, end, index;  // code points; position in the encoding
  bool is_subword;
};

// One token or word with its label (the pipeline's entity before grouping).
struct Labelled {
  std::string label, word;
  float score;
  int64_t start, end, index;
};

int64_t count_code_points(std::string_view s) {
  return std::count_if(s.begin(), s.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; });
}

int64_t argmax(const float* x, int64_t n) { return std::max_element(x, x + n) - x; }

class Postprocess {
 public:
  Postprocess(const Tokenizer& tok, const std::vector<std::string>& labels, const TokenClassifyOptions& options)
      : tok_(tok), labels_(labels), L_(static_cast<int64_t>(labels.size())), options_(options),
        prefix_(tok.continuing_subword_prefix().value_or("")), unk_(tok.unk_token_id()) {}

  std::vector<TokenEntity> operator()(const std::string& text, const Encoding& e, const float* scores) const {
    const std::vector<PreEntity> pre = gather(text, e, scores);
    std::vector<TokenEntity> out;
    if (options_.aggregation == Aggregation::none) {
      for (const Labelled& t : label_tokens(pre))
        if (!ignored(t.label)) out.push_back({t.label, t.score, t.word, t.start, t.end, t.index});
      return out;
    }
    const std::vector<Labelled> items =
        options_.aggregation == Aggregation::simple ? label_tokens(pre) : label_words(pre);
    for (TokenEntity& g : group(items))
      if (!ignored(g.entity)) out.push_back(std::move(g));
    return out;
  }

 private:
  bool ignored(const std::string& label) const {
    return std::find(options_.ignore_labels.begin(), options_.ignore_labels.end(), label) != options_.ignore_labels.end();
  }

  // gather_pre_entities: every token but the special ones, with its char offsets and whether it continues a word.
  std::vector<PreEntity> gather(const std::string& text, const Encoding& e, const float* scores) const {
    const auto chars = Tokenizer::char_offsets(text, e.offsets);
    std::vector<PreEntity> pre;
    for (size_t i = 0; i < e.size(); ++i) {
      if (e.special_tokens_mask[i]) continue;
      const auto [b, end_byte] = e.offsets[i];
      const auto [start, end] = chars[i];
      std::string word = e.tokens[i];
      bool is_subword;
      if (!prefix_.empty()) {
        // A word-aware model: a continuation token is longer than its text by the prefix.
        is_subword = count_code_points(word) != end - start;
      } else {
        // The pipeline's fallback: the token starts a word when the char before it, or its first char, is a
        // space. ' ' is one byte that never occurs inside a multi-byte UTF-8 char, so bytes tell the same.
        const auto at = [&](int64_t byte) { return byte >= 0 && byte < static_cast<int64_t>(text.size()) && text[byte] == ' '; };
        is_subword = start > 0 && !at(b - 1) && !at(b);
      }
      if (unk_ && e.ids[i] == *unk_) {
        word = text.substr(static_cast<size_t>(b), static_cast<size_t>(end_byte - b));
        is_subword = false;
      }
      pre.push_back({std::move(word), scores + i * L_, start, end, static_cast<int64_t>(i), is_subword});
    }
    return pre;
  }

  // aggregate() for none/simple: each token with its arg-max label.
  std::vector<Labelled> label_tokens(const std::vector<PreEntity>& pre) const {
    std::vector<Labelled> out;
    for (const PreEntity& p : pre) {
      const int64_t k = argmax(p.scores, L_);
      out.push_back({labels_[k], p.word, p.scores[k], p.start, p.end, p.index});
    }
    return out;
  }

  // aggregate_words: a word is a token and the sub-word tokens after it (the first token always opens one).
  std::vector<Labelled> label_words(const std::vector<PreEntity>& pre) const {
    std::vector<Labelled> out;
    for (size_t b = 0; b < pre.size();) {
      size_t e = b + 1;
      while (e < pre.size() && pre[e].is_subword) ++e;
      out.push_back(label_word(pre.begin() + static_cast<std::ptrdiff_t>(b), pre.begin() + static_cast<std::ptrdiff_t>(e)));
      b = e;
    }
    return out;
  }

  // aggregate_word: first -> the first token's arg-max; max -> the arg-max of the first token with the highest
  // score; average -> the arg-max of the mean of the tokens' scores.
  Labelled label_word(std::vector<PreEntity>::const_iterator b, std::vector<PreEntity>::const_iterator e) const {
    std::vector<std::string> tokens;
    for (auto it = b; it != e; ++it) tokens.push_back(it->word);
    int64_t k = 0;
    float score = 0.f;
    if (options_.aggregation == Aggregation::average) {
      std::vector<double> mean(static_cast<size_t>(L_), 0.0);
      for (auto it = b; it != e; ++it)
        for (int64_t l = 0; l < L_; ++l) mean[l] += it->scores[l];
      std::vector<float> avg(static_cast<size_t>(L_));
      for (int64_t l = 0; l < L_; ++l) avg[l] = static_cast<float>(mean[l] / static_cast<double>(e - b));
      k = argmax(avg.data(), L_);
      score = avg[k];
    } else {
      auto chosen = b;
      if (options_.aggregation == Aggregation::max)
        for (auto it = b + 1; it != e; ++it)
          if (it->scores[argmax(it->scores, L_)] > chosen->scores[argmax(chosen->scores, L_)]) chosen = it;
      k = argmax(chosen->scores, L_);
      score = chosen->scores[k];
    }
    return {labels_[k], tok_.decode_tokens(std::move(tokens)), score, b->start, (e - 1)->end, -1};
  }

  // get_tag: ("B"|"I", tag); a label without a B-/I- prefix is an I- continuation of itself.
  static std::pair<char, std::string_view> tag_of(std::string_view label) {
    if (label.rfind("B-", 0) == 0) return {'B', label.substr(2)};
    if (label.rfind("I-", 0) == 0) return {'I', label.substr(2)};
    return {'I', label};
  }

  // group_entities: a run of items with one tag, none but the first a B-, is one entity.
  std::vector<TokenEntity> group(const std::vector<Labelled>& items) const {
    std::vector<TokenEntity> out;
    for (size_t b = 0; b < items.size();) {
      size_t e = b + 1;
      while (e < items.size()) {
        const auto [bi, tag] = tag_of(items[e].label);
        if (bi == 'B' || tag != tag_of(items[e - 1].label).second) break;
        ++e;
      }
      out.push_back(group_of(items, b, e));
      b = e;
    }
    return out;
  }

  // group_sub_entities: the first label after its first '-', the mean score, the words decoded together.
  TokenEntity group_of(const std::vector<Labelled>& items, size_t b, size_t e) const {
    const std::string& first = items[b].label;
    const size_t dash = first.find('-');
    std::vector<std::string> words;
    double sum = 0;
    for (size_t i = b; i < e; ++i) {
      words.push_back(items[i].word);
      sum += items[i].score;
    }
    return {dash == std::string::npos ? first : first.substr(dash + 1), static_cast<float>(sum / static_cast<double>(e - b)),
            tok_.decode_tokens(std::move(words)), items[b].start, items[e - 1].end, -1};
  }

  const Tokenizer& tok_;
  const std::vector<std::string>& labels_;
  int64_t L_;
  const TokenClassifyOptions& options_;
  std::string prefix_;
  std::optional<int64_t> unk_;
};

}  // namespace

TokenClassifier::TokenClassifier(AutoModel model, Tokenizer tokenizer, std::vector<std::string> labels)
    : model_(std::move(model)), tokenizer_(std::move(tokenizer)), labels_(std::move(labels)) {}

TokenClassifier TokenClassifier::load(const std::string& model_dir, DType dtype) {
  AutoModel model = AutoModel::load(model_dir, dtype);
  const ModelInfo& info = model.info();
  if (info.head != "token_classification")
    throw ModelFormatError("'" + model_dir + "' is a " + info.architecture +
                           " checkpoint without a token-classification head; token classification needs a "
                           "*ForTokenClassification checkpoint");
  std::vector<std::string> labels(static_cast<size_t>(info.num_labels));
  for (size_t l = 0; l < labels.size(); ++l)
    labels[l] = l < info.id2label.size() && !info.id2label[l].empty() ? info.id2label[l] : "LABEL_" + std::to_string(l);
  Tokenizer tok = Tokenizer::load(model_dir);
  // The pipeline calls the tokenizer with truncation=True and no padding: tokenizer.json's own settings do not apply.
  tok.set_padding(std::nullopt);
  TruncationOptions trunc;
  trunc.max_length = std::min(models::read_model_max_length(model_dir).value_or(kMaxTokens), model.max_sequence_length());
  tok.set_truncation(trunc);
  return TokenClassifier(std::move(model), std::move(tok), std::move(labels));
}

int64_t TokenClassifier::max_length() const { return tokenizer_.truncation()->max_length; }

std::vector<std::vector<float>> TokenClassifier::score_encodings(const std::vector<Encoding>& encodings,
                                                                 int64_t batch_size) const {
  std::vector<std::vector<float>> scores(encodings.size());
  const int64_t L = num_labels();
  ForwardOptions fo;
  fo.compute_logits = true;
  // A text with no tokens at all (a tokenizer that adds no special tokens, an empty text) has no scores.
  std::vector<Encoding> run;
  std::vector<int64_t> run_row;
  for (size_t i = 0; i < encodings.size(); ++i)
    if (encodings[i].size() > 0) run.push_back(encodings[i]), run_row.push_back(static_cast<int64_t>(i));
  for_each_length_sorted_batch(run, batch_size, [&](const std::vector<const Encoding*>& batch,
                                                    const std::vector<int64_t>& run_rows) {
    std::vector<int64_t> rows;
    for (int64_t r : run_rows) rows.push_back(run_row[static_cast<size_t>(r)]);
    const PaddedBatch in = pad_batch(batch, model_);
    const Tensor logits = model_.forward(in.input_ids, in.attention_mask, in.token_type_ids, fo).logits.contiguous();
    ENCORE_CHECK(logits.dim() == 3 && logits.size(2) == L, "token classification: the head gave logits of shape ",
                 logits.shape_str(), ", expected (B, T, ", L, ")");
    const int64_t T = logits.size(1);
    for (size_t i = 0; i < rows.size(); ++i) {
      const int64_t n = static_cast<int64_t>(batch[i]->size());
      std::vector<float>& s = scores[static_cast<size_t>(rows[i])];
      s.resize(static_cast<size_t>(n * L));
      for (int64_t t = 0; t < n; ++t) {
        // softmax(x)_l = exp(x_l - max x) / sum_k exp(x_k - max x), as the pipeline computes it per token
        const float* x = logits.data<float>() + (static_cast<int64_t>(i) * T + t) * L;
        float* y = s.data() + t * L;
        const float mx = *std::max_element(x, x + L);
        if (!std::isfinite(mx) || std::any_of(x, x + L, [](float v) { return !std::isfinite(v); }))
          throw NonFiniteError("token classification: the model gave NaN or Inf logits (text " + std::to_string(rows[i]) +
                               ", token " + std::to_string(t) + "); check the weights and config");
        double sum = 0;
        for (int64_t l = 0; l < L; ++l) sum += std::exp(static_cast<double>(x[l]) - mx);
        for (int64_t l = 0; l < L; ++l) y[l] = static_cast<float>(std::exp(static_cast<double>(x[l]) - mx) / sum);
      }
    }
  });
  return scores;
}

std::vector<Encoding> TokenClassifier::windows(const std::vector<std::string>& texts, int64_t stride,
                                               std::vector<size_t>& chunk_text) const {
  Tokenizer whole = tokenizer_;
  whole.set_truncation(std::nullopt);
  const std::vector<Encoding> full = whole.encode_batch(texts);
  const int64_t window = max_length() - tokenizer_.num_special_tokens_to_add(false);
  ENCORE_CHECK_AS(UsageError, stride >= 0 && stride < window, "stride ", stride, " must be in 0..", window - 1,
                  " (max_length ", max_length(), " less the special tokens)");
  std::vector<Encoding> out;
  for (size_t i = 0; i < full.size(); ++i) {
    const Encoding& e = full[i];
    // The text's own tokens are e[b, c); the special tokens before and after them go around every window.
    size_t b = 0, c = e.size();
    while (b < c && e.special_tokens_mask[b]) ++b;
    while (c > b && e.special_tokens_mask[c - 1]) --c;
    const int64_t n = static_cast<int64_t>(c - b);
    for (int64_t start = 0;; start += window - stride) {
      const int64_t stop = std::min(start + window, n);
      Encoding w;
      auto take = [&](size_t from, size_t to) {
        for (size_t t = from; t < to; ++t) {
          w.ids.push_back(e.ids[t]);
          w.type_ids.push_back(e.type_ids[t]);
          w.tokens.push_back(e.tokens[t]);
          w.offsets.push_back(e.offsets[t]);
          w.special_tokens_mask.push_back(e.special_tokens_mask[t]);
          w.attention_mask.push_back(1);
        }
      };
      take(0, b);
      take(b + static_cast<size_t>(start), b + static_cast<size_t>(stop));
      take(c, e.size());
      out.push_back(std::move(w));
      chunk_text.push_back(i);
      if (stop == n) break;
    }
  }
  return out;
}

namespace {

// The pipeline's aggregate_overlapping_entities: sorted by start (stable), an entity starting inside the one kept
// before it replaces that one when longer, or as long with a higher score; else the kept one is final. (Literally:
// the first entity is compared with itself, so a zero-length first entity is kept twice, as the pipeline does.)
std::vector<TokenEntity> merge_overlapping(std::vector<TokenEntity> entities) {
  if (entities.empty()) return entities;
  std::stable_sort(entities.begin(), entities.end(), [](const TokenEntity& a, const TokenEntity& b) { return a.start < b.start; });
  std::vector<TokenEntity> out;
  TokenEntity previous = entities[0];
  for (const TokenEntity& e : entities) {
    if (previous.start <= e.start && e.start < previous.end) {
      const int64_t length = e.end - e.start, previous_length = previous.end - previous.start;
      if (length > previous_length || (length == previous_length && e.score > previous.score)) previous = e;
    } else {
      out.push_back(previous);
      previous = e;
    }
  }
  out.push_back(previous);
  return out;
}

}  // namespace

std::vector<std::vector<TokenEntity>> TokenClassifier::predict(const std::vector<std::string>& texts,
                                                               const TokenClassifyOptions& options) const {
  ENCORE_CHECK_AS(UsageError, options.batch_size > 0, "batch_size must be positive, got ", options.batch_size);
  ENCORE_CHECK_AS(UsageError, !options.stride || options.aggregation != Aggregation::none,
                  "stride reads the whole text in windows and needs an aggregation strategy other than none");
  std::vector<std::vector<TokenEntity>> out(texts.size());
  if (texts.empty()) return out;
  std::vector<size_t> chunk_text;
  const std::vector<Encoding> encodings =
      options.stride ? windows(texts, *options.stride, chunk_text) : tokenizer_.encode_batch(texts);
  if (!options.stride)
    for (size_t i = 0; i < texts.size(); ++i) chunk_text.push_back(i);
  const std::vector<std::vector<float>> scores = score_encodings(encodings, options.batch_size);
  const Postprocess post(tokenizer_, labels_, options);
  std::vector<int64_t> chunks(texts.size(), 0);
  for (size_t k = 0; k < encodings.size(); ++k) {
    std::vector<TokenEntity> found = post(texts[chunk_text[k]], encodings[k], scores[k].data());
    auto& dest = out[chunk_text[k]];
    dest.insert(dest.end(), std::make_move_iterator(found.begin()), std::make_move_iterator(found.end()));
    ++chunks[chunk_text[k]];
  }
  for (size_t i = 0; i < texts.size(); ++i)
    if (chunks[i] > 1) out[i] = merge_overlapping(std::move(out[i]));
  return out;
}

std::vector<TokenEntity> TokenClassifier::predict(const std::string& text, const TokenClassifyOptions& options) const {
  return predict(std::vector<std::string>{text}, options)[0];
}

Tensor TokenClassifier::token_scores(const std::string& text, Encoding* encoding) const {
  std::vector<Encoding> enc{tokenizer_.encode(text)};
  const std::vector<float> s = score_encodings(enc, 1)[0];
  if (encoding) *encoding = std::move(enc[0]);
  Tensor out = Tensor::empty({static_cast<int64_t>(s.size()) / num_labels(), num_labels()});
  std::copy(s.begin(), s.end(), out.data<float>());
  return out;
}

}  // namespace encore
