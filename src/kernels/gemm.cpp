// GEMMs through oneDNN: linear layers as cached matmul primitives with bias and activation fused into the
// epilogue (post-op), and strided row-major GEMM (attention's per-head products) through dnnl_sgemm.
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <list>
#include <memory>
#include <vector>
#include <mutex>
#include <optional>
#include <tuple>
#include <unordered_map>

#include "oneapi/dnnl/dnnl.hpp"

#include "core/weight_memory.hpp"
#include "encore/error.hpp"
#include "kernels/kernels.hpp"
#include "kernels/onednn.hpp"
#include "runtime/parallel.hpp"
#include "runtime/signals.hpp"

namespace encore::kernels {

dnnl::engine& onednn_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

dnnl::stream& onednn_thread_stream() {
  thread_local dnnl::stream stream(onednn_engine());
  return stream;
}

namespace {
bool is_brgemm(const dnnl::matmul::primitive_desc& pd) {
  return std::string(pd.impl_info_str()).rfind("brg", 0) == 0;
}

// Whether an f32 matmul may run oneDNN's no-copy sgemm kernels with their stack in the heap (runtime/signals.hpp):
// its gemm:jit implementation can, brgemm cannot.
bool f32_matmul_needs_signal_guard(const dnnl::matmul::primitive_desc& pd, int64_t K) {
  return K > runtime::kMaxUnguardedK && !is_brgemm(pd);
}
}  // namespace

PackedWeight reorder_weight(const dnnl::memory::desc& from, const void* weight, const dnnl::memory::desc& packed) {
  PackedWeight out;
  // populated by the threads the reorder then runs on
  out.owner = core::allocate_weight_memory(packed.get_size(), [](size_t pages, size_t grain, const auto& fn) {
    runtime::parallel_for(0, static_cast<int64_t>(pages), static_cast<int64_t>(grain), [&](int64_t first, int64_t end) {
      fn(static_cast<size_t>(first), static_cast<size_t>(end));
    });
  });
  out.memory = dnnl::memory(packed, onednn_engine(), out.owner.get());
  dnnl::memory src(from, onednn_engine(), const_cast<void*>(weight));
  dnnl::reorder(src, out.memory).execute(onednn_thread_stream(), src, out.memory);
  onednn_thread_stream().wait();
  return out;
}

dnnl::memory::desc padded_packing_layout(const dnnl::memory::desc& chosen, int64_t K, int64_t N) {
  const dnnl::memory::data_type type = chosen.data_type();
  if (chosen != dnnl::memory::desc({K, N}, type, dnnl::memory::format_tag::ab)) return chosen;
  const int64_t row_pad = 64 / static_cast<int64_t>(dnnl::memory::data_type_size(type));  // one cache line
  return dnnl::memory::desc({K, N}, type, dnnl::memory::dims{N + row_pad, 1});
}

int64_t plain_row_stride(const dnnl::memory::desc& layout) {
  const dnnl_memory_desc_t& d = layout.data;
  const bool plain_rows = d.ndims == 2 && d.format_kind == dnnl_blocked && d.format_desc.blocking.inner_nblks == 0 &&
                          d.format_desc.blocking.strides[1] == 1;
  return plain_rows ? d.format_desc.blocking.strides[0] : 0;
}

namespace {

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

// oneDNN's relu post-op is max(x, 0), which makes NaN 0 (torch's relu keeps NaN, and a NaN weight must not give a
// finite, wrong output). relu therefore runs after the GEMM, as encore's activation over the output rows (one
// pass; only relu models pay it); every other activation stays fused.
Act onednn_fused_act(Act act) { return act == Act::relu ? Act::none : act; }
void apply_unfused_act(float* out, int64_t n, Act act) {
  if (act != Act::relu) return;
  runtime::parallel_for(0, n, int64_t{1} << 16,
                        [&](int64_t b, int64_t e) { kernels().activation_f32(out + b, out + b, e - b, act); });
}

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
  struct Entry {
    dnnl::matmul matmul;
    bool defer_signals;  // f32_matmul_needs_signal_guard
  };
  Entry get(const LinearKey& key) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = map_.find(key);
    if (it != map_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second.second);
      return it->second.first;
    }
    Entry prim = create(key);
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

