// The process's one oneDNN CPU engine and each thread's stream, shared by every oneDNN user in src/kernels
// (fp32/bf16 GEMMs in gemm.cpp, int8 GEMMs in gemm_int8.cpp). Defined in gemm.cpp.
#pragma once
#include "oneapi/dnnl/dnnl.hpp"

namespace encore::kernels {

dnnl::engine& onednn_engine();         // created on first use; thread-safe (a function-local static)
dnnl::stream& onednn_thread_stream();  // one per calling thread, on onednn_engine()

}  // namespace encore::kernels
