// Tensor core: views, copies, memory accounting and error messages.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <type_traits>

#include "core/allocator.hpp"
#include "encore/nn.hpp"
#include "encore/tensor.hpp"
#include "encore/train.hpp"

#include <sys/mman.h>
#include <unistd.h>
#include <memory>
#include <vector>

using encore::Shape;
using encore::Tensor;

TEST(Tensor, StorageIs64ByteAligned) {
  for (int64_t n : {1, 3, 17, 1000}) {
    Tensor t = Tensor::empty({n});
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw_data()) % 64, 0u);
  }
}

TEST(Tensor, ViewsShareStorageAndCopiesDoNot) {
  Tensor t = Tensor::zeros({2, 3, 4});
  for (int64_t i = 0; i < 24; ++i) t.data<float>()[i] = float(i);
  Tensor s = t.select(0, 1);  // (3, 4) starting at 12
  EXPECT_EQ(s.shape(), (Shape{3, 4}));
  EXPECT_EQ(s.data<float>()[0], 12.f);
  Tensor tr = t.transpose(1, 2);  // (2, 4, 3), non-contiguous
  EXPECT_FALSE(tr.is_contiguous());
  Tensor c = tr.contiguous();
  EXPECT_TRUE(c.is_contiguous());
  // c[0][1][2] = t[0][2][1] = 9
  EXPECT_EQ(c.data<float>()[1 * 3 + 2], 9.f);
  Tensor sl = t.slice(2, 1, 3);  // (2, 3, 2)
  Tensor slc = sl.contiguous();
  EXPECT_EQ(slc.data<float>()[0], 1.f);
  EXPECT_EQ(slc.data<float>()[1], 2.f);
  EXPECT_EQ(slc.data<float>()[2], 5.f);
  s.data<float>()[0] = -1.f;
  EXPECT_EQ(t.data<float>()[12], -1.f);
  Tensor cl = t.clone();
  cl.data<float>()[12] = 5.f;
  EXPECT_EQ(t.data<float>()[12], -1.f);
  EXPECT_EQ(t.view({6, -1}).shape(), (Shape{6, 4}));
  EXPECT_EQ(t.unsqueeze(0).shape(), (Shape{1, 2, 3, 4}));
}

TEST(Tensor, MemoryStatsTrackLiveAndPeakBytes) {
  encore::reset_peak_memory();
  const auto before = encore::memory_stats();
  {
    Tensor a = Tensor::empty({1000});
    Tensor b = Tensor::empty({500});
    EXPECT_EQ(encore::memory_stats().current_bytes - before.current_bytes, 6000);
  }
  EXPECT_EQ(encore::memory_stats().current_bytes, before.current_bytes);
  EXPECT_EQ(encore::memory_stats().peak_bytes - before.current_bytes, 6000);
}

TEST(Tensor, ErrorsNameTheArgumentAndShape) {
  Tensor t = Tensor::zeros({2, 5, 60});
  try {
    encore::check_shape(t, "src", {-1, -1, 64});
    FAIL() << "expected an error";
  } catch (const encore::Error& e) {
    EXPECT_NE(std::string(e.what()).find("src: expected shape (*, *, 64), got (2, 5, 60)"), std::string::npos) << e.what();
  }
  EXPECT_THROW(t.view({7, -1}), encore::Error);
  EXPECT_THROW(t.slice(1, 3, 9), encore::Error);
  EXPECT_THROW(Tensor::empty({-1}), encore::Error);
  EXPECT_THROW(Tensor::empty({int64_t{1} << 30, int64_t{1} << 30}), encore::Error);  // rejected before allocating
}

