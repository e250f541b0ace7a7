// encore::serve::Engine - a SentenceEncoder behind a Batcher and one engine thread: callers (a server's
// connection threads) submit tokenized requests and get a callback when every sequence of the request has run.
//
//   auto enc = std::make_shared<encore::SentenceEncoder>(encore::SentenceEncoder::load(dir));
//   encore::serve::Engine engine(enc, {});
//   auto seqs = enc->tokenize({"a text", "another"});
//   engine.submit(std::move(seqs), encore::serve::Task::embed, [](encore::serve::EngineResult r) {
//     // r.outputs[i]: the pooled embedding of sequence i (not normalised); runs on the engine thread
//   });
//
// The engine thread takes batches from the Batcher (token budget, shortest first, starvation bound) and runs
// each as one padding-free forward pass (SentenceEncoder::encode_tokenized). Callbacks run on the engine
// thread: they must only hand the result over (post it to an I/O thread), never block. A request cancelled
// with cancel() leaves the queue at once; if some of its sequences are running, their results are dropped and
// its callback is never called. Thread safety: every member may be called from any thread.
//
// Threads: only the engine thread runs the model (warm_up too). libgomp keeps a pool of worker threads for every
// thread that ever started an OpenMP region, and when its pools hold more threads than there are cores it makes
// idle workers sleep after ~100 spins instead of ~300,000: every parallel region then pays a futex wake-up. A
// second thread running the model (or a model loaded on a thread that stays alive, such as main) is enough to
// switch that on: a 14-token all-MiniLM-L6-v2 forward took 5.7 ms instead of 3.2-3.4 ms on 2 cores. So load the
// model on a thread that exits before serving (encore serve does), and tokenize on the connection threads with
// SentenceEncoder::tokenize (serial).
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "encore/batcher.hpp"
#include "encore/sentence_encoder.hpp"

namespace encore::serve {

enum class Task {
  embed,             // pooled embedding per sequence (Dense modules applied, not normalised): dimension floats
  token_embeddings,  // the last hidden state of each sequence: length x hidden floats
  classify,          // the sequence-classification head's logits: num_labels floats
};

struct EngineResult {
  std::string error;                        // empty on success
  std::vector<std::vector<float>> outputs;  // per sequence, in request order (see Task)
  std::vector<size_t> lengths;              // tokens per sequence
  int64_t tokens = 0;                       // real tokens of the request
  double queue_seconds = 0;                 // submit -> the last of its batches started
  double inference_seconds = 0;             // sum of the forward passes its sequences ran in
};

struct EngineOptions {
  BatcherOptions batcher;
};

// Totals since start (for metrics).
struct EngineStats {
  int64_t queued_sequences = 0, queued_tokens = 0;
  int64_t batches = 0, sequences = 0, tokens = 0;
  int64_t last_batch_sequences = 0, last_batch_tokens = 0;
  double busy_seconds = 0;  // time spent in forward passes
};

// Scores a classifier's logits the way TEI does for /predict and /rerank: with raw, the logits as they are;
// otherwise a sigmoid for one logit, a softmax for several.
std::vector<float> classification_scores(const std::vector<float>& logits, bool raw);

class Engine {
 public:
  using Callback = std::function<void(EngineResult)>;
  using BatchObserver = std::function<void(int64_t sequences, int64_t tokens, double seconds)>;

  Engine(std::shared_ptr<const SentenceEncoder> encoder, EngineOptions options, BatchObserver observer = {});
  ~Engine();  // shutdown()
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues the sequences (each 1..max_sequence_length() tokens; Task::classify needs a classification head).
  // Throws encore::Error on an invalid request or after shutdown(). done runs on the engine thread.
  RequestId submit(std::vector<Encoding> sequences, Task task, Callback done);
  void cancel(RequestId request);
  // Runs `sequences` sequences of `length` tokens through the model on the engine thread (through the batcher,
  // like a request) and waits for them, before serving: first-touch of weights and workspaces, oneDNN primitive
  // creation. Returns the seconds it took; throws encore::Error if the forward failed.
  double warm_up(int64_t length, int64_t sequences = 1);
  // One forward per count of gemm_warm_up_token_counts(max_tokens) (runtime.hpp), each count split into sequences
  // of at most max_sequence_length() tokens: afterwards no batch of up to max_tokens creates a GEMM primitive, so
  // a long-running server's memory does not creep up as new batch sizes arrive. Returns the seconds it took.
  double warm_up_gemm_sizes(int64_t max_tokens);
  // Stops taking requests, finishes every queued one, joins the engine thread. Idempotent.
  void shutdown();

  EngineStats stats() const;
  const SentenceEncoder& encoder() const { return *encoder_; }

 private:
  double run_warm_up(std::vector<Encoding> batch);  // submits one batch and waits for it
  struct Job;
  void run();

  std::shared_ptr<const SentenceEncoder> encoder_;
  Batcher batcher_;
  BatchObserver observer_;
  mutable std::mutex mutex_;
  std::unordered_map<RequestId, std::shared_ptr<Job>> jobs_;
  EngineStats stats_;
  std::thread thread_;
  std::once_flag shutdown_once_;
};

}  // namespace encore::serve
