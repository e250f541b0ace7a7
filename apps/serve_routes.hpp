// The routes of `encore serve` with TEI's request/response JSON (and OpenAI's for /v1/embeddings): parsing,
// validation, admission (--max-concurrent-requests), tokenization on the connection's thread, the engine,
// and the reply. Every failure becomes a JSON error with TEI's status codes; nothing escapes as a crash.
#pragma once
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "apps/serve_http.hpp"
#include "apps/serve_metrics.hpp"
#include "encore/serve_engine.hpp"

namespace encore::cli {

struct ServeConfig {
  std::string model_dir, model_id, dtype = "float32";
  int64_t max_concurrent_requests = 512;  // inputs admitted at once (TEI: one permit per input)
  int64_t max_client_batch_size = 32;
  int64_t max_batch_tokens = 16384;
  int64_t max_batch_requests = 0;
  bool auto_truncate = false;
  std::string api_key;  // empty: no authentication
  int io_threads = 2;
};

class Router {
 public:
  Router(ServeConfig config, std::shared_ptr<const SentenceEncoder> encoder, serve::Engine& engine,
         ServeMetrics& metrics, const http::Server* server);
  void set_server(const http::Server* server) { server_ = server; }
  void handle(const http::Request& request, const http::Exchange& exchange);
  // The metrics label of a path: a known route, or "unknown" (keeps label cardinality bounded).
  std::string route_label(const std::string& path) const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
  const http::Server* server_ = nullptr;
};

}  // namespace encore::cli
