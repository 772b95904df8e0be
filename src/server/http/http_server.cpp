#include "server/http/http_server.hpp"

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <list>
#include <mutex>

#include "core/log.hpp"
#include "server/http/request_parser.hpp"
#include "server/http/routes.hpp"
#include "server/server_log.hpp"

namespace kiln::server::http {
namespace beast = boost::beast;
namespace bhttp = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

namespace {

// Whether the io_context may still be posted to: replies come from scheduler threads, which
// may finish after the frontend stopped (a drain that timed out).
struct Liveness {
  std::mutex mutex;
  bool alive = true;
};

// What the accept loop needs of a connection to make room at the connection limit.
class ConnectionBase : public std::enable_shared_from_this<ConnectionBase> {
 public:
  virtual ~ConnectionBase() = default;
  // Since when the connection waits for (or reads) its next request; 0 while one is being
  // served. The oldest waiter is the one to close when a new client needs its place.
  int64_t waiting_since() const { return waiting_since_.load(std::memory_order_relaxed); }
  // Closes the connection from any thread (on its own strand).
  virtual void evict() = 0;

 protected:
  void set_waiting(bool waiting) {
    waiting_since_.store(waiting ? std::chrono::steady_clock::now().time_since_epoch().count() : 0,
                         std::memory_order_relaxed);
  }

 private:
  std::atomic<int64_t> waiting_since_{0};
};

// Runs one I/O thread. A handler that throws ends only its own connection (its last owner is
// unwound with it); the thread logs it and goes on serving everyone else.
void run_io_thread(net::io_context& ioc, bool metrics) {
  for (;;) {
    try {
      ioc.run();
      return;
    } catch (const std::exception& e) {
      log_warning("{} I/O thread: a connection's handler failed ({}); connection closed",
                  metrics ? "metrics" : "HTTP", e.what());
    } catch (...) {
      log_warning("{} I/O thread: a connection's handler failed; connection closed",
                  metrics ? "metrics" : "HTTP");
    }
  }
}

}  // namespace

struct HttpServer::Impl {
  InferenceServer& core;
  HttpOptions options;
  // Declared before the io_context: destroying it destroys the connections its queued handlers
  // still own, and their destructors use these.
  std::atomic<size_t> connections{0};
  std::atomic<size_t> open_requests{0};  // read and not yet answered on the wire
  std::shared_ptr<Liveness> liveness = std::make_shared<Liveness>();
  std::unique_ptr<net::ssl::context> tls;  // set when serving HTTPS
  std::mutex registry_mutex;
  std::list<std::weak_ptr<ConnectionBase>> registry;  // every open connection
  net::io_context ioc;
  // The acceptor's completions and its close run on one strand: with several I/O threads a
  // completion racing the close could otherwise re-arm an accept on a socket being torn down.
  net::strand<net::io_context::executor_type> accept_strand = net::make_strand(ioc);
  tcp::acceptor acceptor{accept_strand};
  std::vector<std::thread> threads;

  Impl(InferenceServer& c, HttpOptions o) : core(c), options(std::move(o)) {}
  void do_accept();
  // At the connection limit: closes the connection that has waited longest for a request.
  // False when every connection is busy serving one.
  bool make_room();
  std::list<std::weak_ptr<ConnectionBase>>::iterator enlist(std::weak_ptr<ConnectionBase> c) {
    std::lock_guard lock(registry_mutex);
    return registry.insert(registry.end(), std::move(c));
  }
  void delist(std::list<std::weak_ptr<ConnectionBase>>::iterator it) {
    std::lock_guard lock(registry_mutex);
    registry.erase(it);
  }
};

namespace {

// The largest read buffer a connection needs: a whole header, or a chunk header and the
// trailer that follows the last chunk (which Beast wants in one piece). A longer trailer is a
// buffer_overflow, answered as a too-large header.
size_t read_buffer_limit(const HttpOptions& o) {
  return o.max_header_bytes + (size_t{16} << 10);
}

// One client connection, on its own strand, one request at a time. `Derived` supplies the
// stream (plain TCP or TLS over TCP) and how to close it, as in Beast's "flex" servers.
template <class Derived>
class Connection : public ConnectionBase {
 public:
  explicit Connection(HttpServer::Impl& impl)
      : impl_(impl), buffer_(read_buffer_limit(impl.options)) {
    impl_.connections.fetch_add(1);
  }
  ~Connection() override {
    if (enlisted_) impl_.delist(registry_entry_);
    impl_.connections.fetch_sub(1);
  }