TEST(Layers, ModuleErrorsNameKeysAndShapes) {
  encore::nn::TransformerEncoderLayer layer(16, 4, 32);
  auto sd = layer.state_dict();
  sd["linear1.weight"] = Tensor::zeros({32, 15});
  try {
    layer.load_state_dict(sd);
    FAIL();
  } catch (const encore::Error& e) {
    EXPECT_NE(std::string(e.what()).find("'linear1.weight': expected (32, 16), got (32, 15)"), std::string::npos) << e.what();
  }
  sd = layer.state_dict();
  sd.erase("norm2.bias");
  sd["bogus"] = Tensor::zeros({1});
  try {
    layer.load_state_dict(sd);
    FAIL();
  } catch (const encore::Error& e) {
    std::string w = e.what();
    EXPECT_NE(w.find("missing key(s): 'norm2.bias'"), std::string::npos) << w;
    EXPECT_NE(w.find("unexpected key(s): 'bogus'"), std::string::npos) << w;
  }
  EXPECT_THROW(layer.forward(Tensor::zeros({3, 2, 15})), encore::Error);
  EXPECT_THROW(encore::nn::MultiheadAttention(10, 3), encore::Error);  // 10 % 3 != 0
  EXPECT_THROW(encore::nn::TransformerEncoderLayer(16, 4, 32, 0.1, "tanh"), encore::Error);
}

// A layer's norm is a LayerNorm or an RMSNorm (nn::Norm): the RMSNorm kind has no bias parameter, computes what the
// RMSNorm module computes (bit for bit: the same op), and converts from either module keeping its parameters.
TEST(Layers, NormIsLayerNormOrRMSNorm) {
  using encore::nn::Norm;
  using encore::nn::NormKind;
  encore::nn::TransformerEncoderLayer layer(8, 2, 16, 0.0, "relu", 1e-6, true, true, true, "rms_norm");
  const auto sd = layer.state_dict();
  EXPECT_EQ(sd.count("norm1.weight"), 1u);
  EXPECT_EQ(sd.count("norm1.bias"), 0u);
  EXPECT_EQ(layer.norm2.kind, NormKind::rms_norm);
  EXPECT_DOUBLE_EQ(layer.norm2.eps, 1e-6);

  encore::nn::RMSNorm rms(8, 1e-6);
  Tensor w = Tensor::zeros({8});
  for (int i = 0; i < 8; ++i) w.data<float>()[i] = 0.5f + 0.125f * i;
  rms.weight.copy_from(w);
  rms.eval();
  const Norm norm = rms;  // converts, copying the weight
  EXPECT_EQ(norm.kind, NormKind::rms_norm);
  Tensor x = Tensor::zeros({3, 8});
  for (int i = 0; i < 24; ++i) x.data<float>()[i] = static_cast<float>((i * 7) % 11) - 5.f;
  Tensor want = rms.forward(x), got = norm.apply(x);
  for (int i = 0; i < 24; ++i) EXPECT_EQ(got.data<float>()[i], want.data<float>()[i]) << i;
  const Norm ln = encore::nn::LayerNorm(8, 1e-5, true, false);
  EXPECT_EQ(ln.kind, NormKind::layer_norm);
  EXPECT_FALSE(ln.bias.defined());
  EXPECT_THROW(encore::nn::parse_norm("batch_norm"), encore::Error);
}

TEST(Layers, DeepCopiedStackLayersDoNotShareStorage) {
  encore::nn::TransformerEncoderLayer layer(8, 2, 16);
  encore::nn::TransformerEncoder enc(layer, 3);
  auto sd = enc.state_dict();
  EXPECT_EQ(sd.size(), 3 * layer.state_dict().size());
  EXPECT_NE(sd["layers.0.linear1.weight"].raw_data(), sd["layers.1.linear1.weight"].raw_data());
  encore::nn::TransformerEncoder shared(layer, 3, std::nullopt, /*share_parameters=*/true);
  EXPECT_EQ(shared.state_dict().size(), layer.state_dict().size());  // ALBERT-style: one set of weights
}

