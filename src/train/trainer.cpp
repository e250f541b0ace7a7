// Fine-tuning for sequence classification: data, labels, batching, cross-entropy on the logits, held-out
// accuracy and the transformers checkpoint; the loop is run_training (loop.hpp).
#include "encore/trainer.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <set>

#include "encore/model.hpp"
#include "encore/tokenizer.hpp"
#include "encore/train.hpp"
#include "train/labelled_task.hpp"

namespace encore::train {

namespace {

struct Example {
  std::string text, text_pair, label;
};

std::vector<Example> read_examples(const std::string& path) {
  std::vector<Example> out;
  RecordReader in(path, training_data_format(path), {.allow_non_objects = false, .what = "training data"});
  for (Record r; in.next(r);) {
    const std::string *text = in.scalar(r, "text"), *pair = in.scalar(r, "text_pair"), *label = in.scalar(r, "label");
    if (!text || !label) in.fail(r, "expected a JSON object with 'text' and 'label'");
    out.push_back({*text, pair ? *pair : std::string(), *label});
  }
  ENCORE_CHECK(!out.empty(), "'", path, "' holds no examples");
  return out;
}

// Rerank rows: text, text_pair and a relevance label, which may be any JSON number (0.75) or a numeric string
// (CSV); RerankTask checks it is a number in [0, 1].
std::vector<Example> read_rerank_examples(const std::string& path) {
  std::vector<Example> out;
  RecordReader in(path, training_data_format(path), {.allow_non_objects = false, .what = "training data"});
  for (Record r; in.next(r);) {
    const std::string *text = in.scalar(r, "text"), *pair = in.scalar(r, "text_pair");
    const RecordField* label = r.find("label");
    if (!text || !label) in.fail(r, "expected a JSON object with 'text' (the query), 'text_pair' and 'label'");
    out.push_back({*text, pair ? *pair : std::string(), label->value});
  }
  ENCORE_CHECK(!out.empty(), "'", path, "' holds no examples");
  return out;
}

struct Batch {
  Tensor ids, mask, types;
  int64_t tokens = 0;
};

// The sequences enc[idx[r]], right-padded with pad_id to the longest.
Batch make_batch(const std::vector<Encoding>& enc, const std::vector<int64_t>& idx, int64_t pad_id) {
  Batch b;
  const int64_t B = static_cast<int64_t>(idx.size());
  int64_t T = 1;
  for (int64_t i : idx) T = std::max<int64_t>(T, enc[i].size());
  b.ids = Tensor::empty({B, T}, DType::i64);
  b.mask = Tensor::zeros({B, T}, DType::i64);
  b.types = Tensor::zeros({B, T}, DType::i64);
  for (int64_t r = 0; r < B; ++r) {
    const Encoding& e = enc[idx[r]];
    for (int64_t t = 0; t < T; ++t) {
      const bool real = t < static_cast<int64_t>(e.size());
      b.ids.data<int64_t>()[r * T + t] = real ? e.ids[t] : pad_id;
      b.mask.data<int64_t>()[r * T + t] = real;
      b.types.data<int64_t>()[r * T + t] = real ? e.type_ids[t] : 0;
      b.tokens += real;
    }
  }
  return b;
}

// labels[idx[r]] as a (B) tensor of dtype D (int64 class ids, or float32 targets).
template <typename T>
Tensor gather(const std::vector<T>& labels, const std::vector<int64_t>& idx, DType dtype) {
  Tensor out = Tensor::empty({static_cast<int64_t>(idx.size())}, dtype);
  for (size_t r = 0; r < idx.size(); ++r) out.data<T>()[r] = labels[idx[r]];
  return out;
}

// The tokenizer of the checkpoint, truncating (pairs longest-first) to max_length, unpadded.
Tokenizer training_tokenizer(const std::string& dir, const TrainConfig& cfg, int64_t model_limit) {
  Tokenizer tok = Tokenizer::load(dir);
  tok.set_padding(std::nullopt);
  TruncationOptions trunc;
  trunc.max_length = std::min<int64_t>(cfg.max_length, model_limit);
  tok.set_truncation(trunc);
  return tok;
}

Encoding encode_example(const Tokenizer& tok, const Example& e) {
  return e.text_pair.empty() ? tok.encode(e.text) : tok.encode_pair(e.text, e.text_pair);
}

// What the sequence tasks (classification, rerank) share: texts or pairs into a sequence-classification head,
// micro-batches padded to their longest member, held-out accuracy. They differ in the loss on the logits and in
// what counts as a correct held-out answer.
class SequenceTask : public LabelledTask {
 public:
  using LabelledTask::LabelledTask;
  int64_t train_examples() const override { return static_cast<int64_t>(train_enc_.size()); }
  int64_t eval_examples() const override { return static_cast<int64_t>(eval_enc_.size()); }
  std::string metric_name() const override { return "accuracy"; }

