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
#include <exception>
#include <mutex>

namespace encore::runtime {

int num_threads();             // threads parallel_for uses: ENCORE_NUM_THREADS, else OpenMP's default
void set_num_threads(int n);   // n >= 1

// The work-size rule, the same for every call: an op of `flops` floating-point operations (2 per multiply-add)
// runs on min(num_threads(), flops / kMinFlopsPerThread) threads, at least 1, whether encore's own loops split
// it (ops pass it as parallel_for's thread cap) or oneDNN does (kernels run the call inside a ThreadLimit).
// Measured on this host (2 vCPUs, AMD EPYC, AVX-512; hot threads, medians of 15, session 14): an empty 2-thread
// region costs 0.41 µs; the fused attention of one sequence, 12 heads of 32, runs 1 -> 2 threads in 1.97 -> 2.00 µs
// at 1 token (1.5 kFLOP), 2.20 -> 2.13 µs at 2 (6 kFLOP), 2.55 -> 2.33 µs at 3 (14 kFLOP), 3.75 -> 3.02 µs at
// 6 (55 kFLOP), 4.86 -> 3.55 µs at 8 (98 kFLOP); the smallest MiniLM Linear (1 x 384 x 384, 0.29 MFLOP) 5.4 ->
// 4.3 µs. Below 2 x 16 kFLOP a second thread saves at most ~0.2 µs, while a region whose two threads share one
// CPU (as a new OpenMP worker often does, see spread_team) waits a scheduler time slice, 1.5-3 ms.
inline constexpr double kMinFlopsPerThread = 16384.0;
int threads_for_flops(double flops, int threads = num_threads());

// While alive, parallel regions opened by the calling thread (oneDNN's included: it reads OpenMP's thread count
// when it runs a primitive) use at most n threads. A no-op inside a parallel region (nested regions are serial)
// and when n is not below the current count.
class ThreadLimit {
 public:
  explicit ThreadLimit(int n);
  ~ThreadLimit();
  ThreadLimit(const ThreadLimit&) = delete;
  ThreadLimit& operator=(const ThreadLimit&) = delete;

 private:
  int prev_ = 0;  // 0: nothing to restore
};

// Called at the start of every model forward. If an OpenMP worker of the calling thread's team is on the calling
// thread's CPU, it moves itself to another CPU it may run on (sched_setaffinity to that one CPU) and restores its
// affinity mask at once, so nothing stays bound: the OS remains free to place it, and several encore processes
// are not stacked on the same cores as OMP_PROC_BIND would do. Why: Linux often starts a new thread on its
// parent's CPU, and two spinning OpenMP threads on one CPU wait a scheduler time slice (1.5-3 ms) per parallel
// region until the load balancer separates them, which took 30-50 ms (a 3-token MiniLM forward of 5 ms took
// 35-60 ms in half of fresh processes). The calling thread waits for the workers with sched_yield, so a worker
// on its CPU runs at once. Costs one parallel region (~1-2 µs hot).
void spread_team();

// fn(b, e) over [begin, end) split into one contiguous range per thread (at least `grain` indices each), at most
// max_threads threads (0: num_threads()); serial inside a parallel region. An exception must not leave an OpenMP
// region (the process would terminate): one ends its thread's range, and once every thread is done the exception
// of the lowest failing range is rethrown, the one a serial loop would throw first.
template <typename Fn>
void parallel_for(int64_t begin, int64_t end, int64_t grain, Fn&& fn, int max_threads = 0) {
  const int64_t n = end - begin;
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  const int64_t max_chunks = (n + grain - 1) / grain;
  int64_t cap = num_threads();
  if (max_threads > 0) cap = std::min<int64_t>(cap, max_threads);
  const int threads = static_cast<int>(std::min<int64_t>(cap, max_chunks));
  if (threads <= 1 || omp_in_parallel()) {
    fn(begin, end);
    return;
  }
  std::mutex mutex;
  int64_t first_bad = end;
  std::exception_ptr error;
#pragma omp parallel num_threads(threads)
  {
    const int64_t t = omp_get_thread_num();
    const int64_t nt = omp_get_num_threads();
    const int64_t chunk = n / nt, rest = n % nt;
    const int64_t b = begin + t * chunk + std::min(t, rest);
    const int64_t e = b + chunk + (t < rest ? 1 : 0);
    if (b < e) {
      try {
        fn(b, e);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex);
        if (b < first_bad) {
          first_bad = b;
          error = std::current_exception();
        }
      }
    }
  }
  if (error) std::rethrow_exception(error);
}

// fn(i) for every i in [begin, end), split as parallel_for splits it; an exception ends its thread's range, and the
// one of the lowest failing index is rethrown (parallel_for's rule: ranges are in index order).
template <typename Fn>
void parallel_for_each(int64_t begin, int64_t end, int64_t grain, Fn&& fn) {
  parallel_for(begin, end, grain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) fn(i);
  });
}

}  // namespace encore::runtime