// Copies of every module kind are deep (torch's copy.deepcopy): same names, same values, own storage; moves
// keep the storage (loaders move checkpoint-mapped layers into place).
TEST(Layers, CopiesAreDeepAndMovesKeepStorage) {
  using encore::nn::Module;
  encore::nn::TransformerEncoderLayer layer(8, 2, 16);
  encore::nn::TransformerDecoderLayer dec(8, 2, 16);
  encore::nn::Linear lin(5, 3);
  encore::nn::MultiheadAttention cross(8, 2, 0.0, true, false, false, 4, 6);  // separate q/k/v weights
  auto check_copy = [](Module& original, Module& copy) {
    auto a = original.named_parameters(), b = copy.named_parameters();
    ASSERT_EQ(a.size(), b.size());
    ASSERT_FALSE(a.empty());
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].first, b[i].first);
      EXPECT_NE(a[i].second->raw_data(), b[i].second->raw_data()) << a[i].first;
      ASSERT_EQ(a[i].second->shape(), b[i].second->shape()) << a[i].first;
      EXPECT_EQ(0, std::memcmp(a[i].second->raw_data(), b[i].second->raw_data(), a[i].second->numel() * sizeof(float)))
          << a[i].first;
    }
  };
  encore::nn::TransformerEncoderLayer layer_copy = layer;
  check_copy(layer, layer_copy);
  encore::nn::TransformerDecoderLayer dec_copy(8, 2, 16);
  dec_copy = dec;  // copy assignment
  check_copy(dec, dec_copy);
  encore::nn::Linear lin_copy = lin;
  check_copy(lin, lin_copy);
  encore::nn::MultiheadAttention cross_copy = cross;
  check_copy(cross, cross_copy);
  layer_copy.linear1.weight.fill(0.f);  // training the copy leaves the original as it was
  EXPECT_NE(layer.linear1.weight.data<float>()[0], 0.f);

  const void* storage = layer.self_attn.in_proj_weight.raw_data();
  encore::nn::TransformerEncoderLayer moved = std::move(layer);
  EXPECT_EQ(moved.self_attn.in_proj_weight.raw_data(), storage);
  static_assert(std::is_nothrow_move_constructible_v<encore::nn::TransformerEncoderLayer>);  // vector growth moves
  static_assert(std::is_nothrow_move_constructible_v<encore::nn::TransformerDecoderLayer>);
}

// A packed in-projection given as its query, key and value rows (use_in_proj_rows, as loaders give a checkpoint's
// three weights) is not built until something needs the weight: the prepared forward, the listed parameters and a
// training step (even one the module is put in without train()) all equal those of a module holding the stacked
// weight, bit for bit.
TEST(Layers, InProjFromRowsIsBuiltOnlyWhenNeeded) {
  using encore::nn::MultiheadAttention;
  auto same = [](const Tensor& a, const Tensor& b) {
    return a.shape() == b.shape() &&
           std::memcmp(a.contiguous().raw_data(), b.contiguous().raw_data(), a.numel() * sizeof(float)) == 0;
  };
  MultiheadAttention reference(8, 2, 0.0, true, false, false, std::nullopt, std::nullopt, /*batch_first=*/true);
  std::vector<Tensor> rows;
  for (int64_t i = 0; i < 3; ++i) rows.push_back(reference.in_proj_weight.slice(0, i * 8, (i + 1) * 8).clone());
  Tensor x = Tensor::empty({2, 5, 8});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>((i * 37) % 23) / 11.f - 1.f;

  MultiheadAttention trainee = reference;  // training mode, as constructed
  trainee.use_in_proj_rows(rows);
  EXPECT_FALSE(trainee.in_proj_weight.defined());
  MultiheadAttention trained_reference = reference;
  const Tensor y = trainee.forward(x, x, x).output, y_ref = trained_reference.forward(x, x, x).output;
  EXPECT_TRUE(same(y, y_ref));
  Tensor grad = Tensor::empty(y.shape());
  for (int64_t i = 0; i < grad.numel(); ++i) grad.data<float>()[i] = static_cast<float>((i * 13) % 7) - 3.f;
  EXPECT_TRUE(same(trainee.backward(grad), trained_reference.backward(grad)));
  EXPECT_TRUE(same(trainee.din_proj_weight, trained_reference.din_proj_weight));

  reference.eval();
  MultiheadAttention from_rows = reference;
  from_rows.use_in_proj_rows(rows);
  EXPECT_FALSE(from_rows.in_proj_weight.defined());
  reference.prepare_inference(encore::DType::f32);
  from_rows.prepare_inference(encore::DType::f32);
  EXPECT_FALSE(from_rows.in_proj_weight.defined());  // prepared from a transient copy
  EXPECT_TRUE(same(from_rows.forward(x, x, x).output, reference.forward(x, x, x).output));
  auto sd = from_rows.state_dict();  // listing builds it: the rows stacked
  EXPECT_TRUE(same(sd.at("in_proj_weight"), reference.in_proj_weight));
  // changed through the listing, then prepared again: the forward follows the change, not the rows
  sd.at("in_proj_weight").data<float>()[3] += 0.5f;
  reference.in_proj_weight.data<float>()[3] += 0.5f;
  reference.prepare_inference(encore::DType::f32);
  from_rows.prepare_inference(encore::DType::f32);
  EXPECT_TRUE(same(from_rows.forward(x, x, x).output, reference.forward(x, x, x).output));
}

