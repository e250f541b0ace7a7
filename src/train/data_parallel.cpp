// Parameter broadcast and the bucketed gradient allreduce overlapped with backward (data_parallel.hpp).
#include "train/data_parallel.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <unordered_set>

#include "nn/layer_stack.hpp"

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
// The layers below `module` that the layer stacks announce (each once), in registration order.
void find_layers(nn::Module& module, std::vector<nn::Module*>& out) {
  if (dynamic_cast<nn::TransformerEncoderLayer*>(&module) || dynamic_cast<nn::AnnouncedLayer*>(&module)) {
    if (std::find(out.begin(), out.end(), &module) == out.end()) out.push_back(&module);
    return;
  }
  module.for_each_child([&](nn::Module& child, const std::string&) { find_layers(child, out); });
}

// The embedding tables below `module` (each once), in registration order.
void find_tables(nn::Module& module, std::vector<nn::Embedding*>& out) {
  if (auto* e = dynamic_cast<nn::Embedding*>(&module)) {
    if (std::find(out.begin(), out.end(), e) == out.end()) out.push_back(e);
    return;
  }
  module.for_each_child([&](nn::Module& child, const std::string&) { find_tables(child, out); });
}

// Whether a row holds a nonzero bit (-0.0 counts: only rows of +0.0 on every rank are left out of the sum).
bool row_touched(const float* row, int64_t n) {
  uint32_t bits = 0;
  const auto* u = reinterpret_cast<const uint32_t*>(row);
  for (int64_t i = 0; i < n; ++i) bits |= u[i];
  return bits != 0;
}
}  // namespace

GradientAllreducer::GradientAllreducer(nn::Module& module, Collective& comm, int64_t bucket_bytes) : comm_(comm) {
  // The order backward finishes gradients in: the layers' (which announce themselves) last layer first, then
  // everything else (heads, pooler, embeddings: final when backward returns) in reverse registration order.
  // The same walk on every rank gives every rank the same buckets.
  std::vector<nn::Embedding*> embeddings;
  find_tables(module, embeddings);
  std::unordered_map<const Tensor*, const nn::Embedding*> table_of;  // gradient slot -> its table
  for (const nn::Embedding* e : embeddings) table_of.emplace(&e->dweight, e);
  const std::vector<nn::ParamRef> all = module.parameter_refs();
  std::unordered_set<const Tensor*> table_grads;
  for (const nn::ParamRef& ref : all) {  // registration order, under the model's names
    auto it = table_of.find(ref.grad);
    if (it == table_of.end() || !table_grads.insert(ref.grad).second) continue;
    tables_.push_back({ref, it->second->num_embeddings, it->second->embedding_dim, 0, {}, {}});
  }
  std::vector<nn::Module*> layers;
  find_layers(module, layers);
  for (size_t l = layers.size(); l-- > 0;) {
    for (const nn::ParamRef& ref : layers[l]->parameter_refs()) {
      if (position_.count(ref.grad) || table_grads.count(ref.grad)) continue;
      position_[ref.grad] = grads_.size();
      grads_.push_back(ref);
    }
  }
  for (size_t i = all.size(); i-- > 0;) {
    if (position_.count(all[i].grad) || table_grads.count(all[i].grad)) continue;
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
  size_t flags = grads_.size();
  for (Table& t : tables_) {
    t.first_flag = flags;
    flags += 1 + static_cast<size_t>(t.rows);
    t.buf.resize(static_cast<size_t>(t.rows * t.cols));  // persistent, as the buckets
  }
  flags_.resize(flags);
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
  // Which parameters have a gradient on some rank and which table rows hold a nonzero bit on some rank (sums of
  // 0/1 flags), issued after every bucket on every rank.
  std::copy(reached_.begin(), reached_.end(), flags_.begin());
  for (const Table& t : tables_) {
    const Tensor& grad = *t.ref.grad;
    double* f = flags_.data() + t.first_flag;
    f[0] = grad.defined() ? 1.0 : 0.0;
    for (int64_t r = 0; r < t.rows; ++r)
      f[1 + r] = grad.defined() && row_touched(grad.data<float>() + r * t.cols, t.cols) ? 1.0 : 0.0;
  }
  const auto w0 = std::chrono::steady_clock::now();
  comm_.allreduce_sum(flags_.data(), static_cast<int64_t>(flags_.size()), "allreduce of gradient flags");
  double waited = since(w0);
  for (Table& t : tables_) {  // the rows some rank touched, packed and summed
    const double* f = flags_.data() + t.first_flag;
    t.sent.clear();
    if (f[0] == 0) continue;  // no rank's backward reached the table
    const Tensor& grad = *t.ref.grad;
    float* dst = t.buf.data();
    for (int64_t r = 0; r < t.rows; ++r) {
      if (f[1 + r] == 0) continue;
      t.sent.push_back(r);
      if (grad.defined()) {
        std::memcpy(dst, grad.data<float>() + r * t.cols, static_cast<size_t>(t.cols) * sizeof(float));
      } else {
        std::memset(dst, 0, static_cast<size_t>(t.cols) * sizeof(float));  // not reached on this rank
      }
      dst += t.cols;
    }
    totals_.table_rows_sent += static_cast<int64_t>(t.sent.size());
    totals_.table_rows += t.rows;
    if (!t.sent.empty())
      comm_.start_allreduce_sum(t.buf.data(), static_cast<int64_t>(t.sent.size()) * t.cols,
                                "gradient allreduce of the rows of '" + t.ref.name + "'");
  }
  const auto w1 = std::chrono::steady_clock::now();
  comm_.wait_all();
  waited += since(w1);
  for (const Bucket& b : buckets_) {
    const float* src = b.buf.data();
    for (size_t g = b.first; g < b.last; ++g) {
      const int64_t n = grads_[g].param->numel();
      if (flags_[g] != 0) {
        Tensor& grad = *grads_[g].grad;
        if (!grad.defined()) grad = Tensor::zeros(grads_[g].param->shape());
        std::memcpy(grad.data<float>(), src, static_cast<size_t>(n) * sizeof(float));
      }
      src += n;
    }
  }
  for (const Table& t : tables_) {
    if (flags_[t.first_flag] == 0) continue;
    Tensor& grad = *t.ref.grad;
    if (!grad.defined()) grad = Tensor::zeros(t.ref.param->shape());  // every row it does not get is +0
    const float* src = t.buf.data();
    for (int64_t r : t.sent) {
      std::memcpy(grad.data<float>() + r * t.cols, src, static_cast<size_t>(t.cols) * sizeof(float));
      src += t.cols;
    }
  }
  in_step_ = false;
  const double after = since(t0);
  totals_.in_backward += seconds_;
  last_in_backward_ = seconds_;
  totals_.waiting += waited;
  totals_.after_backward += after - waited;
  const double seconds = seconds_ + after;
  seconds_ = 0;
  return seconds;
}

}  // namespace encore::train
