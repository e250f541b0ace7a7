// Parameter broadcast and the bucketed gradient allreduce overlapped with backward (data_parallel.hpp).
#include "train/data_parallel.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>

namespace encore::train {

namespace {
double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

void broadcast_parameters(nn::Module& module, Collective& comm) {
  for (auto& [name, p] : module.named_parameters())
    comm.broadcast(p->data<float>(), p->numel(), 0, "broadcast of parameter '" + name + "'");
}

namespace {
// The encoder layers below `module` (each once), in registration order.
void find_layers(nn::Module& module, std::vector<nn::Module*>& out) {
  if (dynamic_cast<nn::TransformerEncoderLayer*>(&module)) {
    if (std::find(out.begin(), out.end(), &module) == out.end()) out.push_back(&module);
    return;
  }
  module.for_each_child([&](nn::Module& child, const std::string&) { find_layers(child, out); });
}
}  // namespace

GradientAllreducer::GradientAllreducer(nn::Module& module, Collective& comm, int64_t bucket_bytes) : comm_(comm) {
  // The order backward finishes gradients in: the layers' (which announce themselves) last layer first, then
  // everything else (heads, pooler, embeddings: final when backward returns) in reverse registration order.
  // The same walk on every rank gives every rank the same buckets.
  std::vector<nn::Module*> layers;
  find_layers(module, layers);
  for (size_t l = layers.size(); l-- > 0;) {
    for (const nn::ParamRef& ref : layers[l]->parameter_refs()) {
      if (position_.count(ref.grad)) continue;
      position_[ref.grad] = grads_.size();
      grads_.push_back(ref);
    }
  }
  const std::vector<nn::ParamRef> all = module.parameter_refs();
  for (size_t i = all.size(); i-- > 0;) {
    if (position_.count(all[i].grad)) continue;
    position_[all[i].grad] = grads_.size();
    grads_.push_back(all[i]);
  }
  const int64_t cap = std::max<int64_t>(1, bucket_bytes / static_cast<int64_t>(sizeof(float)));
  bucket_of_.resize(grads_.size());
  for (size_t i = 0; i < grads_.size();) {
    Bucket b{i, i, {}};
    int64_t n = 0;
    while (b.last < grads_.size() && (n == 0 || n + grads_[b.last].param->numel() <= cap)) {
      bucket_of_[b.last] = buckets_.size();
      n += grads_[b.last++].param->numel();
    }
    b.buf.resize(static_cast<size_t>(n));  // persistent: no page faults per step
    buckets_.push_back(std::move(b));
    i = buckets_.back().last;
  }
  ready_.assign(grads_.size(), false);
  reached_.assign(grads_.size(), 0.0);
}

nn::GradientReadyHook GradientAllreducer::hook() {
  return [this](nn::Module& module) { gradients_ready(module); };
}

void GradientAllreducer::gradients_ready(nn::Module& module) {
  const auto t0 = std::chrono::steady_clock::now();
  for (const nn::ParamRef& ref : module.parameter_refs()) {
    auto it = position_.find(ref.grad);
    if (it != position_.end()) mark_ready(it->second);  // a module outside this model: not ours
  }
  start_ready_buckets();
  comm_.progress();
  if (in_step_) started_in_backward_ = static_cast<int64_t>(next_);
  seconds_ += since(t0);
}

void GradientAllreducer::mark_ready(size_t pos) {
  if (!in_step_) {  // the first gradient of a step: every bucket waits for all of its gradients again
    for (Bucket& b : buckets_) b.pending = b.last - b.first;
    std::fill(ready_.begin(), ready_.end(), false);
    next_ = 0;
    in_step_ = true;
  }
  if (ready_[pos]) return;
  ready_[pos] = true;
  --buckets_[bucket_of_[pos]].pending;
}

void GradientAllreducer::start_ready_buckets() {
  for (; next_ < buckets_.size() && buckets_[next_].pending == 0; ++next_) {
    Bucket& b = buckets_[next_];
    float* dst = b.buf.data();
    for (size_t g = b.first; g < b.last; ++g) {
      const Tensor& grad = *grads_[g].grad;
      const size_t n = static_cast<size_t>(grads_[g].param->numel());
      reached_[g] = grad.defined() ? 1.0 : 0.0;
      if (grad.defined()) {
        std::memcpy(dst, grad.data<float>(), n * sizeof(float));
      } else {
        std::memset(dst, 0, n * sizeof(float));  // not reached on this rank: it adds nothing
      }
      dst += n;
    }
    comm_.start_allreduce_sum(b.buf.data(), static_cast<int64_t>(b.buf.size()),
                              "gradient allreduce (bucket " + std::to_string(next_ + 1) + " of " +
                                  std::to_string(buckets_.size()) + ")");
  }
}

double GradientAllreducer::finish() {
  const auto t0 = std::chrono::steady_clock::now();
  if (!in_step_) started_in_backward_ = 0;  // no hook fired this step (no micro-batch here, or no layer stack)
  for (size_t i = 0; i < grads_.size(); ++i) mark_ready(i);  // backward has returned: everything is final
  start_ready_buckets();
  // Which parameters have a gradient on some rank (a sum of 0/1 flags), issued after every bucket on every rank.
  std::vector<double> reached = reached_;
  comm_.allreduce_sum(reached.data(), static_cast<int64_t>(reached.size()), "allreduce of gradient flags");
  comm_.wait_all();
  for (const Bucket& b : buckets_) {
    const float* src = b.buf.data();
    for (size_t g = b.first; g < b.last; ++g) {
      const int64_t n = grads_[g].param->numel();
      if (reached[g] != 0) {
        Tensor& grad = *grads_[g].grad;
        if (!grad.defined()) grad = Tensor::zeros(grads_[g].param->shape());
        std::memcpy(grad.data<float>(), src, static_cast<size_t>(n) * sizeof(float));
      }
      src += n;
    }
  }
  in_step_ = false;
  const double seconds = seconds_ + since(t0);
  seconds_ = 0;
  return seconds;
}

}  // namespace encore::train
