// encore::profiler - where a forward pass (or a training step) spends its time, operation by operation.
//
//   encore::profiler::set_enabled(true);
//   model.forward(ids, mask);                                   // every op records (name, time, FLOPs)
//   for (const auto& op : encore::profiler::summary()) std::cout << op.name << " " << op.seconds << "\n";
//   encore::profiler::write_chrome_trace("trace.json");         // open in https://ui.perfetto.dev
//
// `encore profile` prints the table for any model and shape; ENCORE_PROFILE=1 profiles any run and prints the
// table to stderr at exit (ENCORE_PROFILE_TRACE=FILE also writes the trace).
//
// What is timed: each call of an ops-layer operation (linear, attention, the norms, activations, adds, dropout,
// softmax, rotary, embedding, pooling, normalize, and their backwards), wall time on the calling thread, its
// parallel work inside. An op called inside another profiled op counts as part of the outer one, so the op
// times add up to (about) the forward's time and nothing is counted twice. Off, a Scope costs one relaxed
// atomic load and a branch; on, two clock reads and an append under a mutex per op.
#pragma once
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

namespace encore::profiler {

void set_enabled(bool on);
bool enabled();
void reset();  // drops every record

struct OpStats {
  std::string name;
  int64_t calls = 0;
  double seconds = 0;  // summed over calls
  double flops = 0;    // summed over calls (0 for ops that are not counted in FLOPs)
};
// The records grouped by op name, longest total time first.
std::vector<OpStats> summary();

struct Event {
  const char* name;  // a string literal of the op
  int64_t begin_ns, end_ns;  // steady clock
  double flops;
  uint32_t thread;  // small id of the recording thread, in order of first record
};
std::vector<Event> events();

// The Chrome trace event format (JSON: complete events "ph": "X", microseconds), as Perfetto and
// chrome://tracing read it. Throws encore::ResourceError naming the file if it cannot be written.
void write_chrome_trace(const std::string& path);

// A table of ops: calls per run, milliseconds per run, % of reference_seconds (the wall time of one of the runs
// the records cover; <= 0: of the ops' sum) and GFLOP/s; then the ops' sum and the reference. runs: how many runs
// the records cover.
std::string format_table(const std::vector<OpStats>& ops, int64_t runs, double reference_seconds);

namespace detail {
inline std::atomic<bool> on{false};
inline thread_local int depth = 0;
int64_t now_ns();
void record(const char* name, int64_t begin_ns, int64_t end_ns, double flops);
}  // namespace detail

// Times its scope as one call of `name` (a string literal) when profiling is on.
class Scope {
 public:
  explicit Scope(const char* name, double flops = 0) noexcept {
    if (!detail::on.load(std::memory_order_relaxed)) return;
    counted_ = true;
    if (detail::depth++ > 0) return;  // inside another profiled op: its time is the outer op's
    name_ = name;
    flops_ = flops;
    begin_ = detail::now_ns();
  }
  ~Scope() {
    if (!counted_) return;
    --detail::depth;
    if (name_) detail::record(name_, begin_, detail::now_ns(), flops_);
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  const char* name_ = nullptr;
  bool counted_ = false;
  double flops_ = 0;
  int64_t begin_ = 0;
};

}  // namespace encore::profiler
