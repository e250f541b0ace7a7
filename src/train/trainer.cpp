// Fine-tuning for sequence classification: data, batching, the optimisation loop, held-out evaluation, log.
#include "encore/trainer.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <set>

#include "encore/model.hpp"
#include "encore/tokenizer.hpp"
#include "encore/train.hpp"

namespace encore::train {

namespace {

using Json = nlohmann::json;

struct Example {
  std::string text, text_pair, label;
};

// One CSV record (RFC 4180: quoted fields may hold commas, quotes as "", and newlines).
bool read_csv_record(std::istream& in, std::vector<std::string>& fields) {
  fields.clear();
  std::string field;
  bool quoted = false, any = false;
  char c;
  while (in.get(c)) {
    any = true;
    if (quoted) {
      if (c == '"') {
        if (in.peek() == '"') {
          field.push_back('"');
          in.get();
        } else {
          quoted = false;
        }
      } else {
        field.push_back(c);
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      fields.push_back(field);
      field.clear();
    } else if (c == '\n') {
      break;
    } else if (c != '\r') {
      field.push_back(c);
    }
  }
  if (!any) return false;
  ENCORE_CHECK(!quoted, "CSV: unterminated quoted field");
  fields.push_back(field);
  return true;
}

std::vector<Example> read_examples(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  ENCORE_CHECK(in.good(), "cannot read training data '", path, "'");
  std::vector<Example> out;
  const std::string ext = std::filesystem::path(path).extension().string();
  if (ext == ".csv") {
    std::vector<std::string> header, row;
    ENCORE_CHECK(read_csv_record(in, header), "'", path, "' is empty");
    auto col = [&](const std::string& name) -> int64_t {
      auto it = std::find(header.begin(), header.end(), name);
      return it == header.end() ? -1 : it - header.begin();
    };
    const int64_t ct = col("text"), cp = col("text_pair"), cl = col("label");
    ENCORE_CHECK(ct >= 0 && cl >= 0, "'", path, "': the header needs 'text' and 'label' columns");
    int64_t line = 1;
    while (read_csv_record(in, row)) {
      ++line;
      if (row.size() == 1 && row[0].empty()) continue;
      ENCORE_CHECK(row.size() == header.size(), path, ": record ", line, " has ", row.size(), " fields, the header ",
                   header.size());
      out.push_back({row[ct], cp >= 0 ? row[cp] : std::string(), row[cl]});
    }
  } else {
    std::string l;
    int64_t line = 0;
    while (std::getline(in, l)) {
      ++line;
      if (l.find_first_not_of(" \t\r") == std::string::npos) continue;
      Json j;
      try {
        j = Json::parse(l);
      } catch (const Json::exception& e) {
        throw Error(detail::concat(path, ":", line, ": not valid JSON: ", e.what()));
      }
      ENCORE_CHECK(j.is_object() && j.contains("text") && j["text"].is_string() && j.contains("label"), path, ":",
                   line, ": expected an object with a string 'text' and a 'label'");
      Example e{j["text"].get<std::string>(), j.value("text_pair", std::string()), ""};
      const Json& lab = j["label"];
      ENCORE_CHECK(lab.is_number_integer() || lab.is_string(), path, ":", line, ": label must be an integer or a string");
      e.label = lab.is_string() ? lab.get<std::string>() : std::to_string(lab.get<int64_t>());
      out.push_back(std::move(e));
    }
  }
  ENCORE_CHECK(!out.empty(), "'", path, "' holds no examples");
  return out;
}

bool all_integers(const std::set<std::string>& labels) {
  for (const auto& l : labels) {
    if (l.empty() || l.find_first_not_of("0123456789") != std::string::npos) return false;
  }
  return true;
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

}  // namespace

TrainReport fine_tune_classifier(const TrainConfig& cfg,
                                 const std::function<void(int64_t, int64_t, double, double)>& progress) {
  ENCORE_CHECK(cfg.batch_size > 0 && cfg.max_length > 1 && (cfg.steps > 0 || cfg.epochs > 0),
               "train: batch_size, max_length and steps or epochs must be positive");
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<Example> train_set = read_examples(cfg.data), eval_set;
  if (!cfg.eval_data.empty()) {
    eval_set = read_examples(cfg.eval_data);
  } else if (cfg.eval_fraction > 0) {
    const size_t n_eval = static_cast<size_t>(std::floor(train_set.size() * cfg.eval_fraction));
    eval_set.assign(train_set.end() - n_eval, train_set.end());
    train_set.resize(train_set.size() - n_eval);
  }
  ENCORE_CHECK(!train_set.empty(), "train: no training examples left after the held-out split");

  // Labels: integer ids as given, else strings in sorted order.
  std::set<std::string> names;
  for (auto& e : train_set) names.insert(e.label);
  for (auto& e : eval_set) names.insert(e.label);
  TrainReport report;
  std::map<std::string, int64_t> label_id;
  int64_t num_labels = 0;
  if (all_integers(names)) {
    for (auto& n : names) num_labels = std::max<int64_t>(num_labels, std::stoll(n) + 1);
    for (int64_t i = 0; i < num_labels; ++i) label_id[std::to_string(i)] = i, report.labels.push_back(std::to_string(i));
  } else {
    for (auto& n : names) label_id[n] = num_labels++, report.labels.push_back(n);
  }
  ENCORE_CHECK(num_labels >= 2, "train: classification needs at least 2 classes, the data has ", num_labels);

  AutoModel model = AutoModel::load(cfg.model_dir);
  if (model.info().head != "sequence_classification") {
    model.add_sequence_classifier(num_labels, cfg.seed);
  } else {
    ENCORE_CHECK(model.info().num_labels == num_labels, "train: the checkpoint's head has ", model.info().num_labels,
                 " labels but the data has ", num_labels);
  }
  Tokenizer tok = Tokenizer::load(cfg.model_dir);
  tok.set_padding(std::nullopt);
  TruncationOptions trunc;
  trunc.max_length = std::min<int64_t>(cfg.max_length, model.max_sequence_length());
  tok.set_truncation(trunc);
  auto encode_all = [&](const std::vector<Example>& set, std::vector<Encoding>& enc, std::vector<int64_t>& labels) {
    for (const auto& e : set) {
      enc.push_back(e.text_pair.empty() ? tok.encode(e.text) : tok.encode_pair(e.text, e.text_pair));
      labels.push_back(label_id.at(e.label));
    }
  };
  std::vector<Encoding> train_enc, eval_enc;
  std::vector<int64_t> train_labels, eval_labels;
  encode_all(train_set, train_enc, train_labels);
  encode_all(eval_set, eval_enc, eval_labels);
  report.train_examples = static_cast<int64_t>(train_enc.size());
  report.eval_examples = static_cast<int64_t>(eval_enc.size());

  const int64_t n = report.train_examples;
  const int64_t per_epoch = (n + cfg.batch_size - 1) / cfg.batch_size;
  const int64_t total = cfg.steps > 0 ? cfg.steps : per_epoch * cfg.epochs;
  const Schedule schedule = parse_schedule(cfg.schedule);
  const int64_t pad_id = model.info().pad_token_id;

  model.train();
  nn::Module& params = model.module();
  AdamW opt(params, {cfg.lr, 0.9, 0.999, 1e-8, cfg.weight_decay});
  std::ofstream log;
  if (!cfg.log_csv.empty()) {
    log.open(cfg.log_csv, std::ios::trunc);
    ENCORE_CHECK(log.good(), "cannot write the log '", cfg.log_csv, "'");
    log << "step,loss,lr,grad_norm,eval_accuracy\n";
  }
  auto evaluate = [&]() {
    if (eval_enc.empty()) return std::nan("");
    model.eval();
    int64_t correct = 0;
    for (int64_t s = 0; s < report.eval_examples; s += cfg.batch_size) {
      std::vector<int64_t> idx(std::min(cfg.batch_size, report.eval_examples - s));
      std::iota(idx.begin(), idx.end(), s);
      Batch b = make_batch(eval_enc, eval_labels, idx, pad_id);
      Tensor logits = model.forward(b.ids, b.mask, b.types).logits;
      for (int64_t r = 0; r < logits.size(0); ++r) {
        const float* row = logits.data<float>() + r * num_labels;
        correct += (std::max_element(row, row + num_labels) - row) == b.labels.data<int64_t>()[r];
      }
    }
    model.train();
    return static_cast<double>(correct) / static_cast<double>(report.eval_examples);
  };

  std::mt19937_64 rng(cfg.seed);
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  int64_t step = 0;
  while (step < total) {
    if (cfg.shuffle) std::shuffle(order.begin(), order.end(), rng);
    for (int64_t s = 0; s < n && step < total; s += cfg.batch_size, ++step) {
      std::vector<int64_t> idx(order.begin() + s, order.begin() + std::min(n, s + cfg.batch_size));
      Batch b = make_batch(train_enc, train_labels, idx, pad_id);
      const double lr = learning_rate_at(step, cfg.lr, cfg.warmup_steps, total, schedule);
      opt.set_lr(lr);
      opt.zero_grad();
      ModelOutput out = model.forward(b.ids, b.mask, b.types);
      Tensor dlogits;
      const double loss = cross_entropy_loss(out.logits, b.labels, &dlogits);
      model.backward(Tensor(), Tensor(), dlogits);
      const double norm = cfg.max_grad_norm > 0 ? clip_grad_norm(params, cfg.max_grad_norm) : std::nan("");
      opt.step();
      report.losses.push_back(loss);
      report.tokens += b.tokens;
      const bool epoch_end = cfg.steps <= 0 && (step + 1) % per_epoch == 0;
      const bool last = step + 1 == total;
      double acc = std::nan("");
      if (epoch_end || last) {
        acc = evaluate();
        if (!std::isnan(acc)) report.eval_accuracy.push_back(acc);
      }
      if (log.is_open()) {
        log << step << "," << loss << "," << lr << "," << norm << ",";
        if (!std::isnan(acc)) log << acc;
        log << "\n";
      }
      if (progress) progress(step + 1, total, loss, lr);
    }
  }
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return report;
}

}  // namespace encore::train
