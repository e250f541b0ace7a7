// The serving engine: one thread taking Batcher batches through SentenceEncoder::encode_tokenized.
#include "encore/serve_engine.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <future>

#include "encore/cross_encoder.hpp"
#include "encore/error.hpp"
#include "encore/runtime.hpp"
#include "encore/tensor.hpp"

namespace encore::serve {

namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }
}  // namespace

std::vector<float> classification_scores(const std::vector<float>& logits, bool raw) {
  std::vector<float> scores = logits;
  if (raw) return scores;
  const int64_t n = static_cast<int64_t>(scores.size());
  score_logits(scores.data(), n, n == 1 ? ScoreActivation::sigmoid : ScoreActivation::identity, /*softmax=*/true);
  return scores;
}

struct Engine::Job {
  std::vector<Encoding> sequences;
  Task task = Task::embed;
  Callback done;
  EngineResult result;
  int64_t remaining = 0;
  int64_t last_batch = -1;  // the batch whose forward time was last added to inference_seconds
  Clock::time_point submitted;
};

Engine::Engine(std::shared_ptr<const SentenceEncoder> encoder, EngineOptions options, BatchObserver observer)
    : encoder_(std::move(encoder)), batcher_(options.batcher), observer_(std::move(observer)) {
  ENCORE_CHECK(encoder_, "Engine: no encoder");
  thread_ = std::thread([this] { run(); });
}

Engine::~Engine() { shutdown(); }

RequestId Engine::submit(std::vector<Encoding> sequences, Task task, Callback done) {
  ENCORE_CHECK(!sequences.empty(), "a request needs at least one input");
  const int64_t limit = encoder_->model().max_sequence_length();
  std::vector<int64_t> lengths;
  lengths.reserve(sequences.size());
  int64_t tokens = 0;
  for (size_t i = 0; i < sequences.size(); ++i) {
    const int64_t n = static_cast<int64_t>(sequences[i].size());
    ENCORE_CHECK(n > 0 && n <= limit, "input ", i, " has ", n, " tokens; the model takes 1 to ", limit);
    lengths.push_back(n);
    tokens += n;
  }
  ENCORE_CHECK(task != Task::classify || encoder_->model().info().head == "sequence_classification",
               "the model has no sequence-classification head");
  auto job = std::make_shared<Job>();
  job->sequences = std::move(sequences);
  job->task = task;
  job->done = std::move(done);
  job->remaining = static_cast<int64_t>(lengths.size());
  job->result.outputs.resize(lengths.size());
  job->result.tokens = tokens;
  job->result.lengths.assign(lengths.begin(), lengths.end());
  job->submitted = Clock::now();
  // Held across push so the engine thread never sees an id before its job is registered.
  std::lock_guard<std::mutex> lock(mutex_);
  const RequestId id = batcher_.push(lengths);
  jobs_.emplace(id, std::move(job));
  return id;
}

void Engine::cancel(RequestId request) {
  std::lock_guard<std::mutex> lock(mutex_);
  batcher_.cancel(request);
  jobs_.erase(request);  // sequences of it already in a running batch find no job and are dropped
}

namespace {
Encoding warm_up_sequence(int64_t n) {
  Encoding e;
  e.ids.assign(static_cast<size_t>(n), 100);  // any in-vocabulary id: the values do not matter, the shapes do
  e.type_ids.assign(static_cast<size_t>(n), 0);
  e.attention_mask.assign(static_cast<size_t>(n), 1);
  return e;
}
}  // namespace

double Engine::warm_up(int64_t length, int64_t sequences) {
  const int64_t n = std::clamp<int64_t>(length, 1, encoder_->model().max_sequence_length());
  return run_warm_up(std::vector<Encoding>(static_cast<size_t>(std::max<int64_t>(sequences, 1)), warm_up_sequence(n)));
}

double Engine::warm_up_gemm_sizes(int64_t max_tokens) {
  const int64_t longest = encoder_->model().max_sequence_length();
  double seconds = 0;
  for (const int64_t count : gemm_warm_up_token_counts(max_tokens)) {
    std::vector<Encoding> batch;
    for (int64_t left = count; left > 0; left -= std::min(left, longest))
      batch.push_back(warm_up_sequence(std::min(left, longest)));
    seconds += run_warm_up(std::move(batch));
  }
  return seconds;
}

double Engine::run_warm_up(std::vector<Encoding> batch) {
  std::promise<EngineResult> finished;
  std::future<EngineResult> result = finished.get_future();
  const auto t0 = Clock::now();
  // Through the batcher like a request, so it runs on the engine thread (see the header: one thread runs the model).
  submit(std::move(batch), Task::embed, [&finished](EngineResult r) { finished.set_value(std::move(r)); });
  const EngineResult r = result.get();
  if (!r.error.empty()) throw Error("warm-up forward failed: " + r.error);
  return seconds_since(t0);
}