// nn::Embedding as torch.nn.Embedding: rows gathered by id; backward accumulates each id's output gradient into
// its row, except the padding_idx row, and ids out of range name the argument.
TEST(Layers, EmbeddingGathersRowsAndAccumulatesGradients) {
  encore::nn::Embedding emb(5, 3, /*padding_idx=*/1);
  EXPECT_EQ(emb.named_parameters().size(), 1u);
  EXPECT_EQ(emb.named_parameters()[0].first, "weight");
  Tensor ids = Tensor::empty({2, 2}, encore::DType::i64);
  const int64_t id[] = {4, 1, 4, 0};
  std::memcpy(ids.data<int64_t>(), id, sizeof(id));
  Tensor out = emb.forward(ids);  // training mode (the default): saves the ids
  ASSERT_EQ(out.shape(), (encore::Shape{2, 2, 3}));
  const float* w = emb.weight.data<float>();
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t c = 0; c < 3; ++c) EXPECT_EQ(out.data<float>()[i * 3 + c], w[id[i] * 3 + c]);
  Tensor dout = Tensor::full({2, 2, 3}, 1.f);
  emb.backward(dout);
  const float* g = emb.dweight.data<float>();
  const float expected_rows[] = {1.f, 0.f, 0.f, 0.f, 2.f};  // id 4 twice; id 1 is padding_idx
  for (int64_t r = 0; r < 5; ++r)
    for (int64_t c = 0; c < 3; ++c) EXPECT_EQ(g[r * 3 + c], expected_rows[r]) << "row " << r;
  Tensor bad = Tensor::zeros({1, 1}, encore::DType::i64);
  bad.data<int64_t>()[0] = 5;
  EXPECT_THROW(emb.forward(bad), encore::Error);
  EXPECT_THROW(encore::nn::Embedding(5, 3, /*padding_idx=*/5), encore::Error);
}

// ---- caching allocator (src/core/allocator.hpp) ----
namespace {
bool caching_enabled() {
  const char* m = std::getenv("ENCORE_ALLOCATOR");
  return !(m && std::string(m) == "system");
}
}  // namespace

TEST(Allocator, SizeClassesBoundTheSlack) {
  for (size_t bytes : {size_t{1}, size_t{63}, size_t{64}, size_t{4000}, encore::core::kMinCachedBytes - 1,
                       encore::core::kMinCachedBytes, size_t{40000}, size_t{65537}, size_t{3145728},
                       size_t{3145729}, size_t{100000007}}) {
    const size_t c = encore::core::storage_size_class(bytes);
    EXPECT_GE(c, bytes);
    EXPECT_EQ(c % 64, 0u) << bytes;
    if (bytes >= encore::core::kMinCachedBytes) EXPECT_LT(static_cast<double>(c), 1.125 * bytes) << bytes;
    else EXPECT_LT(c, bytes + 64);
    EXPECT_EQ(encore::core::storage_size_class(c), c) << "a class is its own class: " << c;
  }
}

