// Fine-tuning for token classification (NER): word-level data, labels aligned to each word's first sub-token as
// transformers' run_ner.py does (the other sub-tokens and the special tokens are -100, ignored by the loss),
// cross-entropy over the labelled tokens, held-out token accuracy and the transformers checkpoint; the loop is
// run_training (loop.hpp).
#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <set>

#include "encore/model.hpp"
#include "encore/sentence_encoder.hpp"
#include "encore/tokenizer.hpp"
#include "encore/trainer.hpp"
#include "train/labelled_task.hpp"

namespace encore::train {

namespace {

constexpr int64_t kIgnore = -100;  // torch's CrossEntropyLoss ignore_index, transformers' label for "no label"

struct WordExample {
  std::vector<std::string> words, labels;
};

// JSONL objects {"tokens": [words], "labels" (or "ner_tags"): [one label per word, strings or integers]}.
std::vector<WordExample> read_word_examples(const std::string& path) {
  ENCORE_CHECK_AS(UsageError, training_data_format(path) == RecordFormat::jsonl, "train: token classification reads "
                  "JSONL ({\"tokens\": [...], \"labels\": [...]} per line); '", path, "' is not .jsonl");
  std::vector<WordExample> out;
  RecordReader in(path, RecordFormat::jsonl, {.allow_non_objects = false, .what = "training data"});
  for (Record r; in.next(r);) {
    const RecordField* tokens = r.find("tokens");
    const RecordField* labels = r.find("labels") ? r.find("labels") : r.find("ner_tags");
    if (!tokens || !labels) in.fail(r, "expected a JSON object with 'tokens' and 'labels' (or 'ner_tags') arrays");
    const nlohmann::json w = nlohmann::json::parse(tokens->json), l = nlohmann::json::parse(labels->json);
    if (!w.is_array() || !l.is_array() || w.size() != l.size())
      in.fail(r, "'tokens' and '" + labels->name + "' must be arrays of the same length (one label per word)");
    WordExample e;
    for (size_t i = 0; i < w.size(); ++i) {
      if (!w[i].is_string()) in.fail(r, "tokens[" + std::to_string(i) + "] is not a string");
      if (!l[i].is_string() && !l[i].is_number_unsigned())
        in.fail(r, labels->name + "[" + std::to_string(i) + "] is not a string or a non-negative integer");
      e.words.push_back(w[i].get<std::string>());
      e.labels.push_back(l[i].is_string() ? l[i].get<std::string>() : std::to_string(l[i].get<uint64_t>()));
    }
    out.push_back(std::move(e));
  }
  ENCORE_CHECK(!out.empty(), "'", path, "' holds no examples");
  return out;
}

// One tokenized example: the encoding and one label per token (-100 but on each word's first sub-token).
struct Labelled {
  Encoding enc;
  std::vector<int64_t> labels;
};

class TokenClassificationTask final : public LabelledTask {
 public:
  TokenClassificationTask(const TrainConfig& cfg, const std::vector<WordExample>& train_set,
                          const std::vector<WordExample>& eval_set)
      : LabelledTask(cfg), tok_(Tokenizer::load(source_dir_)) {
    std::set<std::string> names;
    for (const auto* set : {&train_set, &eval_set})
      for (const auto& e : *set) names.insert(e.labels.begin(), e.labels.end());
    std::map<std::string, int64_t> label_id;
    if (model_.info().head == "token_classification") {
      // A checkpoint with a head keeps its label ids: its id2label names them (an integer label is an id).
      const ModelInfo& info = model_.info();
      for (int64_t i = 0; i < info.num_labels; ++i) {
        const std::string name = i < static_cast<int64_t>(info.id2label.size()) && !info.id2label[i].empty()
                                     ? info.id2label[i] : "LABEL_" + std::to_string(i);
        labels_.push_back(name);
        label_id[name] = i;
        label_id.emplace(std::to_string(i), i);
      }
      for (const auto& n : names)
        ENCORE_CHECK_AS(InputError, label_id.count(n), "train: label '", n, "' is not one of the checkpoint's ",
                        info.num_labels, " labels (config.json id2label)");
    } else {
      ENCORE_CHECK_AS(InputError, model_.info().head.empty(), "train: '", source_dir_, "' has a ", model_.info().head,
                      " head; token classification needs a base model or a *ForTokenClassification checkpoint");
      labels_ = class_names(names);
      for (size_t i = 0; i < labels_.size(); ++i) label_id[labels_[i]] = static_cast<int64_t>(i);
      ENCORE_CHECK(labels_.size() >= 2, "train: token classification needs at least 2 labels, the data has ",
                   labels_.size());
      model_.add_token_classifier(static_cast<int64_t>(labels_.size()), cfg.seed);
    }
    tok_.set_padding(std::nullopt);  // tokenizer.json's own padding and truncation do not apply: cut below
    tok_.set_truncation(std::nullopt);
    // The special tokens a single text gets before and after its tokens (e.g. [CLS] ... [SEP]).
    const Encoding probe = tok_.encode("a");
    size_t first = 0, last = probe.size();
    while (first < probe.size() && probe.special_tokens_mask[first]) ++first;
    while (last > first && probe.special_tokens_mask[last - 1]) --last;
    prefix_.assign(probe.ids.begin(), probe.ids.begin() + static_cast<std::ptrdiff_t>(first));
    suffix_.assign(probe.ids.begin() + static_cast<std::ptrdiff_t>(last), probe.ids.end());
    max_length_ = std::min<int64_t>(cfg.max_length, model_.max_sequence_length());
    ENCORE_CHECK(max_length_ > static_cast<int64_t>(prefix_.size() + suffix_.size()), "train: max_length ", max_length_,
                 " leaves no room between the special tokens");
    for (const auto& e : train_set) train_.push_back(tokenize(e, label_id));
    for (const auto& e : eval_set) eval_.push_back(tokenize(e, label_id));
    for (const auto& e : train_set)
      for (size_t i = 0; i < e.words.size(); ++i) fingerprint_.add(e.words[i]), fingerprint_.add(e.labels[i]);
  }