  static Entry create(const LinearKey& k) {
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
    const dnnl::memory::desc bias({1, k.N}, dt::f32, tag::ab);
    const dnnl::matmul::desc desc =
        k.has_bias ? dnnl::matmul::desc(src, wei, bias, dst) : dnnl::matmul::desc(src, wei, dst);
    const dnnl::matmul::primitive_desc pd(desc, attr, onednn_engine());
    return {dnnl::matmul(pd), f32_matmul_needs_signal_guard(pd, k.K)};
  }

  std::mutex mutex_;
  std::list<LinearKey> lru_;
  std::unordered_map<LinearKey, std::pair<Entry, std::list<LinearKey>::iterator>, LinearKeyHash> map_;
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
  const runtime::ThreadLimit threads(runtime::threads_for_flops(2.0 * static_cast<double>(M * K * N)));
  LinearKey key{M, K, N, bias != nullptr, onednn_fused_act(act)};
  const LinearCache::Entry prim = linear_cache().get(key);
  auto& eng = onednn_engine();
  dnnl::memory src({{M, K}, dt::f32, tag::ab}, eng, const_cast<float*>(in));
  dnnl::memory wei({{K, N}, dt::f32, tag::ba}, eng, const_cast<float*>(weight));
  dnnl::memory dst({{M, N}, dt::f32, tag::ab}, eng, out);
  std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DST, dst}};
  if (bias) args.emplace(DNNL_ARG_BIAS, dnnl::memory({{1, N}, dt::f32, tag::ab}, eng, const_cast<float*>(bias)));
  std::optional<runtime::DeferAsyncSignals> defer;
  if (prim.defer_signals) defer.emplace();
  prim.matmul.execute(onednn_thread_stream(), args);
  onednn_thread_stream().wait();
  apply_unfused_act(out, M * N, act);
}

void gemm_f32_onednn(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                     int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  if (K == 0) {  // an empty sum: C = beta·C, as gemm_f32_ref (dnnl_sgemm refuses K = 0: attention over zero keys)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) C[m * ldc + n] = beta == 0.f ? 0.f : beta * C[m * ldc + n];
    return;
  }
  const runtime::ThreadLimit threads(runtime::threads_for_flops(2.0 * static_cast<double>(M * N * K)));
  std::optional<runtime::DeferAsyncSignals> defer;
  if (K > runtime::kMaxUnguardedK) defer.emplace();  // dnnl_sgemm may run the no-copy kernels
  dnnl_status_t st = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  ENCORE_CHECK(st == dnnl_success, "dnnl_sgemm failed with status ", static_cast<int>(st), " for M=", M, " N=", N,
               " K=", K);
}

const char* precision_name(Precision p) {
  return p == Precision::bf16 ? "bf16" : p == Precision::int8 ? "int8" : "fp32";
}

namespace {

// Cached per row-block size (a bounded set, onednn.hpp) and weight form: the matmul primitive for (M, K, N, act)
// on the plain (N, K) weight (the lazy f32 path's first call, kernels.hpp) or on the packed one, in the layout
// oneDNN chose for it (format "any" resolved once, when packing, for a representative M).
class OneDnnPackedLinear final : public PackedLinear {
 public:
  OneDnnPackedLinear(const float* weight, const float* bias, int64_t n, int64_t k, Precision p, PlainWeight plain) {
    N = n;
    K = k;
    precision = p;
    using dt = dnnl::memory::data_type;
    wdt_ = p == Precision::bf16 ? dt::bf16 : dt::f32;
    if (bias) bias_.assign(bias, bias + N);
    if (plain.keep && p == Precision::f32) {
      plain_weight_ = weight;
      plain_ = std::move(plain);
      packed_ready_.store(false, std::memory_order_relaxed);
      return;
    }
    pack(weight);
    if (plain.after_pack) plain.after_pack();
  }

