// Process-wide runtime settings.
//
//   encore::set_num_threads(2);
//   std::cerr << encore::runtime_info() << "\n";   // "isa=avx512 kernels=avx512 gemm=oneDNN 2.6.3 threads=2"
#pragma once
#include <string>

namespace encore {

inline constexpr int kMaxThreads = 256;
void set_num_threads(int n);  // threads for encore's parallel loops and oneDNN; 1..kMaxThreads (else UsageError)
int get_num_threads();
// What was chosen at run time: CPU ISA, kernel table, GEMM engine, threads (ENCORE_VERBOSE=1 prints it too).
std::string runtime_info();

}  // namespace encore
