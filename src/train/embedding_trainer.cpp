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
// With grad_accum, every micro-batch is such a batch with its own in-batch negatives, and the step's loss is the
// mean of the micro-batch losses (as transformers' Trainer with gradient_accumulation_steps runs
// sentence-transformers' loss). The loop (schedule, clipping, AdamW, checkpoints, resume) is run_training.
// BERT's pooler takes no part: it gets no gradient, and AdamW leaves it as it was (as torch does).
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "encore/sentence_encoder.hpp"
#include "encore/similarity.hpp"
#include "encore/train.hpp"
#include "encore/trainer.hpp"
#include "io/json_file.hpp"
#include "io/staged_dir.hpp"
#include "train/checkpoint.hpp"
#include "train/loop.hpp"

namespace encore::train {

namespace {

struct Pair {
  std::string anchor, positive;
};

// `anchor` + `positive`, else `text` + `text_pair`.
std::vector<Pair> read_pairs(const std::string& path) {
  std::vector<Pair> out;
  RecordReader in(path, training_data_format(path), {.allow_non_objects = false, .what = "training data"});
  for (Record r; in.next(r);) {
    auto get = [&](const char* a, const char* b) {
      const std::string* v = in.scalar(r, a);
      return v ? v : in.scalar(r, b);
    };
    const std::string* a = get("anchor", "text");
    const std::string* p = get("positive", "text_pair");
    if (!a || !p) in.fail(r, "a pair needs 'anchor' and 'positive' (or 'text' and 'text_pair')");
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
// progress(done, total) counts the texts encoded (anchors, then positives).
double retrieval_accuracy(const SentenceEncoder& enc, const std::vector<Pair>& pairs, int64_t batch_size,
                          const std::function<void(int64_t, int64_t)>& progress) {
  std::vector<std::string> a, p;
  for (const auto& x : pairs) a.push_back(x.anchor), p.push_back(x.positive);
  EncodeOptions o;
  o.batch_size = batch_size;
  o.normalize = true;  // cosine similarity
  const int64_t texts = static_cast<int64_t>(a.size());
  if (progress) o.progress = [&](int64_t done, int64_t) { progress(done, 2 * texts); };
  const Tensor anchors = enc.encode(a, o);
  if (progress) o.progress = [&](int64_t done, int64_t) { progress(texts + done, 2 * texts); };
  const Tensor sim = cos_sim(anchors, enc.encode(p, o));  // (anchors, positives)
  const int64_t n = sim.size(0);
  int64_t correct = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float* row = sim.data<float>() + i * n;
    correct += std::max_element(row, row + n) - row == i;  // the first of equal maxima, as before
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

// Files a training run writes itself, never copied from the source (a resumed run's source is a checkpoint).
bool is_run_file(const std::filesystem::path& rel) {
  return rel == kRunFile || rel == "trainer_state.json" || rel == "training.svg" || rel == "training.png";
}

// Refuses, before any training, a non-empty output directory this trainer did not write.
void check_embedding_output(const std::string& dir) {
  std::error_code ec;
  if (std::filesystem::is_directory(dir, ec) && !std::filesystem::is_empty(dir, ec))
    ENCORE_CHECK(std::filesystem::exists(std::filesystem::path(dir) / kRunFile), "--output '", dir,
                 "' exists and was not written by encore train --task embedding (no ", kRunFile,
                 "); refusing to replace it: choose a new or empty directory");
  io::StagedDir probe(dir);  // the location is writable (the probe is removed again)
}

// The sentence-transformers directory into a staged directory (see save_sentence_transformer).
void stage_sentence_transformer(io::StagedDir& out, const SentenceEncoder& enc, const std::string& source_dir,
                                const std::string& run_json) {
  namespace fs = std::filesystem;
  for (const auto& entry : fs::recursive_directory_iterator(source_dir)) {
    if (!entry.is_regular_file()) continue;
    const fs::path rel = fs::relative(entry.path(), source_dir);
    if (is_stale_weights(rel) || is_run_file(rel)) continue;
    fs::create_directories(fs::path(out.file(rel.string())).parent_path());
    out.copy_file(entry.path(), rel.string());
  }
  write_hf_weights(out, enc.model());
  out.write_file(kRunFile, run_json);
}
}  // namespace

void save_sentence_transformer(const SentenceEncoder& enc, const std::string& source_dir,
                               const std::string& output_dir, const std::string& run_json) {
  io::StagedDir out(output_dir);
  stage_sentence_transformer(out, enc, source_dir, run_json);
  out.commit();
}

double embedding_loss_backward(SentenceEncoder& enc, const std::vector<std::string>& anchors,
                               const std::vector<std::string>& positives, double scale, int64_t* tokens,
                               double grad_weight) {
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
  if (grad_weight != 1.0)  // d(weight·loss) = weight·d(loss)
    for (int64_t i = 0; i < dy.numel(); ++i) dy.data<float>()[i] *= static_cast<float>(grad_weight);
  const Tensor de = enc.normalizes() ? normalize_rows_backward(dy, e) : dy;
  model.backward(pool_tokens_backward(de, out.last_hidden_state, in.mask, enc.pooling()));
  return loss;
}

namespace {

class EmbeddingTask final : public TrainTask {
 public:
  static constexpr double kScale = 20.0;  // sentence-transformers' default for MultipleNegativesRankingLoss

  EmbeddingTask(const TrainConfig& cfg, std::vector<Pair> train_set, std::vector<Pair> eval_set)
      : cfg_(cfg), source_dir_(cfg.resume_dir.empty() ? cfg.model_dir : cfg.resume_dir),
        enc_(SentenceEncoder::load(source_dir_)), train_(std::move(train_set)), eval_(std::move(eval_set)) {
    check_trainable(enc_);
    enc_.set_max_seq_length(std::min<int64_t>(cfg.max_length, enc_.max_seq_length()));
    for (const auto& p : train_) fingerprint_.add(p.anchor), fingerprint_.add(p.positive);
    source_model_ = cfg.model_dir;  // a resumed run names the model the first run started from
    const std::filesystem::path run = std::filesystem::path(source_dir_) / kRunFile;
    if (!cfg.resume_dir.empty() && std::filesystem::exists(run))
      source_model_ = io::JsonAt(io::read_json_file(run), run.string()).get_or("source_model", source_dir_);
  }

  std::string name() const override { return "embedding"; }
  AutoModel& model() override { return enc_.model(); }
  int64_t train_examples() const override { return static_cast<int64_t>(train_.size()); }
  int64_t eval_examples() const override { return static_cast<int64_t>(eval_.size()); }
  std::string data_fingerprint() const override { return fingerprint_.hex(); }
  nlohmann::json identity() const override {
    return {{"loss", "MultipleNegativesRankingLoss"}, {"scale", kScale}};
  }
  std::string metric_name() const override { return "retrieval accuracy"; }
  bool evaluates_before_training() const override { return true; }

  // Each micro-batch is its own set of in-batch negatives; the step's loss is the mean of the micro-batch losses.
  double micro_batch_weight(int64_t, int64_t, int64_t micro_batches) const override {
    return 1.0 / static_cast<double>(micro_batches);
  }

  double train_micro_batch(const std::vector<int64_t>& idx, double weight, int64_t* tokens) override {
    std::vector<std::string> anchors, positives;
    for (int64_t i : idx) anchors.push_back(train_[i].anchor), positives.push_back(train_[i].positive);
    int64_t t = 0;
    const double loss = embedding_loss_backward(enc_, anchors, positives, kScale, &t, weight);
    *tokens += t;
    return loss;
  }

  double evaluate(const std::function<void(int64_t, int64_t)>& progress) override {
    if (eval_.empty()) return std::nan("");
    AutoModel& m = enc_.model();
    m.eval();
    const double acc = retrieval_accuracy(enc_, eval_, std::max<int64_t>(cfg_.batch_size, 32), progress);
    m.train();
    return acc;
  }

  // A sentence-transformers directory (SentenceTransformer(dir) loads it) with encore_train_embedding.json, plus
  // optimizer.safetensors and trainer_state.json for --resume.
  void save(const std::string& dir, const AdamW& optimizer, const nlohmann::json& state,
            const std::string& plot_png) override {
    std::vector<double> accuracy;
    for (const auto& point : state["eval_accuracy"]) accuracy.push_back(point[1].get<double>());
    nlohmann::json run = {{"task", "embedding"}, {"loss", "MultipleNegativesRankingLoss"}, {"scale", kScale},
                          {"source_model", source_model_}, {"data", cfg_.data}, {"steps", state["global_step"]},
                          {"batch_size", cfg_.batch_size}, {"grad_accum", cfg_.grad_accum}, {"lr", cfg_.lr},
                          {"weight_decay", cfg_.weight_decay}, {"warmup_steps", cfg_.warmup_steps},
                          {"schedule", cfg_.schedule}, {"seed", cfg_.seed},
                          {"eval_retrieval_accuracy_before", state["eval_before"]},
                          {"eval_retrieval_accuracy", accuracy}};
    io::StagedDir out(dir);
    stage_sentence_transformer(out, enc_, source_dir_, run.dump(1) + "\n");
    write_training_state(out, optimizer, state, plot_png);
    out.commit();
  }

 private:
  const TrainConfig& cfg_;
  std::string source_dir_, source_model_;
  SentenceEncoder enc_;
  std::vector<Pair> train_, eval_;
  Fingerprint fingerprint_;
};

}  // namespace

TrainReport fine_tune_embedding(const TrainConfig& cfg, const std::function<void(const TrainProgress&)>& progress) {
  ENCORE_CHECK(cfg.batch_size > 1 && cfg.max_length > 1 && (cfg.steps > 0 || cfg.epochs > 0),
               "train --task embedding: batch_size must be at least 2 (the other pairs of a batch are the "
               "negatives), max_length > 1, and steps or epochs positive");
  check_common_options(cfg);
  create_output_parents(cfg);
  if (!cfg.output_dir.empty()) check_embedding_output(cfg.output_dir);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<Pair> train_set = read_pairs(cfg.data), eval_set;
  split_held_out(cfg, train_set, eval_set, read_pairs);
  const nlohmann::json resumed = resume_state(cfg);
  EmbeddingTask task(cfg, std::move(train_set), std::move(eval_set));
  return run_training(cfg, task, resumed, progress, t0);
}

}  // namespace encore::train
