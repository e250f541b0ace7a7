#include <cmath>

#include "encore/train.hpp"
#include "runtime/parallel.hpp"

namespace encore::train {

AdamW::AdamW(nn::Module& module, AdamWOptions options) : module_(module), options_(options) {
  ENCORE_CHECK(options.lr >= 0 && options.eps >= 0 && options.weight_decay >= 0, "AdamW: lr, eps and weight_decay "
               "must be non-negative");
  ENCORE_CHECK(options.beta1 >= 0 && options.beta1 < 1 && options.beta2 >= 0 && options.beta2 < 1,
               "AdamW: betas must be in [0, 1)");
  auto params = module.named_parameters();
  auto grads = module.named_grads();
  for (size_t i = 0; i < params.size(); ++i)
    slots_.push_back({params[i].first, params[i].second, grads[i].second, Tensor::zeros(params[i].second->shape()),
                      Tensor::zeros(params[i].second->shape())});
}

void AdamW::zero_grad() { module_.zero_grad(); }

void AdamW::step() {
  ++step_;
  const double b1 = options_.beta1, b2 = options_.beta2;
  const double bias1 = 1.0 - std::pow(b1, static_cast<double>(step_));
  const double bias2_sqrt = std::sqrt(1.0 - std::pow(b2, static_cast<double>(step_)));
  const float step_size = static_cast<float>(options_.lr / bias1);
  const float decay = static_cast<float>(1.0 - options_.lr * options_.weight_decay);
  const float fb1 = static_cast<float>(b1), fb2 = static_cast<float>(b2);
  const float eps = static_cast<float>(options_.eps), inv_b2 = static_cast<float>(1.0 / bias2_sqrt);
  for (Slot& s : slots_) {
    ENCORE_CHECK(s.grad->defined() && s.grad->shape() == s.param->shape(), "AdamW: no gradient for '", s.name, "'");
    ENCORE_CHECK(s.param->is_contiguous(), "AdamW: parameter '", s.name, "' is not contiguous");
    float* p = s.param->data<float>();
    const float* g = s.grad->data<float>();
    float* m = s.exp_avg.data<float>();
    float* v = s.exp_avg_sq.data<float>();
    // element-wise, so any split over threads gives the same bits
    runtime::parallel_for(0, s.param->numel(), 1 << 15, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        p[i] *= decay;                                  // p -= lr·wd·p
        m[i] = fb1 * m[i] + (1.f - fb1) * g[i];         // m = β1·m + (1-β1)·g
        v[i] = fb2 * v[i] + (1.f - fb2) * g[i] * g[i];  // v = β2·v + (1-β2)·g²
        p[i] -= step_size * m[i] / (std::sqrt(v[i]) * inv_b2 + eps);
      }
    });
  }
  module_.drop_prepared();
}

std::map<std::string, Tensor> AdamW::state_dict() const {
  std::map<std::string, Tensor> out;
  for (const Slot& s : slots_) {
    out[s.name + ".exp_avg"] = s.exp_avg;
    out[s.name + ".exp_avg_sq"] = s.exp_avg_sq;
  }
  Tensor step = Tensor::empty({1}, DType::i64);
  step.data<int64_t>()[0] = step_;
  out["step"] = step;
  return out;
}

void AdamW::load_state_dict(const std::map<std::string, Tensor>& state) {
  auto it = state.find("step");
  ENCORE_CHECK(it != state.end() && it->second.dtype() == DType::i64 && it->second.numel() == 1,
               "AdamW.load_state_dict: missing or invalid 'step'");
  for (Slot& s : slots_)
    for (auto [suffix, dst] : {std::pair{".exp_avg", &s.exp_avg}, std::pair{".exp_avg_sq", &s.exp_avg_sq}}) {
      auto f = state.find(s.name + suffix);
      ENCORE_CHECK(f != state.end(), "AdamW.load_state_dict: missing '", s.name, suffix, "'");
      ENCORE_CHECK(f->second.shape() == s.param->shape() && f->second.dtype() == DType::f32,
                   "AdamW.load_state_dict: '", s.name, suffix, "' has shape ", f->second.shape_str(), ", expected ",
                   s.param->shape_str());
      dst->copy_from(f->second);
    }
  step_ = it->second.data<int64_t>()[0];
}

double clip_grad_norm(nn::Module& module, double max_norm) {
  double total_sq = 0;
  auto grads = module.named_grads();
  for (auto& [_, g] : grads) {
    double sq = 0;
    const float* p = g->data<float>();
    for (int64_t i = 0, n = g->numel(); i < n; ++i) sq += static_cast<double>(p[i]) * p[i];
    total_sq += sq;
  }
  const double total = std::sqrt(total_sq);
  const double coef = max_norm / (total + 1e-6);
  if (coef < 1.0)
    for (auto& [_, g] : grads) {
      float* p = g->data<float>();
      for (int64_t i = 0, n = g->numel(); i < n; ++i) p[i] *= static_cast<float>(coef);
    }
  return total;
}

Schedule parse_schedule(const std::string& name) {
  if (name == "constant") return Schedule::constant;
  if (name == "linear") return Schedule::linear;
  if (name == "cosine") return Schedule::cosine;
  throw Error("schedule must be constant, linear or cosine; got '" + name + "'");
}

double learning_rate_at(int64_t step, double base_lr, int64_t warmup, int64_t total, Schedule schedule) {
  if (step < warmup) return base_lr * static_cast<double>(step) / static_cast<double>(std::max<int64_t>(1, warmup));
  if (schedule == Schedule::constant) return base_lr;
  const double progress =
      static_cast<double>(step - warmup) / static_cast<double>(std::max<int64_t>(1, total - warmup));
  if (schedule == Schedule::linear) return base_lr * std::max(0.0, 1.0 - progress);
  return base_lr * std::max(0.0, 0.5 * (1.0 + std::cos(M_PI * progress)));
}

}  // namespace encore::train
