// HTTP/1.1 transport of `encore serve` on Boost.Beast: one strand per connection, a deadline on every read and
// write (a slow client loses its connection and frees its slot), a body limit checked against Content-Length
// before the body is read, and replies posted back from the engine thread.
#include "apps/serve_http.hpp"

#include <sys/socket.h>

#include <utility>  // before Boost 1.74's Asio, which uses std::exchange without including it (C++20, GCC 12)

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cerrno>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "encore/error.hpp"

namespace encore::cli::http {

namespace beast = boost::beast;
namespace bhttp = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;

std::string json_error(const std::string& message, const std::string& type) {
  return nlohmann::json{{"error", message}, {"error_type", type}}.dump(-1, ' ', false,
                                                                       nlohmann::json::error_handler_t::replace);
}

namespace {

constexpr uint32_t kHeaderLimit = 64 * 1024;

void set_limits(bhttp::request_parser<bhttp::string_body>& parser, int64_t payload_limit) {
  parser.body_limit(static_cast<uint64_t>(payload_limit));
  parser.header_limit(kHeaderLimit);
}

// The fields the router sees; the body is moved out of req.
void take_request(bhttp::request<bhttp::string_body>& req, Request& out) {
  out.method = std::string(req.method_string());
  out.target = std::string(req.target());
  out.path = out.target.substr(0, out.target.find('?'));
  out.body = std::move(req.body());
  out.authorization = std::string(req[bhttp::field::authorization]);
  out.content_type = std::string(req[bhttp::field::content_type]);
}

std::string payload_limit_message(int64_t payload_limit) {
  return "request body is larger than the payload limit of " + std::to_string(payload_limit) +
         " bytes (--payload-limit)";
}

std::string header_limit_message() {
  return "request headers are larger than " + std::to_string(kHeaderLimit) + " bytes";
}

}  // namespace

ParsedRequest parse_request(std::string_view bytes, int64_t payload_limit) {
  ParsedRequest out;
  bhttp::request_parser<bhttp::string_body> parser;
  set_limits(parser, payload_limit);
  parser.eager(true);
  beast::error_code ec;
  size_t used = 0;
  // Beast's contract: after need_more, put() may only be called again with the unconsumed bytes *plus new
  // ones* (its chunk parser asserts that it sees more than last time). All the bytes are here and eager() makes
  // one put() go as far as they allow, so need_more means they end inside the request: stop there.
  while (!parser.is_done() && used < bytes.size()) {
    used += parser.put(net::buffer(bytes.data() + used, bytes.size() - used), ec);
    if (ec == bhttp::error::need_more) {
      ec = {};
      break;
    }
    if (ec) break;
  }
  if (ec == bhttp::error::header_limit) {
    out.reject_status = 431;
    out.reject_message = header_limit_message();
  } else if (ec == bhttp::error::body_limit) {
    out.reject_status = 413;
    out.reject_message = payload_limit_message(payload_limit);
  } else if (ec) {
    out.reject_status = 400;
    out.reject_message = "malformed HTTP request: " + ec.message();
  } else if (parser.is_done()) {
    out.complete = true;
    take_request(parser.get(), out.request);
  }
  return out;
}

struct Server::Impl {
  // Declared before the io_context so that they outlive it: destroying the io_context destroys pending
  // handlers, and with them sessions, which update `connections`.
  ServerOptions opt;
  Handler handler;
  Observer observer;
  Clock::time_point drain_deadline;
  std::atomic<bool> draining{false};
  std::atomic<int64_t> in_flight{0}, connections{0};
  uint16_t bound_port = 0;
  net::io_context ioc;
  // On its own strand: the accept handler (which re-arms async_accept) and drain's close run on different I/O
  // threads otherwise, and an acceptor is not safe for concurrent use (a SIGTERM during a burst of requests
  // segfaulted in accept() about once in 25 runs with two I/O threads).
  tcp::acceptor acceptor{net::make_strand(ioc)};
  net::steady_timer drain_timer{ioc};

  void accept();
  void poll_drain();
};

namespace {

Response error_response(int status, std::string body) {
  Response r;
  r.status = status;
  r.body = std::move(body);
  return r;
}

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, Server::Impl& server) : stream_(std::move(socket)), server_(server) {
    ++server_.connections;
    beast::error_code ec;
    const auto ep = stream_.socket().remote_endpoint(ec);
    if (!ec) remote_ = ep.address().to_string() + ":" + std::to_string(ep.port());
  }
  ~Session() { --server_.connections; }

  void start() {
    net::dispatch(stream_.get_executor(), beast::bind_front_handler(&Session::wait_for_request, shared_from_this()));
  }

