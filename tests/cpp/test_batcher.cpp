// encore::serve::Batcher (the server's queue) and Engine (batches through a SentenceEncoder): the policy of
// batcher.hpp checked case by case - token budget, length sorting, the starvation bound, cancellation, close -
// and the engine's results against SentenceEncoder::encode on the real all-MiniLM-L6-v2 (max abs 1e-6).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <future>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "encore/batcher.hpp"
#include "encore/error.hpp"
#include "encore/runtime.hpp"
#include "encore/serve_engine.hpp"
#include <omp.h>

using namespace encore;
using namespace encore::serve;

namespace {

int64_t sum_lengths(const Batch& b) {
  int64_t s = 0;
  for (const auto& e : b.entries) s += e.length;
  return s;
}

// Drains the queue; every batch must respect the budget and be ordered longest first.
std::vector<Batch> drain(Batcher& q) {
  std::vector<Batch> out;
  while (auto b = q.try_next_batch()) {
    EXPECT_EQ(b->tokens, sum_lengths(*b));
    EXPECT_TRUE(std::is_sorted(b->entries.begin(), b->entries.end(),
                               [](const BatchEntry& x, const BatchEntry& y) { return x.length > y.length; }));
    out.push_back(*b);
  }
  return out;
}

}  // namespace

TEST(Batcher, TokenBudgetBoundsEveryBatchAndEverySequenceRunsOnce) {
  Batcher q({/*max_batch_tokens=*/100, /*max_batch_sequences=*/0, /*max_skips=*/4});
  std::mt19937 rng(7);
  std::map<std::pair<RequestId, int64_t>, int64_t> pushed;  // (request, index) -> length
  for (int r = 0; r < 40; ++r) {
    std::vector<int64_t> lengths(1 + rng() % 5);
    for (auto& n : lengths) n = 1 + rng() % 60;
    const RequestId id = q.push(lengths);
    for (size_t i = 0; i < lengths.size(); ++i) pushed[{id, static_cast<int64_t>(i)}] = lengths[i];
  }
  int64_t total = 0;
  for (auto& [k, n] : pushed) total += n;
  EXPECT_EQ(q.queued_tokens(), total);
  std::set<std::pair<RequestId, int64_t>> seen;
  for (const Batch& b : drain(q)) {
    EXPECT_LE(b.tokens, 100);
    EXPECT_GE(b.entries.size(), 1u);
    for (const auto& e : b.entries) {
      EXPECT_TRUE(seen.insert({e.request, e.index}).second) << "sequence handed out twice";
      EXPECT_EQ(pushed.at({e.request, e.index}), e.length);
    }
  }
  EXPECT_EQ(seen.size(), pushed.size());
  EXPECT_EQ(q.queued_sequences(), 0);
  EXPECT_EQ(q.queued_tokens(), 0);
}

TEST(Batcher, ASequenceLongerThanTheBudgetRunsAlone) {
  Batcher q({100, 0, 4});
  q.push({250});
  q.push({10, 20});
  auto batches = drain(q);
  ASSERT_EQ(batches.size(), 2u);
  // Shortest first: the two short ones go first, the long one alone afterwards.
  EXPECT_EQ(batches[0].tokens, 30);
  ASSERT_EQ(batches[1].entries.size(), 1u);
  EXPECT_EQ(batches[1].entries[0].length, 250);
}

TEST(Batcher, MaxBatchSequencesBoundsTheCount) {
  Batcher q({1000, 3, 4});
  q.push(std::vector<int64_t>(8, 5));
  auto batches = drain(q);
  ASSERT_EQ(batches.size(), 3u);
  EXPECT_EQ(batches[0].entries.size(), 3u);
  EXPECT_EQ(batches[1].entries.size(), 3u);
  EXPECT_EQ(batches[2].entries.size(), 2u);
}

