// Asynchronous signals held off the threads that run oneDNN's f32 GEMM kernels.
//
// Why: oneDNN's generated f32 GEMM kernels (its no-copy sgemm: jit_avx512_common_gemm_f32 on AVX-512,
// jit_avx_gemm_f32 on AVX2; reached by dnnl_sgemm and by every matmul oneDNN runs as "gemm:jit", which is every
// fp32 Linear on an AVX2 CPU) move the stack pointer into a heap workspace when the K of a kernel call (K, or a
// block of it) exceeds their on-stack capacity, (16384 - 256) / (4 · unroll) floats: 84 on AVX-512, 252 on AVX2.
// A signal handler run on such a thread gets its frame written below that stack pointer, into the heap and the
// GEMM's own data: glibc aborts later ("corrupted size vs. prev_size", "munmap_chunk(): invalid pointer") or a
// result is silently wrong. Python installs a SIGINT handler, so Ctrl-C during SentenceEncoder.encode() did this
// (3 runs in 30 on an AVX2 host; tests/cpp/test_signals.cpp). Reported as uxlfoundation/oneDNN#4845, fixed
// upstream by #4855 (March 2026, after 3.11); Debian's oneDNN 2.6.3 has the bug.
//
// While a DeferAsyncSignals is alive, the calling thread blocks every asynchronous signal; one sent meanwhile
// stays pending and its handler runs when the guard ends (when the guarded call returns: one sgemm, or all row
// blocks of one Linear). Not blocked: SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS and SIGABRT, which a thread
// raises on itself (blocking a fault signal kills the process). The guard also opens a parallel region of the
// team oneDNN is about to use, in which every worker blocks the same signals, and leaves them blocked: libgomp
// replaces pool workers (a smaller team of two or more ends the workers beyond it, a larger one makes new ones
// with the mask of the thread opening the region; thread binding swaps them between places), so the region runs
// on every guard rather than once. Signals sent to the process then go to a thread that does not block them (the
// calling thread between calls); one sent to a particular worker thread (pthread_kill, a per-thread profiling
// timer) waits until no guard holds it, which for a worker may be never. Under OMP_DYNAMIC=true the guard's
// region runs with dynamic adjustment off, so it blocks every worker oneDNN's region can get.
// Cost per guard: two rt_sigprocmask calls (0.45-0.51 µs a pair on a 2-vCPU VM) and, with two or more threads, a
// parallel region (a worker's first one also calls rt_sigprocmask). Measured on a contended 2-vCPU AVX2 VM, where
// every fp32 Linear is guarded: encode("hello world") +8-10 % (about 12 µs per guard, 24 per MiniLM forward), a
// 32-text batch unchanged; on a quiet VM of the same kind no difference above the noise (1.6-1.8 µs per guard).
// Only where the kernels above can run (kernels/gemm.cpp decides: K above kMaxUnguardedK and an implementation other
// than brgemm).
#pragma once
#include <signal.h>

#include <cstdint>

namespace encore::runtime {

// GEMMs whose K is at most this need no guard: every kernel call's K is then below the smallest on-stack capacity
// (84 floats, AVX-512).
inline constexpr int64_t kMaxUnguardedK = 64;

class DeferAsyncSignals {
 public:
  DeferAsyncSignals();
  ~DeferAsyncSignals();
  DeferAsyncSignals(const DeferAsyncSignals&) = delete;
  DeferAsyncSignals& operator=(const DeferAsyncSignals&) = delete;

 private:
  sigset_t previous_;
};

}  // namespace encore::runtime
