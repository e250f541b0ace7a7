#include <cmath>
#include <set>

#include "encore/train.hpp"
#include "runtime/parallel.hpp"

namespace encore::train {

AdamW::AdamW(nn::Module& module, AdamWOptions options) : module_(module), options_(options) {
  ENCORE_CHECK(options.lr >= 0 && options.eps >= 0 && options.weight_decay >= 0, "AdamW: lr, eps and weight_decay "
               "must be non-negative");
  ENCORE_CHECK(options.beta1 >= 0 && options.beta1 < 1 && options.beta2 >= 0 && options.beta2 < 1,
               "AdamW: betas must be in [0, 1)");
  for (const nn::ParamRef& r : module.parameter_refs()) slots_.push_back({r.name, r.param, r.grad, {}, {}, 0});
}

void AdamW::zero_grad(bool set_to_none) { module_.zero_grad(set_to_none); }

void AdamW::step() {
  ++step_;
  const double b1 = options_.beta1, b2 = options_.beta2;
  const float decay = static_cast<float>(1.0 - options_.lr * options_.weight_decay);
  const float fb1 = static_cast<float>(b1), fb2 = static_cast<float>(b2);
  const float eps = static_cast<float>(options_.eps);
  for (Slot& s : slots_) {
    if (!s.grad->defined()) continue;  // torch: p.grad is None -> p, its moments and its step stay as they are
    ENCORE_CHECK(s.grad->shape() == s.param->shape(), "AdamW: the gradient of '", s.name, "' has shape ",
                 s.grad->shape_str(), ", the parameter ", s.param->shape_str());
    ENCORE_CHECK(s.param->is_contiguous(), "AdamW: parameter '", s.name, "' is not contiguous");
    if (!s.exp_avg.defined()) {
      s.exp_avg = Tensor::zeros(s.param->shape());
      s.exp_avg_sq = Tensor::zeros(s.param->shape());
    }
    ++s.step;
    const double bias1 = 1.0 - std::pow(b1, static_cast<double>(s.step));
    const double bias2_sqrt = std::sqrt(1.0 - std::pow(b2, static_cast<double>(s.step)));
    const float step_size = static_cast<float>(options_.lr / bias1);
    const float inv_b2 = static_cast<float>(1.0 / bias2_sqrt);
    s.param->make_writable();  // a never-trained model's weights may still be the checkpoint's read-only mapping
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

namespace {
Tensor i64_scalar(int64_t v) {
  Tensor t = Tensor::empty({1}, DType::i64);
  t.data<int64_t>()[0] = v;
  return t;
}
}  // namespace

std::map<std::string, Tensor> AdamW::state_dict() const {
  std::map<std::string, Tensor> out;
  for (const Slot& s : slots_) {
    if (s.step == 0) continue;  // never updated: no state (as torch's state_dict)
    out[s.name + ".exp_avg"] = s.exp_avg;
    out[s.name + ".exp_avg_sq"] = s.exp_avg_sq;
    out[s.name + ".step"] = i64_scalar(s.step);
  }
  out["step"] = i64_scalar(step_);
  return out;
}

void AdamW::load_state_dict(const std::map<std::string, Tensor>& state) {
  auto scalar = [&](const std::string& key) -> const Tensor* {
    auto it = state.find(key);
    if (it == state.end()) return nullptr;
    ENCORE_CHECK(it->second.dtype() == DType::i64 && it->second.numel() == 1, "AdamW.load_state_dict: '", key,
                 "' must be one int64");
    return &it->second;
  };
  const Tensor* global = scalar("step");
  ENCORE_CHECK(global, "AdamW.load_state_dict: missing 'step'");
  const int64_t steps = global->data<int64_t>()[0];
  ENCORE_CHECK(steps >= 0, "AdamW.load_state_dict: 'step' is negative");
  std::set<std::string> known = {"step"};
  for (const Slot& s : slots_)
    for (const char* suffix : {".exp_avg", ".exp_avg_sq", ".step"}) known.insert(s.name + suffix);
  for (const auto& [key, _] : state)
    ENCORE_CHECK(known.count(key), "AdamW.load_state_dict: unexpected '", key, "' (no such parameter)");
  std::vector<Slot> loaded = slots_;  // all or nothing: a bad entry leaves the optimizer as it was
  for (Slot& s : loaded) {
    auto m = state.find(s.name + ".exp_avg"), v = state.find(s.name + ".exp_avg_sq");
    const Tensor* t = scalar(s.name + ".step");
    ENCORE_CHECK((m == state.end()) == (v == state.end()), "AdamW.load_state_dict: '", s.name,
                 "' has only one of exp_avg and exp_avg_sq");
    if (m == state.end()) {
      ENCORE_CHECK(!t || t->data<int64_t>()[0] == 0, "AdamW.load_state_dict: '", s.name,
                   ".step' is set but its moments are missing");
      s.exp_avg = s.exp_avg_sq = Tensor();
      s.step = 0;
      continue;
    }
    s.step = t ? t->data<int64_t>()[0] : steps;
    ENCORE_CHECK(s.step > 0 && s.step <= steps, "AdamW.load_state_dict: '", s.name, ".step' is ", s.step,
                 ", must be in [1, step = ", steps, "]");
    for (auto [src, dst] : {std::pair{&m->second, &s.exp_avg}, std::pair{&v->second, &s.exp_avg_sq}}) {
      ENCORE_CHECK(src->shape() == s.param->shape() && src->dtype() == DType::f32, "AdamW.load_state_dict: '",
                   s.name, src == &m->second ? ".exp_avg" : ".exp_avg_sq", "' has shape ", src->shape_str(),
                   ", expected ", s.param->shape_str());
      *dst = Tensor::empty(s.param->shape());
      dst->copy_from(*src);
    }
  }
  slots_ = std::move(loaded);
  step_ = steps;
}

double clip_grad_norm(nn::Module& module, double max_norm) {
  double total_sq = 0;
  auto grads = module.named_grads();  // the gradients that exist (torch skips .grad None)
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
