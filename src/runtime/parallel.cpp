#include "runtime/parallel.hpp"

#include <atomic>
#include <cstdlib>

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

}  // namespace encore::runtime