  double train_micro_batch(const std::vector<int64_t>& idx, double weight, int64_t* tokens) override {
    Batch b = make_batch(train_enc_, idx, pad_id_);
    ModelOutput out = model_.forward(b.ids, b.mask, b.types);
    Tensor dlogits;
    const double loss = logits_loss(out.logits, idx, &dlogits);
    if (weight != 1.0)
      for (int64_t i = 0; i < dlogits.numel(); ++i) dlogits.data<float>()[i] *= static_cast<float>(weight);
    model_.backward(Tensor(), Tensor(), dlogits);
    *tokens += b.tokens;
    return loss;
  }

  double evaluate(const std::function<void(int64_t, int64_t)>& progress) override {
    const int64_t n = eval_examples();
    if (n == 0) return std::nan("");
    model_.eval();
    int64_t correct = 0;
    for (int64_t s = 0; s < n; s += cfg_.batch_size) {
      std::vector<int64_t> idx(std::min(cfg_.batch_size, n - s));
      std::iota(idx.begin(), idx.end(), s);
      Batch b = make_batch(eval_enc_, idx, pad_id_);
      correct += count_correct(model_.forward(b.ids, b.mask, b.types).logits, idx);
      if (progress) progress(s + static_cast<int64_t>(idx.size()), n);
    }
    model_.train();
    return static_cast<double>(correct) / static_cast<double>(n);
  }

 protected:
  // The loss of training examples idx given their logits, and d(loss)/d(logits).
  virtual double logits_loss(const Tensor& logits, const std::vector<int64_t>& idx, Tensor* dlogits) const = 0;
  // How many of held-out examples idx the logits get right.
  virtual int64_t count_correct(const Tensor& logits, const std::vector<int64_t>& idx) const = 0;

  std::vector<Encoding> train_enc_, eval_enc_;
  int64_t pad_id_ = 0;
};

class ClassificationTask final : public SequenceTask {
 public:
  ClassificationTask(const TrainConfig& cfg, std::vector<Example> train_set, std::vector<Example> eval_set)
      : SequenceTask(cfg) {
    std::set<std::string> names;
    for (auto& e : train_set) names.insert(e.label);
    for (auto& e : eval_set) names.insert(e.label);
    labels_ = class_names(names);
    num_labels_ = static_cast<int64_t>(labels_.size());
    std::map<std::string, int64_t> label_id;
    for (int64_t i = 0; i < num_labels_; ++i) label_id[labels_[i]] = i;
    ENCORE_CHECK(num_labels_ >= 2, "train: classification needs at least 2 classes, the data has ", num_labels_);
    if (model_.info().head != "sequence_classification") {
      model_.add_sequence_classifier(num_labels_, cfg.seed);
    } else {
      ENCORE_CHECK(model_.info().num_labels == num_labels_, "train: the checkpoint's head has ",
                   model_.info().num_labels, " labels but the data has ", num_labels_);
    }
    const Tokenizer tok = training_tokenizer(source_dir_, cfg, model_.max_sequence_length());
    auto encode_all = [&](const std::vector<Example>& set, std::vector<Encoding>& enc, std::vector<int64_t>& labels) {
      for (const auto& e : set) {
        enc.push_back(encode_example(tok, e));
        labels.push_back(label_id.at(e.label));
      }
    };
    encode_all(train_set, train_enc_, train_labels_);
    encode_all(eval_set, eval_enc_, eval_labels_);
    for (const auto& e : train_set) fingerprint_.add(e.text), fingerprint_.add(e.text_pair), fingerprint_.add(e.label);
    pad_id_ = model_.info().pad_token_id;
  }