  void evict() override {
    net::post(tcp().get_executor(), [s = self()] {
      beast::error_code ec;
      s->tcp().socket().shutdown(tcp::socket::shutdown_both, ec);
      s->tcp().cancel();
    });
  }

 protected:
  Derived& derived() { return static_cast<Derived&>(*this); }
  std::shared_ptr<Derived> self() {
    return std::static_pointer_cast<Derived>(this->shared_from_this());
  }
  beast::tcp_stream& tcp() { return beast::get_lowest_layer(derived().stream()); }

  void enlist() {
    registry_entry_ = impl_.enlist(this->weak_from_this());
    enlisted_ = true;
  }

  // Waits (up to the idle timeout) for the first byte of the next request, then reads its
  // header under the read timeout.
  void do_read() {
    const HttpOptions& o = impl_.options;
    parser_.emplace(&impl_.core.request_memory(), o.max_body_bytes,
                    static_cast<std::uint32_t>(o.max_header_bytes));
    set_waiting(true);
    if (buffer_.size() > 0) return read_header();  // pipelined: the next request is here
    tcp().expires_after(std::chrono::seconds(o.idle_timeout_secs));
    const size_t room = std::min<size_t>(4096, buffer_.max_size() - buffer_.size());
    derived().stream().async_read_some(buffer_.prepare(room),
                                       [s = self()](beast::error_code ec, std::size_t n) {
                                         if (ec) return s->on_read(ec);
                                         s->buffer_.commit(n);
                                         s->read_header();
                                       });
  }

  HttpServer::Impl& impl_;
  beast::flat_buffer buffer_;

 private:
  void read_header() {
    exchange_ = ExchangeTrace{};
    exchange_.recv_start = Clock::now();
    tcp().expires_after(std::chrono::seconds(impl_.options.read_timeout_secs));
    bhttp::async_read_header(derived().stream(), buffer_, *parser_,
                             beast::bind_front_handler(&Connection::on_header, self()));
  }

  // A client that sent "Expect: 100-continue" (curl does for larger bodies) waits for this
  // interim answer before sending the body.
  void on_header(beast::error_code ec, std::size_t) {
    if (ec) return on_read(ec);
    const auto& header = parser_->get();
    auto expect = header.find(bhttp::field::expect);
    if (expect != header.end() && beast::iequals(expect->value(), "100-continue")) {
      auto interim = std::make_shared<bhttp::response<bhttp::empty_body>>(bhttp::status::continue_,
                                                                          header.version());
      bhttp::async_write(derived().stream(), *interim,
                         [s = self(), interim](beast::error_code wec, std::size_t) {
                           if (wec) return s->derived().do_close();
                           s->read_body();
                         });
      return;
    }
    read_body();
  }

 public:
  // The body arrives in pieces; each extends the deadline by what its bytes earn at the minimum
  // rate, so a fast large upload has time and a trickle runs out of it.
  void read_body() {
    body_started_ = std::chrono::steady_clock::now();
    body_bytes_ = 0;
    if (parser_->is_done()) return on_read({});
    read_body_piece();
  }

 private:
  void read_body_piece() {
    const HttpOptions& o = impl_.options;
    const auto earned = std::chrono::microseconds(
        static_cast<int64_t>(static_cast<double>(body_bytes_) * 1e6 /
                             static_cast<double>(std::max<size_t>(o.min_body_bytes_per_sec, 1))));
    tcp().expires_at(body_started_ + std::chrono::seconds(o.read_timeout_secs) + earned);
    bhttp::async_read_some(derived().stream(), buffer_, *parser_,
                           [s = self()](beast::error_code ec, std::size_t n) {
                             if (ec) return s->on_read(ec);
                             s->body_bytes_ += n;
                             if (s->parser_->is_done()) return s->on_read({});
                             s->read_body_piece();
                           });
  }

