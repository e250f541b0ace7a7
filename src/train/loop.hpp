// The training loop every `encore train` task runs (internal to src/train): learning-rate schedule, gradient
// accumulation over micro-batches, clipping, AdamW, the CSV log and progress, held-out evaluation per epoch,
// checkpoints every save_every steps and at the end, resume (weights, optimizer, shuffle RNG, data order and
// position, history) and the plot. A TrainTask says what the rest depends on: what one micro-batch's forward,
// loss and backward are, what the held-out metric is, and how a checkpoint is written.
//
//   ClassificationTask task(...);                       // owns the model and the data
//   TrainReport r = run_training(cfg, task, resumed, progress, t0);
#pragma once
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "encore/model.hpp"
#include "encore/records.hpp"
#include "encore/train.hpp"
#include "encore/trainer.hpp"

namespace encore::train {

// Training and held-out data: CSV with a header line when the name ends in .csv, else JSONL.
inline RecordFormat training_data_format(const std::string& path) {
  return record_format_from_path(path) == RecordFormat::csv ? RecordFormat::csv : RecordFormat::jsonl;
}

class TrainTask {
 public:
  virtual ~TrainTask() = default;
  virtual std::string name() const = 0;  // "classification", "embedding": trainer_state.json's "task"
  virtual AutoModel& model() = 0;        // the model trained (its module() is what AdamW updates)
  virtual int64_t train_examples() const = 0;
  virtual int64_t eval_examples() const = 0;
  // Of the training examples in file order: a resumed run must see the same data.
  virtual std::string data_fingerprint() const = 0;
  // More trainer_state.json fields a resumed run must match (the class names, ...).
  virtual nlohmann::json identity() const { return nlohmann::json::object(); }
  // Forward, loss and backward of the micro-batch `idx` (indices into the training set), the loss's gradient
  // scaled by `weight` (its share of the optimizer step) before backward; parameter gradients accumulate.
  // Returns the micro-batch's own (unweighted) mean loss and adds its real tokens to *tokens.
  virtual double train_micro_batch(const std::vector<int64_t>& idx, double weight, int64_t* tokens) = 0;
  // The weight of a micro-batch of `examples` in a step of `step_examples` split into `micro_batches`; the step's
  // loss is Σ weight·loss.
  virtual double micro_batch_weight(int64_t examples, int64_t step_examples, int64_t micro_batches) const = 0;
  // The held-out metric in [0, 1] (NaN without held-out data), computed in eval mode; the model is left in
  // training mode.
  // progress(done, total) after each held-out batch.
  virtual double evaluate(const std::function<void(int64_t done, int64_t total)>& progress) = 0;
  virtual bool evaluates_before_training() const { return false; }
  virtual std::string metric_name() const = 0;  // "accuracy", shown in the plot
  // Writes the checkpoint directory (atomically): the model as the task exports it, the optimizer's state as
  // optimizer.safetensors, `trainer_state` as trainer_state.json, and training.svg when plot_svg is not empty.
  virtual void save(const std::string& dir, const AdamW& optimizer, const nlohmann::json& trainer_state,
                    const std::string& plot_svg) = 0;
};

// The options every task checks the same way: grad_accum >= 1, save_every >= 0 (and an output directory for it),
// dropout in [0, 1) when set.
void check_common_options(const TrainConfig& cfg);
// Creates the missing parent directories of output_dir, log_csv and plot_svg, as `mkdir -p` would (rank 0 only
// when distributed: it alone writes them); the outputs themselves are written later (atomically).
void create_output_parents(const TrainConfig& cfg);

// cfg.resume_dir's trainer_state.json when resuming (checked for format and version), else null.
nlohmann::json resume_state(const TrainConfig& cfg);

// The loop; `resumed` from resume_state(cfg), `t0` when the run started (for report.seconds).
TrainReport run_training(const TrainConfig& cfg, TrainTask& task, const nlohmann::json& resumed,
                         const std::function<void(const TrainProgress&)>& progress,
                         std::chrono::steady_clock::time_point t0);

// Moves the last cfg.eval_fraction of `train` into `eval` unless cfg.eval_data names the held-out file (read
// with `read`). Refuses an empty training set.
template <typename Example, typename Read>
void split_held_out(const TrainConfig& cfg, std::vector<Example>& train, std::vector<Example>& eval, Read read) {
  if (!cfg.eval_data.empty()) {
    eval = read(cfg.eval_data);
  } else if (cfg.eval_fraction > 0) {
    const size_t n_eval = static_cast<size_t>(std::floor(train.size() * cfg.eval_fraction));
    eval.assign(train.end() - n_eval, train.end());
    train.resize(train.size() - n_eval);
  }
  ENCORE_CHECK(!train.empty(), "train: no training examples left after the held-out split");
}

// The class names of a data set's labels, in id order: integer labels are class ids 0..max (every id up to the
// largest, named by its decimal), other labels their strings in sorted order. Refuses ids of 2^16 and more.
std::vector<std::string> class_names(const std::set<std::string>& labels);

// FNV-1a over string fields, each followed by a separator: fingerprints a data set.
class Fingerprint {
 public:
  void add(const std::string& s);
  std::string hex() const;

 private:
  uint64_t h_ = 1469598103934665603ull;
};

}  // namespace encore::train
