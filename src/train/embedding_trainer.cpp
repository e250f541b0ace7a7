// Fine-tuning a sentence-transformers pipeline (Transformer -> Pooling -> [Normalize]) on text pairs with
// in-batch MultipleNegativesRankingLoss: the engine of `encore train --task embedding`.
//
// One step on a batch of B pairs: anchors and positives are tokenized as SentenceEncoder::encode does and run
// through the encoder as ONE padded batch of 2B rows (anchors first). Attention never crosses rows and pooling
// ignores padding, so each row's embedding - and so the loss and its gradient - equals what two separate passes
// (as sentence-transformers runs them) give, up to float rounding.
//   h = model(ids)            (2B, T, H)
//   e = pool(h, mask)         (2B, C)
//   y = normalize(e)          (only when modules.json has Normalize)
//   loss = MNRL(y[:B], y[B:]) cross-entropy of scale·cos(a_i, p_j) with target j = i
// and backward in reverse: dy -> de (normalize_rows_backward) -> dh (pool_tokens_backward) -> model.backward.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>

#include "encore/sentence_encoder.hpp"
#include "encore/train.hpp"
#include "encore/trainer.hpp"
#include "io/json_file.hpp"
#include "io/staged_dir.hpp"
#include "train/checkpoint.hpp"
#include "train/records.hpp"

namespace encore::train {

namespace {

struct Pair {
  std::string anchor, positive;
};

// `anchor` + `positive`, else `text` + `text_pair`.
std::vector<Pair> read_pairs(const std::string& path) {
  std::vector<Pair> out;
  for (const Record& r : read_records(path, {"anchor", "positive", "text", "text_pair"})) {
    auto get = [&](const char* a, const char* b) -> const std::string* {
      auto it = r.fields.find(a);
      if (it == r.fields.end()) it = r.fields.find(b);
      return it == r.fields.end() ? nullptr : &it->second;
    };
    const std::string* a = get("anchor", "text");
    const std::string* p = get("positive", "text_pair");
    ENCORE_CHECK(a && p, path, ":", r.line, ": a pair needs 'anchor' and 'positive' (or 'text' and 'text_pair')");
    out.push_back({*a, *p});
  }
  ENCORE_CHECK(!out.empty(), "'", path, "' holds no pairs");
  return out;
}

// Rows of `enc` padded to the longest: ids (pad_id where padded), attention mask, token types.
struct Padded {
  Tensor ids, mask, types;
  int64_t tokens = 0;
};
Padded pad(const std::vector<Encoding>& enc, int64_t pad_id) {
  const int64_t B = static_cast<int64_t>(enc.size());
  int64_t T = 1;
  for (const auto& e : enc) T = std::max<int64_t>(T, e.size());
  Padded p{Tensor::empty({B, T}, DType::i64), Tensor::zeros({B, T}, DType::i64), Tensor::zeros({B, T}, DType::i64)};
  for (int64_t r = 0; r < B; ++r)
    for (int64_t t = 0; t < T; ++t) {
      const bool real = t < static_cast<int64_t>(enc[r].size());
      p.ids.data<int64_t>()[r * T + t] = real ? enc[r].ids[t] : pad_id;
      p.mask.data<int64_t>()[r * T + t] = real;
      p.types.data<int64_t>()[r * T + t] = real ? enc[r].type_ids[t] : 0;
      p.tokens += real;
    }
  return p;
}

// Share of anchors whose most cosine-similar positive (among all of them) is their own.
double retrieval_accuracy(const SentenceEncoder& enc, const std::vector<Pair>& pairs, int64_t batch_size) {
  std::vector<std::string> a, p;
  for (const auto& x : pairs) a.push_back(x.anchor), p.push_back(x.positive);
  EncodeOptions o;
  o.batch_size = batch_size;
  o.normalize = true;  // cosine similarity
  const Tensor ea = enc.encode(a, o), ep = enc.encode(p, o);
  const int64_t n = ea.size(0), C = ea.size(1);
  int64_t correct = 0;
  for (int64_t i = 0; i < n; ++i) {
    int64_t best = 0;
    double best_score = -1e300;
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t c = 0; c < C; ++c) s += double(ea.data<float>()[i * C + c]) * ep.data<float>()[j * C + c];
      if (s > best_score) best_score = s, best = j;
    }
    correct += best == i;
  }
  return static_cast<double>(correct) / static_cast<double>(n);
}

void check_trainable(const SentenceEncoder& enc) {
  for (const auto& type : enc.module_types())
    ENCORE_CHECK(type.ends_with(".Transformer") || type.ends_with(".Pooling") || type.ends_with(".Normalize"),
                 "train --task embedding: the pipeline's module '", type,
                 "' is not trainable yet (Transformer, Pooling, Normalize)");
}

