#include "runtime/signals.hpp"

#include <omp.h>
#include <pthread.h>

#include <initializer_list>

namespace encore::runtime {

namespace {

const sigset_t& asynchronous_signals() {
  static const sigset_t set = [] {
    sigset_t s;
    sigfillset(&s);
    for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS, SIGABRT}) sigdelset(&s, sig);
    return s;
  }();
  return set;
}

// How many threads of the calling thread's OpenMP team are known to block them (the calling thread not counted as
// blocking: it blocks only inside guards).
thread_local int team_blocking = 1;

}  // namespace

DeferAsyncSignals::DeferAsyncSignals(bool active) : active_(active) {
  if (!active_) return;
  pthread_sigmask(SIG_BLOCK, &asynchronous_signals(), &previous_);
  if (omp_in_parallel()) return;  // a nested oneDNN call runs on this thread alone
  const int n = omp_get_max_threads();
  if (n <= team_blocking) return;
#pragma omp parallel num_threads(n)
  if (omp_get_thread_num() != 0) pthread_sigmask(SIG_BLOCK, &asynchronous_signals(), nullptr);
  team_blocking = n;  // OpenMP may have given fewer threads: then oneDNN gets no more either
}

DeferAsyncSignals::~DeferAsyncSignals() {
  if (active_) pthread_sigmask(SIG_SETMASK, &previous_, nullptr);
}

}  // namespace encore::runtime
