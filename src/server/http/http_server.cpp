#include "server/http/http_server.hpp"

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <mutex>

#include "server/http/routes.hpp"

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

}  // namespace

struct HttpServer::Impl {
  InferenceServer& core;
  HttpOptions options;
  net::io_context ioc;
  // The acceptor's completions and its close run on one strand: with several I/O threads a
  // completion racing the close could otherwise re-arm an accept on a socket being torn down.
  net::strand<net::io_context::executor_type> accept_strand = net::make_strand(ioc);
  tcp::acceptor acceptor{accept_strand};
  std::vector<std::thread> threads;
  std::atomic<size_t> connections{0};
  std::atomic<size_t> open_requests{0};  // read and not yet answered on the wire
  std::shared_ptr<Liveness> liveness = std::make_shared<Liveness>();
  std::unique_ptr<net::ssl::context> tls;  // set when serving HTTPS

  Impl(InferenceServer& c, HttpOptions o) : core(c), options(std::move(o)) {}
  void do_accept();
};

namespace {

// One client connection, on its own strand, one request at a time. `Derived` supplies the
// stream (plain TCP or TLS over TCP) and how to close it, as in Beast's "flex" servers.
template <class Derived>
class Connection {
 public:
  explicit Connection(HttpServer::Impl& impl) : impl_(impl) { impl_.connections.fetch_add(1); }
  ~Connection() { impl_.connections.fetch_sub(1); }

 protected:
  Derived& derived() { return static_cast<Derived&>(*this); }
  std::shared_ptr<Derived> self() { return derived().shared_from_this(); }
  beast::tcp_stream& tcp() { return beast::get_lowest_layer(derived().stream()); }

  void do_read() {
    parser_.emplace();
    parser_->body_limit(impl_.options.max_body_bytes);
    parser_->header_limit(static_cast<std::uint32_t>(impl_.options.max_header_bytes));
    tcp().expires_after(std::chrono::seconds(impl_.options.idle_timeout_secs));
    bhttp::async_read_header(derived().stream(), buffer_, *parser_,
                             beast::bind_front_handler(&Connection::on_header, self()));
  }

  HttpServer::Impl& impl_;
  beast::flat_buffer buffer_;

 private:
  // A client that sent "Expect: 100-continue" (curl does for larger bodies) waits for this
  // interim answer before sending the body.
  void on_header(beast::error_code ec, std::size_t bytes) {
    if (ec) return on_read(ec, bytes);
    const auto& header = parser_->get();
    auto expect = header.find(bhttp::field::expect);
    if (expect != header.end() && beast::iequals(expect->value(), "100-continue")) {
      auto interim = std::make_shared<bhttp::response<bhttp::empty_body>>(bhttp::status::continue_,
                                                                          header.version());
      bhttp::async_write(derived().stream(), *interim,
                         [s = self(), interim](beast::error_code wec, std::size_t) {
                           if (wec) return s->do_close();
                           s->read_body();
                         });
      return;
    }
    read_body();
  }

 public:
  void read_body() {
    bhttp::async_read(derived().stream(), buffer_, *parser_,
                      beast::bind_front_handler(&Connection::on_read, self()));
  }

 private:
  void on_read(beast::error_code ec, std::size_t) {
    if (ec == bhttp::error::end_of_stream || ec == beast::error::timeout || ec == net::error::eof ||
        ec == net::error::connection_reset || ec == net::error::operation_aborted) {
      return derived().do_close();
    }
    keep_alive_ = false;
    if (ec == bhttp::error::body_limit) {
      return write(
          error_response(413, fmt::format("request body is larger than the limit of {} bytes",
                                          impl_.options.max_body_bytes)));
    }
    if (ec == bhttp::error::header_limit) {
      return write(error_response(431, "request header is too large"));
    }
    if (ec) return write(error_response(400, "malformed HTTP request: " + ec.message()));
    Request request = parser_->release();
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
    try {
      if (impl_.options.metrics) {
        route_metrics(impl_.core, request, std::move(reply));
      } else {
        route_api(impl_.core, impl_.options, request, std::move(reply));
      }
    } catch (const std::exception& e) {
      // route_* answer their own errors; this is the last guard for a connection.
      write(error_response(500, e.what(), version_));
    }
  }

 public:
  void write(Response response) {
    response.version(version_);
    response.keep_alive(keep_alive_);
    response.prepare_payload();
    response_ = std::make_shared<Response>(std::move(response));
    tcp().expires_after(std::chrono::seconds(impl_.options.idle_timeout_secs));
    bhttp::async_write(
        derived().stream(), *response_,
        beast::bind_front_handler(&Connection::on_write, self(), response_->need_eof()));
  }

 private:
  void on_write(bool close, beast::error_code ec, std::size_t) {
    response_.reset();
    if (counted_) {
      counted_ = false;
      impl_.open_requests.fetch_sub(1);
    }
    if (ec || close) return derived().do_close();
    do_read();
  }

  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  std::shared_ptr<Response> response_;
  bool keep_alive_ = true;
  bool counted_ = false;  // this connection holds one of impl_.open_requests
  unsigned version_ = 11;
};

class PlainConnection : public Connection<PlainConnection>,
                        public std::enable_shared_from_this<PlainConnection> {
 public:
  PlainConnection(tcp::socket&& socket, HttpServer::Impl& impl)
      : Connection(impl), stream_(std::move(socket)) {}
  beast::tcp_stream& stream() { return stream_; }
  void run() {
    net::dispatch(stream_.get_executor(),
                  beast::bind_front_handler(&PlainConnection::do_read, shared_from_this()));
  }
  void do_close() {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
  }

 private:
  beast::tcp_stream stream_;
};

class TlsConnection : public Connection<TlsConnection>,
                      public std::enable_shared_from_this<TlsConnection> {
 public:
  TlsConnection(tcp::socket&& socket, net::ssl::context& ctx, HttpServer::Impl& impl)
      : Connection(impl), stream_(std::move(socket), ctx) {}
  beast::ssl_stream<beast::tcp_stream>& stream() { return stream_; }
  void run() {
    net::dispatch(stream_.get_executor(), [self = shared_from_this()] {
      beast::get_lowest_layer(self->stream_)
          .expires_after(std::chrono::seconds(self->impl_.options.idle_timeout_secs));
      self->stream_.async_handshake(net::ssl::stream_base::server, self->buffer_.data(),
                                    [self](beast::error_code ec, std::size_t used) {
                                      if (ec) return;  // not TLS, or a failed handshake
                                      self->buffer_.consume(used);
                                      self->do_read();
                                    });
    });
  }
  void do_close() {
    beast::get_lowest_layer(stream_).expires_after(std::chrono::seconds(5));
    stream_.async_shutdown([self = shared_from_this()](beast::error_code) {
      beast::error_code ec;
      beast::get_lowest_layer(self->stream_).socket().shutdown(tcp::socket::shutdown_send, ec);
    });
  }

 private:
  beast::ssl_stream<beast::tcp_stream> stream_;
};

}  // namespace

void HttpServer::Impl::do_accept() {
  acceptor.async_accept(net::make_strand(ioc), [this](beast::error_code ec, tcp::socket socket) {
    if (ec == net::error::operation_aborted || !acceptor.is_open()) return;
    if (!ec) {
      if (connections.load() >= options.max_connections) {
        beast::error_code ignored;
        socket.close(ignored);  // over the limit: refuse rather than queue unbounded
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
    impl_->threads.emplace_back([this] { impl_->ioc.run(); });
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
