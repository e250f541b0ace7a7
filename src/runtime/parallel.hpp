// The one threading primitive. Kernels never spawn threads; ops split work with parallel_for.
//
//   parallel_for(0, rows, 16, [&](int64_t begin, int64_t end) { kernel(out + begin * C, ..., end - begin); });
//
// Contract: fn(begin, end) is called on disjoint ranges covering [begin, end) exactly once. The split is
// static (a pure function of the range, grain and thread count), so results are deterministic. Runs serially
// when nested inside another parallel region, when the range is at most one grain, or with one thread.
#pragma once
#include <omp.h>

#include <algorithm>
#include <cstdint>

namespace encore::runtime {

int num_threads();             // threads parallel_for uses: ENCORE_NUM_THREADS, else OpenMP's default
void set_num_threads(int n);   // n >= 1

template <typename Fn>
void parallel_for(int64_t begin, int64_t end, int64_t grain, Fn&& fn) {
  const int64_t n = end - begin;
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  const int64_t max_chunks = (n + grain - 1) / grain;
  const int threads = static_cast<int>(std::min<int64_t>(num_threads(), max_chunks));
  if (threads <= 1 || omp_in_parallel()) {
    fn(begin, end);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    const int64_t t = omp_get_thread_num();
    const int64_t nt = omp_get_num_threads();
    const int64_t chunk = n / nt, rest = n % nt;
    const int64_t b = begin + t * chunk + std::min(t, rest);
    const int64_t e = b + chunk + (t < rest ? 1 : 0);
    if (b < e) fn(b, e);
  }
}

}  // namespace encore::runtime