  // bf16: one parallel region per call, as the int8 linear does: each thread rounds its rows of the input to
  // bf16 in its own scratch (the vectorised convert_f32_to_bf16) and runs the GEMM on them, oneDNN being
  // single-threaded inside the region. Calls of at most kRowsPerThread rows run on the calling thread, where
  // oneDNN threads the GEMM itself. fp32 needs no conversion and leaves the threading to oneDNN.
  void forward(float* out, const float* in, int64_t M, Act act) const override {
    if (M == 0) return;
    if (wdt_ != dnnl::memory::data_type::bf16) {
      if (!packed_ready_.load(std::memory_order_acquire)) {
        if (std::shared_ptr<const void> keep = claim_plain_call(M)) {
          forward_rows(out, in, M, act, true);  // keep holds the plain weight until this call is done
          return;
        }
      }
      forward_rows(out, in, M, act, false);
      return;
    }
    runtime::parallel_for(0, M, kRowsPerThread, [&](int64_t r0, int64_t r1) {
      forward_rows(out + r0 * N, in + r0 * K, r1 - r0, act, false);
    });
  }

 private:
  static constexpr int64_t kRowsPerThread = 64;

  // Resolves the packed layout with a representative M; primitives for other M are created with the same weights
  // descriptor (oneDNN's brgemm matmul picks its blocking from K, N and the ISA, not from M).
  void pack(const float* weight) const {
    using dt = dnnl::memory::data_type;
    using tag = dnnl::memory::format_tag;
    auto pd = make_pd(128, Act::none, dnnl::memory::desc({K, N}, wdt_, tag::any));
    packed_desc_ = padded_packing_layout(pd.weights_desc(), K, N);
    packed_ = reorder_weight(dnnl::memory::desc({K, N}, dt::f32, tag::ba), weight, packed_desc_);
  }

 public:
  int64_t packed_row_stride() const override {
    return packed_ready_.load(std::memory_order_acquire) ? plain_row_stride(packed_desc_) : 0;
  }

