// What the classification tasks (sequence: trainer.cpp, token: token_trainer.cpp) share (internal to src/train):
// the model loaded from model_dir (resume_dir when resuming), the class names, the data fingerprint, micro-batches
// weighted by their share of the step's examples, the transformers checkpoint; and the run around a task.
#pragma once
#include <chrono>
#include <string>
#include <vector>

#include "encore/model.hpp"
#include "train/checkpoint.hpp"
#include "train/loop.hpp"

namespace encore::train {

class LabelledTask : public TrainTask {
 public:
  explicit LabelledTask(const TrainConfig& cfg)
      : cfg_(cfg), source_dir_(cfg.resume_dir.empty() ? cfg.model_dir : cfg.resume_dir),
        model_(AutoModel::load(source_dir_)) {}

  const std::vector<std::string>& labels() const { return labels_; }
  AutoModel& model() override { return model_; }
  std::string data_fingerprint() const override { return fingerprint_.hex(); }
  nlohmann::json identity() const override { return {{"labels", labels_}}; }

  // Each micro-batch's mean-loss gradient is weighted by its share of the step's examples, so the step's
  // gradient (and loss) is the mean over all of them, as one batch of grad_accum x batch_size.
  double micro_batch_weight(int64_t examples, int64_t step_examples, int64_t) const override {
    return static_cast<double>(examples) / static_cast<double>(step_examples);
  }

  void save(const std::string& dir, const AdamW& optimizer, const nlohmann::json& trainer_state,
            const std::string& plot_svg) override {
    save_checkpoint(dir, {&model_, source_dir_, labels_, &optimizer, trainer_state, plot_svg});
  }

 protected:
  const TrainConfig& cfg_;
  std::string source_dir_;
  AutoModel model_;
  std::vector<std::string> labels_;  // class names in id order
  Fingerprint fingerprint_;          // of the training examples in file order
};

// Checks the options, reads the training (and held-out) examples with read(path), builds Task(cfg, train, eval)
// and runs the loop; report.labels are the task's labels.
template <class Task, class Read>
TrainReport run_labelled_task(const TrainConfig& cfg, const std::function<void(const TrainProgress&)>& progress,
                              Read read) {
  ENCORE_CHECK(cfg.batch_size > 0 && cfg.max_length > 1 && (cfg.steps > 0 || cfg.epochs > 0),
               "train: batch_size, max_length and steps or epochs must be positive");
  check_common_options(cfg);
  create_output_parents(cfg);
  if (!cfg.output_dir.empty()) check_output_dir(cfg.output_dir);  // fail now, not after hours of training
  const auto t0 = std::chrono::steady_clock::now();
  auto train_set = read(cfg.data);
  decltype(train_set) eval_set;
  split_held_out(cfg, train_set, eval_set, read);
  const nlohmann::json resumed = resume_state(cfg);
  Task task(cfg, std::move(train_set), std::move(eval_set));
  TrainReport report = run_training(cfg, task, resumed, progress, t0);
  report.labels = task.labels();
  return report;
}

}  // namespace encore::train