  void on_read(beast::error_code ec) {
    if (ec == bhttp::error::end_of_stream || ec == beast::error::timeout || ec == net::error::eof ||
        ec == net::error::connection_reset || ec == net::error::operation_aborted) {
      return derived().do_close();
    }
    set_waiting(false);
    keep_alive_ = false;
    if (parser_ && parser_->is_header_done()) version_ = parser_->get().version();
    if (ec == bhttp::error::body_limit) {
      return write(
          error_response(413, fmt::format("request body is larger than the limit of {} bytes",
                                          impl_.options.max_body_bytes)));
    }
    if (ec == bhttp::error::header_limit || ec == bhttp::error::buffer_overflow) {
      return write(error_response(
          431, fmt::format("request header, a header field or the trailer is larger than the "
                           "limit of {} bytes",
                           impl_.options.max_header_bytes)));
    }
    if (ec == ParseError::unsupported_transfer_encoding) {
      return write(error_response(501, "unsupported Transfer-Encoding: only chunked is accepted"));
    }
    if (ec == ParseError::memory_budget) {
      return write(error_response(
          503, fmt::format("the server's request memory budget ({} bytes) is spent; retry later",
                           impl_.core.request_memory().limit())));
    }
    if (ec) return write(error_response(400, "malformed HTTP request: " + ec.message()));
    exchange_.recv_end = Clock::now();
    Request request = parser_->release(lease_);
    impl_.open_requests.fetch_add(1);
    counted_ = true;
    keep_alive_ = request.keep_alive();
    version_ = request.version();
    // The reply may come from a scheduler thread: hop back onto this connection's strand.
    std::weak_ptr<Liveness> live = impl_.liveness;
    Reply reply = [s = self(), live](Response response) {
      std::shared_ptr<Liveness> l = live.lock();
      if (!l) return;
      std::lock_guard lock(l->mutex);
      if (!l->alive) return;
      net::post(s->tcp().get_executor(),
                [s, response = std::move(response)]() mutable { s->write(std::move(response)); });
    };
    tcp().expires_never();  // inference may queue; the scheduler's policy bounds the wait
    // route_* answer their own errors; this is the last guard for a connection. Once `reply`
    // has been called it must not be again, so only a failure before that answers here.
    auto answered = std::make_shared<std::atomic<bool>>(false);
    Reply once = [reply = std::move(reply), answered](Response response) {
      if (!answered->exchange(true)) reply(std::move(response));
    };
    log_verbose(1, "HTTP request: {} {}",
                std::string_view(request.method_string().data(), request.method_string().size()),
                std::string_view(request.target().data(), request.target().size()));
    try {
      if (impl_.options.metrics) {
        route_metrics(impl_.core, impl_.options, request, once);
      } else {
        route_api(impl_.core, impl_.options, request, once, &exchange_);
      }
    } catch (const std::bad_alloc&) {
      once(error_response(503, "out of memory while serving the request", version_));
    } catch (const std::exception& e) {
      once(error_response(500, e.what(), version_));
    } catch (...) {
      once(error_response(500, "internal error", version_));
    }
  }

 public:
  void write(Response response) {
    response.version(version_);
    response.keep_alive(keep_alive_);
    response.prepare_payload();
    response_ = std::make_shared<Response>(std::move(response));
    stamp(exchange_.trace, TraceActivity::HttpSendStart);
    tcp().expires_after(std::chrono::seconds(impl_.options.idle_timeout_secs));
    bhttp::async_write(
        derived().stream(), *response_,
        beast::bind_front_handler(&Connection::on_write, self(), response_->need_eof()));
  }