 private:
  // A keep-alive connection may sit idle (idle_timeout); once a request's first byte is there, the whole
  // request must arrive within request_timeout.
  void wait_for_request() {
    if (buffer_.size() > 0) return read_request();
    stream_.expires_after(server_.opt.idle_timeout);
    stream_.async_read_some(buffer_.prepare(16 * 1024), [self = shared_from_this()](beast::error_code ec, size_t n) {
      if (ec) return self->close();
      self->buffer_.commit(n);
      self->read_request();
    });
  }

  void read_request() {
    parser_.emplace();
    set_limits(*parser_, server_.opt.payload_limit);
    stream_.expires_after(server_.opt.request_timeout);
    bhttp::async_read(stream_, buffer_, *parser_, beast::bind_front_handler(&Session::on_read, shared_from_this()));
  }

  void on_read(beast::error_code ec, size_t) {
    started_ = Clock::now();
    request_ = Request{};
    request_.remote = remote_;
    // The client closed (between requests, or in the middle of one): nobody to answer.
    if (ec == bhttp::error::end_of_stream || ec == bhttp::error::partial_message || ec == net::error::eof)
      return close();
    if (ec == beast::error::timeout) {
      // The stream closed the socket already: nothing can be sent. Counted as 408 in metrics and the log.
      request_.path = "(incomplete request)";
      if (server_.observer) server_.observer(request_, 408, seconds());
      return;
    }
    if (ec == bhttp::error::body_limit || ec == bhttp::error::header_limit) {
      request_.method = std::string(parser_->get().method_string());
      request_.path = std::string(parser_->get().target());
      if (ec == bhttp::error::header_limit)  // 431 Request Header Fields Too Large (RFC 6585), not the body's 413
        return reject(431, json_error(header_limit_message(), "Validation"));
      return reject(413, json_error(payload_limit_message(server_.opt.payload_limit), "Validation"));
    }
    if (ec) {
      if (ec.category() == bhttp::make_error_code(bhttp::error::bad_method).category())
        return reject(400, json_error("malformed HTTP request: " + ec.message(), "Validation"));
      return close();  // reset, broken pipe...: the client is gone
    }
    replied_ = false;
    auto& req = parser_->get();
    keep_alive_ = req.keep_alive();
    take_request(req, request_);
    if (server_.draining) {
      keep_alive_ = false;
      ++server_.in_flight;
      return write(error_response(503, json_error("the server is shutting down", "Unhealthy")));
    }
    ++server_.in_flight;
    auto self = shared_from_this();
    Exchange ex;
    ex.reply = [self](Response r) {
      net::post(self->stream_.get_executor(), [self, r = std::move(r)]() mutable { self->write(std::move(r)); });
    };
    ex.post = [self](std::function<void()> fn) { net::post(self->stream_.get_executor(), std::move(fn)); };
    ex.on_disconnect = [self](std::function<void()> fn) { self->on_disconnect_ = std::move(fn); };
    try {
      server_.handler(request_, ex);
    } catch (const std::exception& e) {  // the router's own boundary should have caught it; never a crash
      return write(error_response(500, json_error(std::string("internal error: ") + e.what(), "Backend")));
    }
    watch_disconnect();
  }

  // While the engine works, a readable socket with nothing to read means the client closed: cancel its work.
  void watch_disconnect() {
    stream_.socket().async_wait(tcp::socket::wait_read, [self = shared_from_this()](beast::error_code ec) {
      if (ec || self->replied_) return;
      char c;
      const ssize_t n = ::recv(self->stream_.socket().native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
      if (n > 0 || (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))) return;  // pipelined data: not gone
      self->replied_ = true;
      if (self->on_disconnect_) self->on_disconnect_();
      self->on_disconnect_ = nullptr;
      --self->server_.in_flight;
      if (self->server_.observer) self->server_.observer(self->request_, 499, self->seconds());
      self->close();
    });
  }

  void write(Response r) {
    if (replied_) return;  // the client left; its work was cancelled
    replied_ = true;
    on_disconnect_ = nullptr;
    beast::error_code ignored;
    stream_.socket().cancel(ignored);  // the disconnect watch
    status_ = r.status;
    res_ = std::make_shared<bhttp::response<bhttp::string_body>>(static_cast<bhttp::status>(r.status), 11);
    res_->set(bhttp::field::server, "encore");
    res_->set(bhttp::field::content_type, r.content_type);
    for (auto& [k, v] : r.headers) res_->set(k, v);
    res_->body() = std::move(r.body);
    res_->keep_alive(keep_alive_ && !server_.draining);
    res_->prepare_payload();
    stream_.expires_after(server_.opt.request_timeout);
    bhttp::async_write(stream_, *res_, [self = shared_from_this()](beast::error_code ec, size_t) {
      --self->server_.in_flight;
      if (self->server_.observer) self->server_.observer(self->request_, self->status_, self->seconds());
      if (ec || !self->res_->keep_alive()) return self->close();
      self->res_.reset();
      self->wait_for_request();
    });
  }

