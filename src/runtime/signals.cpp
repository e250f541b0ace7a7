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

// Set on a worker once it blocks them (nothing in encore unblocks a worker: guards restore the mask they found).
thread_local bool worker_blocks = false;

}  // namespace

DeferAsyncSignals::DeferAsyncSignals() {
  pthread_sigmask(SIG_BLOCK, &asynchronous_signals(), &previous_);
  if (omp_in_parallel()) return;  // a nested oneDNN call runs on this thread alone
  const int n = omp_get_max_threads();  // the team oneDNN's region will have
  if (n <= 1) return;
  // The same n threads oneDNN's region gets next (same size, same places); any it makes inherit the blocked mask.
  // Under OMP_DYNAMIC=true the runtime may give a region fewer threads than asked: this one runs with dynamic
  // adjustment off, so it blocks all n, and oneDNN's region (dynamic again) gets at most those n.
  const bool dynamic = omp_get_dynamic() != 0;
  if (dynamic) omp_set_dynamic(0);
#pragma omp parallel num_threads(n)
  if (omp_get_thread_num() != 0 && !worker_blocks) {
    pthread_sigmask(SIG_BLOCK, &asynchronous_signals(), nullptr);
    worker_blocks = true;
  }
  if (dynamic) omp_set_dynamic(1);
}

DeferAsyncSignals::~DeferAsyncSignals() { pthread_sigmask(SIG_SETMASK, &previous_, nullptr); }

}  // namespace encore::runtime