 private:
  void on_write(bool close, beast::error_code ec, std::size_t) {
    stamp(exchange_.trace, TraceActivity::HttpSendEnd);
    exchange_.trace.reset();  // the trace is written once its last holder lets go
    response_.reset();
    lease_.reset();
    if (counted_) {
      counted_ = false;
      impl_.open_requests.fetch_sub(1);
    }
    if (ec || close) return derived().do_close();
    do_read();
  }

  std::optional<RequestParser> parser_;
  MemoryLease lease_;  // pays for the request being served
  std::shared_ptr<Response> response_;
  ExchangeTrace exchange_;  // this exchange's arrival times and trace (tracing)
  std::chrono::steady_clock::time_point body_started_;
  size_t body_bytes_ = 0;
  bool keep_alive_ = true;
  bool counted_ = false;  // this connection holds one of impl_.open_requests
  unsigned version_ = 11;
  bool enlisted_ = false;
  std::list<std::weak_ptr<ConnectionBase>>::iterator registry_entry_;
};

class PlainConnection : public Connection<PlainConnection> {
 public:
  PlainConnection(tcp::socket&& socket, HttpServer::Impl& impl)
      : Connection(impl), stream_(std::move(socket)) {}
  beast::tcp_stream& stream() { return stream_; }
  void run() {
    enlist();
    net::dispatch(stream_.get_executor(), [s = self()] { s->do_read(); });
  }
  void do_close() {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
  }

 private:
  beast::tcp_stream stream_;
};

class TlsConnection : public Connection<TlsConnection> {
 public:
  TlsConnection(tcp::socket&& socket, net::ssl::context& ctx, HttpServer::Impl& impl)
      : Connection(impl), stream_(std::move(socket), ctx) {}
  beast::ssl_stream<beast::tcp_stream>& stream() { return stream_; }
  void run() {
    enlist();
    net::dispatch(stream_.get_executor(), [s = self()] {
      s->set_waiting(true);
      beast::get_lowest_layer(s->stream_)
          .expires_after(std::chrono::seconds(s->impl_.options.read_timeout_secs));
      s->stream_.async_handshake(net::ssl::stream_base::server, s->buffer_.data(),
                                 [s](beast::error_code ec, std::size_t used) {
                                   if (ec) return;  // not TLS, or a failed handshake
                                   s->buffer_.consume(used);
                                   s->do_read();
                                 });
    });
  }
  void do_close() {
    beast::get_lowest_layer(stream_).expires_after(std::chrono::seconds(5));
    stream_.async_shutdown([s = self()](beast::error_code) {
      beast::error_code ec;
      beast::get_lowest_layer(s->stream_).socket().shutdown(tcp::socket::shutdown_send, ec);
    });
  }