 private:
  // The lazy f32 path (kernels.hpp): a non-null result (the plain weight's keeper) lets this call of M rows run
  // on the plain weight, the object's first call only; otherwise the packed copy exists when this returns.
  std::shared_ptr<const void> claim_plain_call(int64_t M) const {
    if (M <= kRowChunk && !first_call_claimed_.exchange(true)) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (plain_.keep) return plain_.keep;
    }
    std::call_once(pack_once_, [this] {
      pack(plain_weight_);
      packed_ready_.store(true, std::memory_order_release);
      PlainWeight done;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        done = std::move(plain_);
        plain_ = {};
      }
      if (done.after_pack) done.after_pack();
    });
    return nullptr;
  }

  void forward_rows(float* out, const float* in, int64_t M, Act act, bool plain) const {
    using dt = dnnl::memory::data_type;
    using tag = dnnl::memory::format_tag;
    auto& eng = onednn_engine();
    // Grow-only per-thread scratch (no allocation in steady state); the scratchpad is the thread's own because
    // two threads may run the same primitive at once.
    thread_local std::vector<uint16_t> in_bf16;
    thread_local std::vector<uint8_t> pad;
    const bool bf16 = wdt_ == dt::bf16;
    // oneDNN threads the call by the work-size rule (a no-op inside the bf16 path's parallel region)
    const runtime::ThreadLimit threads(runtime::threads_for_flops(2.0 * static_cast<double>(M * K * N)));
    if (bf16) {
      if (in_bf16.size() < static_cast<size_t>(M * K)) in_bf16.resize(static_cast<size_t>(M * K));
      kernels().convert_f32_to_bf16(in_bf16.data(), in, M * K);
    }
    std::optional<runtime::DeferAsyncSignals> defer;
    // Primitives exist for a bounded set of row counts only (onednn.hpp, for_each_row_block).
    for_each_row_block(M, [&](int64_t r0, int64_t rows) {
      const auto prim = get(rows, onednn_fused_act(act), plain);
      dnnl::memory src = bf16 ? dnnl::memory({{rows, K}, dt::bf16, tag::ab}, eng, in_bf16.data() + r0 * K)
                              : dnnl::memory({{rows, K}, dt::f32, tag::ab}, eng, const_cast<float*>(in + r0 * K));
      if (pad.size() < prim->scratchpad.get_size()) pad.resize(prim->scratchpad.get_size());
      dnnl::memory dst({{rows, N}, dt::f32, tag::ab}, eng, out + r0 * N);
      std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, src},
                                                 {DNNL_ARG_WEIGHTS, plain ? plain_memory(eng) : packed_.memory},
                                                 {DNNL_ARG_DST, dst},
                                                 {DNNL_ARG_SCRATCHPAD, dnnl::memory(prim->scratchpad, eng, pad.data())}};
      if (!bias_.empty())
        args.emplace(DNNL_ARG_BIAS, dnnl::memory({{1, N}, dt::f32, tag::ab}, eng, const_cast<float*>(bias_.data())));
      if (prim->defer_signals && !defer) defer.emplace();  // one guard for the call's blocks
      prim->matmul.execute(onednn_thread_stream(), args);
      onednn_thread_stream().wait();
      apply_unfused_act(out + r0 * N, rows * N, act);
    });
  }

  dnnl::matmul::primitive_desc make_pd(int64_t M, Act act, const dnnl::memory::desc& wei) const {
    using dt = dnnl::memory::data_type;
    using tag = dnnl::memory::format_tag;
    dnnl::memory::desc src({M, K}, wdt_, tag::ab), dst({M, N}, dt::f32, tag::ab), bias({1, N}, dt::f32, tag::ab);
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    if (act != Act::none) {
      dnnl::post_ops ops;
      ops.append_eltwise(1.f, onednn_algorithm(act), act == Act::silu ? 1.f : 0.f, 0.f);
      attr.set_post_ops(ops);
    }
    // Bias presence is part of the primitive; the constructor passes none while resolving the layout.
    if (!bias_.empty()) return {dnnl::matmul::desc(src, wei, bias, dst), attr, onednn_engine()};
    return {dnnl::matmul::desc(src, wei, dst), attr, onednn_engine()};
  }

  struct Primitive {
    dnnl::matmul matmul;
    dnnl::memory::desc scratchpad;
    bool defer_signals;  // f32_matmul_needs_signal_guard (bf16 GEMMs run other kernels)
  };
  dnnl::memory plain_memory(const dnnl::engine& eng) const {
    using tag = dnnl::memory::format_tag;
    return dnnl::memory({{K, N}, dnnl::memory::data_type::f32, tag::ba}, eng, const_cast<float*>(plain_weight_));
  }
  std::shared_ptr<const Primitive> get(int64_t M, Act act, bool plain) const {
    std::lock_guard<std::mutex> lock(mutex_);
    const int64_t key = (M * 8 + static_cast<int64_t>(act)) * 2 + (plain ? 1 : 0);
    auto it = prims_.find(key);
    if (it != prims_.end()) return it->second;
    // M from for_each_row_block's bounded set: the map stays small
    auto pd = make_pd(M, act, plain ? dnnl::memory::desc({K, N}, dnnl::memory::data_type::f32,
                                                         dnnl::memory::format_tag::ba)
                                    : packed_desc_);
    const bool defer_signals = wdt_ == dnnl::memory::data_type::f32 && f32_matmul_needs_signal_guard(pd, K);
    auto p = std::make_shared<const Primitive>(Primitive{dnnl::matmul(pd), pd.scratchpad_desc(), defer_signals});
    prims_.emplace(key, p);
    return p;
  }

  dnnl::memory::data_type wdt_;
  // Set at creation, or once by the lazy path's packing (the object's only change after creation).
  mutable dnnl::memory::desc packed_desc_;
  mutable PackedWeight packed_;
  std::vector<float> bias_;
  // The lazy f32 path: the plain weight and its keeper until packed (plain_ is cleared under mutex_ then).
  const float* plain_weight_ = nullptr;
  mutable PlainWeight plain_;
  mutable std::atomic<bool> first_call_claimed_{false}, packed_ready_{true};
  mutable std::once_flag pack_once_;
  mutable std::mutex mutex_;
  mutable std::unordered_map<int64_t, std::shared_ptr<const Primitive>> prims_;
};

// bf16 on a CPU oneDNN cannot run bf16 GEMMs on: bf16-rounded weights, f32 GEMM (same numbers as bf16 weights
// with f32 activations; slower than native bf16, never wrong).
class EmulatedBf16Linear final : public PackedLinear {
 public:
  EmulatedBf16Linear(const float* weight, const float* bias, int64_t n, int64_t k) {
    N = n;
    K = k;
    precision = Precision::bf16;
    native = false;
    std::vector<float> rounded(static_cast<size_t>(N * K));
    for (int64_t i = 0; i < N * K; ++i) rounded[i] = bf16_round(weight[i]);
    inner_ = std::make_unique<OneDnnPackedLinear>(rounded.data(), bias, N, K, Precision::f32, PlainWeight{});
  }
  void forward(float* out, const float* in, int64_t M, Act act) const override { inner_->forward(out, in, M, act); }