TEST(Allocator, ReusesFreedBlocksAndStaysWithinItsLimit) {
  using encore::core::CachingAllocator;
  CachingAllocator a(size_t{5} << 19);  // 2.5 MiB of cache
  size_t cap1 = 0, cap2 = 0, cap3 = 0;
  void* p1 = a.allocate(1000000, &cap1);
  std::memset(p1, 1, 1000000);
  a.release(p1, cap1);
  EXPECT_EQ(a.stats().cached_bytes, static_cast<int64_t>(cap1));
  void* p2 = a.allocate(999000, &cap2);  // same size class
  EXPECT_EQ(p2, p1);
  EXPECT_EQ(cap2, cap1);
  EXPECT_EQ(a.stats().reused_allocations, 1);
  EXPECT_EQ(a.stats().system_allocations, 1);
  EXPECT_EQ(a.stats().cached_bytes, 0);
  // Another class is a fresh block; its 2 MiB class and p2's 1 MiB exceed the limit together, so caching p2
  // evicts the older p3.
  void* p3 = a.allocate(2000000, &cap3);
  EXPECT_EQ(a.stats().system_allocations, 2);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p3) % 64, 0u);
  a.release(p3, cap3);
  a.release(p2, cap2);
  EXPECT_EQ(a.stats().evictions, 1);  // p3 (2 MB, cached first) made room for p2
  EXPECT_EQ(a.stats().cached_bytes, static_cast<int64_t>(cap2));
  size_t cap4 = 0;
  EXPECT_EQ(a.allocate(1000000, &cap4), p2);
  a.release(p2, cap4);
  // Below the threshold blocks are never cached; above the limit neither.
  size_t small = 0, huge = 0;
  void* ps = a.allocate(100, &small);
  a.release(ps, small);
  EXPECT_EQ(a.stats().small_allocations, 1);
  void* ph = a.allocate(size_t{4} << 20, &huge);
  a.release(ph, huge);
  EXPECT_EQ(a.stats().cached_bytes, static_cast<int64_t>(cap2));
  a.release_all();
  EXPECT_EQ(a.stats().cached_bytes, 0);
}

TEST(Allocator, ASmallerRequestTakesALargerBlockUpToTwiceItsSize) {
  encore::core::CachingAllocator a(size_t{64} << 20);
  size_t big = 0, mid = 0, small = 0;
  void* pb = a.allocate(3000000, &big);
  a.release(pb, big);
  void* pm = a.allocate(1600000, &mid);  // class 1.625 MiB; the cached 3 MiB block is within 2x
  EXPECT_EQ(pm, pb);
  EXPECT_EQ(mid, big);  // released back under the block's own class
  a.release(pm, mid);
  void* ps = a.allocate(1000000, &small);  // class 1 MiB: 3 MiB is more than twice that
  EXPECT_NE(ps, pb);
  EXPECT_EQ(small, encore::core::storage_size_class(1000000));
  a.release(ps, small);
  EXPECT_EQ(a.stats().system_allocations, 2);
  EXPECT_EQ(a.stats().reused_allocations, 1);
  EXPECT_EQ(a.stats().cached_bytes, static_cast<int64_t>(big + small));
}

TEST(Allocator, BypassNeverCaches) {
  encore::core::CachingAllocator a(size_t{64} << 20, /*bypass=*/true);
  size_t cap = 0;
  for (int i = 0; i < 3; ++i) {
    void* p = a.allocate(1 << 20, &cap);
    a.release(p, cap);
  }
  EXPECT_EQ(a.stats().system_allocations, 3);
  EXPECT_EQ(a.stats().reused_allocations, 0);
  EXPECT_EQ(a.stats().cached_bytes, 0);
}

TEST(Allocator, ConcurrentAllocateAndReleaseKeepTheBooks) {
  encore::core::CachingAllocator a(size_t{16} << 20);
  auto work = [&a](int seed) {
    for (int i = 0; i < 2000; ++i) {
      size_t cap = 0;
      const size_t bytes = 40000 + static_cast<size_t>((i * 7919 + seed * 104729) % 9) * 50000;
      char* p = static_cast<char*>(a.allocate(bytes, &cap));
      p[0] = static_cast<char>(i);
      p[bytes - 1] = static_cast<char>(seed);
      a.release(p, cap);
    }
  };
  std::thread t1(work, 1), t2(work, 2), t3(work, 3);
  t1.join();
  t2.join();
  t3.join();
  const auto s = a.stats();
  EXPECT_EQ(s.system_allocations + s.reused_allocations, 6000);
  EXPECT_LE(s.system_allocations, 3 * 9);  // at most one block per class per thread is ever live at once
  EXPECT_LE(s.cached_bytes, int64_t{16} << 20);
}

