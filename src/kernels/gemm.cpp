// GEMMs through oneDNN: linear layers as cached matmul primitives with bias and activation fused into the
// epilogue (post-op), and strided row-major GEMM (attention's per-head products) through dnnl_sgemm.
#include <list>
#include <mutex>
#include <tuple>
#include <unordered_map>

#include "oneapi/dnnl/dnnl.hpp"

#include "encore/error.hpp"
#include "kernels/kernels.hpp"

namespace encore::kernels {

namespace {

dnnl::engine& cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

dnnl::stream& thread_stream() {
  thread_local dnnl::stream stream(cpu_engine());
  return stream;
}

struct LinearKey {
  int64_t M, K, N;
  bool has_bias;
  Act act;
  bool operator==(const LinearKey&) const = default;
};
struct LinearKeyHash {
  size_t operator()(const LinearKey& k) const {
    size_t h = std::hash<int64_t>()(k.M);
    h = h * 1000003u ^ std::hash<int64_t>()(k.K);
    h = h * 1000003u ^ std::hash<int64_t>()(k.N);
    return h * 31u + (k.has_bias ? 2u : 0u) + static_cast<size_t>(k.act) * 4u;
  }
};

dnnl::algorithm onednn_algorithm(Act act) {
  switch (act) {
    case Act::relu: return dnnl::algorithm::eltwise_relu;
    case Act::gelu_erf: return dnnl::algorithm::eltwise_gelu_erf;
    case Act::gelu_tanh: return dnnl::algorithm::eltwise_gelu_tanh;
    case Act::silu: return dnnl::algorithm::eltwise_swish;  // swish(x, alpha=1) = silu
    case Act::tanh: return dnnl::algorithm::eltwise_tanh;
    case Act::none: break;
  }
  return dnnl::algorithm::undef;
}

// Primitive cache keyed by shape: bounded LRU so that many distinct M (token counts) cannot grow it forever.
class LinearCache {
 public:
  dnnl::matmul get(const LinearKey& key) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = map_.find(key);
    if (it != map_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second.second);
      return it->second.first;
    }
    dnnl::matmul prim = create(key);
    lru_.push_front(key);
    map_.emplace(key, std::make_pair(prim, lru_.begin()));
    if (map_.size() > kCapacity) {
      map_.erase(lru_.back());
      lru_.pop_back();
    }
    return prim;
  }

 private:
  static constexpr size_t kCapacity = 256;

  static dnnl::matmul create(const LinearKey& k) {
    using dt = dnnl::memory::data_type;
    using tag = dnnl::memory::format_tag;
    dnnl::memory::desc src({k.M, k.K}, dt::f32, tag::ab);
    dnnl::memory::desc wei({k.K, k.N}, dt::f32, tag::ba);  // (N, K) row-major read as Kx N
    dnnl::memory::desc dst({k.M, k.N}, dt::f32, tag::ab);
    dnnl::primitive_attr attr;
    if (k.act != Act::none) {
      dnnl::post_ops ops;
      ops.append_eltwise(1.f, onednn_algorithm(k.act), k.act == Act::silu ? 1.f : 0.f, 0.f);
      attr.set_post_ops(ops);
    }
    if (k.has_bias) {
      dnnl::memory::desc bias({1, k.N}, dt::f32, tag::ab);
      return dnnl::matmul(dnnl::matmul::primitive_desc(dnnl::matmul::desc(src, wei, bias, dst), attr, cpu_engine()));
    }
    return dnnl::matmul(dnnl::matmul::primitive_desc(dnnl::matmul::desc(src, wei, dst), attr, cpu_engine()));
  }

  std::mutex mutex_;
  std::list<LinearKey> lru_;
  std::unordered_map<LinearKey, std::pair<dnnl::matmul, std::list<LinearKey>::iterator>, LinearKeyHash> map_;
};

LinearCache& linear_cache() {
  static LinearCache cache;
  return cache;
}

}  // namespace

void linear_f32_onednn(float* out, const float* in, const float* weight, const float* bias, int64_t M,
                       int64_t K, int64_t N, Act act) {
  if (M == 0 || N == 0) return;
  using dt = dnnl::memory::data_type;
  using tag = dnnl::memory::format_tag;
  LinearKey key{M, K, N, bias != nullptr, act};
  dnnl::matmul prim = linear_cache().get(key);
  auto& eng = cpu_engine();
  dnnl::memory src({{M, K}, dt::f32, tag::ab}, eng, const_cast<float*>(in));
  dnnl::memory wei({{K, N}, dt::f32, tag::ba}, eng, const_cast<float*>(weight));
  dnnl::memory dst({{M, N}, dt::f32, tag::ab}, eng, out);
  std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DST, dst}};
  if (bias) args.emplace(DNNL_ARG_BIAS, dnnl::memory({{1, N}, dt::f32, tag::ab}, eng, const_cast<float*>(bias)));
  prim.execute(thread_stream(), args);
  thread_stream().wait();
}

void gemm_f32_onednn(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                     int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  dnnl_status_t st = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  ENCORE_CHECK(st == dnnl_success, "dnnl_sgemm failed with status ", static_cast<int>(st), " for M=", M, " N=", N,
               " K=", K);
}

}  // namespace encore::kernels
