// encore::train::fine_tune_classifier - fine-tunes a checkpoint for sequence classification on JSONL or CSV data,
// the engine behind `encore train --task classification` and encore.train_classifier() in Python.
//
//   encore::train::TrainConfig cfg;
//   cfg.model_dir = "/path/to/all-MiniLM-L6-v2"; cfg.data = "train.jsonl"; cfg.epochs = 3;
//   encore::train::TrainReport r = encore::train::fine_tune_classifier(cfg);
//
// Data: JSONL objects or CSV rows (header line) with `text`, optional `text_pair`, and `label` (an integer class
// id, or a string mapped to ids in sorted order). Held-out evaluation each epoch on `eval_data`, else on the last
// eval_fraction of the (unshuffled) file.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace encore::train {

struct TrainConfig {
  std::string model_dir, data, eval_data;
  double eval_fraction = 0.1;
  int64_t steps = 0;   // > 0: this many optimizer steps; else epochs
  int64_t epochs = 1;
  int64_t batch_size = 16;
  double lr = 2e-5, weight_decay = 0.01;
  int64_t warmup_steps = 0;
  std::string schedule = "linear";  // constant, linear, cosine
  double max_grad_norm = 1.0;       // <= 0: no clipping
  int64_t max_length = 128;
  uint64_t seed = 42;
  bool shuffle = true;
  std::string log_csv;  // step,loss,lr,grad_norm[,eval_accuracy] per optimizer step
};

struct TrainReport {
  std::vector<double> losses;          // per optimizer step, the batch loss before the update
  std::vector<double> eval_accuracy;   // per epoch (or once at the end with steps)
  std::vector<std::string> labels;     // class names in id order
  int64_t train_examples = 0, eval_examples = 0, tokens = 0;
  double seconds = 0;
};

// progress(step, total_steps, loss, lr) after each optimizer step.
TrainReport fine_tune_classifier(const TrainConfig& config,
                                 const std::function<void(int64_t, int64_t, double, double)>& progress = {});

}  // namespace encore::train