// Weight files and exported copies of the source model that a trained directory must not carry along.
bool is_stale_weights(const std::filesystem::path& rel) {
  const std::string top = rel.begin()->string(), ext = rel.extension().string(), name = rel.filename().string();
  return top == "onnx" || top == "openvino" || ext == ".safetensors" || ext == ".bin" || ext == ".h5" ||
         ext == ".msgpack" || ext == ".onnx" || ext == ".ckpt" || name == "model.safetensors.index.json" ||
         name == "pytorch_model.bin.index.json";
}

constexpr const char* kRunFile = "encore_train_embedding.json";  // marks a directory this trainer wrote

// Refuses, before any training, a non-empty output directory this trainer did not write.
void check_embedding_output(const std::string& dir) {
  std::error_code ec;
  if (std::filesystem::is_directory(dir, ec) && !std::filesystem::is_empty(dir, ec))
    ENCORE_CHECK(std::filesystem::exists(std::filesystem::path(dir) / kRunFile), "--output '", dir,
                 "' exists and was not written by encore train --task embedding (no ", kRunFile,
                 "); refusing to replace it: choose a new or empty directory");
  io::StagedDir probe(dir);  // the location is writable (the probe is removed again)
}

}  // namespace

void save_sentence_transformer(const SentenceEncoder& enc, const std::string& source_dir,
                               const std::string& output_dir, const std::string& run_json) {
  namespace fs = std::filesystem;
  io::StagedDir out(output_dir);
  for (const auto& entry : fs::recursive_directory_iterator(source_dir)) {
    if (!entry.is_regular_file()) continue;
    const fs::path rel = fs::relative(entry.path(), source_dir);
    if (is_stale_weights(rel) || rel == kRunFile) continue;
    fs::create_directories(fs::path(out.file(rel.string())).parent_path());
    out.copy_file(entry.path(), rel.string());
  }
  write_hf_weights(out, enc.model());
  out.write_file(kRunFile, run_json);
  out.commit();
}

double embedding_loss_backward(SentenceEncoder& enc, const std::vector<std::string>& anchors,
                               const std::vector<std::string>& positives, double scale, int64_t* tokens) {
  ENCORE_CHECK(!anchors.empty() && anchors.size() == positives.size(), "embedding loss: ", anchors.size(),
               " anchors and ", positives.size(), " positives; need the same positive number");
  check_trainable(enc);
  const int64_t B = static_cast<int64_t>(anchors.size());
  std::vector<std::string> texts(anchors);
  texts.insert(texts.end(), positives.begin(), positives.end());
  AutoModel& model = enc.model();
  const Padded in = pad(enc.tokenize(texts), model.info().pad_token_id);
  if (tokens) *tokens = in.tokens;
  ForwardOptions fo;
  fo.compute_logits = false;
  const ModelOutput out = model.forward(in.ids, in.mask, in.types, fo);
  const Tensor e = pool_tokens(out.last_hidden_state, in.mask, enc.pooling());
  const Tensor y = enc.normalizes() ? normalize_rows(e) : e;
  Tensor da, dp;
  const double loss = multiple_negatives_ranking_loss(y.slice(0, 0, B), y.slice(0, B, 2 * B), scale, &da, &dp);
  Tensor dy = Tensor::empty(y.shape());
  dy.slice(0, 0, B).copy_from(da);
  dy.slice(0, B, 2 * B).copy_from(dp);
  const Tensor de = enc.normalizes() ? normalize_rows_backward(dy, e) : dy;
  model.backward(pool_tokens_backward(de, out.last_hidden_state, in.mask, enc.pooling()));
  return loss;
}

