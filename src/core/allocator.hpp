// Storage blocks for Tensor: a bounded caching allocator in front of aligned_alloc.
//
//   size_t capacity;
//   void* p = core::storage_allocate(bytes, &capacity);   // 64-byte aligned, at least `bytes` usable
//   ...
//   core::storage_release(p, capacity);                     // back to the cache (or to the system)
//
// Why: inference allocates the same activation shapes on every call. Freshly mapped memory costs a page fault
// per 4 KiB on first touch (~20% of an int8 all-MiniLM-L6-v2 run before this existed); a freed block kept
// and handed out again for the next tensor of its size class costs none.
//
// Contract: blocks of at least kMinCachedBytes are rounded up to a size class (1/8-power-of-two steps, so at most
// 12.5% slack) and, when released, kept on a per-class free list; a later request takes the most recently freed
// block of the smallest cached class that fits and is at most twice its own class (*capacity tells which). The free lists together hold at most the cache limit (ENCORE_ALLOCATOR_CACHE_MB,
// default 1024): releasing past it evicts the least recently cached blocks to the system. Smaller blocks go
// straight to aligned_alloc/free. ENCORE_ALLOCATOR=system bypasses the cache entirely. Thread-safe.
// Byte accounting of tensors (memory_stats) is the caller's: it counts requested bytes, never cached ones.
#pragma once
#include <cstddef>
#include <deque>
#include <list>
#include <mutex>
#include <map>

#include "encore/tensor.hpp"

namespace encore::core {

constexpr size_t kMinCachedBytes = size_t{32} << 10;

// Returns a 64-byte aligned block of at least `bytes` (nullptr for 0); *capacity receives the size to pass back
// to storage_release. Throws encore::Error when out of memory or on a bad ENCORE_ALLOCATOR value.
void* storage_allocate(size_t bytes, size_t* capacity);
void storage_release(void* p, size_t capacity);

// The size class a request of `bytes` is served from (bytes itself, rounded to 64, below kMinCachedBytes).
size_t storage_size_class(size_t bytes);

// The allocator behind storage_allocate (one process-wide instance, configured from the environment); its own
// instances are for tests. Cached blocks sit in a list in the order they were cached (front = newest) and, per
// size class, in the same order (back = newest): the oldest block overall is the oldest (front) of its class.
class CachingAllocator {
 public:
  explicit CachingAllocator(size_t limit_bytes, bool bypass = false) : limit_(limit_bytes), bypass_(bypass) {}
  ~CachingAllocator() { release_all(); }
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  void* allocate(size_t bytes, size_t* capacity);
  void release(void* p, size_t capacity);
  void release_all();
  AllocatorStats stats();

 private:
  struct Block {
    void* ptr;
    size_t size;
  };
  void evict_oldest();  // mutex held

  size_t limit_;
  bool bypass_;
  std::mutex mutex_;
  std::list<Block> order_;
  std::map<size_t, std::deque<std::list<Block>::iterator>> classes_;  // only non-empty classes
  size_t cached_bytes_ = 0;
  AllocatorStats stats_;
};

}  // namespace encore::core
