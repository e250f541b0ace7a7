#include "core/weight_memory.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <new>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14; older kernels answer EINVAL and the pages fault in on first touch
#endif

namespace encore::core {

namespace {

constexpr size_t kPageBytes = size_t{4} << 10;
constexpr size_t kHugePageBytes = size_t{2} << 20;

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

struct Chunk {
  char* base = nullptr;
  size_t size = 0;
  size_t used = 0;  // bytes handed out, from base
  size_t live = 0;  // blocks not yet released
};

class WeightArena {
 public:
  std::shared_ptr<void> allocate(size_t bytes, const PageRangeRunner& run) {
    if (bytes == 0) return nullptr;
    const size_t size = round_up(bytes, kPageBytes);
    Chunk* chunk = nullptr;
    char* block = nullptr;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (size > kWeightChunkBytes / 2) {
        chunk = map_chunk(round_up(size, kHugePageBytes));  // a chunk of its own; the current one carries on
      } else {
        if (current_ == nullptr || current_->size - current_->used < size) current_ = map_chunk(kWeightChunkBytes);
        chunk = current_;  // a replaced chunk is unmapped when its last block goes (release)
      }
      block = chunk->base + chunk->used;
      chunk->used += size;
      ++chunk->live;
    }
    // Outside the lock (a few ms for a large weight); the range is this block's alone. Advice only, in this order:
    // populated with 4 KiB pages first, then marked for huge pages, which khugepaged may collapse later
    // (weight_memory.hpp says why not huge pages at once).
    const size_t pages = size / kPageBytes;
    auto populate = [block](size_t first, size_t end) {
      madvise(block + first * kPageBytes, (end - first) * kPageBytes, MADV_POPULATE_WRITE);
    };
    if (run && pages >= 2 * kPopulateGrainPages) run(pages, kPopulateGrainPages, populate);
    else populate(0, pages);
    madvise(block, size, MADV_HUGEPAGE);
    return std::shared_ptr<void>(block, [this, chunk](void*) { release(chunk); });
  }

  size_t mapped_bytes() {
    std::lock_guard<std::mutex> lock(mutex_);
    return mapped_;
  }

 private:
  void release(Chunk* chunk) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (--chunk->live > 0) return;
    if (chunk == current_) current_ = nullptr;  // its pages go back too; the next block starts a fresh chunk
    unmap_chunk(chunk);
  }

  // A 2 MiB-aligned anonymous mapping of `size` bytes (a multiple of 2 MiB), so that khugepaged can collapse whole
  // huge pages of it once its blocks are advised (allocate). mutex_ held.
  Chunk* map_chunk(size_t size) {
    void* raw = mmap(nullptr, size + kHugePageBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) throw std::bad_alloc();
    const uintptr_t start = reinterpret_cast<uintptr_t>(raw);
    const uintptr_t aligned = round_up(start, kHugePageBytes);
    // Trim the unaligned head and the tail beyond size.
    if (aligned > start) munmap(raw, aligned - start);
    const uintptr_t end = start + size + kHugePageBytes;
    if (end > aligned + size) munmap(reinterpret_cast<void*>(aligned + size), end - (aligned + size));
    // No huge pages at population even where THP is "always" (allocate advises MADV_HUGEPAGE afterwards).
    madvise(reinterpret_cast<void*>(aligned), size, MADV_NOHUGEPAGE);
    Chunk* chunk = new Chunk;
    chunk->base = reinterpret_cast<char*>(aligned);
    chunk->size = size;
    mapped_ += size;
    return chunk;
  }

  void unmap_chunk(Chunk* chunk) {  // mutex_ held
    munmap(chunk->base, chunk->size);
    mapped_ -= chunk->size;
    delete chunk;
  }

  std::mutex mutex_;
  Chunk* current_ = nullptr;
  size_t mapped_ = 0;
};

WeightArena& arena() {
  static WeightArena* a = new WeightArena();  // never destroyed: blocks of static models may outlive statics
  return *a;
}

}  // namespace

std::shared_ptr<void> allocate_weight_memory(size_t bytes, const PageRangeRunner& run) {
  return arena().allocate(bytes, run);
}

size_t weight_memory_mapped_bytes() { return arena().mapped_bytes(); }

}  // namespace encore::core
