// libFuzzer: the request path of `encore serve` without a socket: raw bytes -> the server's HTTP parser
// (http::parse_request, the settings the live server uses) -> the router (every route, JSON bodies, token ids,
// truncation, prompts, batching through the real engine) -> one reply. The model is the tiny BERT of
// fuzz_util.hpp with MiniLM's tokenizer. The first byte picks the router: without or with an API key ("k").
//
// Checked: malformed or oversized requests are 400/413/431; every complete request gets exactly one reply, within
// 30 s (no hang), with a status the routes document (never 500: that is an escaped exception) and a JSON body
// for errors.
#include <chrono>
#include <future>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>

#include "apps/serve_http.hpp"
#include "apps/serve_metrics.hpp"
#include "apps/serve_routes.hpp"
#include "encore/serve_engine.hpp"
#include "fuzz_util.hpp"

namespace {

using namespace encore;

constexpr int64_t kPayloadLimit = 1 << 16;

struct Fixture {
  std::shared_ptr<SentenceEncoder> encoder;
  cli::ServeMetrics metrics;
  std::unique_ptr<serve::Engine> engine;
  std::unique_ptr<cli::Router> open, keyed;

  Fixture() {
    encoder = std::make_shared<SentenceEncoder>(SentenceEncoder::load(encore_fuzz::tiny_model_dir()));
    engine = std::make_unique<serve::Engine>(encoder, serve::EngineOptions{});
    cli::ServeConfig cfg;
    cfg.model_dir = encore_fuzz::tiny_model_dir();
    cfg.model_id = "tiny";
    cfg.max_client_batch_size = 8;
    open = std::make_unique<cli::Router>(cfg, encoder, *engine, metrics, nullptr);
    cfg.api_key = "k";
    keyed = std::make_unique<cli::Router>(cfg, encoder, *engine, metrics, nullptr);
  }
};

bool documented_status(int s) {
  return s == 200 || s == 400 || s == 401 || s == 404 || s == 405 || s == 413 || s == 422 || s == 424 || s == 429 ||
         s == 431;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static Fixture fx;
  const std::string_view bytes(reinterpret_cast<const char*>(data + 1), size - 1);
  const cli::http::ParsedRequest parsed = cli::http::parse_request(bytes, kPayloadLimit);
  if (!parsed.complete) {
    FUZZ_ASSERT(parsed.reject_status == 0 || parsed.reject_status == 400 || parsed.reject_status == 413 ||
                parsed.reject_status == 431);
    return 0;
  }
  struct Reply {
    std::mutex mu;
    int count = 0;
    std::promise<cli::http::Response> promise;
  };
  auto reply = std::make_shared<Reply>();
  cli::http::Exchange ex;
  ex.reply = [reply](cli::http::Response r) {
    std::lock_guard<std::mutex> lock(reply->mu);
    FUZZ_ASSERT(++reply->count == 1);  // exactly one reply
    reply->promise.set_value(std::move(r));
  };
  ex.post = [](std::function<void()> fn) { fn(); };  // the engine thread stands in for the connection's strand
  ex.on_disconnect = [](std::function<void()>) {};
  auto future = reply->promise.get_future();
  (data[0] & 1 ? *fx.keyed : *fx.open).handle(parsed.request, ex);
  FUZZ_ASSERT(future.wait_for(std::chrono::seconds(30)) == std::future_status::ready);  // no hang
  const cli::http::Response r = future.get();
  if (!documented_status(r.status)) __builtin_printf("status %d: %s\n", r.status, r.body.c_str());
  FUZZ_ASSERT(documented_status(r.status));
  if (r.status != 200) FUZZ_ASSERT(nlohmann::json::accept(r.body));
  return 0;
}