  // A reply to a request that was not read whole (too large, malformed): sent, then the rest of what the client
  // sends is read and dropped for a moment so that closing does not reset the connection before the client
  // has read the reply.
  void reject(int status, std::string body) {
    ++server_.in_flight;
    replied_ = true;
    status_ = status;
    res_ = std::make_shared<bhttp::response<bhttp::string_body>>(static_cast<bhttp::status>(status), 11);
    res_->set(bhttp::field::server, "encore");
    res_->set(bhttp::field::content_type, "application/json");
    res_->body() = std::move(body);
    res_->keep_alive(false);
    res_->prepare_payload();
    stream_.expires_after(server_.opt.request_timeout);
    bhttp::async_write(stream_, *res_, [self = shared_from_this()](beast::error_code ec, size_t) {
      --self->server_.in_flight;
      if (self->server_.observer) self->server_.observer(self->request_, self->status_, self->seconds());
      if (ec) return self->close();
      beast::error_code ignored;
      self->stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
      self->stream_.expires_after(std::chrono::seconds(2));
      self->discard();
    });
  }

  void discard() {
    buffer_.consume(buffer_.size());
    stream_.async_read_some(buffer_.prepare(64 * 1024), [self = shared_from_this()](beast::error_code ec, size_t n) {
      if (ec) return self->close();
      self->buffer_.commit(n);
      self->discard();
    });
  }

  void close() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.close();
  }

  double seconds() const { return std::chrono::duration<double>(Clock::now() - started_).count(); }

  beast::tcp_stream stream_;
  Server::Impl& server_;
  beast::flat_buffer buffer_;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  std::shared_ptr<bhttp::response<bhttp::string_body>> res_;
  Request request_;
  std::string remote_;
  std::function<void()> on_disconnect_;
  Clock::time_point started_ = Clock::now();
  bool keep_alive_ = true, replied_ = false;
  int status_ = 0;
};

}  // namespace

void Server::Impl::accept() {
  acceptor.async_accept(net::make_strand(ioc), [this](beast::error_code ec, tcp::socket socket) {
    if (ec) {
      if (!acceptor.is_open()) return;  // draining
    } else {
      socket.set_option(tcp::no_delay(true), ec);
      std::make_shared<Session>(std::move(socket), *this)->start();
    }
    accept();
  });
}

void Server::Impl::poll_drain() {
  if (in_flight == 0 || Clock::now() >= drain_deadline) {
    ioc.stop();
    return;
  }
  drain_timer.expires_after(std::chrono::milliseconds(20));
  drain_timer.async_wait([this](beast::error_code) { poll_drain(); });
}

Server::Server(ServerOptions options, Handler handler, Observer observer) : impl_(std::make_unique<Impl>()) {
  impl_->opt = std::move(options);
  impl_->handler = std::move(handler);
  impl_->observer = std::move(observer);
  beast::error_code ec;
  const auto address = net::ip::make_address(impl_->opt.host, ec);
  ENCORE_CHECK(!ec, "--hostname '", impl_->opt.host, "' is not an IP address (", ec.message(), ")");
  const tcp::endpoint endpoint(address, impl_->opt.port);
  impl_->acceptor.open(endpoint.protocol(), ec);
  if (!ec) impl_->acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) impl_->acceptor.bind(endpoint, ec);
  if (!ec) impl_->acceptor.listen(net::socket_base::max_listen_connections, ec);
  ENCORE_CHECK(!ec, "cannot listen on ", impl_->opt.host, ":", impl_->opt.port, ": ", ec.message());
  impl_->bound_port = impl_->acceptor.local_endpoint().port();
}

Server::~Server() = default;

uint16_t Server::port() const { return impl_->bound_port; }
int64_t Server::in_flight() const { return impl_->in_flight; }
int64_t Server::open_connections() const { return impl_->connections; }

void Server::run() {
  impl_->accept();
  std::vector<std::thread> threads;
  for (int i = 1; i < std::max(1, impl_->opt.io_threads); ++i) threads.emplace_back([this] { impl_->ioc.run(); });
  impl_->ioc.run();
  for (auto& t : threads) t.join();
}

void Server::drain(std::chrono::milliseconds deadline) {
  net::post(impl_->acceptor.get_executor(), [this, deadline] {  // the acceptor's strand: see Impl::acceptor
    if (impl_->draining.exchange(true)) return;
    beast::error_code ignored;
    impl_->acceptor.close(ignored);
    impl_->drain_deadline = Clock::now() + deadline;
    impl_->poll_drain();
  });
}

}  // namespace encore::cli::http
