// Signal handlers that run while GEMMs compute leave the heap and the results intact (runtime/signals.hpp).
// oneDNN's generated f32 GEMM kernels (the no-copy sgemm on AVX/AVX2 and AVX-512, reached by dnnl_sgemm and by
// the gemm:jit matmul, every fp32 Linear on AVX2 CPUs) point the stack pointer into a heap workspace when K is
// above their on-stack capacity (uxlfoundation/oneDNN#4845); a handler run on such a thread wrote its frame into
// the heap, and glibc aborted later ("corrupted size vs. prev_size", "munmap_chunk(): invalid pointer"): Python's
// SIGINT handler made Ctrl-C during encode() do that.
//
// Here a thread sends SIGUSR1 to the process every ~20 µs (a handler counts them; the storm lasts until 1000 have run)
// while the calling thread runs those GEMMs over and over: the shapes of MiniLM's Linears with the small row counts
// a batch's last row block has (the sgemm driver's no-copy path), K of 1536 (above the on-stack capacity of AVX2's
// kernel, 252 floats, and AVX-512's, 84) and 384 (above AVX-512's). Before the fix this aborted or gave other bits
// within the first few hundred signals on an AVX2 host (3 runs of 3). A second test checks the OpenMP workers' masks
// directly, through the pool changes that make libgomp replace workers.
#include <gtest/gtest.h>
#include <omp.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "encore/runtime.hpp"
#include "kernels/kernels.hpp"
#include "runtime/signals.hpp"
#include "scoped_threads.hpp"

namespace {

using namespace encore::kernels;

std::atomic<long> g_handled{0};
void count_signal(int) { g_handled.fetch_add(1, std::memory_order_relaxed); }  // lock-free: async-signal-safe

std::vector<float> uniform(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// SIGUSR1 at the whole process (the kernel picks a thread that does not block it: the calling thread or an OpenMP
// worker) until stopped; the sender itself blocks it.
class SignalStorm {
 public:
  SignalStorm() {
    struct sigaction sa {};
    sa.sa_handler = count_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR1, &sa, &previous_);
    sender_ = std::thread([this] {
      sigset_t usr1;
      sigemptyset(&usr1);
      sigaddset(&usr1, SIGUSR1);
      pthread_sigmask(SIG_BLOCK, &usr1, nullptr);
      while (!stop_.load()) {
        kill(getpid(), SIGUSR1);
        std::this_thread::sleep_for(std::chrono::microseconds(20));
      }
    });
  }
  ~SignalStorm() {
    stop_.store(true);
    sender_.join();
    sigaction(SIGUSR1, &previous_, nullptr);
  }

 private:
  struct sigaction previous_ {};
  std::atomic<bool> stop_{false};
  std::thread sender_;
};

struct Gemm {
  int64_t M, N, K;
  bool trans_b;
};

TEST(Signals, HandlersDuringGemmsLeaveHeapAndResultsIntact) {
  if (kernels().gemm_f32 != &gemm_f32_onednn) GTEST_SKIP() << "GEMMs are not oneDNN's here (ENCORE_KERNELS=ref)";
  const Gemm gemms[] = {{1, 384, 1536, true}, {7, 384, 1536, true}, {9, 1536, 384, true}, {31, 384, 384, true},
                        {17, 384, 1536, false}, {5, 64, 1536, true}};
  const int64_t linear_rows[] = {1, 3, 9, 17, 31, 45};
  const int64_t N_up = 1536, K_up = 384;  // MiniLM's FFN, up and down
  const auto w_up = uniform(N_up * K_up, 1), b_up = uniform(N_up, 2), w_down = uniform(K_up * N_up, 3),
             b_down = uniform(K_up, 4);
  const auto up = PackedLinear::create(w_up.data(), b_up.data(), N_up, K_up, Precision::f32);
  const auto down = PackedLinear::create(w_down.data(), b_down.data(), K_up, N_up, Precision::f32);
  const auto x = uniform(64 * 1536, 5), y = uniform(1536 * 1536, 6);

  // Every call's output without signals, then the same calls under the storm, compared bitwise.
  auto run_all = [&](std::vector<std::vector<float>>& outs) {
    size_t i = 0;
    auto out = [&](size_t n) -> float* {
      if (outs.size() <= i) outs.emplace_back(n);
      return outs[i++].data();
    };
    for (const Gemm& g : gemms)
      kernels().gemm_f32(false, g.trans_b, g.M, g.N, g.K, 1.f, x.data(), g.K, y.data(), g.trans_b ? g.K : g.N, 0.f,
                         out(g.M * g.N), g.N);
    for (int64_t M : linear_rows) {
      float* hidden = out(M * N_up);
      up->forward(hidden, x.data(), M, Act::gelu_erf);
      down->forward(out(M * K_up), hidden, M, Act::none);
      kernels().linear_f32(out(M * K_up), x.data(), w_down.data(), b_down.data(), M, N_up, K_up, Act::none);
    }
  };
  std::vector<std::vector<float>> want, got;
  run_all(want);
  // The storm lasts until the handler has run kSignalsWanted times (and at least kMinRounds rounds ran), not for a
  // fixed time: on a loaded CI host the sender's 20 µs sleeps stretch (CI once delivered 162 signals in 1.5 s, where
  // an idle host delivers thousands). The deadline and the round cap only bound a host that starves the sender.
  constexpr long kSignalsWanted = 1000;
  constexpr int kMinRounds = 3, kMaxRounds = 20000;
  const long handled_before = g_handled.load();
  {
    const SignalStorm storm;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    int rounds = 0;
    while (std::chrono::steady_clock::now() < until && rounds < kMaxRounds &&
           (rounds < kMinRounds || g_handled.load() - handled_before < kSignalsWanted)) {
      got.clear();
      run_all(got);
      ++rounds;
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < want.size(); ++i)
        ASSERT_EQ(std::memcmp(got[i].data(), want[i].data(), want[i].size() * sizeof(float)), 0)
            << "call " << i << " of round " << rounds << " differs under signals";
    }
  }
  // The storm reached the handler (the test would prove nothing otherwise), and the heap still works.
  EXPECT_GE(g_handled.load() - handled_before, kSignalsWanted);
  std::vector<std::vector<char>> churn;
  for (int i = 0; i < 1000; ++i) churn.emplace_back(static_cast<size_t>(64 + (i * 7919) % 100000));
}