// ---- decay: cached blocks that no request takes within the decay time go back to the system ----

namespace {
// A clock the tests move by hand (the allocator reads it through a function pointer).
std::chrono::steady_clock::time_point g_fake_now{};
std::chrono::steady_clock::time_point fake_now() { return g_fake_now; }
void advance_ms(int64_t ms) { g_fake_now += std::chrono::milliseconds(ms); }

// Resident pages of this process, in bytes (/proc/self/statm's second field).
int64_t resident_bytes() {
  long pages_total = 0, pages_resident = 0;
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return -1;
  const int n = std::fscanf(f, "%ld %ld", &pages_total, &pages_resident);
  std::fclose(f);
  return n == 2 ? static_cast<int64_t>(pages_resident) * sysconf(_SC_PAGESIZE) : -1;
}
}  // namespace

TEST(Allocator, BlocksUnusedForTheDecayTimeGoBackToTheSystem) {
  using encore::core::CachingAllocator;
  CachingAllocator a(size_t{64} << 20, false, std::chrono::milliseconds(10000), &fake_now);
  size_t cap_a = 0, cap_b = 0, cap = 0;
  void* pa = a.allocate(1000000, &cap_a);
  void* pb = a.allocate(3000000, &cap_b);  // another class (more than twice pa's)
  a.release(pa, cap_a);                    // t = 0
  advance_ms(6000);
  a.release(pb, cap_b);                    // t = 6 s
  advance_ms(4000);                        // t = 10 s: pa has waited exactly the decay time
  a.release_idle();
  EXPECT_EQ(a.stats().decayed, 1);
  EXPECT_EQ(a.stats().evictions, 0);
  EXPECT_EQ(a.stats().cached_bytes, static_cast<int64_t>(cap_b));
  // pb is taken and given back at t = 10 s: its wait starts again.
  void* again = a.allocate(3000000, &cap);
  EXPECT_EQ(again, pb);
  a.release(again, cap);
  advance_ms(9000);  // t = 19 s: pb waited 9 s
  a.release_idle();
  EXPECT_EQ(a.stats().decayed, 1);
  EXPECT_EQ(a.stats().cached_bytes, static_cast<int64_t>(cap_b));
  advance_ms(1000);  // t = 20 s; allocate applies the rule too, before it maps a fresh block for pa's class
  void* pa2 = a.allocate(1000000, &cap);
  EXPECT_EQ(a.stats().decayed, 2);
  EXPECT_EQ(a.stats().cached_bytes, 0);
  EXPECT_EQ(a.stats().system_allocations, 3);
  a.release(pa2, cap);
}

TEST(Allocator, NeverDecayKeepsBlocksUntilTheLimitNeedsThem) {
  encore::core::CachingAllocator a(size_t{64} << 20, false, encore::core::kNeverDecay, &fake_now);
  size_t cap = 0;
  void* p = a.allocate(1000000, &cap);
  a.release(p, cap);
  advance_ms(int64_t{1} << 40);
  a.release_idle();
  EXPECT_EQ(a.stats().decayed, 0);
  EXPECT_EQ(a.allocate(1000000, &cap), p);
  a.release(p, cap);
}

