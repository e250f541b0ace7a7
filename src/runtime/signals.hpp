// Asynchronous signals held off a thread while it runs oneDNN's f32 GEMMs.
//
// Why: oneDNN's generated f32 GEMM kernels (the no-copy sgemm: jit_avx_gemm_f32 on AVX/AVX2, jit_avx512_common_
// gemm_f32 on AVX-512; reached by dnnl_sgemm, and by every matmul oneDNN runs as "gemm:jit", which is every fp32
// Linear on an AVX2 CPU) move the stack pointer into a heap workspace when K is above their on-stack capacity
// ((16384 - 256) / (4 · unroll) floats: 84 on AVX-512, 252 on AVX2, 504 on AVX). A signal handler run on such a
// thread gets its frame written below that stack pointer, into the heap and the GEMM's own data: glibc aborts
// later ("corrupted size vs. prev_size", "munmap_chunk(): invalid pointer") or a result is silently wrong.
// Python installs a SIGINT handler, so Ctrl-C during SentenceEncoder.encode() did this (1 run in 10 on an AVX2
// host; tests/cpp/test_signals.cpp). Reported as uxlfoundation/oneDNN#4845 and fixed upstream by #4855 (March
// 2026, after 3.11); Debian's oneDNN 2.6.3 has the bug.
//
// While a DeferAsyncSignals is alive, the calling thread blocks every asynchronous signal; one sent meanwhile
// stays pending and its handler runs when the guard ends (after one GEMM call). Not blocked: SIGSEGV, SIGBUS,
// SIGFPE, SIGILL, SIGTRAP, SIGSYS and SIGABRT, which a thread raises on itself (blocking a fault signal kills the
// process). The OpenMP workers of the calling thread's team block the same signals for good, set once when the
// team first reaches its size (a parallel region; workers made later inherit the calling thread's blocked mask):
// unblocking them after every call would cost a parallel region per call. Signals sent to the process then go to
// a thread that does not block them (the calling thread between calls); a profiler that signals individual
// worker threads no longer samples them. Cost: two rt_sigprocmask calls per guard (~0.5 µs on a 2-vCPU VM), paid
// only where the kernels above can run (kernels/gemm.cpp decides: K above kMinHeapStackK and not brgemm).
#pragma once
#include <signal.h>

#include <cstdint>

namespace encore::runtime {

// The smallest K for which oneDNN's f32 GEMM kernels may move their stack into the heap is 85 (AVX-512): calls
// with K at or below this bound need no guard.
inline constexpr int64_t kMinHeapStackK = 64;

class DeferAsyncSignals {
 public:
  explicit DeferAsyncSignals(bool active = true);
  ~DeferAsyncSignals();
  DeferAsyncSignals(const DeferAsyncSignals&) = delete;
  DeferAsyncSignals& operator=(const DeferAsyncSignals&) = delete;

 private:
  bool active_;
  sigset_t previous_;
};

}  // namespace encore::runtime