 private:
  beast::ssl_stream<beast::tcp_stream> stream_;
};

}  // namespace

bool HttpServer::Impl::make_room() {
  // Strong references are taken under the lock and dropped after it: the last one going away
  // runs a connection's destructor, which takes the lock itself.
  std::vector<std::shared_ptr<ConnectionBase>> alive;
  {
    std::lock_guard lock(registry_mutex);
    alive.reserve(registry.size());
    for (const auto& w : registry) {
      if (auto c = w.lock()) alive.push_back(std::move(c));
    }
  }
  ConnectionBase* oldest = nullptr;
  for (const auto& c : alive) {
    const int64_t since = c->waiting_since();
    if (since != 0 && (oldest == nullptr || since < oldest->waiting_since())) oldest = c.get();
  }
  if (oldest == nullptr) return false;
  oldest->evict();
  return true;
}

void HttpServer::Impl::do_accept() {
  acceptor.async_accept(net::make_strand(ioc), [this](beast::error_code ec, tcp::socket socket) {
    if (ec == net::error::operation_aborted || !acceptor.is_open()) return;
    if (!ec) {
      // At the limit, the longest waiter makes room; closings still in progress may take the
      // count a little over it, never far (a burst past the slack is refused).
      const size_t open = connections.load();
      const size_t slack = options.max_connections / 16 + 16;
      if (open >= options.max_connections &&
          (open >= options.max_connections + slack || !make_room())) {
        beast::error_code ignored;
        socket.close(ignored);  // no room: refuse rather than queue unbounded
      } else {
        if (tls) {
          std::make_shared<TlsConnection>(std::move(socket), *tls, *this)->run();
        } else {
          std::make_shared<PlainConnection>(std::move(socket), *this)->run();
        }
      }
    }
    do_accept();
  });
}

HttpServer::HttpServer(InferenceServer& core, HttpOptions options)
    : impl_(std::make_unique<Impl>(core, std::move(options))) {
  KILN_CHECK_ARG(impl_->options.threads >= 1 && impl_->options.threads <= 1024,
                 "HTTP thread count {} must be in 1..1024", impl_->options.threads);
}

HttpServer::~HttpServer() {
  stop();
}

void HttpServer::start() {
  beast::error_code ec;
  const HttpOptions& o = impl_->options;
  if (!o.tls_cert.empty() || !o.tls_key.empty()) {
    KILN_CHECK_ARG(!o.tls_cert.empty() && !o.tls_key.empty(),
                   "HTTPS needs both a certificate and a private key");
    auto ctx = std::make_unique<net::ssl::context>(net::ssl::context::tls_server);
    ctx->set_options(net::ssl::context::default_workarounds | net::ssl::context::no_sslv2 |
                     net::ssl::context::no_sslv3 | net::ssl::context::no_tlsv1 |
                     net::ssl::context::no_tlsv1_1);
    ctx->use_certificate_chain_file(o.tls_cert, ec);
    KILN_CHECK_ARG(!ec, "cannot read the TLS certificate '{}': {}", o.tls_cert, ec.message());
    ctx->use_private_key_file(o.tls_key, net::ssl::context::pem, ec);
    KILN_CHECK_ARG(!ec, "cannot read the TLS private key '{}': {}", o.tls_key, ec.message());
    if (!o.tls_client_ca.empty()) {
      // Mutual TLS: clients must present a certificate signed by this CA.
      ctx->load_verify_file(o.tls_client_ca, ec);
      KILN_CHECK_ARG(!ec, "cannot read the TLS client CA '{}': {}", o.tls_client_ca, ec.message());
      ctx->set_verify_mode(net::ssl::verify_peer | net::ssl::verify_fail_if_no_peer_cert);
    }
    impl_->tls = std::move(ctx);
  }
  net::ip::address address = net::ip::make_address(impl_->options.address, ec);
  KILN_CHECK_ARG(!ec, "invalid address '{}'", impl_->options.address);
  tcp::endpoint endpoint(address, impl_->options.port);
  impl_->acceptor.open(endpoint.protocol(), ec);
  if (!ec) impl_->acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) impl_->acceptor.bind(endpoint, ec);
  if (!ec) impl_->acceptor.listen(net::socket_base::max_listen_connections, ec);
  KILN_CHECK(!ec, ErrorCode::Unavailable, "cannot listen on {}:{}: {}", impl_->options.address,
             impl_->options.port, ec.message());
  bound_port_ = impl_->acceptor.local_endpoint().port();
  impl_->do_accept();
  for (int i = 0; i < impl_->options.threads; ++i) {
    impl_->threads.emplace_back([this] { run_io_thread(impl_->ioc, impl_->options.metrics); });
  }
}

void HttpServer::stop(std::chrono::milliseconds grace) {
  if (!impl_ || impl_->threads.empty()) return;
  net::post(impl_->accept_strand, [impl = impl_.get()] {
    beast::error_code ec;
    impl->acceptor.close(ec);
  });
  // Answers already computed are still being written: let them reach their clients.
  const auto deadline = std::chrono::steady_clock::now() + grace;
  while (impl_->open_requests.load() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  {
    std::lock_guard lock(impl_->liveness->mutex);
    impl_->liveness->alive = false;
  }
  impl_->ioc.stop();
  for (std::thread& t : impl_->threads) {
    if (t.joinable()) t.join();
  }
  impl_->threads.clear();
}

}  // namespace kiln::server::http
