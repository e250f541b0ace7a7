// The HTTP/1.1 transport of `encore serve` (Boost.Beast over Asio): accepting, reading requests under a
// deadline and a body limit, keep-alive, writing responses, noticing clients that leave, and a graceful drain.
// What a request means is the router's business (cmd_serve.cpp); this file knows no model.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace encore::cli::http {

struct Request {
  std::string method, target, path, body, authorization, content_type, remote;
};

struct Response {
  int status = 200;
  std::string body;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;
};

// What a handler gets besides the request. All three may be copied and called from any thread.
struct Exchange {
  std::function<void(Response)> reply;               // once; posts the write to the connection's I/O strand
  std::function<void(std::function<void()>)> post;   // runs work on that strand (never on the caller's thread)
  // Registers what to run if the client goes away before the reply (cancel queued work); call it before the
  // handler returns. Runs at most once, on the strand; a reply after it is dropped.
  std::function<void(std::function<void()>)> on_disconnect;
};
using Handler = std::function<void(const Request&, const Exchange&)>;
// Called once per finished exchange, for metrics and the access log (status 0: the client never got a reply).
using Observer = std::function<void(const Request&, int status, double seconds)>;

struct ServerOptions {
  std::string host = "0.0.0.0";
  uint16_t port = 8080;
  int io_threads = 2;
  int64_t payload_limit = 2'000'000;                    // request body bytes; past it 413
  std::chrono::milliseconds request_timeout{30'000};    // to receive one whole request (headers + body), or to
                                                        // send a response; a slower client is disconnected
  std::chrono::milliseconds idle_timeout{60'000};       // keep-alive connection with no request in flight
};

class Server {
 public:
  Server(ServerOptions options, Handler handler, Observer observer);
  ~Server();
  uint16_t port() const;  // the bound port (useful with port 0)
  // Serves until stop()/drain finishes. Blocks the calling thread (it is one of the I/O threads).
  void run();
  // Stops accepting; requests in flight finish, new requests on open connections get 503; returns at once.
  // run() returns once nothing is in flight or the deadline passed.
  void drain(std::chrono::milliseconds deadline);
  int64_t in_flight() const;
  int64_t open_connections() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

std::string json_error(const std::string& message, const std::string& type);

// One request parsed from raw bytes with the server's parser settings (header limit 64 KiB, body limit
// payload_limit) and the same mapping to Request the server does, without a socket: the request path of the fuzz
// harness (tests/fuzz/fuzz_serve_request.cpp). complete: a whole request was read; otherwise reject_status is
// what the server answers (400 malformed, 413 over a limit), or 0 when the bytes end before the request does (the
// server would wait for more).
struct ParsedRequest {
  Request request;
  bool complete = false;
  int reject_status = 0;
  std::string reject_message;
};
ParsedRequest parse_request(std::string_view bytes, int64_t payload_limit);

}  // namespace encore::cli::http