TEST(Batcher, ShortestSequencesAreTakenFirstAndPackedLongestFirst) {
  Batcher q({60, 0, 4});
  const RequestId a = q.push({50, 7});
  const RequestId b = q.push({3, 40, 12});
  auto first = q.try_next_batch();
  ASSERT_TRUE(first);
  // 3 + 7 + 12 = 22 fit; 40 would make 62 > 60.
  std::vector<int64_t> lengths;
  for (auto& e : first->entries) lengths.push_back(e.length);
  EXPECT_EQ(lengths, (std::vector<int64_t>{12, 7, 3}));
  EXPECT_EQ(first->entries[1].request, a);
  EXPECT_EQ(first->entries[1].index, 1);
  EXPECT_EQ(first->entries[0].request, b);
  EXPECT_EQ(first->entries[0].index, 2);
  auto second = q.try_next_batch();
  ASSERT_TRUE(second);
  EXPECT_EQ(second->entries.size(), 1u);  // 40 then 50 > 60
  EXPECT_EQ(second->entries[0].length, 40);
}

// A long sequence under a steady flood of short ones (each round pushes more short work than one batch
// holds, so shortest-first alone would pass over the long one forever): nothing older than it is queued, so
// it must run within max_skips + 1 batches of its arrival.
TEST(Batcher, StarvationBoundUnderAFloodOfShortRequests) {
  for (int64_t max_skips : {0, 1, 3, 8}) {
    Batcher q({100, 0, max_skips});
    const RequestId long_id = q.push({90});
    int64_t batches = 0;
    bool served = false;
    while (!served && batches < 100) {
      q.push(std::vector<int64_t>(15, 10));  // 150 tokens of new short work per batch of 100
      auto b = q.try_next_batch();
      ASSERT_TRUE(b);
      ++batches;
      EXPECT_LE(b->tokens, 100);
      for (auto& e : b->entries) served |= e.request == long_id;
    }
    EXPECT_TRUE(served) << "max_skips " << max_skips;
    EXPECT_LE(batches, max_skips + 1) << "max_skips " << max_skips;
    if (max_skips > 0) {
      EXPECT_GT(batches, 1) << "shortest-first passed it over at least once";
    }
  }
}

// Work queued before the long sequence is due first (arrival order among due entries): the long one waits
// for it, then runs. A backlog of 300 short tokens at budget 100 takes 3 batches; the long one runs in the
// 4th at the latest even with new short work arriving every batch.
TEST(Batcher, DueEntriesKeepArrivalOrder) {
  Batcher q({100, 0, 1});
  q.push(std::vector<int64_t>(30, 10));
  const RequestId long_id = q.push({90});
  int64_t batches = 0;
  bool served = false;
  while (!served && batches < 100) {
    q.push(std::vector<int64_t>(15, 10));
    auto b = q.try_next_batch();
    ASSERT_TRUE(b);
    ++batches;
    for (auto& e : b->entries) served |= e.request == long_id;
  }
  EXPECT_TRUE(served);
  EXPECT_LE(batches, 4);
}

TEST(Batcher, ZeroSkipsIsArrivalOrder) {
  Batcher q({25, 0, 0});
  q.push({20});
  q.push({1});
  q.push({10});
  std::vector<int64_t> lengths;
  for (const Batch& b : drain(q))
    for (auto& e : b.entries) lengths.push_back(e.length);
  // Every entry is due at once: arrival order, cut by the budget (20+1 = 21, then 10).
  EXPECT_EQ(lengths, (std::vector<int64_t>{20, 1, 10}));
}

TEST(Batcher, ACancelledRequestLeavesTheQueueAndTheBatch) {
  Batcher q({1000, 0, 4});
  const RequestId a = q.push({5, 6});
  const RequestId b = q.push({7, 8, 9});
  const RequestId c = q.push({10});
  EXPECT_EQ(q.cancel(b), 3);
  EXPECT_EQ(q.cancel(b), 0);
  EXPECT_EQ(q.queued_sequences(), 3);
  EXPECT_EQ(q.queued_tokens(), 21);
  auto batch = q.try_next_batch();
  ASSERT_TRUE(batch);
  EXPECT_EQ(batch->tokens, 21);
  for (auto& e : batch->entries) EXPECT_NE(e.request, b);
  EXPECT_EQ(q.cancel(a), 0);  // already handed out: the caller drops its results
  EXPECT_FALSE(q.try_next_batch());
  (void)c;
}

