// Prometheus text format 0.0.4: counters end in _total, histograms have cumulative _bucket{le=...}, _sum, _count.
#include "apps/serve_metrics.hpp"

#include <cstdio>

namespace encore::cli {

namespace {

const std::vector<double> kLatencyBounds = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                            0.25,  0.5,    1,     2.5,  5,    10,   30};
const std::vector<double> kTokenBounds = {16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768};
const std::vector<double> kSizeBounds = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512};
constexpr double kTokenWindowSeconds = 10;

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

}  // namespace

void ServeMetrics::Histogram::observe(double v) {
  if (counts.empty()) counts.assign(bounds->size() + 1, 0);
  size_t i = 0;
  while (i < bounds->size() && v > (*bounds)[i]) ++i;
  ++counts[i];
  sum += v;
  ++count;
}

void ServeMetrics::render_histogram(std::string& out, const std::string& name, const std::string& labels,
                                    const Histogram& h) {
  const std::string sep = labels.empty() ? "" : ",";
  int64_t cumulative = 0;
  for (size_t i = 0; i < h.bounds->size(); ++i) {
    cumulative += h.counts.empty() ? 0 : h.counts[i];
    out += name + "_bucket{" + labels + sep + "le=\"" + number((*h.bounds)[i]) + "\"} " + std::to_string(cumulative) + "\n";
  }
  out += name + "_bucket{" + labels + sep + "le=\"+Inf\"} " + std::to_string(h.count) + "\n";
  const std::string braces = labels.empty() ? "" : "{" + labels + "}";
  out += name + "_sum" + braces + " " + number(h.sum) + "\n";
  out += name + "_count" + braces + " " + std::to_string(h.count) + "\n";
}

void ServeMetrics::observe_request(const std::string& route, const std::string& method, int status, double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto [it, inserted] = requests_.try_emplace({route, method, status}, Histogram(&kLatencyBounds));
  it->second.observe(seconds);
}

void ServeMetrics::observe_batch(int64_t sequences, int64_t tokens, double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!batch_init_) {
    batch_tokens_ = Histogram(&kTokenBounds);
    batch_sizes_ = Histogram(&kSizeBounds);
    batch_seconds_ = Histogram(&kLatencyBounds);
    batch_init_ = true;
  }
  batch_tokens_.observe(static_cast<double>(tokens));
  batch_sizes_.observe(static_cast<double>(sequences));
  batch_seconds_.observe(seconds);
  const auto now = std::chrono::steady_clock::now();
  recent_tokens_.emplace_back(now, tokens);
  while (!recent_tokens_.empty() &&
         std::chrono::duration<double>(now - recent_tokens_.front().first).count() > kTokenWindowSeconds)
    recent_tokens_.pop_front();
}

void ServeMetrics::observe_rejection(const std::string& reason) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++rejections_[reason];
}

