// The work-size rule (runtime/parallel.hpp, threads_for_flops): ops whose work is below it run on the calling
// thread, whether encore splits them (attention) or oneDNN does (Linear), with the same results as on more
// threads; and spread_team leaves every thread's affinity mask as it found it.
//
// Parallel regions are counted by wrapping libgomp's entry point GOMP_parallel (what `#pragma omp parallel`
// compiles to, in libencore and in libdnnl alike): this binary's definition is the one the dynamic linker binds,
// and it forwards to libgomp's.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <omp.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <vector>

#include "encore/runtime.hpp"
#include "kernels/kernels.hpp"
#include "ops/ops.hpp"
#include "runtime/parallel.hpp"
#include "scoped_threads.hpp"

namespace {
std::atomic<int> g_regions{0};
}  // namespace

extern "C" void GOMP_parallel(void (*fn)(void*), void* data, unsigned num_threads, unsigned flags) {
  using Real = void (*)(void (*)(void*), void*, unsigned, unsigned);
  static const Real real = reinterpret_cast<Real>(dlsym(RTLD_NEXT, "GOMP_parallel"));
  g_regions.fetch_add(1, std::memory_order_relaxed);
  real(fn, data, num_threads, flags);
}

namespace {

using namespace encore;

template <typename Fn>
int regions_opened(Fn&& fn) {
  const int before = g_regions.load();
  fn();
  return g_regions.load() - before;
}

std::vector<float> values(int64_t n, uint32_t seed) {  // deterministic, in [-1, 1)
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) {
    seed = seed * 1664525u + 1013904223u;
    x = static_cast<float>(seed >> 8) / static_cast<float>(1u << 23) - 1.f;
  }
  return v;
}

TEST(WorkRule, ThreadsForFlops) {
  const double k = runtime::kMinFlopsPerThread;
  EXPECT_EQ(runtime::threads_for_flops(0, 2), 1);
  EXPECT_EQ(runtime::threads_for_flops(2 * k - 1, 2), 1);
  EXPECT_EQ(runtime::threads_for_flops(2 * k, 2), 2);
  EXPECT_EQ(runtime::threads_for_flops(1e12, 2), 2);
  EXPECT_EQ(runtime::threads_for_flops(3.5 * k, 8), 3);
  EXPECT_EQ(runtime::threads_for_flops(1e12, 1), 1);
  ScopedThreads two(2);
  EXPECT_EQ(runtime::threads_for_flops(1e12), 2);
}

TEST(WorkRule, ParallelForCapRunsOnTheCallingThread) {
  ScopedThreads two(2);
  int calls = 0, team = 0;
  const int opened = regions_opened([&] {
    runtime::parallel_for(0, 100, 1, [&](int64_t b, int64_t e) {
      ++calls;
      team = omp_get_num_threads();
      EXPECT_EQ(b, 0);
      EXPECT_EQ(e, 100);
    }, 1);
  });
  EXPECT_EQ(opened, 0);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(team, 1);
}

// MiniLM's attention shape: one sequence, 12 heads of 32. 3 tokens is 13.8 kFLOP (below 2 x kMinFlopsPerThread),
// 64 tokens 6.3 MFLOP. Each (head, query) row is computed the same way whatever thread runs it: bit-identical.
TEST(WorkRule, AttentionBelowTheRuleOpensNoRegion) {
  const int64_t H = 12, D = 32;
  for (const int64_t T : {int64_t{3}, int64_t{64}}) {
    auto make = [&](uint32_t seed) { return Tensor::from_floats({1, T, H * D}, values(T * H * D, seed).data()); };
    const Tensor q = make(1), k = make(2), v = make(3);
    const ops::AttentionMasks masks;
    const bool small = ops::attention_flops(q, k, v, masks) < 2 * runtime::kMinFlopsPerThread;
    EXPECT_EQ(small, T == 3);
    Tensor one, two;
    {
      ScopedThreads t(1);
      one = ops::attention_forward(q, k, v, H, masks, nullptr, 0.0, false, 0);
    }
    ScopedThreads t(2);
    const int opened = regions_opened([&] { two = ops::attention_forward(q, k, v, H, masks, nullptr, 0.0, false, 0); });
    if (small)
      EXPECT_EQ(opened, 0) << "T " << T;
    else
      EXPECT_GE(opened, 1) << "T " << T;
    ASSERT_EQ(one.numel(), two.numel());
    EXPECT_EQ(std::memcmp(one.data<float>(), two.data<float>(), sizeof(float) * one.numel()), 0) << "T " << T;
  }
}

// A Linear of 1 x 64 x 128 (16 kFLOP, which oneDNN alone splits over 2 threads: one region) runs on the calling
// thread, one of 64 x 64 x 128 (1 MFLOP) in oneDNN's threads; both within 1e-5 of a double-precision reference
// (sums of 64 products of values in [-1, 1) plus a bias: it measured 1.1e-6 and 3.2e-6).
TEST(WorkRule, LinearBelowTheRuleRunsOnTheCallingThread) {
  const int64_t K = 64, N = 128;
  const std::vector<float> w = values(N * K, 7), b = values(N, 8);
  ScopedThreads two(2);
  const auto linear = kernels::PackedLinear::create(w.data(), b.data(), N, K, kernels::Precision::f32);
  for (const int64_t M : {int64_t{1}, int64_t{64}}) {
    const std::vector<float> in = values(M * K, 9);
    std::vector<float> out(static_cast<size_t>(M * N));
    linear->forward(out.data(), in.data(), M, kernels::Act::none);  // creates the primitive
    const int opened = regions_opened([&] { linear->forward(out.data(), in.data(), M, kernels::Act::none); });
    if (2.0 * M * K * N < 2 * runtime::kMinFlopsPerThread)
      EXPECT_EQ(opened, 0) << "M " << M;
    else
      EXPECT_GE(opened, 1) << "M " << M;
    double worst = 0;
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double ref = b[n];
        for (int64_t kk = 0; kk < K; ++kk) ref += static_cast<double>(in[m * K + kk]) * w[n * K + kk];
        worst = std::max(worst, std::abs(ref - out[m * N + n]));
      }
    EXPECT_LT(worst, 1e-5) << "M " << M;
  }
}

