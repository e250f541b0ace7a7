// Parameter broadcast and bucketed gradient allreduce for data-parallel training (data_parallel.hpp).
#include "train/data_parallel.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

namespace encore::train {

void broadcast_parameters(nn::Module& module, Collective& comm) {
  for (auto& [name, p] : module.named_parameters())
    comm.broadcast(p->data<float>(), p->numel(), 0, "broadcast of parameter '" + name + "'");
}

double allreduce_gradients(nn::Module& module, Collective& comm, int64_t bucket_bytes) {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<nn::ParamRef> refs = module.parameter_refs();
  // Which parameters have a gradient on some rank: a sum of 0/1 flags.
  std::vector<double> reached(refs.size());
  for (size_t i = 0; i < refs.size(); ++i) reached[i] = refs[i].grad->defined() ? 1.0 : 0.0;
  comm.allreduce_sum(reached.data(), static_cast<int64_t>(reached.size()), "allreduce of gradient flags");
  std::vector<Tensor*> grads;  // reverse registration order: backward reaches the last layers first
  for (size_t i = refs.size(); i-- > 0;) {
    if (reached[i] == 0) continue;
    if (!refs[i].grad->defined()) *refs[i].grad = Tensor::zeros(refs[i].param->shape());
    grads.push_back(refs[i].grad);
  }
  // Buckets: consecutive gradients packed into one buffer of at least bucket_bytes (a larger gradient alone).
  const int64_t cap = std::max<int64_t>(1, bucket_bytes / static_cast<int64_t>(sizeof(float)));
  struct Bucket {
    size_t first, last;  // grads[first, last)
    std::vector<float> buf;
  };
  std::vector<Bucket> buckets;
  for (size_t i = 0; i < grads.size();) {
    Bucket b{i, i, {}};
    int64_t n = 0;
    while (b.last < grads.size() && (n == 0 || n + grads[b.last]->numel() <= cap)) n += grads[b.last++]->numel();
    b.buf.resize(static_cast<size_t>(n));
    buckets.push_back(std::move(b));
    i = buckets.back().last;
  }
  for (size_t k = 0; k < buckets.size(); ++k) {  // pack bucket k while buckets < k are in flight
    Bucket& b = buckets[k];
    float* dst = b.buf.data();
    for (size_t g = b.first; g < b.last; ++g) {
      std::memcpy(dst, grads[g]->data<float>(), static_cast<size_t>(grads[g]->numel()) * sizeof(float));
      dst += grads[g]->numel();
    }
    comm.start_allreduce_sum(b.buf.data(), static_cast<int64_t>(b.buf.size()),
                             "gradient allreduce (bucket " + std::to_string(k + 1) + " of " +
                                 std::to_string(buckets.size()) + ")");
  }
  comm.wait_all();
  for (Bucket& b : buckets) {
    const float* src = b.buf.data();
    for (size_t g = b.first; g < b.last; ++g) {
      std::memcpy(grads[g]->data<float>(), src, static_cast<size_t>(grads[g]->numel()) * sizeof(float));
      src += grads[g]->numel();
    }
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace encore::train