TEST(Batcher, CloseDrainsThenEnds) {
  Batcher q({100, 0, 4});
  q.push({4, 4});
  q.close();
  EXPECT_THROW(q.push({1}), Error);
  auto b = q.next_batch();
  ASSERT_TRUE(b);
  EXPECT_EQ(b->tokens, 8);
  EXPECT_FALSE(q.next_batch());  // closed and empty: returns instead of blocking
}

TEST(Batcher, RejectsBadRequestsAndOptions) {
  Batcher q({100, 0, 4});
  EXPECT_THROW(q.push({}), Error);
  EXPECT_THROW(q.push({3, 0}), Error);
  EXPECT_THROW(q.push({-1}), Error);
  EXPECT_THROW(Batcher({0, 0, 4}), Error);
  EXPECT_THROW(Batcher({10, -1, 4}), Error);
  EXPECT_THROW(Batcher({10, 0, -1}), Error);
}

TEST(Batcher, ProducersAndABlockingConsumer) {
  Batcher q({64, 0, 2});
  std::atomic<int64_t> consumed{0};
  std::thread consumer([&] {
    while (auto b = q.next_batch()) {
      EXPECT_LE(b->tokens, 64);
      consumed += static_cast<int64_t>(b->entries.size());
    }
  });
  std::vector<std::thread> producers;
  for (int p = 0; p < 4; ++p)
    producers.emplace_back([&, p] {
      std::mt19937 rng(p);
      for (int i = 0; i < 200; ++i) q.push({1 + static_cast<int64_t>(rng() % 30), 1 + static_cast<int64_t>(rng() % 30)});
    });
  for (auto& t : producers) t.join();
  q.close();
  consumer.join();
  EXPECT_EQ(consumed.load(), 4 * 200 * 2);
}

TEST(Batcher, NextBatchForTimesOut) {
  Batcher q;
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(q.next_batch_for(std::chrono::milliseconds(30)));
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(25));
}

TEST(ClassificationScores, SigmoidSoftmaxOrRaw) {
  EXPECT_NEAR(classification_scores({0.f}, false)[0], 0.5f, 1e-7);
  EXPECT_NEAR(classification_scores({2.f}, false)[0], 1.0 / (1.0 + std::exp(-2.0)), 1e-7);
  auto s = classification_scores({1.f, 2.f, 3.f}, false);
  const double z = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  EXPECT_NEAR(s[0], std::exp(1.0) / z, 1e-7);
  EXPECT_NEAR(s[2], std::exp(3.0) / z, 1e-7);
  EXPECT_EQ(classification_scores({1.f, 2.f}, true), (std::vector<float>{1.f, 2.f}));
}