// The int8 Linear follows the same rule: a 1-row call (16 kFLOP worth of multiply-adds) runs on the calling thread,
// a 64-row one in oneDNN's threads; the integer GEMM is exact, so both give one thread's bits.
TEST(WorkRule, Int8LinearBelowTheRuleRunsOnTheCallingThread) {
  const int64_t K = 64, N = 128;
  const std::vector<float> w = values(N * K, 7), b = values(N, 8);
  const auto linear = kernels::PackedLinear::create(w.data(), b.data(), N, K, kernels::Precision::int8);
  for (const int64_t M : {int64_t{1}, int64_t{64}}) {
    const std::vector<float> in = values(M * K, 9);
    std::vector<float> one(static_cast<size_t>(M * N)), two(one.size());
    {
      ScopedThreads t(1);
      linear->forward(one.data(), in.data(), M, kernels::Act::none);
    }
    ScopedThreads t(2);
    linear->forward(two.data(), in.data(), M, kernels::Act::none);  // creates the 2-thread primitive state
    const int opened = regions_opened([&] { linear->forward(two.data(), in.data(), M, kernels::Act::none); });
    if (2.0 * M * K * N < 2 * runtime::kMinFlopsPerThread)
      EXPECT_EQ(opened, 0) << "M " << M;
    else
      EXPECT_GE(opened, 1) << "M " << M;
    EXPECT_EQ(std::memcmp(one.data(), two.data(), sizeof(float) * one.size()), 0) << "M " << M;
  }
}

TEST(WorkRule, ThreadLimitScopesOpenMPsCount) {
  ScopedThreads two(2);
  {
    runtime::ThreadLimit limit(1);
    EXPECT_EQ(omp_get_max_threads(), 1);
    runtime::ThreadLimit wider(4);  // not below the current count: nothing changes
    EXPECT_EQ(omp_get_max_threads(), 1);
  }
  EXPECT_EQ(omp_get_max_threads(), 2);
}

bool same_mask(const cpu_set_t& a, const cpu_set_t& b) { return CPU_EQUAL(&a, &b); }

// Whatever spread_team moves, every thread of the team ends with the affinity mask it had; with more threads
// than CPUs it still returns.
TEST(SpreadTeam, LeavesEveryThreadsAffinityMask) {
  cpu_set_t process;
  ASSERT_EQ(sched_getaffinity(0, sizeof(process), &process), 0);
  for (const int n : {1, 2, 3, std::min(2 * CPU_COUNT(&process) + 1, encore::kMaxThreads)}) {
    ScopedThreads t(n);
    // Each thread's own mask before (under OMP_PROC_BIND each thread has its own place, not the process's).
    std::vector<cpu_set_t> before(static_cast<size_t>(n));
    std::vector<int> read(static_cast<size_t>(n), -1);
#pragma omp parallel num_threads(n)
    read[static_cast<size_t>(omp_get_thread_num())] =
        sched_getaffinity(0, sizeof(cpu_set_t), &before[static_cast<size_t>(omp_get_thread_num())]);
    for (int i = 0; i < n; ++i) ASSERT_EQ(read[static_cast<size_t>(i)], 0) << "thread " << i;
    runtime::spread_team();
    std::atomic<int> differing{0}, seen{0};
#pragma omp parallel num_threads(n)
    {
      cpu_set_t mine;
      const size_t i = static_cast<size_t>(omp_get_thread_num());
      if (sched_getaffinity(0, sizeof(mine), &mine) != 0 || !same_mask(mine, before[i])) differing.fetch_add(1);
      seen.fetch_add(1);
    }
    EXPECT_EQ(differing.load(), 0) << n << " threads";
    EXPECT_EQ(seen.load(), n) << n << " threads";
  }
}

}  // namespace

// An exception thrown in a parallel_for range reaches the caller (leaving an OpenMP region with one terminated the
// process: encore.nn.MultiheadAttention over zero keys aborted Python), and it is the lowest failing range's, the
// one a serial loop meets first, whichever thread throws first.
TEST(ParallelFor, ExceptionsReachTheCallerLowestRangeFirst) {
  ScopedThreads two(2);
  for (int round = 0; round < 20; ++round) {
    try {
      encore::runtime::parallel_for(0, 1000, 1, [&](int64_t b, int64_t e) {
        if (b >= 500) throw std::runtime_error("second half");  // the second thread throws at once
        for (volatile int64_t spin = 0; spin < 200000; spin = spin + 1) {
        }
        if (b < 500 && e > 0) throw std::runtime_error("first half");
      });
      FAIL() << "no exception";
    } catch (const std::runtime_error& e) {
      EXPECT_STREQ(e.what(), "first half");
    }
  }
  std::vector<int> hit(100, 0);
  try {
    encore::runtime::parallel_for_each(0, 100, 1, [&](int64_t i) {
      if (i == 70 || i == 30) throw std::out_of_range(std::to_string(i));
      hit[i] = 1;
    });
    FAIL() << "no exception";
  } catch (const std::out_of_range& e) {
    EXPECT_STREQ(e.what(), "30");
  }
  EXPECT_EQ(hit[29], 1);
  EXPECT_EQ(hit[31], 0);  // a range stops at its first exception
}