void Engine::shutdown() {
  std::call_once(shutdown_once_, [this] {
    batcher_.close();
    if (thread_.joinable()) thread_.join();
  });
}

EngineStats Engine::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  EngineStats s = stats_;
  s.queued_sequences = batcher_.queued_sequences();
  s.queued_tokens = batcher_.queued_tokens();
  return s;
}

void Engine::run() {
  // OpenMP's thread count (which oneDNN follows) is per thread: set_num_threads() on the thread that created the
  // engine does not reach this one, so it is applied here too.
  set_num_threads(get_num_threads());
  const bool has_head = encoder_->model().info().head == "sequence_classification";
  // Between batches the engine wakes once a second: while the queue stays empty, activation blocks that no
  // batch took within the allocator's decay time go back to the system (release_idle_cached_memory), so a
  // server that ran one huge batch, or an overload, shrinks again once idle.
  for (;;) {
    std::optional<Batch> batch = batcher_.next_batch_for(std::chrono::seconds(1));
    if (!batch) {
      if (batcher_.closed() && batcher_.queued_sequences() == 0) break;
      release_idle_cached_memory();
      continue;
    }
    const auto started = Clock::now();
    // The jobs of this batch's entries (cancelled ones are gone from jobs_: their entries are skipped).
    std::vector<std::shared_ptr<Job>> owners(batch->entries.size());
    std::vector<const Encoding*> seqs;
    std::vector<size_t> rows(batch->entries.size(), SIZE_MAX);
    TokenizedEncodeOptions opt;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (size_t i = 0; i < batch->entries.size(); ++i) {
        auto it = jobs_.find(batch->entries[i].request);
        if (it == jobs_.end()) continue;
        owners[i] = it->second;
        rows[i] = seqs.size();
        seqs.push_back(&owners[i]->sequences[batch->entries[i].index]);
        opt.token_embeddings |= owners[i]->task == Task::token_embeddings;
        opt.logits |= owners[i]->task == Task::classify;
      }
    }
    if (seqs.empty()) continue;
    opt.logits &= has_head;
    TokenizedEncodeOutput out;
    std::string error;
    try {
      out = encoder_->encode_tokenized(seqs, opt);
    } catch (const std::exception& e) {
      error = e.what();
    }
    const double took = seconds_since(started);
    int64_t tokens = 0;
    for (const Encoding* s : seqs) tokens += static_cast<int64_t>(s->size());
    std::vector<std::shared_ptr<Job>> finished;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stats_.batches += 1;
      stats_.sequences += static_cast<int64_t>(seqs.size());
      stats_.tokens += tokens;
      stats_.last_batch_sequences = static_cast<int64_t>(seqs.size());
      stats_.last_batch_tokens = tokens;
      stats_.busy_seconds += took;
      for (size_t i = 0; i < owners.size(); ++i) {
        if (!owners[i]) continue;
        Job& job = *owners[i];
        const RequestId id = batch->entries[i].request;
        if (jobs_.find(id) == jobs_.end()) continue;  // cancelled while the batch ran
        const int64_t index = batch->entries[i].index;
        const int64_t r = static_cast<int64_t>(rows[i]);
        if (error.empty()) {
          std::vector<float>& dst = job.result.outputs[index];
          if (job.task == Task::embed) {
            const int64_t C = out.embeddings.size(1);
            dst.assign(out.embeddings.data<float>() + r * C, out.embeddings.data<float>() + (r + 1) * C);
          } else if (job.task == Task::token_embeddings) {
            const int64_t T = out.token_embeddings.size(1), H = out.token_embeddings.size(2);
            const int64_t n = static_cast<int64_t>(job.sequences[index].size());
            const float* src = out.token_embeddings.data<float>() + r * T * H;
            dst.assign(src, src + n * H);
          } else {
            const int64_t L = out.logits.size(1);
            dst.assign(out.logits.data<float>() + r * L, out.logits.data<float>() + (r + 1) * L);
          }
        } else if (job.result.error.empty()) {
          job.result.error = error;
        }
        job.result.queue_seconds =
            std::max(job.result.queue_seconds, std::chrono::duration<double>(started - job.submitted).count());
        if (job.last_batch != stats_.batches) job.result.inference_seconds += took;
        job.last_batch = stats_.batches;
        if (--job.remaining == 0) {
          finished.push_back(owners[i]);
          jobs_.erase(id);
        }
      }
    }
    if (observer_) observer_(static_cast<int64_t>(seqs.size()), tokens, took);
    for (auto& job : finished) {
      job->sequences.clear();
      if (job->done) job->done(std::move(job->result));
    }
  }
}

}  // namespace encore::serve