// Decayed blocks leave the process: the resident set shrinks by their size once the decay time has passed.
// (What this does not tell apart: blocks from glibc's malloc of this size were returned too in a trial run, so
// the allocator mapping its blocks itself is a guarantee against malloc's thresholds, not shown by this test.)
TEST(Allocator, DecayedBlocksLeaveTheResidentSet) {
  encore::core::CachingAllocator a(size_t{1} << 30, false, std::chrono::milliseconds(1000), &fake_now);
  const size_t bytes = size_t{8} << 20;
  constexpr int kBlocks = 6;
  std::vector<std::pair<char*, size_t>> blocks;
  for (int i = 0; i < kBlocks; ++i) {
    size_t cap = 0;
    char* p = static_cast<char*>(a.allocate(bytes, &cap));
    std::memset(p, 1, bytes);  // resident now
    blocks.emplace_back(p, cap);
  }
  for (auto& [p, cap] : blocks) a.release(p, cap);
  const int64_t with_blocks = resident_bytes();
  advance_ms(1000);
  a.release_idle();
  const int64_t without_blocks = resident_bytes();
  ASSERT_GT(with_blocks, 0);
  EXPECT_EQ(a.stats().decayed, kBlocks);
  // 48 MiB left; 8 MiB of margin for whatever else the process touched meanwhile (nothing, in practice).
  EXPECT_GE(with_blocks - without_blocks, static_cast<int64_t>(kBlocks * bytes) - (int64_t{8} << 20))
      << with_blocks << " -> " << without_blocks;
}

// Repeated inference on the same shapes: after the first calls, tensors come from the cache only, and the
// tracked bytes stay the tensors' own (the cache is invisible to memory_stats).
TEST(Allocator, SteadyStateInferenceMapsNoNewMemory) {
  if (!caching_enabled()) GTEST_SKIP() << "ENCORE_ALLOCATOR=system";
  for (encore::DType dtype : {encore::DType::f32, encore::DType::bf16, encore::DType::i8}) {
    encore::nn::TransformerEncoderLayer layer(64, 4, 256, 0.0, "gelu", 1e-5, /*batch_first=*/true);
    encore::nn::TransformerEncoder enc(layer, 2);
    enc.eval();
    enc.prepare_inference(dtype);
    Tensor x = Tensor::zeros({4, 40, 64});
    for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>((i * 37) % 101) / 50.f - 1.f;
    const auto live_before = encore::memory_stats().current_bytes;
    Tensor first = enc.forward(x);
    Tensor second = enc.forward(x);  // from here on two earlier outputs stay alive during each call
    encore::AllocatorStats warm;
    for (int i = 0; i < 4; ++i) {
      if (i == 1) warm = encore::allocator_stats();
      Tensor again = enc.forward(x);
      EXPECT_EQ(0, std::memcmp(again.raw_data(), first.raw_data(), static_cast<size_t>(first.numel()) * 4))
          << encore::dtype_name(dtype) << " call " << i;
    }
    const auto after = encore::allocator_stats();
    // (blocks below 32 KiB come from malloc's own free lists each time: small_allocations grows, harmlessly)
    EXPECT_EQ(after.system_allocations, warm.system_allocations) << encore::dtype_name(dtype);
    EXPECT_GT(after.reused_allocations, warm.reused_allocations);
    first = Tensor();
    second = Tensor();
    EXPECT_EQ(encore::memory_stats().current_bytes, live_before);
  }
}

// ---- copy-on-write of read-only file mappings (a loaded checkpoint's weights) ----

namespace {
// n floats 0, 1, 2, ... written to a temporary file and mapped read-only and private, as io::SafeTensors maps a
// checkpoint: a store into these pages faults.
struct ReadOnlyMappedFloats {
  explicit ReadOnlyMappedFloats(int64_t n) : bytes(static_cast<size_t>(n) * sizeof(float)) {
    char name[] = "/tmp/encore_cow_XXXXXX";
    fd = mkstemp(name);
    unlink(name);
    std::vector<float> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = float(i);
    EXPECT_EQ(write(fd, v.data(), bytes), static_cast<ssize_t>(bytes));
    void* p = mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
    EXPECT_NE(p, MAP_FAILED);
    const size_t len = bytes;
    mapping = std::shared_ptr<void>(p, [len](void* q) { munmap(q, len); });
  }
  ~ReadOnlyMappedFloats() { close(fd); }
  std::vector<float> file_contents() const {
    std::vector<float> v(bytes / sizeof(float));
    EXPECT_EQ(pread(fd, v.data(), bytes, 0), static_cast<ssize_t>(bytes));
    return v;
  }
  size_t bytes;
  int fd = -1;
  std::shared_ptr<void> mapping;
};
}  // namespace