std::string ServeMetrics::render(const serve::EngineStats& engine, int64_t in_flight, int64_t connections,
                                 int64_t permits_used, int64_t permits_max) const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::string out;
  out += "# HELP encore_http_requests_total HTTP requests answered, by route, method and status.\n";
  out += "# TYPE encore_http_requests_total counter\n";
  for (auto& [key, h] : requests_) {
    auto& [route, method, status] = key;
    out += "encore_http_requests_total{route=\"" + route + "\",method=\"" + method + "\",status=\"" +
           std::to_string(status) + "\"} " + std::to_string(h.count) + "\n";
  }
  out += "# HELP encore_http_request_duration_seconds Time from a request's arrival to its reply being sent.\n";
  out += "# TYPE encore_http_request_duration_seconds histogram\n";
  for (auto& [key, h] : requests_) {
    auto& [route, method, status] = key;
    render_histogram(out, "encore_http_request_duration_seconds",
                     "route=\"" + route + "\",method=\"" + method + "\",status=\"" + std::to_string(status) + "\"", h);
  }
  out += "# HELP encore_http_rejections_total Requests refused or abandoned: overloaded (429), timeout, disconnect.\n";
  out += "# TYPE encore_http_rejections_total counter\n";
  for (auto& [reason, n] : rejections_)
    out += "encore_http_rejections_total{reason=\"" + reason + "\"} " + std::to_string(n) + "\n";
  out += "# HELP encore_requests_in_flight Requests read and not yet answered.\n# TYPE encore_requests_in_flight gauge\n";
  out += "encore_requests_in_flight " + std::to_string(in_flight) + "\n";
  out += "# HELP encore_open_connections Open client connections.\n# TYPE encore_open_connections gauge\n";
  out += "encore_open_connections " + std::to_string(connections) + "\n";
  out += "# HELP encore_concurrency_permits_used Inputs admitted and not finished (limit: --max-concurrent-requests).\n";
  out += "# TYPE encore_concurrency_permits_used gauge\nencore_concurrency_permits_used " + std::to_string(permits_used) + "\n";
  out += "# TYPE encore_concurrency_permits_max gauge\nencore_concurrency_permits_max " + std::to_string(permits_max) + "\n";
  out += "# HELP te_queue_size Sequences waiting for the engine (TEI's name).\n# TYPE te_queue_size gauge\n";
  out += "te_queue_size " + std::to_string(engine.queued_sequences) + "\n";
  out += "# HELP encore_queue_tokens Tokens waiting for the engine.\n# TYPE encore_queue_tokens gauge\n";
  out += "encore_queue_tokens " + std::to_string(engine.queued_tokens) + "\n";
  // The tensor allocator's cache (include/encore/tensor.hpp): freed blocks kept for reuse, bounded by
  // ENCORE_ALLOCATOR_CACHE_MB and returned when unused for ENCORE_ALLOCATOR_DECAY_MS; resident but not a leak.
  const AllocatorStats alloc = allocator_stats();
  out += "# HELP encore_allocator_cached_bytes Freed tensor storage kept for reuse (ENCORE_ALLOCATOR_CACHE_MB bounds it).\n";
  out += "# TYPE encore_allocator_cached_bytes gauge\nencore_allocator_cached_bytes " + std::to_string(alloc.cached_bytes) + "\n";
  out += "# HELP encore_allocator_system_bytes_total Bytes of tensor storage of 32 KiB or more taken from the system allocator.\n";
  out += "# TYPE encore_allocator_system_bytes_total counter\nencore_allocator_system_bytes_total " + std::to_string(alloc.system_bytes) + "\n";
  out += "# HELP encore_allocator_decayed_blocks_total Cached blocks returned to the system after waiting unused longer than ENCORE_ALLOCATOR_DECAY_MS.\n";
  out += "# TYPE encore_allocator_decayed_blocks_total counter\nencore_allocator_decayed_blocks_total " + std::to_string(alloc.decayed) + "\n";
  if (batch_init_) {
    out += "# HELP te_batch_next_tokens Real tokens per batch the engine ran (TEI's name).\n";
    out += "# TYPE te_batch_next_tokens histogram\n";
    render_histogram(out, "te_batch_next_tokens", "", batch_tokens_);
    out += "# HELP te_batch_next_size Sequences per batch the engine ran (TEI's name).\n";
    out += "# TYPE te_batch_next_size histogram\n";
    render_histogram(out, "te_batch_next_size", "", batch_sizes_);
    out += "# HELP encore_batch_duration_seconds Forward-pass time per batch.\n";
    out += "# TYPE encore_batch_duration_seconds histogram\n";
    render_histogram(out, "encore_batch_duration_seconds", "", batch_seconds_);
  }
  out += "# HELP encore_engine_batches_total Batches run.\n# TYPE encore_engine_batches_total counter\n";
  out += "encore_engine_batches_total " + std::to_string(engine.batches) + "\n";
  out += "# HELP encore_engine_sequences_total Sequences run.\n# TYPE encore_engine_sequences_total counter\n";
  out += "encore_engine_sequences_total " + std::to_string(engine.sequences) + "\n";
  out += "# HELP encore_engine_tokens_total Real tokens run.\n# TYPE encore_engine_tokens_total counter\n";
  out += "encore_engine_tokens_total " + std::to_string(engine.tokens) + "\n";
  out += "# HELP encore_engine_busy_seconds_total Time spent in forward passes.\n";
  out += "# TYPE encore_engine_busy_seconds_total counter\n";
  out += "encore_engine_busy_seconds_total " + number(engine.busy_seconds) + "\n";
  int64_t window_tokens = 0;
  const auto now = std::chrono::steady_clock::now();
  for (auto& [t, n] : recent_tokens_)
    if (std::chrono::duration<double>(now - t).count() <= kTokenWindowSeconds) window_tokens += n;
  out += "# HELP encore_tokens_per_second Real tokens run per second over the last 10 s.\n";
  out += "# TYPE encore_tokens_per_second gauge\n";
  out += "encore_tokens_per_second " + number(window_tokens / kTokenWindowSeconds) + "\n";
  return out;
}

}  // namespace encore::cli
