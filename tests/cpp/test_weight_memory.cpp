// core::allocate_weight_memory: blocks for packed weights (populated up front, then advised for huge pages).
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
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

struct Mapping {
  bool found = false;
  size_t rss_kb = 0, anon_huge_kb = 0;
  std::string flags;
};

// The /proc/self/smaps entry of the mapping that holds `address`.
Mapping mapping_of(const void* address) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(address);
  std::ifstream smaps("/proc/self/smaps");
  Mapping m;
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    uintptr_t lo = 0, hi = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> lo >> dash >> hi && dash == '-') {  // a mapping's first line: "lo-hi perms ..."
      if (inside) break;
      inside = a >= lo && a < hi;
      m.found = m.found || inside;
      continue;
    }
    if (!inside) continue;
    std::istringstream field(line);
    std::string key;
    field >> key;
    if (key == "Rss:") field >> m.rss_kb;
    if (key == "AnonHugePages:") field >> m.anon_huge_kb;
    if (key == "VmFlags:") std::getline(field, m.flags);
  }
  return m;
}

uint64_t vmstat(const std::string& key) {  // a /proc/vmstat counter, 0 if absent
  std::ifstream f("/proc/vmstat");
  std::string k;
  uint64_t v = 0;
  while (f >> k >> v)
    if (k == key) return v;
  return 0;
}

std::string transparent_hugepage_mode() {  // "always", "madvise", "never", or "" without THP
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string all;
  std::getline(f, all);
  const size_t open = all.find('['), close = all.find(']');
  return open == std::string::npos || close == std::string::npos ? "" : all.substr(open + 1, close - open - 1);
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

// Huge pages are not taken at load: a block is populated with 4 KiB pages and only then advised MADV_HUGEPAGE,
// for khugepaged to collapse later. Faulting huge pages in up front made loads stall: all-MiniLM-L6-v2's
// AutoModel::load took 200-590 ms after a few idle seconds on a VM whose balloon reports free 2 MiB blocks to the
// host, against 73-100 ms with 4 KiB pages (weight_memory.hpp).
TEST(WeightMemory, BlocksArePopulatedWithSmallPagesThenAdvisedHuge) {
  const std::string mode = transparent_hugepage_mode();
  if (mode.empty()) GTEST_SKIP() << "no transparent huge pages on this kernel";
  const uint64_t collapsed_before = vmstat("thp_collapse_alloc");
  constexpr size_t kBytes = size_t{8} << 20;  // a chunk of its own would also do; this one spans 2 MiB pages
  std::shared_ptr<void> block = allocate_weight_memory(kBytes);
  const Mapping m = mapping_of(block.get());
  ASSERT_TRUE(m.found);
  EXPECT_NE((" " + m.flags + " ").find(" hg "), std::string::npos) << "VmFlags:" << m.flags;
  // The advice may wake khugepaged at once, and it may collapse the block before smaps is read: huge pages then
  // count only if no collapse happened meanwhile (in "always" mode too: the chunk is MADV_NOHUGEPAGE until then).
  if (vmstat("thp_collapse_alloc") == collapsed_before) {
    EXPECT_EQ(m.anon_huge_kb, 0u) << "huge pages faulted in at allocation (THP mode " << mode << ")";
  }
  // MADV_POPULATE_WRITE is Linux 5.14+; before, pages fault in on first touch.
  void* probe = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(probe, MAP_FAILED);
  const bool can_populate = madvise(probe, 4096, 23 /* MADV_POPULATE_WRITE */) == 0;
  munmap(probe, 4096);
  if (can_populate) {
    EXPECT_GE(m.rss_kb * 1024, kBytes) << "not populated up front";
  }
}

// With a runner (the kernels pass runtime::parallel_for), a block is populated over the runner's ranges alone: each
// range the runner runs is resident, a range it skips is not (so allocate does not populate the block itself too),
// the runner gets kPopulateGrainPages as its grain, and a block under two grains is populated in one call without
// the runner. The runner here runs its two halves on two threads at once.
TEST(WeightMemory, ARunnerPopulatesEveryPageOnce) {
  using encore::core::kPopulateGrainPages;
  void* probe = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(probe, MAP_FAILED);
  const bool can_populate = madvise(probe, 4096, 23 /* MADV_POPULATE_WRITE */) == 0;
  munmap(probe, 4096);
  std::mutex mutex;
  std::vector<std::pair<size_t, size_t>> ranges;
  std::vector<size_t> grains;
  bool skip_second = false;
  const encore::core::PageRangeRunner two_threads = [&](size_t pages, size_t grain, const auto& fn) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      grains.push_back(grain);
    }
    const size_t half = pages / 2;
    auto run = [&](size_t first, size_t end) {
      if (!(skip_second && first == half)) fn(first, end);
      std::lock_guard<std::mutex> lock(mutex);
      ranges.emplace_back(first, end);
    };
    std::thread second(run, half, pages);
    run(0, half);
    second.join();
  };
  const size_t bytes = kWeightChunkBytes / 2 + 3 * 4096 + 5;  // a chunk of its own: its mapping is this block alone
  const size_t pages = (bytes + 4095) / 4096;
  for (const bool skip : {false, true}) {
    skip_second = skip;
    ranges.clear();
    grains.clear();
    const uint64_t collapsed_before = vmstat("thp_collapse_alloc");
    std::shared_ptr<void> block = allocate_weight_memory(bytes, two_threads);
    ASSERT_NE(block, nullptr);
    ASSERT_EQ(grains, std::vector<size_t>{kPopulateGrainPages});
    std::sort(ranges.begin(), ranges.end());
    ASSERT_EQ(ranges.size(), 2u);
    EXPECT_EQ(ranges[0], std::make_pair(size_t{0}, pages / 2));
    EXPECT_EQ(ranges[1], std::make_pair(pages / 2, pages));
    if (can_populate) {
      const Mapping m = mapping_of(block.get());  // the block alone (advised apart from its chunk's tail)
      ASSERT_TRUE(m.found);
      // (khugepaged collapsing the advised block meanwhile would fill the skipped pages in)
      if (skip && vmstat("thp_collapse_alloc") == collapsed_before) {
        EXPECT_LE(m.rss_kb * 1024, (pages - pages / 2) * 4096) << "pages the runner skipped are resident";
      } else if (!skip) {
        EXPECT_GE(m.rss_kb * 1024, pages * 4096) << "the runner's ranges were not populated";
      }
    }
    EXPECT_TRUE(all_zero(block.get(), bytes));
  }
  // Small blocks do not call the runner.
  grains.clear();
  std::shared_ptr<void> small = allocate_weight_memory((2 * kPopulateGrainPages - 1) * 4096, two_threads);
  EXPECT_TRUE(grains.empty());
  EXPECT_TRUE(all_zero(small.get(), (2 * kPopulateGrainPages - 1) * 4096));
}