TrainReport fine_tune_embedding(const TrainConfig& cfg, const std::function<void(const TrainProgress&)>& progress) {
  ENCORE_CHECK(cfg.batch_size > 1 && cfg.max_length > 1 && (cfg.steps > 0 || cfg.epochs > 0),
               "train --task embedding: batch_size must be at least 2 (the other pairs of a batch are the "
               "negatives), max_length > 1, and steps or epochs positive");
  ENCORE_CHECK(cfg.grad_accum == 1 && cfg.save_every <= 0 && cfg.resume_dir.empty() && cfg.plot_png.empty(),
               "train --task embedding: --grad-accum, --save-every, --resume and --plot are classification-only so "
               "far (the embedding task saves once, at the end)");
  ENCORE_CHECK(cfg.dropout < 1, "train: dropout must be in [0, 1), got ", cfg.dropout);
  if (!cfg.output_dir.empty()) check_embedding_output(cfg.output_dir);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<Pair> train_set = read_pairs(cfg.data), eval_set;
  if (!cfg.eval_data.empty()) {
    eval_set = read_pairs(cfg.eval_data);
  } else if (cfg.eval_fraction > 0) {
    const size_t n_eval = static_cast<size_t>(std::floor(train_set.size() * cfg.eval_fraction));
    eval_set.assign(train_set.end() - n_eval, train_set.end());
    train_set.resize(train_set.size() - n_eval);
  }
  ENCORE_CHECK(!train_set.empty(), "train: no training pairs left after the held-out split");

  SentenceEncoder enc = SentenceEncoder::load(cfg.model_dir);
  check_trainable(enc);
  enc.set_max_seq_length(std::min<int64_t>(cfg.max_length, enc.max_seq_length()));
  AutoModel& model = enc.model();

  TrainReport report;
  report.train_examples = static_cast<int64_t>(train_set.size());
  report.eval_examples = static_cast<int64_t>(eval_set.size());
  const int64_t n = report.train_examples;
  const int64_t per_epoch = (n + cfg.batch_size - 1) / cfg.batch_size;
  const int64_t total = cfg.steps > 0 ? cfg.steps : per_epoch * cfg.epochs;
  const Schedule schedule = parse_schedule(cfg.schedule);
  const double scale = 20.0;  // sentence-transformers' default for MultipleNegativesRankingLoss

  auto evaluate = [&]() {
    if (eval_set.empty()) return std::nan("");
    model.eval();
    const double acc = retrieval_accuracy(enc, eval_set, std::max<int64_t>(cfg.batch_size, 32));
    model.train();
    return acc;
  };
  report.eval_before = evaluate();

  if (cfg.dropout >= 0) model.set_dropout(cfg.dropout);  // else the checkpoint's own rates
  model.train();
  nn::Module& params = model.module();
  AdamW opt(params, {cfg.lr, 0.9, 0.999, 1e-8, cfg.weight_decay});
  std::ofstream log;
  if (!cfg.log_csv.empty()) {
    log.open(cfg.log_csv, std::ios::trunc);
    ENCORE_CHECK(log.good(), "cannot write the log '", cfg.log_csv, "'");
    log << "step,loss,lr,grad_norm,eval_accuracy\n";
  }
  std::mt19937_64 rng(cfg.seed);
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  int64_t step = 0;
  while (step < total) {
    if (cfg.shuffle) std::shuffle(order.begin(), order.end(), rng);
    for (int64_t s = 0; s < n && step < total; s += cfg.batch_size, ++step) {
      std::vector<std::string> anchors, positives;
      for (int64_t i = s; i < std::min(n, s + cfg.batch_size); ++i)
        anchors.push_back(train_set[order[i]].anchor), positives.push_back(train_set[order[i]].positive);
      const double lr = learning_rate_at(step, cfg.lr, cfg.warmup_steps, total, schedule);
      opt.set_lr(lr);
      opt.zero_grad();
      nn::manual_seed(cfg.seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(step));  // this step's dropout
      int64_t tokens = 0;
      const double loss = embedding_loss_backward(enc, anchors, positives, scale, &tokens);
      const double norm = cfg.max_grad_norm > 0 ? clip_grad_norm(params, cfg.max_grad_norm) : std::nan("");
      opt.step();
      report.losses.push_back(loss);
      report.tokens += tokens;
      const bool epoch_end = cfg.steps <= 0 && (step + 1) % per_epoch == 0;
      double acc = std::nan("");
      if (epoch_end || step + 1 == total) {
        acc = evaluate();
        if (!std::isnan(acc)) report.eval_accuracy.push_back(acc);
      }
      if (log.is_open()) {
        log << step << "," << loss << "," << lr << "," << norm << ",";
        if (!std::isnan(acc)) log << acc;
        log << "\n";
      }
      if (progress)
        progress({step + 1, total, loss, lr, report.tokens,
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 0});
    }
  }
  model.eval();
  if (!cfg.output_dir.empty()) {
    nlohmann::json run = {{"task", "embedding"}, {"loss", "MultipleNegativesRankingLoss"}, {"scale", scale},
                          {"source_model", cfg.model_dir}, {"data", cfg.data}, {"steps", total},
                          {"batch_size", cfg.batch_size}, {"lr", cfg.lr}, {"weight_decay", cfg.weight_decay},
                          {"warmup_steps", cfg.warmup_steps}, {"schedule", cfg.schedule}, {"seed", cfg.seed},
                          {"eval_retrieval_accuracy_before", report.eval_before},
                          {"eval_retrieval_accuracy", report.eval_accuracy}};
    save_sentence_transformer(enc, cfg.model_dir, cfg.output_dir, run.dump(1) + "\n");
  }
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return report;
}

}  // namespace encore::train
