// The process's one oneDNN CPU engine and each thread's stream, shared by every oneDNN user in src/kernels
// (fp32/bf16 GEMMs in gemm.cpp, int8 GEMMs in gemm_int8.cpp). Defined in gemm.cpp.
#pragma once
#include <cstdint>
#include <memory>

#include "oneapi/dnnl/dnnl.hpp"

namespace encore::kernels {

dnnl::engine& onednn_engine();         // created on first use; thread-safe (a function-local static)
dnnl::stream& onednn_thread_stream();  // one per calling thread, on onednn_engine()

// `weight` (in `from`'s layout) reordered into memory of layout `packed` allocated by core::allocate_weight_memory
// (populated up front, huge pages later: see core/weight_memory.hpp); `owner` keeps that memory alive.
struct PackedWeight {
  std::shared_ptr<void> owner;
  dnnl::memory memory;
};
PackedWeight reorder_weight(const dnnl::memory::desc& from, const void* weight, const dnnl::memory::desc& packed);

// The layout to pack a (K, N) weight into, given the one oneDNN chose for it (format "any"): that one, except the
// plain row-major (K, N) its gemm:jit matmul asks for (f32 and int8 wherever oneDNN does not use brgemm: AVX2
// CPUs, typically), whose rows are then one 64-byte cache line longer than N elements (the padding is never read).
// With a row of N elements a multiple of 4 KiB (BERT-base's FFN: 3072 floats) or near one (MiniLM's, 1536), the
// GEMM's reads down a column of the weight all fall in the same cache sets. Measured with raw oneDNN on an AVX2
// Zen 3, 2 threads, weights in 2 MiB-aligned memory (core::allocate_weight_memory's blocks are 4 KiB-aligned
// pieces of 2 MiB-aligned chunks), dense -> padded, M rows: f32 N 3072 K 768 M 40 78 -> 153 GFLOP/s, M 256
// 74 -> 148, M 1024 138 -> 138; f32 N 1536 K 384 M 256 115 -> 150; int8 N 1536 K 384 M 8 176 -> 234 GOP/s, M 1
// 36 -> 61; N 384 K 384 (no conflict) within the noise either way. The results are bitwise the same.
dnnl::memory::desc padded_packing_layout(const dnnl::memory::desc& chosen, int64_t K, int64_t N);
// The row stride (elements) of a plain row-major 2-D layout, dense or padded; 0 for any other (blocked) layout.
int64_t plain_row_stride(const dnnl::memory::desc& layout);

// The int8 half of warm_up_gemm_kernels (kernels.hpp), in gemm_int8.cpp: whether the int8 Linear's matmul is
// oneDNN's gemm:jit on this CPU, and one small u8 x s8 GEMM on the calling thread to make its kernels.
bool int8_gemm_kernels_are_process_wide();
void warm_up_int8_gemm_kernels();

}  // namespace encore::kernels

namespace encore::kernels {

// The row counts oneDNN matmul primitives are made for. A primitive serves one M (rows) only, and each costs JIT
// code (about 60 KB per weight shape) and ~0.4 ms to create; batches of a server come with any token count, so
// one primitive per M grew memory with every new count (0.25 MB per count for all-MiniLM-L6-v2, until a cache
// clear; see bench/RESULTS.md, serve soak). A GEMM of M rows therefore runs as calls over row blocks: whole
// blocks of kRowChunk rows, then the largest multiple of kRowGranule left, then the last < kRowGranule rows.
// Rows are independent in a GEMM, so the result is the same GEMM; the sizes are 1..kRowGranule and the multiples
// of kRowGranule up to kRowChunk (63 per weight shape), and each extra call is one more pass over the weights
// (none for M <= kRowGranule or a multiple of it up to kRowChunk).
constexpr int64_t kRowGranule = 32, kRowChunk = 1024;

// fn(first_row, rows) for each block, in order.
template <typename Fn>
void for_each_row_block(int64_t M, Fn&& fn) {
  int64_t r = 0;
  for (; M - r > kRowChunk; r += kRowChunk) fn(r, kRowChunk);
  const int64_t whole = (M - r) / kRowGranule * kRowGranule;
  if (whole > 0 && whole < M - r) {
    fn(r, whole);
    r += whole;
  }
  if (M - r > 0) fn(r, M - r);
}

}  // namespace encore::kernels
