// encore train: fine-tune a checkpoint for sequence classification on JSONL/CSV data.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>

#include "apps/common.hpp"
#include "encore/runtime.hpp"
#include "encore/sentence_encoder.hpp"
#include "encore/trainer.hpp"

namespace encore::cli {

void register_train(CLI::App& app) {
  static train::TrainConfig c;
  static std::string task = "classification";
  static int threads = 0;
  static bool no_shuffle = false, quiet = false;
  auto* cmd = app.add_subcommand("train", "fine-tune a model for sequence classification (bert family so far)");
  cmd->add_option("--model", c.model_dir, "model directory (default: $ENCORE_MODEL, else all-MiniLM-L6-v2)");
  cmd->add_option("--data", c.data, "training data: .jsonl or .csv with text[, text_pair], label")->required();
  cmd->add_option("--eval-data", c.eval_data, "held-out data (default: the last --eval-fraction of --data)");
  cmd->add_option("--eval-fraction", c.eval_fraction, "held-out share of --data")->capture_default_str();
  cmd->add_option("--task", task, "classification (embedding lands later)")->check(CLI::IsMember({"classification"}));
  cmd->add_option("--steps", c.steps, "optimizer steps (overrides --epochs)");
  cmd->add_option("--epochs", c.epochs, "passes over the data")->capture_default_str();
  cmd->add_option("--batch-size", c.batch_size, "examples per step")->capture_default_str();
  cmd->add_option("--lr", c.lr, "peak learning rate")->capture_default_str();
  cmd->add_option("--weight-decay", c.weight_decay, "AdamW decoupled weight decay")->capture_default_str();
  cmd->add_option("--warmup-steps", c.warmup_steps, "linear warm-up steps")->capture_default_str();
  cmd->add_option("--schedule", c.schedule, "constant, linear or cosine decay")
      ->check(CLI::IsMember({"constant", "linear", "cosine"}))
      ->capture_default_str();
  cmd->add_option("--max-grad-norm", c.max_grad_norm, "clip gradients to this global norm (<= 0: off)")->capture_default_str();
  cmd->add_option("--max-length", c.max_length, "truncate to this many tokens")->capture_default_str();
  cmd->add_option("--seed", c.seed, "shuffling and head initialisation")->capture_default_str();
  cmd->add_flag("--no-shuffle", no_shuffle, "keep the data order");
  cmd->add_option("--log", c.log_csv, "CSV log: step,loss,lr,grad_norm,eval_accuracy per optimizer step");
  cmd->add_option("--threads", threads, "threads (default: all cores)");
  cmd->add_flag("-q,--quiet", quiet, "no progress bar");
  cmd->callback([] {
    if (threads > 0) set_num_threads(threads);
    c.shuffle = !no_shuffle;
    if (c.model_dir.empty()) c.model_dir = default_model_dir();
    const bool bar = !quiet && isatty(STDERR_FILENO);
    const auto start = std::chrono::steady_clock::now();
    train::TrainReport r = train::fine_tune_classifier(c, [&](int64_t step, int64_t total, double loss, double lr) {
      if (!bar) return;
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      const double eta = secs / step * (total - step);
      std::fprintf(stderr, "\rstep %lld/%lld  loss %.4f  lr %.2e  %.1f steps/s  ETA %.0fs   ", (long long)step,
                   (long long)total, loss, lr, step / secs, eta);
      if (step == total) std::fprintf(stderr, "\n");
    });
    std::printf("trained on %lld examples (%lld tokens) in %.1f s: %.0f tokens/s; %zu steps\n",
                (long long)r.train_examples, (long long)r.tokens, r.seconds, r.tokens / std::max(r.seconds, 1e-9),
                r.losses.size());
    std::printf("loss: first %.4f, last %.4f\n", r.losses.front(), r.losses.back());
    for (size_t i = 0; i < r.eval_accuracy.size(); ++i)
      std::printf("held-out accuracy after %s %zu: %.4f (%lld examples)\n", c.steps > 0 ? "training" : "epoch", i + 1,
                  r.eval_accuracy[i], (long long)r.eval_examples);
  });
}

}  // namespace encore::cli
