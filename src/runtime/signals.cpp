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

// Whether worker 1 of the calling thread's OpenMP pool blocks them (libgomp keeps that worker once made).
thread_local bool first_worker_blocks = false;

}  // namespace

DeferAsyncSignals::DeferAsyncSignals() {
  pthread_sigmask(SIG_BLOCK, &asynchronous_signals(), &previous_);
  if (omp_in_parallel()) return;  // a nested oneDNN call runs on this thread alone
  const int n = omp_get_max_threads();  // the team oneDNN's region will have
  if (n <= 1 || (n == 2 && first_worker_blocks)) return;
#pragma omp parallel num_threads(n)
  if (omp_get_thread_num() != 0) pthread_sigmask(SIG_BLOCK, &asynchronous_signals(), nullptr);
  first_worker_blocks = true;
}

DeferAsyncSignals::~DeferAsyncSignals() { pthread_sigmask(SIG_SETMASK, &previous_, nullptr); }

}  // namespace encore::runtime
