#include "core/allocator.hpp"

#include <sys/mman.h>

#include <cstdlib>
#ifdef __GLIBC__
#include <malloc.h>  // malloc_trim
#endif
#include <string>

namespace encore::core {

namespace {
size_t round64(size_t bytes) { return (bytes + 63) / 64 * 64; }

// Blocks of a cached class (>= kMinCachedBytes, so whole 4 KiB pages: the class step is then >= 4 KiB) are mapped
// and unmapped here rather than by malloc, which would keep freed memory of its heap below its mmap threshold
// (glibc raises that threshold, up to 32 MiB, every time such a block is freed).
void* map_block(size_t size) {
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}
void unmap_block(void* p, size_t size) { munmap(p, size); }
}  // namespace

// Classes: below kMinCachedBytes, 64-byte multiples; above, 8 steps per power of two:
// p = largest power of two <= bytes, size = ceil(bytes / (p/8)) · (p/8), so size < bytes · 1.125.
size_t storage_size_class(size_t bytes) {
  if (bytes < kMinCachedBytes) return round64(bytes);
  const size_t p = size_t{1} << (63 - __builtin_clzll(static_cast<unsigned long long>(bytes)));
  const size_t step = p / 8;
  return (bytes + step - 1) / step * step;
}

void* CachingAllocator::allocate(size_t bytes, size_t* capacity) {
  *capacity = 0;
  if (bytes == 0) return nullptr;
  const size_t size = bypass_ ? round64(bytes) : storage_size_class(bytes);
  *capacity = size;
  if (!bypass_ && size >= kMinCachedBytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    // The smallest cached class that fits, at most twice the request (batches of varying length ask for
    // neighbouring classes; a somewhat larger warm block beats fresh pages), most recently freed first.
    auto it = classes_.lower_bound(size);
    if (it != classes_.end() && it->first <= 2 * size) {
      auto block = it->second.back();
      it->second.pop_back();
      void* p = block->ptr;
      *capacity = it->first;
      if (it->second.empty()) classes_.erase(it);
      order_.erase(block);
      cached_bytes_ -= *capacity;
      ++stats_.reused_allocations;
      stats_.cached_bytes = static_cast<int64_t>(cached_bytes_);
      evict_idle_locked();
      return p;
    }
    evict_idle_locked();  // before mapping more: what has waited too long goes first
  }
  const bool mapped = !bypass_ && size >= kMinCachedBytes;
  void* p = mapped ? map_block(size) : std::aligned_alloc(64, size);
  ENCORE_CHECK(p != nullptr, "out of memory allocating ", bytes, " bytes");
  std::lock_guard<std::mutex> lock(mutex_);
  if (size < kMinCachedBytes) {
    ++stats_.small_allocations;
  } else {
    ++stats_.system_allocations;
    stats_.system_bytes += static_cast<int64_t>(size);
  }
  return p;
}

void CachingAllocator::release(void* p, size_t capacity) {
  if (!p) return;
  if (bypass_ || capacity < kMinCachedBytes) {
    std::free(p);
    return;
  }
  if (capacity > limit_) {
    unmap_block(p, capacity);
    return;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  evict_idle_locked();
  while (cached_bytes_ + capacity > limit_) {
    return_oldest_locked();
    ++stats_.evictions;
  }
  order_.push_front(Block{p, capacity, now_()});
  classes_[capacity].push_back(order_.begin());
  cached_bytes_ += capacity;
  stats_.cached_bytes = static_cast<int64_t>(cached_bytes_);
}

void CachingAllocator::release_idle() {
  std::lock_guard<std::mutex> lock(mutex_);
  evict_idle_locked();
}

void CachingAllocator::evict_idle_locked() {
  if (decay_ < std::chrono::milliseconds::zero() || order_.empty()) return;
  const Clock::time_point cutoff = now_() - decay_;
  while (!order_.empty() && order_.back().cached_at <= cutoff) {
    return_oldest_locked();
    ++stats_.decayed;
  }
}

void CachingAllocator::release_all() {
  std::lock_guard<std::mutex> lock(mutex_);
  while (!order_.empty()) {
    return_oldest_locked();
    ++stats_.evictions;
  }
}

AllocatorStats CachingAllocator::stats() {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void CachingAllocator::return_oldest_locked() {
  const Block b = order_.back();
  auto cls = classes_.find(b.size);
  cls->second.pop_front();
  if (cls->second.empty()) classes_.erase(cls);
  order_.pop_back();
  cached_bytes_ -= b.size;
  stats_.cached_bytes = static_cast<int64_t>(cached_bytes_);
  unmap_block(b.ptr, b.size);
}

namespace {

// The process-wide instance, configured once from ENCORE_ALLOCATOR and ENCORE_ALLOCATOR_CACHE_MB. A bad value
// is reported by every allocation (an exception from a static initializer would abort instead). Never
// destroyed: tensors held by static objects may be released after every other static is gone.
struct Global {
  std::string error;
  CachingAllocator* allocator = nullptr;
  Global() {
    bool bypass = false;
    size_t limit = size_t{1024} << 20;
    if (const char* mode = std::getenv("ENCORE_ALLOCATOR"); mode && *mode) {
      const std::string m(mode);
      if (m == "system") bypass = true;
      else if (m != "caching") error = "ENCORE_ALLOCATOR must be 'caching' or 'system', got '" + m + "'";
    }
    if (const char* mb = std::getenv("ENCORE_ALLOCATOR_CACHE_MB"); mb && *mb) {
      char* end = nullptr;
      const long long v = std::strtoll(mb, &end, 10);
      if (*end == '\0' && v >= 0 && v < (1ll << 40)) limit = static_cast<size_t>(v) << 20;
      else error = std::string("ENCORE_ALLOCATOR_CACHE_MB must be a number of MiB >= 0, got '") + mb + "'";
    }
    std::chrono::milliseconds decay = kDefaultCacheDecay;
    if (const char* ms = std::getenv("ENCORE_ALLOCATOR_DECAY_MS"); ms && *ms) {
      char* end = nullptr;
      const long long v = std::strtoll(ms, &end, 10);
      if (*end == '\0' && v >= -1 && v < (1ll << 40)) decay = std::chrono::milliseconds(v);
      else error = std::string("ENCORE_ALLOCATOR_DECAY_MS must be a number of milliseconds >= 0, or -1 for never, got '") + ms + "'";
    }
    allocator = new CachingAllocator(limit, bypass, decay);
  }
};

Global& global() {
  static Global* g = new Global();
  return *g;
}

}  // namespace

void* storage_allocate(size_t bytes, size_t* capacity) {
  Global& g = global();
  if (!g.error.empty()) throw Error(g.error);
  return g.allocator->allocate(bytes, capacity);
}

void storage_release(void* p, size_t capacity) { global().allocator->release(p, capacity); }

}  // namespace encore::core

namespace encore {
AllocatorStats allocator_stats() { return core::global().allocator->stats(); }
void release_idle_cached_memory() { core::global().allocator->release_idle(); }
void release_cached_memory() {
  core::global().allocator->release_all();
#ifdef __GLIBC__
  // glibc serves blocks below its (self-raising, up to 32 MiB) mmap threshold from its heap, and free() keeps
  // their pages; malloc_trim hands the free whole pages back to the system.
  malloc_trim(0);
#endif
}
}  // namespace encore
