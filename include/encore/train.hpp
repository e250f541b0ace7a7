// encore::train - optimisation with PyTorch's semantics: AdamW, gradient clipping by global norm, learning-rate
// schedules, and the losses fine-tuning needs. Losses return the mean loss and write the gradient of that mean.
//
//   encore::train::AdamW opt(encoder, {.lr = 2e-5, .weight_decay = 0.01});
//   encoder.train();
//   Tensor y = encoder.forward(x);
//   Tensor dy;
//   double loss = encore::train::mse_loss(y, target, &dy);
//   encoder.zero_grad();          // (or opt.zero_grad()): every gradient becomes "none"
//   encoder.backward(dy);         // gradients of the parameters the output depends on
//   encore::train::clip_grad_norm(encoder, 1.0);
//   opt.step();
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "encore/nn.hpp"
#include "encore/tensor.hpp"

namespace encore::train {

struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;
};

// torch.optim.AdamW (decoupled weight decay, bias correction, amsgrad=False), per parameter with a gradient:
//   t += 1 ; p -= lr·wd·p ; m = β1·m + (1-β1)·g ; v = β2·v + (1-β2)·g² ;
//   p -= (lr / (1-β1^t)) · m / (sqrt(v) / sqrt(1-β2^t) + eps)
// A parameter without a gradient (no backward reached it since zero_grad; torch: .grad is None) is skipped: no
// decay, no moment update, its own step count t unchanged. Its moments are allocated at its first update.
// Holds references to the module's parameters: the module must outlive the optimizer.
class AdamW {
 public:
  AdamW(nn::Module& module, AdamWOptions options = {});
  void step();
  void zero_grad(bool set_to_none = true);  // the module's zero_grad
  void set_lr(double lr) { options_.lr = lr; }
  double lr() const { return options_.lr; }
  int64_t steps() const { return step_; }  // calls of step()
  // For checkpoints: "step" (calls of step()) and, per parameter updated at least once, "<name>.exp_avg",
  // "<name>.exp_avg_sq" and "<name>.step" (its own t). load_state_dict refuses names this module does not have;
  // a parameter absent from `state` starts fresh, and a state without "<name>.step" (written before per-parameter
  // steps) gives every parameter t = "step".
  std::map<std::string, Tensor> state_dict() const;
  void load_state_dict(const std::map<std::string, Tensor>& state);

 private:
  struct Slot {
    std::string name;
    Tensor* param;
    Tensor* grad;
    Tensor exp_avg, exp_avg_sq;  // undefined until the first update
    int64_t step = 0;
  };
  nn::Module& module_;
  AdamWOptions options_;
  std::vector<Slot> slots_;
  int64_t step_ = 0;
};

// torch.nn.utils.clip_grad_norm_: total = sqrt(Σ ||g||²) over the gradients that exist (none: skipped, as torch
// skips .grad None); if max_norm/(total+1e-6) < 1, scale every gradient by it. Returns the norm before clipping.
double clip_grad_norm(nn::Module& module, double max_norm);

enum class Schedule { constant, linear, cosine };
Schedule parse_schedule(const std::string& name);  // "constant", "linear", "cosine"
// transformers' get_*_schedule_with_warmup: lr·step/warmup during warmup, then constant, linear to 0 at
// total_steps, or half a cosine to 0.
double learning_rate_at(int64_t step, double base_lr, int64_t warmup_steps, int64_t total_steps, Schedule schedule);

// ---- losses: mean over the items that count; *grad (if non-null) receives d(loss)/d(input) ----
// logits (N, C) float32, labels (N) int64; labels equal to ignore_index do not count (torch's default -100).
double cross_entropy_loss(const Tensor& logits, const Tensor& labels, Tensor* grad, int64_t ignore_index = -100);
// mean((pred - target)²) over all elements.
double mse_loss(const Tensor& pred, const Tensor& target, Tensor* grad);
// torch.nn.BCEWithLogitsLoss: mean over all elements of max(z, 0) - z·y + log(1 + e^-|z|) (the stable form of
// -y·log σ(z) - (1 - y)·log(1 - σ(z))); targets y in [0, 1] (soft labels allowed), logits' shape.
double binary_cross_entropy_with_logits_loss(const Tensor& logits, const Tensor& targets, Tensor* grad);
// sentence-transformers' MultipleNegativesRankingLoss: scores = scale·cos(a_i, p_j), cross-entropy with the
// matching pair i as the label (in-batch negatives). anchors, positives (B, D).
double multiple_negatives_ranking_loss(const Tensor& anchors, const Tensor& positives, double scale,
                                       Tensor* grad_anchors, Tensor* grad_positives);

}  // namespace encore::train
