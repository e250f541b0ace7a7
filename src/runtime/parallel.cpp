#include "runtime/parallel.hpp"

#include <sched.h>

#include <atomic>
#include <cstdlib>
#include <vector>

#include "encore/error.hpp"
#include "encore/runtime.hpp"

namespace encore::runtime {

namespace {
int initial_threads() {
  if (const char* v = std::getenv("ENCORE_NUM_THREADS")) {
    int n = std::atoi(v);
    if (n >= 1 && n <= kMaxThreads) {
      omp_set_num_threads(n);  // oneDNN's OpenMP runtime follows it too
      return n;
    }
  }
  return omp_get_max_threads();
}
std::atomic<int> g_threads{initial_threads()};
}  // namespace

int num_threads() { return g_threads.load(std::memory_order_relaxed); }

void set_num_threads(int n) {
  // Beyond a few hundred threads the OpenMP runtime's per-thread bookkeeping overflows its stack inside oneDNN
  // (--threads 100000 crashed); no CPU this runs on benefits from more than kMaxThreads anyway.
  ENCORE_CHECK_AS(UsageError, n >= 1 && n <= kMaxThreads, "threads: expected 1..", kMaxThreads, ", got ", n);
  g_threads.store(n);
  omp_set_num_threads(n);  // oneDNN's OpenMP runtime follows this too
}

int threads_for_flops(double flops, int threads) {
  const double fit = flops / kMinFlopsPerThread;
  return fit >= threads ? std::max(threads, 1) : std::max(1, static_cast<int>(fit));
}

ThreadLimit::ThreadLimit(int n) {
  if (omp_in_parallel()) return;
  const int current = omp_get_max_threads();
  if (n >= current) return;
  prev_ = current;
  omp_set_num_threads(std::max(n, 1));
}
ThreadLimit::~ThreadLimit() {
  if (prev_ > 0) omp_set_num_threads(prev_);
}

namespace {
// Moves the calling thread off CPU `home` (to the `index`-th CPU of its mask after home, cyclically), then
// gives it back its mask. A failed move leaves it where it is; it is never left bound to one CPU.
void move_off(int home, int index) {
  cpu_set_t mask;
  if (sched_getaffinity(0, sizeof(mask), &mask) != 0) return;
  std::vector<int> others;  // allowed CPUs other than home, in order after it
  for (int i = 1; i < CPU_SETSIZE; ++i) {
    const int c = (home + i) % CPU_SETSIZE;
    if (CPU_ISSET(c, &mask)) others.push_back(c);
  }
  if (others.empty()) return;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(others[static_cast<size_t>(index) % others.size()], &one);
  if (sched_setaffinity(0, sizeof(one), &one) != 0) return;
  if (sched_setaffinity(0, sizeof(mask), &mask) == 0) return;
  // The old mask is no longer valid (its CPUs went offline or the cpuset changed meanwhile): every CPU, which the
  // kernel narrows to those this thread may use, rather than staying bound to one.
  cpu_set_t all;
  CPU_ZERO(&all);
  for (int c = 0; c < CPU_SETSIZE; ++c) CPU_SET(c, &all);
  sched_setaffinity(0, sizeof(all), &all);
}
}  // namespace

void spread_team() {
  const int n = num_threads();
  if (n <= 1 || omp_in_parallel()) return;
  const int home = sched_getcpu();
  if (home < 0) return;
  std::atomic<int> checked{0};
#pragma omp parallel num_threads(n)
  {
    const int t = omp_get_thread_num();
    if (t == 0) {
      // Yield rather than spin: a worker waiting for this CPU gets it now, not after a time slice.
      const int workers = omp_get_num_threads() - 1;
      while (checked.load(std::memory_order_acquire) < workers) sched_yield();
    } else {
      if (sched_getcpu() == home) move_off(home, t - 1);
      checked.fetch_add(1, std::memory_order_acq_rel);
    }
  }
}

}  // namespace encore::runtime
