// Prometheus text exposition for `encore serve`: request counts and latency histograms by route and status,
// the engine's queue, batch sizes and tokens per second. Thread safety: every member may be called from any thread.
#pragma once
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "encore/serve_engine.hpp"

namespace encore::cli {

class ServeMetrics {
 public:
  void observe_request(const std::string& route, const std::string& method, int status, double seconds);
  void observe_batch(int64_t sequences, int64_t tokens, double seconds);
  void observe_rejection(const std::string& reason);  // 429s, timeouts, disconnects
  // The whole exposition. in_flight: requests being served; connections: open sockets.
  std::string render(const serve::EngineStats& engine, int64_t in_flight, int64_t connections, int64_t permits_used,
                     int64_t permits_max) const;

 private:
  struct Histogram {
    explicit Histogram(const std::vector<double>* bounds = nullptr) : bounds(bounds) {}
    void observe(double v);
    const std::vector<double>* bounds;
    std::vector<int64_t> counts;  // per bound, non-cumulative; +Inf last
    double sum = 0;
    int64_t count = 0;
  };
  static void render_histogram(std::string& out, const std::string& name, const std::string& labels, const Histogram& h);

  mutable std::mutex mutex_;
  std::map<std::tuple<std::string, std::string, int>, Histogram> requests_;  // (route, method, status)
  std::map<std::string, int64_t> rejections_;
  Histogram batch_tokens_, batch_sizes_, batch_seconds_;
  bool batch_init_ = false;
  std::deque<std::pair<std::chrono::steady_clock::time_point, int64_t>> recent_tokens_;  // last 10 s of batches
};

}  // namespace encore::cli
