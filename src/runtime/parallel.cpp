#include "runtime/parallel.hpp"

#include <atomic>
#include <cstdlib>

namespace encore::runtime {

namespace {
int initial_threads() {
  if (const char* v = std::getenv("ENCORE_NUM_THREADS")) {
    int n = std::atoi(v);
    if (n >= 1) {
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
  g_threads.store(n < 1 ? 1 : n);
  omp_set_num_threads(n < 1 ? 1 : n);  // oneDNN's OpenMP runtime follows this too
}

}  // namespace encore::runtime