 private:
  std::unique_ptr<OneDnnPackedLinear> inner_;
};

}  // namespace

bool lazy_f32_packing_is_exact() {
  static const bool exact = [] {
    using dt = dnnl::memory::data_type;
    using tag = dnnl::memory::format_tag;
    // oneDNN's brgemm matmul reorders a plain weight into its blocked layout per call and then runs the kernel
    // the packed weight runs; any other implementation (gemm:jit) may sum in another order per weight layout.
    const int64_t M = 128, K = 64, N = 64;
    const dnnl::matmul::primitive_desc pd(
        dnnl::matmul::desc(dnnl::memory::desc({M, K}, dt::f32, tag::ab), dnnl::memory::desc({K, N}, dt::f32, tag::any),
                           dnnl::memory::desc({M, N}, dt::f32, tag::ab)),
        onednn_engine());
    return is_brgemm(pd);
  }();
  return exact;
}

bool f32_packing_is_lazy() {
  // ENCORE_PACK=eager packs at creation as before the lazy path existed (to compare the two; read once).
  static const bool lazy = [] {
    const char* v = std::getenv("ENCORE_PACK");
    return !(v && std::string(v) == "eager") && lazy_f32_packing_is_exact();
  }();
  return lazy;
}

namespace {
std::atomic<bool> f32_kernels_warm{false}, int8_kernels_warm{false};
}  // namespace

bool gemm_kernels_need_warm_up(Precision precision) {
  if (!f32_kernels_warm.load(std::memory_order_relaxed) && !lazy_f32_packing_is_exact()) return true;
  return precision == Precision::int8 && !int8_kernels_warm.load(std::memory_order_relaxed) &&
         int8_gemm_kernels_are_process_wide();
}

void warm_up_gemm_kernels(Precision precision) {
  const runtime::ThreadLimit one_thread(1);  // kernel generation is sequential; no OpenMP team for it
  if (!lazy_f32_packing_is_exact()) {  // gemm:jit f32 matmul (lazy_f32_packing_is_exact tells brgemm apart)
    // One small GEMM; a K of 128 > kMaxUnguardedK goes through the guarded path as the Linears do.
    constexpr int64_t M = 3, N = 16, K = 128;
    std::vector<float> a(M * K, 0.f), b(N * K, 0.f), c(M * N);
    gemm_f32_onednn(false, true, M, N, K, 1.f, a.data(), K, b.data(), K, 0.f, c.data(), N);
    f32_kernels_warm.store(true, std::memory_order_relaxed);
  }
  if (precision == Precision::int8 && int8_gemm_kernels_are_process_wide()) {
    warm_up_int8_gemm_kernels();
    int8_kernels_warm.store(true, std::memory_order_relaxed);
  }
}

std::shared_ptr<const PackedLinear> PackedLinear::create(const float* weight, const float* bias, int64_t N, int64_t K,
                                                         Precision precision, PlainWeight plain) {
  ENCORE_CHECK(N > 0 && K > 0, "PackedLinear: empty weight (", N, ", ", K, ")");
  if (precision == Precision::f32) {
    if (!f32_packing_is_lazy()) plain.keep.reset();
    return std::make_shared<OneDnnPackedLinear>(weight, bias, N, K, precision, std::move(plain));  // runs after_pack
  }
  std::shared_ptr<const PackedLinear> out;
  if (precision == Precision::int8) {
    out = create_int8_linear(weight, bias, N, K);  // gemm_int8.cpp
  } else {
    try {
      out = std::make_shared<OneDnnPackedLinear>(weight, bias, N, K, precision, PlainWeight{});
    } catch (const dnnl::error&) {
      static std::once_flag logged;
      std::call_once(logged, [] {
        const char* v = std::getenv("ENCORE_VERBOSE");
        if (v && std::string(v) == "1")
          std::fprintf(stderr, "encore: no native bf16 GEMM on this CPU: bf16-rounded weights with fp32 GEMMs\n");
      });
      out = std::make_shared<EmulatedBf16Linear>(weight, bias, N, K);
    }
  }
  if (plain.after_pack) plain.after_pack();  // bf16 and int8 are prepared at creation
  return out;
}

}  // namespace encore::kernels