  std::string name() const override { return "token-classification"; }
  int64_t train_examples() const override { return static_cast<int64_t>(train_.size()); }
  int64_t eval_examples() const override { return static_cast<int64_t>(eval_.size()); }
  std::string metric_name() const override { return "token accuracy"; }
  // micro_batch_weight as sequence classification, by examples: exact with grad_accum 1; with more, the step's
  // loss is the examples-weighted mean of the micro-batches' token means (docs/training.md).

  double train_micro_batch(const std::vector<int64_t>& idx, double weight, int64_t* tokens) override {
    const Batch b = make_batch(train_, idx);
    const Tensor logits = model_.forward(b.in.input_ids, b.in.attention_mask, b.in.token_type_ids).logits;
    const int64_t L = num_labels();
    Tensor dflat;
    // transformers' loss: CrossEntropyLoss()(logits.view(-1, L), labels.view(-1)): the mean over labelled tokens
    const double loss = cross_entropy_loss(logits.contiguous().view({-1, L}), b.labels, &dflat, kIgnore);
    if (weight != 1.0)
      for (int64_t i = 0; i < dflat.numel(); ++i) dflat.data<float>()[i] *= static_cast<float>(weight);
    model_.backward(Tensor(), Tensor(), dflat.view(logits.shape()));
    *tokens += b.tokens;
    return loss;
  }

  // Share of the held-out labelled tokens (each word's first sub-token) whose arg-max label is right.
  double evaluate(const std::function<void(int64_t, int64_t)>& progress) override {
    const int64_t n = eval_examples();
    if (n == 0) return std::nan("");
    model_.eval();
    int64_t correct = 0, counted = 0;
    const int64_t L = num_labels();
    for (int64_t s = 0; s < n; s += cfg_.batch_size) {
      std::vector<int64_t> idx(std::min(cfg_.batch_size, n - s));
      std::iota(idx.begin(), idx.end(), s);
      const Batch b = make_batch(eval_, idx);
      const Tensor logits =
          model_.forward(b.in.input_ids, b.in.attention_mask, b.in.token_type_ids).logits.contiguous();
      for (int64_t t = 0; t < b.labels.numel(); ++t) {
        const int64_t want = b.labels.data<int64_t>()[t];
        if (want == kIgnore) continue;
        const float* row = logits.data<float>() + t * L;
        correct += (std::max_element(row, row + L) - row) == want;
        ++counted;
      }
      if (progress) progress(s + static_cast<int64_t>(idx.size()), n);
    }
    model_.train();
    return counted ? static_cast<double>(correct) / static_cast<double>(counted) : std::nan("");
  }

