// Memory for weights prepared once at load (the GEMM library's packed layouts: f32, bf16, s8) and read by every
// forward after.
//
//   std::shared_ptr<void> block = core::allocate_weight_memory(bytes);   // 4 KiB aligned, populated
//   ... write the packed weight into block.get() ...                      // no page faults on the way
//
// Why: a model's packed weights are written once, right after allocation. Fresh 4 KiB pages cost a page fault each on
// that first write: ~10,000 faults, about 25 ms, for all-MiniLM-L6-v2's 42 MB of encoder weights - the largest part of
// loading it (bench/coldstart.py). Blocks are therefore populated up front (MADV_POPULATE_WRITE: in one call, or over
// the caller's threads) and carved from 2 MiB-aligned anonymous mappings. Huge pages come later, not
// at load: the mappings are MADV_NOHUGEPAGE (so not even THP mode "always" faults huge pages in) and each block is
// advised MADV_HUGEPAGE only after it is populated, so khugepaged may collapse it in the background (fewer TLB misses
// in the GEMMs that read it; at its default pace, 16 MiB per 10 s: BERT-base's 340 MB took minutes). Faulting huge
// pages in at load (advice first, populate second) was faster back to back (AutoModel::load of all-MiniLM-L6-v2 32-49
// ms against 57-74 ms with 4 KiB pages, AVX2 VM) but stalled: after a few idle seconds every load took 200-590 ms,
// because that VM's balloon had reported its free 2 MiB blocks to the host (virtio-balloon free page reporting,
// page_reporting_order 9), so a huge page had to be faulted in again on the host, while 4 KiB pages come from memory
// the guest kept (73-100 ms then). Direct compaction of fragmented memory (THP defrag "madvise", the kernel's default)
// can stall huge-page faults on any machine too (not seen on that VM: compact_stall stayed 0). Where the kernel refuses
// either advice (THP off, a kernel before 5.14) the block still works, with ordinary pages faulted on first touch.
//
// Contract: blocks are bump-allocated from chunks of kWeightChunkBytes (a block over half of that gets a chunk of
// its own); a chunk is unmapped when its last block is released, so memory of a model's weights goes back to the
// system once the model and every block of its chunk are gone (a chunk may hold the tail of one model and the head
// of the next). Thread-safe.
#pragma once
#include <cstddef>
#include <functional>
#include <memory>

namespace encore::core {

constexpr size_t kWeightChunkBytes = size_t{32} << 20;

// How a caller lends its threads to the population: run(pages, grain, fn) calls fn(first, end) on disjoint ranges that
// cover [0, pages) once, possibly at the same time, split as parallel_for(0, pages, grain, ...) splits a range (one
// contiguous range per thread, none split below `grain` pages). Kernels pass runtime::parallel_for; core has no
// threads of its own.
using PageRangeRunner =
    std::function<void(size_t pages, size_t grain, const std::function<void(size_t first, size_t end)>& fn)>;
// The grain a runner is given (1 MiB): a block under two of it is populated in one call, without the runner.
constexpr size_t kPopulateGrainPages = 256;

// A zero-filled block of at least `bytes` (4 KiB aligned; null for 0), released when the last copy of the pointer
// goes. With `run`, the block is populated over its ranges on the caller's threads instead of on the calling one
// (each 4 KiB page is zeroed, and in a VM the host may have to back it first). That applies where a weight is packed
// outside a parallel region: f32 weights packed at their second forward (AVX-512), DeBERTa-v2's embedding
// projection. Layers prepared in parallel (EncoderModel::prepare_inference_weights) populate their blocks serially, each
// thread its own layers. Measured before layers were prepared in parallel: all-MiniLM-L6-v2's SentenceEncoder::load
// on a 2-vCPU AVX2 VM 85 -> 75 ms. Throws std::bad_alloc when the system has no memory for it.
std::shared_ptr<void> allocate_weight_memory(size_t bytes, const PageRangeRunner& run = {});

// Bytes of the chunks currently mapped for weight blocks (what allocate_weight_memory holds from the system).
size_t weight_memory_mapped_bytes();

}  // namespace encore::core