  std::string name() const override { return "classification"; }

 private:
  double logits_loss(const Tensor& logits, const std::vector<int64_t>& idx, Tensor* dlogits) const override {
    return cross_entropy_loss(logits, gather(train_labels_, idx, DType::i64), dlogits);
  }
  int64_t count_correct(const Tensor& logits, const std::vector<int64_t>& idx) const override {
    int64_t correct = 0;
    for (int64_t r = 0; r < logits.size(0); ++r) {
      const float* row = logits.data<float>() + r * num_labels_;
      correct += (std::max_element(row, row + num_labels_) - row) == eval_labels_[idx[r]];
    }
    return correct;
  }

  int64_t num_labels_ = 0;
  std::vector<int64_t> train_labels_, eval_labels_;
};

// Cross-encoder (reranker) training, as sentence-transformers' CrossEncoder with BinaryCrossEntropyLoss: one
// logit per (query, document) pair, BCE-with-logits against a relevance target in [0, 1]; held-out accuracy is
// (logit > 0) == (target > 0.5).
class RerankTask final : public SequenceTask {
 public:
  RerankTask(const TrainConfig& cfg, std::vector<Example> train_set, std::vector<Example> eval_set)
      : SequenceTask(cfg) {
    labels_ = {"LABEL_0"};  // transformers' name of a lone label
    if (model_.info().head != "sequence_classification") {
      model_.add_sequence_classifier(1, cfg.seed);
    } else {
      ENCORE_CHECK_AS(InputError, model_.info().num_labels == 1, "train: a reranker scores with one logit, but the "
                      "checkpoint's head has ", model_.info().num_labels, " labels (use --task classification)");
      labels_ = model_.info().id2label;
    }
    const Tokenizer tok = training_tokenizer(source_dir_, cfg, model_.max_sequence_length());
    auto encode_all = [&](const std::vector<Example>& set, std::vector<Encoding>& enc, std::vector<float>& targets) {
      for (size_t i = 0; i < set.size(); ++i) {
        const Example& e = set[i];
        ENCORE_CHECK_AS(InputError, !e.text_pair.empty(), "train: rerank example ", i,
                        " has no 'text_pair' (the document scored against 'text', the query)");
        char* end = nullptr;
        const double y = std::strtod(e.label.c_str(), &end);
        ENCORE_CHECK_AS(InputError, !e.label.empty() && end && *end == '\0' && y >= 0.0 && y <= 1.0, "train: rerank example ",
                        i, "'s label '", e.label, "' is not a relevance in [0, 1] (1 relevant, 0 not)");
        enc.push_back(encode_example(tok, e));
        targets.push_back(static_cast<float>(y));
      }
    };
    encode_all(train_set, train_enc_, train_targets_);
    encode_all(eval_set, eval_enc_, eval_targets_);
    for (const auto& e : train_set) fingerprint_.add(e.text), fingerprint_.add(e.text_pair), fingerprint_.add(e.label);
    pad_id_ = model_.info().pad_token_id;
  }

  std::string name() const override { return "rerank"; }

 private:
  double logits_loss(const Tensor& logits, const std::vector<int64_t>& idx, Tensor* dlogits) const override {
    const Tensor targets = gather(train_targets_, idx, DType::f32).view({static_cast<int64_t>(idx.size()), 1});
    return binary_cross_entropy_with_logits_loss(logits, targets, dlogits);
  }
  int64_t count_correct(const Tensor& logits, const std::vector<int64_t>& idx) const override {
    int64_t correct = 0;
    for (int64_t r = 0; r < logits.size(0); ++r) correct += (logits.data<float>()[r] > 0.0f) == (eval_targets_[idx[r]] > 0.5f);
    return correct;
  }

  std::vector<float> train_targets_, eval_targets_;
};

}  // namespace

TrainReport fine_tune_reranker(const TrainConfig& cfg, const std::function<void(const TrainProgress&)>& progress) {
  return run_labelled_task<RerankTask>(cfg, progress, read_rerank_examples);
}

TrainReport fine_tune_classifier(const TrainConfig& cfg, const std::function<void(const TrainProgress&)>& progress) {
  return run_labelled_task<ClassificationTask>(cfg, progress, read_examples);
}

}  // namespace encore::train