TEST(Tensor, WritingAFileMappingWritesAnOwnedCopy) {
  ReadOnlyMappedFloats file(8);
  Tensor t = Tensor::wrap_file_mapping(file.mapping.get(), {2, 4}, encore::DType::f32, file.mapping);
  Tensor row = t.select(0, 1);  // a view sharing the storage
  ASSERT_TRUE(t.is_file_mapping());
  const int64_t before = encore::memory_stats().current_bytes;
  t.copy_from(Tensor::full({2, 4}, 5.f));  // faulted before copy-on-write
  EXPECT_FALSE(t.is_file_mapping());
  EXPECT_FALSE(row.is_file_mapping());
  EXPECT_EQ(encore::memory_stats().current_bytes - before, 32);  // the copy is encore's own, counted memory
  for (int64_t i = 0; i < 4; ++i) EXPECT_EQ(row.data<float>()[i], 5.f);  // the view sees the copy
  for (int64_t i = 0; i < 8; ++i) EXPECT_EQ(file.file_contents()[static_cast<size_t>(i)], float(i));

  ReadOnlyMappedFloats other(4);
  Tensor u = Tensor::wrap_file_mapping(other.mapping.get(), {4}, encore::DType::f32, other.mapping);
  Tensor same = u;  // a second handle of the same storage
  u.fill(-1.f);
  EXPECT_EQ(same.data<float>()[3], -1.f);
  EXPECT_EQ(other.file_contents()[3], 3.f);
  // a refused copy changes nothing: the storage stays the mapping
  Tensor v = Tensor::wrap_file_mapping(other.mapping.get(), {4}, encore::DType::f32, other.mapping);
  EXPECT_THROW(v.copy_from(Tensor::zeros({5})), encore::Error);
  EXPECT_TRUE(v.is_file_mapping());
  EXPECT_EQ(v.data<float>()[1], 1.f);
}

TEST(Tensor, ModuleWritesToFileMappedParametersCopyFirst) {
  // load_state_dict, reset_parameters and an optimizer step on parameters that are still a checkpoint's read-only
  // mapping (AutoModel::module() of a model never put in train()) write owned copies; the file stays as it was.
  encore::nn::Linear lin(4, 2);
  ReadOnlyMappedFloats w(8), b(2);
  lin.weight = encore::nn::Parameter(Tensor::wrap_file_mapping(w.mapping.get(), {2, 4}, encore::DType::f32, w.mapping));
  lin.bias = encore::nn::Parameter(Tensor::wrap_file_mapping(b.mapping.get(), {2}, encore::DType::f32, b.mapping));
  encore::nn::StateDict sd{{"weight", Tensor::full({2, 4}, 0.5f)}, {"bias", Tensor::full({2}, 0.25f)}};
  lin.load_state_dict(sd);
  EXPECT_FALSE(lin.weight.is_file_mapping());
  EXPECT_EQ(lin.weight.data<float>()[7], 0.5f);
  EXPECT_EQ(lin.bias.data<float>()[1], 0.25f);
  EXPECT_EQ(w.file_contents()[7], 7.f);

  encore::nn::RMSNorm norm(4);
  ReadOnlyMappedFloats g(4);
  norm.weight = encore::nn::Parameter(Tensor::wrap_file_mapping(g.mapping.get(), {4}, encore::DType::f32, g.mapping));
  norm.train();
  Tensor x = Tensor::zeros({3, 4});
  for (int64_t i = 0; i < 12; ++i) x.data<float>()[i] = float(i % 5) - 2.f;
  norm.forward(x);
  norm.backward(Tensor::full({3, 4}, 1.f));
  encore::train::AdamW opt(norm, {});
  opt.step();
  EXPECT_FALSE(norm.weight.is_file_mapping());
  EXPECT_NE(norm.weight.data<float>()[3], 3.f);  // moved by the step
  EXPECT_EQ(g.file_contents()[3], 3.f);

  lin.weight = encore::nn::Parameter(Tensor::wrap_file_mapping(w.mapping.get(), {2, 4}, encore::DType::f32, w.mapping));
  lin.reset_parameters(3);
  EXPECT_FALSE(lin.weight.is_file_mapping());
  EXPECT_EQ(w.file_contents()[0], 0.f);
}
