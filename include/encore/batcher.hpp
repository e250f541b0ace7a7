// encore::serve::Batcher - the request queue of a server: sequences wait here until the engine takes them in
// batches bounded by a token budget, shortest first, with a bound on how long any sequence can be passed over.
//
//   encore::serve::Batcher q({.max_batch_tokens = 16384});
//   auto id = q.push({12, 300, 7});                 // a request of three sequences (their token counts)
//   std::optional<encore::serve::Batch> b = q.next_batch();   // blocks; nullopt once closed and empty
//   for (const auto& e : b->entries) { /* e.request, e.index (position in its request), e.length */ }
//
// Policy of next_batch() (the contract the unit tests check):
//   1. Budget: the lengths of a batch's entries sum to at most max_batch_tokens (padding-free engines compute
//      on real tokens only, so the budget counts real tokens, not B x max length), and a batch holds at most
//      max_batch_sequences entries (0 = no limit). A single entry longer than the budget forms a batch alone.
//   2. Starvation bound: an entry left in the queue when a batch is formed is "skipped" once; an entry skipped
//      max_skips times is due, and due entries go first, oldest first. So no entry waits for more than
//      max_skips + 1 batches after the batches that take the entries due before it.
//   3. Length sorting: the rest of the budget is filled shortest first (ties: oldest first), which keeps short
//      requests fast under load; the returned entries are ordered longest first (the packing order).
// cancel() removes a request's queued entries; entries already handed out in a batch are the caller's (it
// drops their results). Thread safety: every member may be called from any thread.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <vector>

namespace encore::serve {

struct BatcherOptions {
  int64_t max_batch_tokens = 16384;  // sum of real sequence lengths per batch
  int64_t max_batch_sequences = 0;   // entries per batch; 0 = no limit
  int64_t max_skips = 4;             // starvation bound (see above); 0 = strict arrival order
};

using RequestId = uint64_t;

struct BatchEntry {
  RequestId request = 0;
  int64_t index = 0;   // position of the sequence in its request
  int64_t length = 0;  // tokens
  uint64_t arrival = 0;  // global arrival order
  int64_t skips = 0;     // batches formed while this entry waited
};

struct Batch {
  std::vector<BatchEntry> entries;  // longest first
  int64_t tokens = 0;               // sum of lengths
};

class Batcher {
 public:
  explicit Batcher(BatcherOptions options = {});

  // Queues a request of sequences with these token lengths (each >= 1); returns its id. Throws encore::Error
  // on an empty request, a non-positive length, or after close().
  RequestId push(const std::vector<int64_t>& lengths);
  // Removes the request's queued entries; returns how many were removed (0 if all were handed out already).
  int64_t cancel(RequestId request);

  // Waits until an entry is queued, then forms a batch by the policy above. nullopt once close() was called
  // and the queue is empty (queued entries are still handed out after close: a server drains them).
  std::optional<Batch> next_batch();
  // The same without waiting (nullopt when the queue is empty); and with a time limit.
  std::optional<Batch> try_next_batch();
  std::optional<Batch> next_batch_for(std::chrono::milliseconds timeout);

  void close();  // no more push(); wakes next_batch()
  bool closed() const;

  int64_t queued_sequences() const;
  int64_t queued_tokens() const;
  const BatcherOptions& options() const { return options_; }

 private:
  Batch form_batch_locked();

  const BatcherOptions options_;
  mutable std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<BatchEntry> queue_;  // arrival order
  RequestId next_request_ = 1;
  uint64_t next_arrival_ = 0;
  int64_t queued_tokens_ = 0;
  bool closed_ = false;
};

}  // namespace encore::serve
