// encore train: fine-tune a checkpoint for sequence classification or as a sentence encoder on JSONL/CSV data.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>

#include "apps/common.hpp"
#include "encore/collective.hpp"
#include "encore/runtime.hpp"
#include "encore/sentence_encoder.hpp"
#include "encore/tokenizer.hpp"
#include "encore/trainer.hpp"

namespace encore::cli {

namespace {
std::string format_duration(double s) {
  char buf[32];
  const long long t = std::llround(s);
  if (t >= 3600)
    std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", t / 3600, t / 60 % 60, t % 60);
  else
    std::snprintf(buf, sizeof buf, "%lld:%02lld", t / 60, t % 60);
  return buf;
}
}  // namespace

void register_train(CLI::App& app) {
  static train::TrainConfig c;
  static std::string task = "classification";
  static int threads = 0;
  static bool no_shuffle = false, quiet = false, distributed = false;
  static double dist_timeout = 300, bucket_mb = 25;
  auto* cmd = app.add_subcommand("train", "fine-tune a checkpoint of any supported family (bert, roberta, xlm-roberta, distilbert, albert, electra, mpnet, modernbert) for sequence or token classification, as a reranker (cross-encoder) or as a sentence encoder");
  cmd->add_option("--model", c.model_dir, "model directory (default: $ENCORE_MODEL, else all-MiniLM-L6-v2)");
  cmd->add_option("--data", c.data, "training data: .jsonl or .csv with text[, text_pair], label")->required();
  cmd->add_option("--eval-data", c.eval_data, "held-out data (default: the last --eval-fraction of --data)");
  cmd->add_option("--eval-fraction", c.eval_fraction, "held-out share of --data")->check(FiniteRange(0.0, 0.9))->capture_default_str();
  cmd->add_option("--task", task, "classification (text[, text_pair], label), rerank (a cross-encoder: text = query, "
                  "text_pair = document, label = relevance in [0, 1]; binary cross-entropy), token-classification "
                  "(JSONL tokens, labels: one label per word) or embedding (pairs: anchor, positive or text, "
                  "text_pair; MultipleNegativesRankingLoss)")
      ->check(CLI::IsMember(train::train_tasks()))
      ->capture_default_str();
  cmd->add_option("--steps", c.steps, "optimizer steps (overrides --epochs)")->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  cmd->add_option("--epochs", c.epochs, "passes over the data")->check(CLI::Range(int64_t{0}, int64_t{1} << 20))->capture_default_str();
  cmd->add_option("--batch-size", c.batch_size, "examples per forward/backward (per optimizer step without --grad-accum)")->check(CLI::Range(int64_t{1}, int64_t{1} << 16))->capture_default_str();
  cmd->add_option("--lr", c.lr, "peak learning rate")->check(FiniteRange(0.0, 10.0))->capture_default_str();
  cmd->add_option("--weight-decay", c.weight_decay, "AdamW decoupled weight decay")->check(FiniteRange(0.0, 10.0))->capture_default_str();
  cmd->add_option("--warmup-steps", c.warmup_steps, "linear warm-up steps")->check(CLI::Range(int64_t{0}, int64_t{1} << 40))->capture_default_str();
  cmd->add_option("--schedule", c.schedule, "constant, linear or cosine decay")
      ->check(CLI::IsMember({"constant", "linear", "cosine"}))
      ->capture_default_str();
  cmd->add_option("--max-grad-norm", c.max_grad_norm, "clip gradients to this global norm (<= 0: off)")->check(FiniteRange(-1e300, 1e300))->capture_default_str();
  cmd->add_option("--max-length", c.max_length, "truncate to this many tokens")->check(CLI::Range(int64_t{2}, kMaxTokens))->capture_default_str();
  cmd->add_option("--seed", c.seed, "shuffling, head initialisation and dropout masks")->capture_default_str();
  cmd->add_flag("--no-shuffle", no_shuffle, "keep the data order");
  cmd->add_option("--grad-accum", c.grad_accum, "micro-batches of --batch-size per optimizer step (the step's loss "
                  "and gradient are the mean over all their examples; embedding: over the micro-batches, each with "
                  "its own in-batch negatives)")->check(CLI::Range(int64_t{1}, int64_t{1} << 16))->capture_default_str();
  cmd->add_flag("--gradient-checkpointing", c.gradient_checkpointing,
                "recompute each layer's forward during backward instead of keeping its activations (less memory)");
  cmd->add_option("--dropout", c.dropout, "dropout probability at every dropout site of the training forward "
                  "(default: the model's own, from its config.json where the family reads it)")
      ->check(FiniteRange(0.0, 0.999));
  cmd->add_option("--log", c.log_csv, "CSV log: step,loss,lr,grad_norm,eval_accuracy per optimizer step (step from "
                  "1; loss = that step's batch loss before the update)");
  cmd->add_option("--output", c.output_dir, "checkpoint directory, written at the end (and with --save-every): "
                  "classification: transformers loads it (model.safetensors, config.json with labels, tokenizer); "
                  "embedding: sentence-transformers loads it; both plus optimizer and trainer state for --resume; "
                  "replaced atomically, refused if it holds something else");
  cmd->add_option("--save-every", c.save_every, "also save the checkpoint every N optimizer steps")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  cmd->add_option("--resume", c.resume_dir, "continue from a checkpoint written by --output (model, optimizer, "
                  "step, data order); same data, --batch-size, --grad-accum, --seed as the run that wrote it");
  cmd->add_option("--plot", c.plot_svg, "SVG (FILE.svg) of the loss per step and held-out accuracy, with axes "
                  "and labels (default with --output: <output>/training.svg, redrawn at every save)");
  add_threads_option(*cmd, threads);
  cmd->add_flag("-q,--quiet", quiet, "no progress bar");
  cmd->add_flag("--distributed", distributed, "data-parallel over MPI: launch with `mpirun -np N encore train "
                "--distributed ...`; each step is --batch-size x --grad-accum examples per rank, gradients summed over "
                "ranks; rank 0 evaluates, logs and saves (docs/scale.md)");
  cmd->add_option("--dist-timeout", dist_timeout, "with --distributed: seconds a collective may wait for the other "
                  "ranks before the job ends with an error (a rank died or hung)")
      ->check(CLI::Range(0.1, 1e6))
      ->capture_default_str();
  cmd->add_option("--bucket-mb", bucket_mb, "with --distributed: gradient allreduce bucket size in MB")
      ->check(CLI::Range(0.001, 1e6))
      ->capture_default_str();
  cmd->callback([] {
    apply_threads(threads);
    c.shuffle = !no_shuffle;
    if (c.model_dir.empty()) c.model_dir = default_model_dir();
    if (distributed) {
      c.collective = train::mpi_collective(dist_timeout);
      c.bucket_bytes = static_cast<int64_t>(bucket_mb * 1e6);
    }
    const bool leader = !c.collective || c.collective->rank() == 0;
    const bool bar = !quiet && leader && isatty(STDERR_FILENO);
    bool eval_line = false;  // an evaluation bar is on the current line
    train::TrainReport r;
    try {
      r = train::fine_tune(task, c, [&](const train::TrainProgress& p) {
        using Phase = train::TrainProgress::Phase;
        if (p.phase == Phase::start) {
          if (leader && c.warmup_steps > p.total)
            note("--warmup-steps ", c.warmup_steps, " is more than the run's ", p.total, " optimizer steps: the "
                 "learning rate rises the whole run and never reaches --lr ", c.lr);
          return;
        }
        if (!bar) return;
        if (p.phase == Phase::evaluate) {
          const int width = 24, filled = static_cast<int>(width * p.eval_done / std::max<int64_t>(p.eval_total, 1));
          std::fprintf(stderr, "%sevaluating [%s%s] %lld/%lld   ", eval_line || p.step == 0 ? "\r" : "\n",
                       std::string(filled, '#').c_str(), std::string(width - filled, '.').c_str(),
                       (long long)p.eval_done, (long long)p.eval_total);
          eval_line = p.eval_done < p.eval_total;
          if (!eval_line) std::fprintf(stderr, "\n");
          return;
        }
        const int64_t done = p.step - p.first_step;  // steps this run (a resumed run's rate excludes earlier ones)
        const double secs = std::max(p.seconds, 1e-9), eta = secs / done * (p.total - p.step);
        const int width = 24, filled = static_cast<int>(width * p.step / std::max<int64_t>(p.total, 1));
        std::fprintf(stderr, "\r[%s%s] %lld/%lld  loss %.4f  lr %.2e  %.0f tok/s  ETA %s   ",
                     std::string(filled, '#').c_str(), std::string(width - filled, '.').c_str(), (long long)p.step,
                     (long long)p.total, p.loss, p.lr, p.tokens / secs, format_duration(eta).c_str());
        if (p.step == p.total) std::fprintf(stderr, "\n");
        });
    } catch (const Error& e) {
      // A rank that fails alone must take the job down (the others would wait in a collective until the timeout).
      if (c.collective && c.collective->world_size() > 1) c.collective->abort(e.what());
      throw;
    }
    if (!leader) return;
    if (r.world_size > 1)
      std::printf("distributed: %d ranks (%s), gradient allreduce %.2f s of %.1f s on rank 0 (%.1f%%)\n", r.world_size,
                  c.collective->backend().c_str(), r.allreduce_seconds, r.seconds,
                  100.0 * r.allreduce_seconds / std::max(r.seconds, 1e-9));
    std::printf("trained on %lld examples (%lld tokens) in %.1f s: %.0f tokens/s; %zu steps (the data holds %lld "
                "examples)\n",
                (long long)r.examples_trained, (long long)r.tokens, r.seconds,
                r.tokens / std::max(r.seconds, 1e-9), r.losses.size(), (long long)r.train_examples);
    if (r.first_step > 0) std::printf("resumed at step %lld\n", (long long)r.first_step);
    std::printf("loss: first %.4f, last %.4f\n", r.losses.front(), r.losses.back());
    const char* metric = task == "embedding" ? "retrieval accuracy" : task == "token-classification" ? "token accuracy" : "accuracy";
    if (!std::isnan(r.eval_before))
      std::printf("held-out %s before training: %.4f (%lld pairs)\n", metric, r.eval_before, (long long)r.eval_examples);
    for (size_t i = 0; i < r.eval_accuracy.size(); ++i) {
      if (c.steps > 0)
        std::printf("held-out %s after step %lld: %.4f (%lld examples)\n", metric, (long long)r.eval_steps[i],
                    r.eval_accuracy[i], (long long)r.eval_examples);
      else
        std::printf("held-out %s after epoch %lld: %.4f (%lld examples)\n", metric, (long long)r.eval_epochs[i],
                    r.eval_accuracy[i], (long long)r.eval_examples);
    }
    if (!c.output_dir.empty()) std::printf("checkpoint: %s\n", c.output_dir.c_str());
    if (!c.plot_svg.empty()) std::printf("plot: %s\n", c.plot_svg.c_str());
  });
}

}  // namespace encore::cli