// Whether every thread of a `threads`-thread region (this thread's pool, as oneDNN's next region gets it) other
// than the calling thread blocks SIGUSR1.
bool workers_block_signals(int threads) {
  int unblocked = 0;
#pragma omp parallel num_threads(threads) reduction(+ : unblocked)
  {
    sigset_t mask;
    pthread_sigmask(SIG_BLOCK, nullptr, &mask);
    if (omp_get_thread_num() != 0 && !sigismember(&mask, SIGUSR1)) ++unblocked;
  }
  return unblocked == 0;
}

// libgomp ends a pool's workers 2.. when a smaller team of two or more runs, and makes new ones (with the opening
// thread's mask, unblocked outside a guard) when the team grows again; thread binding can also swap workers. A
// guard must leave the team it hands to oneDNN blocking signals whatever ran before it: teams of 4 (more than this
// 2-vCPU host has: the pool is what counts) and of 2, each after unguarded regions that shrink and regrow the pool.
TEST(Signals, GuardLeavesEveryWorkerOfItsTeamBlocking) {
  for (const int team : {4, 2}) {
    const ScopedThreads threads(team);
    { const encore::runtime::DeferAsyncSignals guard; }
    EXPECT_TRUE(workers_block_signals(team)) << team;
    workers_block_signals(4);  // unguarded regions: shrink, grow, 1 thread, then this team
    workers_block_signals(2);
    workers_block_signals(4);
    workers_block_signals(1);
    workers_block_signals(team);
    { const encore::runtime::DeferAsyncSignals guard; }
    EXPECT_TRUE(workers_block_signals(team)) << team;
  }
  // and the calling thread is back to its own mask
  sigset_t mask;
  pthread_sigmask(SIG_BLOCK, nullptr, &mask);
  EXPECT_FALSE(sigismember(&mask, SIGUSR1));
}

}  // namespace
