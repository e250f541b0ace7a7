// core::allocate_weight_memory: blocks for packed weights (huge-page chunks, populated up front).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "core/weight_memory.hpp"

using encore::core::allocate_weight_memory;
using encore::core::kWeightChunkBytes;
using encore::core::weight_memory_mapped_bytes;

namespace {

bool all_zero(const void* p, size_t n) {
  const auto* b = static_cast<const unsigned char*>(p);
  return std::all_of(b, b + n, [](unsigned char c) { return c == 0; });
}

}  // namespace

TEST(WeightMemory, BlocksAreAlignedZeroedWritableAndDisjoint) {
  const std::vector<size_t> sizes = {1, 4096, 4097, 590 * 1024, 1 << 20, 2359296, 3, kWeightChunkBytes / 2 + 1};
  std::vector<std::pair<std::shared_ptr<void>, size_t>> blocks;
  for (size_t n : sizes) {
    std::shared_ptr<void> b = allocate_weight_memory(n);
    ASSERT_NE(b, nullptr) << n;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.get()) % 4096, 0u) << n;
    EXPECT_TRUE(all_zero(b.get(), n)) << n;
    blocks.emplace_back(std::move(b), n);
  }
  // Each block filled with its index: an overlap would show in the check after.
  for (size_t i = 0; i < blocks.size(); ++i) std::memset(blocks[i].first.get(), static_cast<int>(i + 1), blocks[i].second);
  for (size_t i = 0; i < blocks.size(); ++i) {
    const auto* p = static_cast<const unsigned char*>(blocks[i].first.get());
    EXPECT_TRUE(std::all_of(p, p + blocks[i].second, [&](unsigned char c) { return c == i + 1; })) << sizes[i];
  }
  EXPECT_EQ(allocate_weight_memory(0), nullptr);
}

TEST(WeightMemory, ChunksGoBackWhenTheirLastBlockIsReleased) {
  const size_t before = weight_memory_mapped_bytes();
  {
    std::shared_ptr<void> big = allocate_weight_memory(kWeightChunkBytes + 12345);  // a chunk of its own
    EXPECT_GE(weight_memory_mapped_bytes(), before + kWeightChunkBytes + 12345);
    std::vector<std::shared_ptr<void>> small;
    for (int i = 0; i < 40; ++i) small.push_back(allocate_weight_memory(1 << 20));  // 40 MiB: two chunks or more
    std::shared_ptr<void> kept = small[3];  // a copy keeps its chunk alive
    small.clear();
    std::memset(kept.get(), 7, 1 << 20);  // still mapped while the other blocks of its chunk are gone
  }
  EXPECT_EQ(weight_memory_mapped_bytes(), before);
}

TEST(WeightMemory, ThreadsGetDisjointBlocks) {
  constexpr int kPerThread = 64;
  std::vector<std::shared_ptr<void>> got[2];
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        got[t].push_back(allocate_weight_memory(8192));
        std::memset(got[t].back().get(), t + 1, 8192);
      }
    });
  for (auto& th : threads) th.join();
  std::vector<uintptr_t> starts;
  for (int t = 0; t < 2; ++t)
    for (auto& b : got[t]) {
      const auto* p = static_cast<const unsigned char*>(b.get());
      EXPECT_TRUE(std::all_of(p, p + 8192, [&](unsigned char c) { return c == t + 1; }));
      starts.push_back(reinterpret_cast<uintptr_t>(b.get()));
    }
  std::sort(starts.begin(), starts.end());
  for (size_t i = 1; i < starts.size(); ++i) EXPECT_GE(starts[i] - starts[i - 1], 8192u);
}