// The engine on the real all-MiniLM-L6-v2: requests batched together give what SentenceEncoder::encode gives
// each text (max abs 1e-6, pooled and not normalised), a request cancelled while queued never calls back, and
// the others complete.
TEST(Engine, BatchesGiveEncodeResultsAndCancelledRequestsNeverCallBack) {
  auto enc = std::make_shared<SentenceEncoder>(SentenceEncoder::load(default_model_dir()));
  const std::vector<std::string> texts = {"A man is eating food.", "Someone is eating.",
                                          "The new movie is awesome, a long review follows and goes on and on",
                                          "x", "Two dogs play in the snow."};
  EncodeOptions eo;
  eo.normalize = false;
  const Tensor expected = enc->encode(texts, eo);
  const int64_t C = expected.size(1);

  std::mutex mu;
  std::condition_variable cv;
  std::map<int, EngineResult> results;
  std::atomic<int> cancelled_calls{0};
  {
    EngineOptions opt;
    opt.batcher.max_batch_tokens = 40;  // several batches; requests split across them
    Engine engine(enc, opt);
    engine.warm_up(16);
    // Hold the engine busy with a first request so the next ones queue up together.
    auto submit = [&](int key, std::vector<std::string> t) {
      return engine.submit(enc->tokenize(t), Task::embed, [&, key](EngineResult r) {
        std::lock_guard<std::mutex> lock(mu);
        results[key] = std::move(r);
        cv.notify_all();
      });
    };
    submit(0, {texts[0], texts[1]});
    const RequestId doomed = engine.submit(enc->tokenize({texts[2], texts[3]}), Task::embed,
                                           [&](EngineResult) { ++cancelled_calls; });
    submit(1, {texts[2], texts[3], texts[4]});
    engine.cancel(doomed);
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(60), [&] { return results.size() == 2; }));
    lock.unlock();
    const EngineStats st = engine.stats();
    EXPECT_GE(st.batches, 2);
    EXPECT_EQ(st.queued_sequences, 0);
  }  // engine shut down: every callback that will run has run
  EXPECT_EQ(cancelled_calls.load(), 0);
  auto check = [&](const EngineResult& r, std::vector<int> rows) {
    ASSERT_TRUE(r.error.empty()) << r.error;
    ASSERT_EQ(r.outputs.size(), rows.size());
    for (size_t i = 0; i < rows.size(); ++i) {
      ASSERT_EQ(static_cast<int64_t>(r.outputs[i].size()), C);
      double worst = 0;
      for (int64_t c = 0; c < C; ++c)
        worst = std::max(worst, std::abs(double(r.outputs[i][c]) - expected.data<float>()[rows[i] * C + c]));
      // The engine's batches run GEMMs of other row counts than encode()'s: bitwise the same where oneDNN's f32
      // matmul is brgemm (AVX-512), not where its kernel choice depends on the row count (AVX2's gemm:jit sums in
      // another order: up to 1.4e-6 measured on an AVX2-only EPYC). 1e-5 on unit vectors of 384 components.
      EXPECT_LE(worst, 1e-5) << "text " << rows[i];
    }
  };
  check(results[0], {0, 1});
  check(results[1], {2, 3, 4});
  EXPECT_GT(results[1].tokens, 0);
}

TEST(Engine, RejectsWhatTheModelCannotRun) {
  auto enc = std::make_shared<SentenceEncoder>(SentenceEncoder::load(default_model_dir()));
  Engine engine(enc, {});
  EXPECT_THROW(engine.submit({}, Task::embed, nullptr), Error);
  Encoding too_long;
  too_long.ids.assign(enc->model().max_sequence_length() + 1, 100);
  EXPECT_THROW(engine.submit({too_long}, Task::embed, nullptr), Error);
  EXPECT_THROW(engine.submit(enc->tokenize({"a"}), Task::classify, nullptr), Error);  // no head
  engine.shutdown();
  EXPECT_THROW(engine.submit(enc->tokenize({"a"}), Task::embed, nullptr), Error);
}

// The model runs on the engine thread only (warm-up included), with the thread count set on the thread that made
// the engine: OpenMP's count is per thread, and oneDNN follows the calling thread's (serve_engine.hpp, "Threads").
TEST(Engine, WarmUpAndBatchesRunOnTheEngineThreadWithTheCallersThreadCount) {
  auto enc = std::make_shared<SentenceEncoder>(SentenceEncoder::load(default_model_dir()));
  const int before = get_num_threads();
  set_num_threads(1);
  std::thread::id engine_thread;
  int engine_omp_threads = -1;
  {
    Engine engine(enc, {});
    EXPECT_GT(engine.warm_up(8, 2), 0.0);
    std::promise<void> done;
    engine.submit(enc->tokenize({"hello"}), Task::embed, [&](EngineResult r) {
      EXPECT_TRUE(r.error.empty()) << r.error;
      engine_thread = std::this_thread::get_id();
      engine_omp_threads = omp_get_max_threads();
      done.set_value();
    });
    ASSERT_EQ(done.get_future().wait_for(std::chrono::seconds(60)), std::future_status::ready);
  }
  set_num_threads(before);
  EXPECT_NE(engine_thread, std::this_thread::get_id());
  EXPECT_EQ(engine_omp_threads, 1);
}