 private:
  struct Batch {
    PaddedBatch in;
    Tensor labels;  // (B * T) int64, -100 where not labelled or padded
    int64_t tokens = 0;
  };

  int64_t num_labels() const { return static_cast<int64_t>(labels_.size()); }

  // The words tokenized one by one (as a fast tokenizer does with is_split_into_words: each word normalized and
  // pre-tokenized alone), concatenated, cut to max_length with the special tokens, which are then put around.
  Labelled tokenize(const WordExample& e, const std::map<std::string, int64_t>& label_id) const {
    Labelled out;
    std::vector<int64_t> ids(prefix_), labels(prefix_.size(), kIgnore);
    const size_t room = static_cast<size_t>(max_length_) - prefix_.size() - suffix_.size();
    for (size_t w = 0; w < e.words.size() && ids.size() - prefix_.size() < room; ++w) {
      const Encoding piece = tok_.encode(e.words[w], /*add_special_tokens=*/false);
      for (size_t i = 0; i < piece.size() && ids.size() - prefix_.size() < room; ++i) {
        ids.push_back(piece.ids[i]);
        labels.push_back(i == 0 ? label_id.at(e.labels[w]) : kIgnore);
      }
    }
    ids.insert(ids.end(), suffix_.begin(), suffix_.end());
    labels.resize(ids.size(), kIgnore);
    out.enc.ids = std::move(ids);
    out.enc.type_ids.assign(out.enc.ids.size(), 0);
    out.enc.attention_mask.assign(out.enc.ids.size(), 1);
    out.labels = std::move(labels);
    return out;
  }

  Batch make_batch(const std::vector<Labelled>& set, const std::vector<int64_t>& idx) const {
    std::vector<const Encoding*> seqs;
    for (int64_t i : idx) seqs.push_back(&set[static_cast<size_t>(i)].enc);
    Batch b{pad_batch(seqs, model_), Tensor(), 0};
    const int64_t B = static_cast<int64_t>(idx.size()), T = b.in.input_ids.size(1);
    b.labels = Tensor::empty({B * T}, DType::i64);
    for (int64_t r = 0; r < B; ++r) {
      const Labelled& x = set[static_cast<size_t>(idx[r])];
      for (int64_t t = 0; t < T; ++t)
        b.labels.data<int64_t>()[r * T + t] = t < static_cast<int64_t>(x.labels.size()) ? x.labels[t] : kIgnore;
      b.tokens += static_cast<int64_t>(x.enc.size());
    }
    return b;
  }

  Tokenizer tok_;
  std::vector<int64_t> prefix_, suffix_;
  int64_t max_length_ = 0;
  std::vector<Labelled> train_, eval_;
};

}  // namespace

TrainReport fine_tune_token_classifier(const TrainConfig& cfg,
                                       const std::function<void(const TrainProgress&)>& progress) {
  return run_labelled_task<TokenClassificationTask>(cfg, progress, read_word_examples);
}

const std::vector<std::string>& train_tasks() {
  static const std::vector<std::string> tasks = {"classification", "rerank", "token-classification", "embedding"};
  return tasks;
}

TrainReport fine_tune(const std::string& task, const TrainConfig& cfg,
                      const std::function<void(const TrainProgress&)>& progress) {
  if (task == "classification") return fine_tune_classifier(cfg, progress);
  if (task == "rerank") return fine_tune_reranker(cfg, progress);
  if (task == "token-classification") return fine_tune_token_classifier(cfg, progress);
  if (task == "embedding") return fine_tune_embedding(cfg, progress);
  throw UsageError("train: task must be 'classification', 'rerank', 'token-classification' or 'embedding', got '" +
                   task + "'");
}

}  // namespace encore::train
