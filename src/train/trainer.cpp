// Fine-tuning for sequence classification: data, batching, the optimisation loop, held-out evaluation, log.
#include "encore/trainer.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <set>
#include <sstream>

#include "encore/model.hpp"
#include "encore/tokenizer.hpp"
#include "encore/train.hpp"
#include "io/staged_dir.hpp"
#include "train/checkpoint.hpp"
#include "train/plot.hpp"
#include "train/records.hpp"

namespace encore::train {

namespace {

using Json = nlohmann::json;

struct Example {
  std::string text, text_pair, label;
};

std::vector<Example> read_examples(const std::string& path) {
  std::vector<Example> out;
  for (const Record& r : read_records(path, {"text", "text_pair", "label"}, {"text", "label"})) {
    auto pair = r.fields.find("text_pair");
    out.push_back({r.fields.at("text"), pair == r.fields.end() ? std::string() : pair->second, r.fields.at("label")});
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

namespace {

uint64_t mix64(uint64_t x) {  // splitmix64 finaliser
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// FNV-1a over the training examples: a resumed run must see the same data in the same order.
std::string fingerprint(const std::vector<Example>& set) {
  uint64_t h = 1469598103934665603ull;
  auto add = [&](const std::string& s) {
    for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
    h = (h ^ 0xFF) * 1099511628211ull;  // field separator
  };
  for (const auto& e : set) add(e.text), add(e.text_pair), add(e.label);
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

// Where training stands: what a checkpoint stores beyond the weights and the optimizer.
struct LoopState {
  int64_t step = 0;   // optimizer steps done
  int64_t epoch = -1; // current pass over the data (0-based; -1 before the first)
  int64_t pos = 0;    // next index into `order`; == n: the epoch is done
  std::vector<int64_t> order;
  std::mt19937_64 rng;
  std::vector<double> losses;                           // every step so far, resumed ones included
  std::vector<std::pair<int64_t, double>> eval_points;  // (step, accuracy)
};

template <typename T>
T state_field(const Json& j, const char* key, const std::string& where) {
  ENCORE_CHECK(j.contains(key), where, ": missing '", key, "'");
  try {
    return j[key].get<T>();
  } catch (const Json::exception& e) {
    throw Error(detail::concat(where, ": '", key, "' has the wrong type: ", e.what()));
  }
}

// Rewrites the CSV log keeping the header and the rows of steps <= last_step (a resumed run appends after them).
void truncate_log(const std::string& path, int64_t last_step) {
  std::ifstream in(path);
  if (!in.good()) return;
  std::string out, line;
  bool header = true;
  while (std::getline(in, line)) {
    if (!header && !line.empty()) {
      const std::string step = line.substr(0, line.find(','));
      ENCORE_CHECK(!step.empty() && step.find_first_not_of("0123456789") == std::string::npos, "--resume: the log '",
                   path, "' has a row that does not start with a step number: '", line, "'");
      if (std::stoll(step) > last_step) continue;
    }
    out += line + "\n";
    header = false;
  }
  in.close();
  std::ofstream f(path, std::ios::trunc);
  f << out;
  ENCORE_CHECK(f.good(), "cannot write the log '", path, "'");
}

}  // namespace

TrainReport fine_tune_classifier(const TrainConfig& cfg, const std::function<void(const TrainProgress&)>& progress) {
  ENCORE_CHECK(cfg.batch_size > 0 && cfg.max_length > 1 && (cfg.steps > 0 || cfg.epochs > 0),
               "train: batch_size, max_length and steps or epochs must be positive");
  ENCORE_CHECK(cfg.grad_accum >= 1, "train: grad_accum must be >= 1, got ", cfg.grad_accum);
  ENCORE_CHECK(cfg.save_every >= 0, "train: save_every must be >= 0, got ", cfg.save_every);
  ENCORE_CHECK(cfg.dropout < 0 || cfg.dropout < 1, "train: dropout must be in [0, 1), got ", cfg.dropout);
  ENCORE_CHECK(cfg.save_every == 0 || !cfg.output_dir.empty(), "train: save_every needs an output directory");
  if (!cfg.output_dir.empty()) check_output_dir(cfg.output_dir);  // fail now, not after hours of training
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

  const bool resuming = !cfg.resume_dir.empty();
  Json resumed;
  if (resuming) resumed = read_trainer_state(cfg.resume_dir);
  const std::string model_dir = resuming ? cfg.resume_dir : cfg.model_dir;
  AutoModel model = AutoModel::load(model_dir);
  if (model.info().head != "sequence_classification") {
    model.add_sequence_classifier(num_labels, cfg.seed);
  } else {
    ENCORE_CHECK(model.info().num_labels == num_labels, "train: the checkpoint's head has ", model.info().num_labels,
                 " labels but the data has ", num_labels);
  }
  Tokenizer tok = Tokenizer::load(model_dir);
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
  const int64_t step_examples = cfg.batch_size * cfg.grad_accum;
  const int64_t per_epoch = (n + step_examples - 1) / step_examples;
  const int64_t total = cfg.steps > 0 ? cfg.steps : per_epoch * cfg.epochs;
  const Schedule schedule = parse_schedule(cfg.schedule);
  const int64_t pad_id = model.info().pad_token_id;
  const std::string data_fingerprint = fingerprint(train_set);

  if (cfg.dropout >= 0) model.set_dropout(cfg.dropout);
  model.set_gradient_checkpointing(cfg.gradient_checkpointing);
  model.train();
  nn::Module& params = model.module();
  AdamW opt(params, {cfg.lr, 0.9, 0.999, 1e-8, cfg.weight_decay});

  LoopState st;
  st.rng.seed(cfg.seed);
  st.order.resize(n);
  std::iota(st.order.begin(), st.order.end(), 0);
  st.pos = n;  // the first iteration starts epoch 0
  if (resuming) {
    const std::string where = "'" + cfg.resume_dir + "/trainer_state.json'";
    auto must_match = [&](const char* key, const Json& now) {
      ENCORE_CHECK(resumed.contains(key) && resumed[key] == now, "--resume: ", key, " is ", now.dump(),
                   " but the checkpoint was trained with ", resumed.contains(key) ? resumed[key].dump() : "nothing",
                   " (", where, "); resuming needs the same value");
    };
    must_match("labels", report.labels);
    must_match("train_examples", n);
    must_match("data_fingerprint", data_fingerprint);
    must_match("batch_size", cfg.batch_size);
    must_match("grad_accum", cfg.grad_accum);
    must_match("seed", cfg.seed);
    must_match("shuffle", cfg.shuffle);
    st.step = state_field<int64_t>(resumed, "global_step", where);
    st.epoch = state_field<int64_t>(resumed, "epoch", where);
    st.pos = state_field<int64_t>(resumed, "position", where);
    st.order = state_field<std::vector<int64_t>>(resumed, "order", where);
    for (const Json& l : state_field<Json>(resumed, "losses", where)) {  // JSON writes a NaN loss as null
      ENCORE_CHECK(l.is_number() || l.is_null(), where, ": 'losses' must hold numbers");
      st.losses.push_back(l.is_null() ? std::nan("") : l.get<double>());
    }
    st.eval_points = state_field<std::vector<std::pair<int64_t, double>>>(resumed, "eval_accuracy", where);
    std::istringstream rng_text(state_field<std::string>(resumed, "shuffle_rng", where));
    rng_text >> st.rng;
    ENCORE_CHECK(!rng_text.fail(), where, ": 'shuffle_rng' is not a generator state");
    std::vector<int64_t> sorted = st.order;
    std::sort(sorted.begin(), sorted.end());
    for (int64_t i = 0; i < static_cast<int64_t>(sorted.size()); ++i)
      ENCORE_CHECK(sorted[i] == i, where, ": 'order' is not a permutation of the ", n, " examples");
    ENCORE_CHECK(static_cast<int64_t>(st.order.size()) == n && st.pos >= 0 && st.pos <= n && st.step >= 0 &&
                     st.epoch >= -1 && static_cast<int64_t>(st.losses.size()) == st.step,
                 where, ": inconsistent step/epoch/position/losses");
    ENCORE_CHECK(st.step < total, "--resume: the checkpoint is at step ", st.step, ", the run ends at step ", total,
                 ": nothing left to train (raise --steps/--epochs)");
    load_optimizer_state(cfg.resume_dir, opt);
    ENCORE_CHECK(opt.steps() == st.step, where, ": global_step ", st.step, " disagrees with the optimizer's step ",
                 opt.steps());
  }
  report.first_step = st.step;

  std::ofstream log;
  if (!cfg.log_csv.empty()) {
    const bool append = resuming && std::filesystem::exists(cfg.log_csv);
    if (append) truncate_log(cfg.log_csv, st.step);
    log.open(cfg.log_csv, append ? std::ios::app : std::ios::trunc);
    ENCORE_CHECK(log.good(), "cannot write the log '", cfg.log_csv, "'");
    if (!append) log << "step,loss,lr,grad_norm,eval_accuracy\n";
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
  auto plot = [&]() { return render_training_plot({st.losses, st.eval_points}); };
  auto save = [&]() {
    std::ostringstream rng_text;
    rng_text << st.rng;
    Json state = {{"format", kTrainerStateFormat}, {"version", kTrainerStateVersion}, {"global_step", st.step},
                  {"epoch", st.epoch}, {"position", st.pos}, {"total_steps", total}, {"labels", report.labels},
                  {"train_examples", n}, {"data_fingerprint", data_fingerprint}, {"batch_size", cfg.batch_size},
                  {"grad_accum", cfg.grad_accum}, {"seed", cfg.seed}, {"shuffle", cfg.shuffle}, {"lr", cfg.lr},
                  {"schedule", cfg.schedule}, {"warmup_steps", cfg.warmup_steps}, {"data", cfg.data},
                  {"source_model", model_dir}, {"shuffle_rng", rng_text.str()}, {"order", st.order},
                  {"losses", st.losses}, {"eval_accuracy", st.eval_points}};
    save_checkpoint(cfg.output_dir, {&model, model_dir, report.labels, &opt, state,
                                     cfg.plot_png.empty() ? plot() : std::string()});
    if (const char* v = std::getenv("ENCORE_VERBOSE"); v && std::string(v) == "1")
      std::fprintf(stderr, "encore: train: saved the checkpoint of step %lld to '%s'\n",
                   static_cast<long long>(st.step), cfg.output_dir.c_str());
  };

  const auto loop_start = std::chrono::steady_clock::now();
  while (st.step < total) {
    if (st.pos >= n) {  // next epoch
      ++st.epoch;
      st.pos = 0;
      if (cfg.shuffle) std::shuffle(st.order.begin(), st.order.end(), st.rng);
    }
    const int64_t end = std::min(n, st.pos + step_examples), step_n = end - st.pos;
    const double lr = learning_rate_at(st.step, cfg.lr, cfg.warmup_steps, total, schedule);
    opt.set_lr(lr);
    opt.zero_grad();
    // Micro-batches of batch_size: each one's mean-loss gradient is weighted by its share of the step's
    // examples, so the step's gradient (and loss) is the mean over all of them.
    double loss = 0;
    for (int64_t s = st.pos, micro = 0; s < end; s += cfg.batch_size, ++micro) {
      nn::manual_seed(mix64(cfg.seed ^ mix64(static_cast<uint64_t>(st.step * cfg.grad_accum + micro))));  // dropout
      std::vector<int64_t> idx(st.order.begin() + s, st.order.begin() + std::min(end, s + cfg.batch_size));
      Batch b = make_batch(train_enc, train_labels, idx, pad_id);
      ModelOutput out = model.forward(b.ids, b.mask, b.types);
      Tensor dlogits;
      const double weight = static_cast<double>(idx.size()) / static_cast<double>(step_n);
      loss += weight * cross_entropy_loss(out.logits, b.labels, &dlogits);
      if (weight != 1.0)
        for (int64_t i = 0; i < dlogits.numel(); ++i) dlogits.data<float>()[i] *= static_cast<float>(weight);
      model.backward(Tensor(), Tensor(), dlogits);
      report.tokens += b.tokens;
    }
    st.pos = end;
    const double norm = cfg.max_grad_norm > 0 ? clip_grad_norm(params, cfg.max_grad_norm) : std::nan("");
    opt.step();
    ++st.step;
    st.losses.push_back(loss);
    report.losses.push_back(loss);
    const bool epoch_end = cfg.steps <= 0 && st.pos >= n;
    const bool last = st.step == total;
    double acc = std::nan("");
    if (epoch_end || last) {
      acc = evaluate();
      if (!std::isnan(acc)) {
        report.eval_accuracy.push_back(acc);
        st.eval_points.emplace_back(st.step, acc);
      }
    }
    if (log.is_open()) {
      log << st.step << "," << loss << "," << lr << "," << norm << ",";
      if (!std::isnan(acc)) log << acc;
      log << "\n";
      log.flush();
    }
    if (!cfg.output_dir.empty() && (last || (cfg.save_every > 0 && st.step % cfg.save_every == 0))) save();
    if (progress) {
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - loop_start).count();
      progress({st.step, total, loss, lr, report.tokens, secs, report.first_step});
    }
  }
  if (!cfg.plot_png.empty()) io::write_file_atomic(cfg.plot_png, plot());
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return report;
}

}  // namespace encore::train
