// Process-wide runtime settings.
//
//   encore::set_num_threads(2);
//   std::cerr << encore::runtime_info() << "\n";   // "isa=avx512 kernels=avx512 gemm=oneDNN-2.6.3 threads=2 omp_wait=default int8=8-bit fp32_pack=lazy"
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace encore {

inline constexpr int kMaxThreads = 256;
void set_num_threads(int n);  // threads for encore's parallel loops and oneDNN; 1..kMaxThreads (else UsageError)
int get_num_threads();
// Signals: oneDNN's f32 GEMM kernels (oneDNN bug uxlfoundation/oneDNN#4845, in the oneDNN encore links) may run with
// their stack pointer in a heap buffer, where a signal handler's frame would corrupt memory. So while such a GEMM
// runs (an sgemm, or the row blocks of one Linear), the thread that called encore holds asynchronous signals back
// (their handlers run when it returns), and the OpenMP worker threads running it block them (and keep them
// blocked). A signal sent to the process is handled by the calling thread between GEMMs or by another thread of
// the program; one sent to a particular OpenMP worker (pthread_kill, a per-thread profiling timer) stays pending.
// Fault signals (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS) and SIGABRT are never blocked.

// What was chosen at run time: CPU ISA, kernel table, GEMM engine, threads (ENCORE_VERBOSE=1 prints it too).
std::string runtime_info();

// Token counts whose forward passes, run once each (padding-free, so a Linear sees that many rows), create every
// GEMM primitive a later call of any size can need: GEMMs run over a bounded set of row-block sizes, and each
// size's oneDNN primitive is JIT code (~60 KB per weight shape) made on its first use. A server runs these at
// start so its memory does not grow as new batch sizes turn up (`encore serve`'s warm-up). Capped at max_tokens.
std::vector<int64_t> gemm_warm_up_token_counts(int64_t max_tokens);

}  // namespace encore
