// The server's request queue: token-budget batches, shortest first, with a starvation bound (see batcher.hpp).
#include "encore/batcher.hpp"

#include <algorithm>

#include "encore/error.hpp"

namespace encore::serve {

Batcher::Batcher(BatcherOptions options) : options_(options) {
  ENCORE_CHECK(options_.max_batch_tokens > 0, "max_batch_tokens must be positive, got ", options_.max_batch_tokens);
  ENCORE_CHECK(options_.max_batch_sequences >= 0, "max_batch_sequences must be >= 0 (0 = no limit), got ",
               options_.max_batch_sequences);
  ENCORE_CHECK(options_.max_skips >= 0, "max_skips must be >= 0, got ", options_.max_skips);
}

RequestId Batcher::push(const std::vector<int64_t>& lengths) {
  ENCORE_CHECK(!lengths.empty(), "a request needs at least one sequence");
  for (size_t i = 0; i < lengths.size(); ++i)
    ENCORE_CHECK(lengths[i] > 0, "sequence ", i, " has length ", lengths[i], "; lengths must be positive");
  RequestId id;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ENCORE_CHECK(!closed_, "the queue is closed (the server is shutting down)");
    id = next_request_++;
    for (size_t i = 0; i < lengths.size(); ++i) {
      queue_.push_back(BatchEntry{id, static_cast<int64_t>(i), lengths[i], next_arrival_++, 0});
      queued_tokens_ += lengths[i];
    }
  }
  ready_.notify_one();
  return id;
}

int64_t Batcher::cancel(RequestId request) {
  std::lock_guard<std::mutex> lock(mutex_);
  int64_t removed = 0;
  for (auto it = queue_.begin(); it != queue_.end();) {
    if (it->request == request) {
      queued_tokens_ -= it->length;
      it = queue_.erase(it);
      ++removed;
    } else {
      ++it;
    }
  }
  return removed;
}

Batch Batcher::form_batch_locked() {
  Batch batch;
  const int64_t budget = options_.max_batch_tokens;
  const size_t max_entries = options_.max_batch_sequences > 0 ? static_cast<size_t>(options_.max_batch_sequences)
                                                              : queue_.size();
  std::vector<char> taken(queue_.size(), 0);
  auto fits = [&](const BatchEntry& e) {
    if (batch.entries.empty()) return true;  // an entry longer than the budget runs alone
    return batch.entries.size() < max_entries && batch.tokens + e.length <= budget;
  };
  auto take = [&](size_t i) {
    taken[i] = 1;
    batch.entries.push_back(queue_[i]);
    batch.tokens += queue_[i].length;
  };
  // 1. Due entries (skipped max_skips times), oldest first; stop at the first that does not fit so that due
  //    entries keep their arrival order.
  for (size_t i = 0; i < queue_.size(); ++i) {
    if (queue_[i].skips < options_.max_skips) continue;
    if (!fits(queue_[i])) break;
    take(i);
  }
  // 2. The rest shortest first (ties oldest first); once one does not fit, no longer one does.
  std::vector<size_t> order;
  order.reserve(queue_.size());
  for (size_t i = 0; i < queue_.size(); ++i)
    if (!taken[i]) order.push_back(i);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return queue_[a].length < queue_[b].length; });
  for (size_t i : order) {
    if (!fits(queue_[i])) break;
    take(i);
  }
  // 3. What stays was skipped once more.
  std::deque<BatchEntry> rest;
  for (size_t i = 0; i < queue_.size(); ++i)
    if (!taken[i]) {
      rest.push_back(queue_[i]);
      ++rest.back().skips;
    }
  queue_.swap(rest);
  queued_tokens_ -= batch.tokens;
  std::stable_sort(batch.entries.begin(), batch.entries.end(),
                   [](const BatchEntry& a, const BatchEntry& b) { return a.length > b.length; });
  return batch;
}

std::optional<Batch> Batcher::next_batch() {
  std::unique_lock<std::mutex> lock(mutex_);
  ready_.wait(lock, [&] { return !queue_.empty() || closed_; });
  if (queue_.empty()) return std::nullopt;
  return form_batch_locked();
}

std::optional<Batch> Batcher::try_next_batch() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (queue_.empty()) return std::nullopt;
  return form_batch_locked();
}

std::optional<Batch> Batcher::next_batch_for(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  ready_.wait_for(lock, timeout, [&] { return !queue_.empty() || closed_; });
  if (queue_.empty()) return std::nullopt;
  return form_batch_locked();
}

void Batcher::close() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    closed_ = true;
  }
  ready_.notify_all();
}

bool Batcher::closed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return closed_;
}

int64_t Batcher::queued_sequences() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<int64_t>(queue_.size());
}

int64_t Batcher::queued_tokens() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return queued_tokens_;
}

}  // namespace encore::serve
