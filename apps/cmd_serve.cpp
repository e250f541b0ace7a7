// encore serve: an HTTP embedding server with TEI's and OpenAI's API (docs/serving.md). Thin: flags, logs and
// signals here; the transport in serve_http.cpp, the routes in serve_routes.cpp, batching in the library
// (encore/serve_engine.hpp).
#include <pthread.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <future>
#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "apps/common.hpp"
#include "apps/serve_http.hpp"
#include "apps/serve_metrics.hpp"
#include "apps/serve_routes.hpp"
#include "encore/runtime.hpp"
#include "encore/serve_engine.hpp"

namespace encore::cli {

namespace {

using Json = nlohmann::json;

struct ServeArgs {
  std::string model, dtype = "fp32", hostname = "0.0.0.0", api_key, served_model_name;
  int port = 8080, threads = 0, io_threads = 2;
  int64_t max_batch_tokens = 16384, max_batch_requests = 0, max_concurrent_requests = 512,
          max_client_batch_size = 32, payload_limit = 2'000'000, max_skips = 4;
  bool auto_truncate = false, no_warmup = false;
  double request_timeout = 30, idle_timeout = 60, drain_timeout = 30;
};

std::mutex log_mutex;

// One JSON object per line on stderr: {"time", "level", "message", ...fields}.
void log_line(const char* level, const std::string& message, Json fields = Json::object()) {
  char ts[80];  // room for any int the format can print (GCC checks the worst case)
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&t, &tm);
  std::snprintf(ts, sizeof ts, "%04d-%02d-%02dT%02d:%02d:%02d.%03lldZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<long long>(ms));
  Json j = {{"time", ts}, {"level", level}, {"message", message}};
  for (auto& [k, v] : fields.items()) j[k] = v;
  const std::string line = j.dump(-1, ' ', false, Json::error_handler_t::replace);
  std::lock_guard<std::mutex> lock(log_mutex);
  std::fprintf(stderr, "%s\n", line.c_str());
  std::fflush(stderr);
}

std::chrono::milliseconds millis(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

void serve(const ServeArgs& a) {
  // SIGTERM/SIGINT are taken by one thread with sigwait: blocked here before any other thread (engine, OpenMP,
  // I/O) exists, so every thread inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  if (a.threads > 0) set_num_threads(a.threads);
  const std::string dir = a.model.empty() ? default_model_dir() : a.model;
  const DType dtype = parse_dtype(a.dtype);
  const auto t0 = std::chrono::steady_clock::now();
  // Loaded on a thread that exits at once (std::async's own), never on main: loading runs OpenMP regions, and a
  // thread that did keeps a libgomp pool alive, which would make the engine thread's regions wait by sleeping
  // instead of spinning (include/encore/serve_engine.hpp, "Threads").
  auto encoder = std::async(std::launch::async, [&] {
                   return std::make_shared<SentenceEncoder>(SentenceEncoder::load(dir, dtype));
                 }).get();
  const ModelInfo& mi = encoder->model().info();
  log_line("INFO", "model loaded",
           {{"model", dir}, {"architecture", mi.architecture}, {"dtype", dtype_name(dtype)},
            {"dimension", encoder->dimension()}, {"max_input_length", encoder->max_seq_length()},
            {"head", mi.head}, {"runtime", runtime_info()},
            {"seconds", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()}});

  ServeMetrics metrics;
  serve::EngineOptions eo;
  eo.batcher.max_batch_tokens = a.max_batch_tokens;
  eo.batcher.max_batch_sequences = a.max_batch_requests;
  eo.batcher.max_skips = a.max_skips;
  serve::Engine engine(encoder, eo, [&metrics](int64_t n, int64_t tokens, double s) { metrics.observe_batch(n, tokens, s); });
  if (!a.no_warmup) {
    // Weights touched, workspaces sized and GEMM primitives created for the longest input and a full batch,
    // so the first requests do not pay for it (TEI warms up with max_input_length tokens too).
    const double s1 = engine.warm_up(encoder->max_seq_length(), 1);
    const double s2 = engine.warm_up(16, 32);
    // Every GEMM row-block size a batch can need, so memory stays flat as batch sizes vary (issue 10's soak).
    const double s3 = engine.warm_up_gemm_sizes(a.max_batch_tokens);
    log_line("INFO", "warm-up done",
             {{"longest_input_seconds", s1}, {"batch_32x16_seconds", s2}, {"gemm_sizes_seconds", s3}});
  }

  ServeConfig cfg;
  cfg.model_dir = dir;
  cfg.model_id = a.served_model_name.empty() ? std::filesystem::path(dir).filename().string() : a.served_model_name;
  if (cfg.model_id.empty()) cfg.model_id = dir;
  cfg.dtype = dtype_name(dtype);
  cfg.max_concurrent_requests = a.max_concurrent_requests;
  cfg.max_client_batch_size = a.max_client_batch_size;
  cfg.max_batch_tokens = a.max_batch_tokens;
  cfg.max_batch_requests = a.max_batch_requests;
  cfg.auto_truncate = a.auto_truncate;
  cfg.api_key = a.api_key;
  cfg.io_threads = a.io_threads;
  Router router(cfg, encoder, engine, metrics, nullptr);

  http::ServerOptions so;
  so.host = a.hostname;
  so.port = static_cast<uint16_t>(a.port);
  so.io_threads = a.io_threads;
  so.payload_limit = a.payload_limit;
  so.request_timeout = millis(a.request_timeout);
  so.idle_timeout = millis(a.idle_timeout);
  auto observe = [&](const http::Request& req, int status, double seconds) {
    const std::string route = router.route_label(req.path);
    metrics.observe_request(route, req.method.empty() ? "-" : req.method, status, seconds);
    if (status == 408) metrics.observe_rejection("request_timeout");
    log_line(status >= 500 ? "ERROR" : status >= 400 ? "WARN" : "INFO", "request",
             {{"method", req.method}, {"path", req.path}, {"status", status}, {"ms", seconds * 1000},
              {"remote", req.remote}});
  };
  http::Server server(so, [&router](const http::Request& req, const http::Exchange& ex) { router.handle(req, ex); },
                      observe);
  router.set_server(&server);

  std::thread([&server, &a, signals]() mutable {
    int sig = 0;
    sigwait(&signals, &sig);
    log_line("INFO", "shutting down: no new connections, draining requests in flight",
             {{"signal", sig == SIGTERM ? "SIGTERM" : "SIGINT"}, {"in_flight", server.in_flight()},
              {"deadline_seconds", a.drain_timeout}});
    server.drain(millis(a.drain_timeout));
  }).detach();

  log_line("INFO", "listening",
           {{"host", a.hostname}, {"port", server.port()}, {"max_batch_tokens", a.max_batch_tokens},
            {"max_concurrent_requests", a.max_concurrent_requests}, {"max_client_batch_size", a.max_client_batch_size},
            {"payload_limit", a.payload_limit}, {"auto_truncate", a.auto_truncate}, {"api_key", !a.api_key.empty()},
            {"io_threads", a.io_threads}, {"threads", get_num_threads()}});
  server.run();
  const int64_t left = server.in_flight();
  engine.shutdown();
  log_line(left ? "WARN" : "INFO", "stopped", {{"unfinished_requests", left}});
}

}  // namespace

void register_serve(CLI::App& app) {
  static ServeArgs a;
  auto* cmd = app.add_subcommand("serve", "HTTP embedding server with TEI's and OpenAI's API (docs/serving.md)");
  cmd->add_option("--model", a.model, "model directory (default: $ENCORE_MODEL, else all-MiniLM-L6-v2)");
  cmd->add_option("--dtype", a.dtype, "encoder GEMMs: fp32, bf16 or int8")->check(DTypeName())->capture_default_str();
  cmd->add_option("--hostname", a.hostname, "address to listen on")->capture_default_str();
  cmd->add_option("--port", a.port, "port to listen on (0: any free port, logged at start)")
      ->check(CLI::Range(0, 65535))->capture_default_str();
  cmd->add_option("--max-batch-tokens", a.max_batch_tokens, "real tokens per engine batch")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24))->capture_default_str();
  cmd->add_option("--max-batch-requests", a.max_batch_requests, "sequences per engine batch (0: no limit)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20))->capture_default_str();
  cmd->add_option("--max-concurrent-requests", a.max_concurrent_requests,
                  "inputs admitted at once; past it 429 at once (a request of n inputs counts n)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))->capture_default_str();
  cmd->add_option("--max-client-batch-size", a.max_client_batch_size, "inputs per request; past it 422")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))->capture_default_str();
  cmd->add_option("--payload-limit", a.payload_limit, "request body bytes; past it 413")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 34))->capture_default_str();
  cmd->add_flag("--auto-truncate", a.auto_truncate,
                "truncate inputs longer than the model's maximum (default: 413 unless the request says truncate)");
  cmd->add_option("--api-key", a.api_key, "require Authorization: Bearer KEY on every route but /health")
      ->envname("ENCORE_API_KEY");
  cmd->add_option("--served-model-name", a.served_model_name, "model name in /info and OpenAI responses");
  cmd->add_option("--request-timeout", a.request_timeout,
                  "seconds a client has to send a whole request (or read a reply); slower clients are disconnected")
      ->check(FiniteRange(0.05, 3600.0))->capture_default_str();
  cmd->add_option("--idle-timeout", a.idle_timeout, "seconds an idle keep-alive connection stays open")
      ->check(FiniteRange(0.05, 86400.0))->capture_default_str();
  cmd->add_option("--drain-timeout", a.drain_timeout, "seconds SIGTERM waits for requests in flight")
      ->check(FiniteRange(0.0, 3600.0))->capture_default_str();
  cmd->add_option("--max-skips", a.max_skips,
                  "starvation bound: batches an input can be passed over for shorter ones before it goes first")
      ->check(CLI::Range(int64_t{0}, int64_t{1000}))->capture_default_str();
  add_threads_option(*cmd, a.threads);
  cmd->add_option("--io-threads", a.io_threads, "connection threads (HTTP, JSON, tokenization)")
      ->check(CLI::Range(1, 256))->capture_default_str();
  cmd->add_flag("--no-warmup", a.no_warmup, "skip the warm-up forward passes at start");
  cmd->callback([] { serve(a); });
}

}  // namespace encore::cli
