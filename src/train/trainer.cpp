// Fine-tuning for sequence classification: data, labels, batching, cross-entropy on the logits, held-out
// accuracy and the transformers checkpoint; the loop is run_training (loop.hpp).
#include "encore/trainer.hpp"

#include <algorithm>
#include <cmath>
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

struct Batch {
  Tensor ids, mask, types, labels;
  int64_t tokens = 0;
};

Batch make_batch(const std::vector<Encoding>& enc, const std::vector<int64_t>& labels, const std::vector<int64_t>& idx,
                 int64_t pad_id) {
  Batch b;
  const int64_t B = static_cast<int64_t>(idx.size());
  int64_t T = 1;
  for (int64_t i : idx) T = std::max<int64_t>(T, enc[i].size());
  b.ids = Tensor::empty({B, T}, DType::i64);
  b.mask = Tensor::zeros({B, T}, DType::i64);
  b.types = Tensor::zeros({B, T}, DType::i64);
  b.labels = Tensor::empty({B}, DType::i64);
  for (int64_t r = 0; r < B; ++r) {
    const Encoding& e = enc[idx[r]];
    for (int64_t t = 0; t < T; ++t) {
      const bool real = t < static_cast<int64_t>(e.size());
      b.ids.data<int64_t>()[r * T + t] = real ? e.ids[t] : pad_id;
      b.mask.data<int64_t>()[r * T + t] = real;
      b.types.data<int64_t>()[r * T + t] = real ? e.type_ids[t] : 0;
      b.tokens += real;
    }
    b.labels.data<int64_t>()[r] = labels[idx[r]];
  }
  return b;
}

class ClassificationTask final : public LabelledTask {
 public:
  ClassificationTask(const TrainConfig& cfg, std::vector<Example> train_set, std::vector<Example> eval_set)
      : LabelledTask(cfg) {
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
    Tokenizer tok = Tokenizer::load(source_dir_);
    tok.set_padding(std::nullopt);
    TruncationOptions trunc;
    trunc.max_length = std::min<int64_t>(cfg.max_length, model_.max_sequence_length());
    tok.set_truncation(trunc);
    auto encode_all = [&](const std::vector<Example>& set, std::vector<Encoding>& enc, std::vector<int64_t>& labels) {
      for (const auto& e : set) {
        enc.push_back(e.text_pair.empty() ? tok.encode(e.text) : tok.encode_pair(e.text, e.text_pair));
        labels.push_back(label_id.at(e.label));
      }
    };
    encode_all(train_set, train_enc_, train_labels_);
    encode_all(eval_set, eval_enc_, eval_labels_);
    for (const auto& e : train_set) fingerprint_.add(e.text), fingerprint_.add(e.text_pair), fingerprint_.add(e.label);
    pad_id_ = model_.info().pad_token_id;
  }

  std::string name() const override { return "classification"; }
  int64_t train_examples() const override { return static_cast<int64_t>(train_enc_.size()); }
  int64_t eval_examples() const override { return static_cast<int64_t>(eval_enc_.size()); }
  std::string metric_name() const override { return "accuracy"; }

  double train_micro_batch(const std::vector<int64_t>& idx, double weight, int64_t* tokens) override {
    Batch b = make_batch(train_enc_, train_labels_, idx, pad_id_);
    ModelOutput out = model_.forward(b.ids, b.mask, b.types);
    Tensor dlogits;
    const double loss = cross_entropy_loss(out.logits, b.labels, &dlogits);
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
      Batch b = make_batch(eval_enc_, eval_labels_, idx, pad_id_);
      Tensor logits = model_.forward(b.ids, b.mask, b.types).logits;
      for (int64_t r = 0; r < logits.size(0); ++r) {
        const float* row = logits.data<float>() + r * num_labels_;
        correct += (std::max_element(row, row + num_labels_) - row) == b.labels.data<int64_t>()[r];
      }
      if (progress) progress(s + static_cast<int64_t>(idx.size()), n);
    }
    model_.train();
    return static_cast<double>(correct) / static_cast<double>(n);
  }

 private:
  int64_t num_labels_ = 0, pad_id_ = 0;
  std::vector<Encoding> train_enc_, eval_enc_;
  std::vector<int64_t> train_labels_, eval_labels_;
};

}  // namespace

TrainReport fine_tune_classifier(const TrainConfig& cfg, const std::function<void(const TrainProgress&)>& progress) {
  return run_labelled_task<ClassificationTask>(cfg, progress, read_examples);
}

}  // namespace encore::train
