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
// 12.5% slack), are mapped from the system directly (anonymous mmap, so returning one unmaps it: the memory
// leaves the process at once, whatever malloc's thresholds) and, when released, kept on a per-class free list; a
// later request takes the most recently freed block of the smallest cached class that fits and is at most twice
// its own class (*capacity tells which). The free lists together hold at most the cache limit
// (ENCORE_ALLOCATOR_CACHE_MB, default 1024): releasing past it evicts the least recently cached blocks to the
// system. A cached block that no request has taken for the decay time (ENCORE_ALLOCATOR_DECAY_MS, default 10000;
// -1 = never) is returned to the system by the next allocate/release/release_idle, so one rare large batch does
// not keep its blocks for the life of a server (jemalloc's dirty_decay_ms, 10 s by default, is the same idea;
// blocks that every call reuses are never idle). What a server keeps is then the largest working set of its last
// 10 s of batches: it follows the batch mix (bench/serve.py soak, session 12: 127-168 MB at 70% load, of which
// the cache 14-58 MB). A minute was tried once (a run disturbed by other work on the machine): the resident set
// still moved with the mix (167-205 MB), and the blocks of the load generator's start stayed in the baseline. Smaller blocks go straight to aligned_alloc/free. ENCORE_ALLOCATOR=system bypasses the
// cache entirely. Thread-safe. Byte accounting of tensors (memory_stats) is the caller's: it counts requested
// bytes, never cached ones.
#pragma once
#include <chrono>
#include <cstddef>
#include <deque>
#include <list>
#include <mutex>
#include <map>

#include "encore/tensor.hpp"

namespace encore::core {

constexpr size_t kMinCachedBytes = size_t{32} << 10;
constexpr std::chrono::milliseconds kDefaultCacheDecay{10000};
constexpr std::chrono::milliseconds kNeverDecay{-1};

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
  using Clock = std::chrono::steady_clock;
  // `decay`: how long a cached block may wait unused (kNeverDecay: forever); `now`: the clock (tests pass their own).
  explicit CachingAllocator(size_t limit_bytes, bool bypass = false,
                            std::chrono::milliseconds decay = kDefaultCacheDecay,
                            Clock::time_point (*now)() = &Clock::now)
      : limit_(limit_bytes), bypass_(bypass), decay_(decay), now_(now) {}
  ~CachingAllocator() { release_all(); }
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  void* allocate(size_t bytes, size_t* capacity);
  void release(void* p, size_t capacity);
  void release_idle();  // returns the blocks cached longer than the decay time (what allocate/release do anyway)
  void release_all();
  AllocatorStats stats();

 private:
  struct Block {
    void* ptr;
    size_t size;
    Clock::time_point cached_at;
  };
  void return_oldest_locked();  // unmaps the least recently cached block (the caller counts why)
  void evict_idle_locked();     // returns every block cached longer than decay_ ago

  size_t limit_;
  bool bypass_;
  std::chrono::milliseconds decay_;
  Clock::time_point (*now_)();
  std::mutex mutex_;
  std::list<Block> order_;  // front = most recently cached; cached_at never increases towards the back
  std::map<size_t, std::deque<std::list<Block>::iterator>> classes_;  // only non-empty classes
  size_t cached_bytes_ = 0;
  AllocatorStats stats_;
};

}  // namespace encore::core
