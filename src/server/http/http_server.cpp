#include "server/http/http_server.hpp"

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
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
  tcp::acceptor acceptor{ioc};
  std::vector<std::thread> threads;
  std::atomic<size_t> connections{0};
  std::shared_ptr<Liveness> liveness = std::make_shared<Liveness>();

  Impl(InferenceServer& c, HttpOptions o) : core(c), options(std::move(o)) {}
  void do_accept();
};

namespace {

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(tcp::socket&& socket, HttpServer::Impl& impl)
      : stream_(std::move(socket)), impl_(impl) {
    impl_.connections.fetch_add(1);
  }
  ~Connection() { impl_.connections.fetch_sub(1); }

  void run() {
    net::dispatch(stream_.get_executor(),
                  beast::bind_front_handler(&Connection::do_read, shared_from_this()));
  }

 private:
  void do_read() {
    parser_.emplace();
    parser_->body_limit(impl_.options.max_body_bytes);
    parser_->header_limit(static_cast<std::uint32_t>(impl_.options.max_header_bytes));
    stream_.expires_after(std::chrono::seconds(impl_.options.idle_timeout_secs));
    bhttp::async_read_header(stream_, buffer_, *parser_,
                             beast::bind_front_handler(&Connection::on_header, shared_from_this()));
  }

  // A client that sent "Expect: 100-continue" (curl does for larger bodies) waits for this
  // interim answer before sending the body.
  void on_header(beast::error_code ec, std::size_t bytes) {
    if (ec) return on_read(ec, bytes);
    const auto& header = parser_->get();
    auto expect = header.find(bhttp::field::expect);
    if (expect != header.end() && beast::iequals(expect->value(), "100-continue")) {
      auto interim = std::make_shared<bhttp::response<bhttp::empty_body>>(bhttp::status::continue_,
                                                                          header.version());
      bhttp::async_write(stream_, *interim,
                         [self = shared_from_this(), interim](beast::error_code wec, std::size_t) {
                           if (wec) return self->do_close();
                           self->read_body();
                         });
      return;
    }
    read_body();
  }

  void read_body() {
    bhttp::async_read(stream_, buffer_, *parser_,
                      beast::bind_front_handler(&Connection::on_read, shared_from_this()));
  }

  void on_read(beast::error_code ec, std::size_t) {
    if (ec == bhttp::error::end_of_stream || ec == beast::error::timeout || ec == net::error::eof ||
        ec == net::error::connection_reset || ec == net::error::operation_aborted) {
      return do_close();
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
    keep_alive_ = request.keep_alive();
    version_ = request.version();
    // The reply may come from a scheduler thread: hop back onto this connection's strand.
    std::weak_ptr<Liveness> live = impl_.liveness;
    Reply reply = [self = shared_from_this(), live](Response response) {
      std::shared_ptr<Liveness> l = live.lock();
      if (!l) return;
      std::lock_guard lock(l->mutex);
      if (!l->alive) return;
      net::post(self->stream_.get_executor(), [self, response = std::move(response)]() mutable {
        self->write(std::move(response));
      });
    };
    stream_.expires_never();  // inference may queue; the scheduler's policy bounds the wait
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

  void write(Response response) {
    response.version(version_);
    response.keep_alive(keep_alive_);
    response.prepare_payload();
    response_ = std::make_shared<Response>(std::move(response));
    stream_.expires_after(std::chrono::seconds(impl_.options.idle_timeout_secs));
    bhttp::async_write(stream_, *response_,
                       beast::bind_front_handler(&Connection::on_write, shared_from_this(),
                                                 response_->need_eof()));
  }

  void on_write(bool close, beast::error_code ec, std::size_t) {
    response_.reset();
    if (ec || close) return do_close();
    do_read();
  }

  void do_close() {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
  }

  beast::tcp_stream stream_;
  HttpServer::Impl& impl_;
  beast::flat_buffer buffer_;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  std::shared_ptr<Response> response_;
  bool keep_alive_ = true;
  unsigned version_ = 11;
};

}  // namespace

void HttpServer::Impl::do_accept() {
  acceptor.async_accept(net::make_strand(ioc), [this](beast::error_code ec, tcp::socket socket) {
    if (!acceptor.is_open()) return;
    if (!ec) {
      if (connections.load() >= options.max_connections) {
        beast::error_code ignored;
        socket.close(ignored);  // over the limit: refuse rather than queue unbounded
      } else {
        std::make_shared<Connection>(std::move(socket), *this)->run();
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

void HttpServer::stop() {
  if (!impl_) return;
  {
    std::lock_guard lock(impl_->liveness->mutex);
    impl_->liveness->alive = false;
  }
  net::post(impl_->ioc, [impl = impl_.get()] {
    beast::error_code ec;
    impl->acceptor.close(ec);
  });
  impl_->ioc.stop();
  for (std::thread& t : impl_->threads) {
    if (t.joinable()) t.join();
  }
  impl_->threads.clear();
}

void RestrictedApi::add(std::string_view spec) {
  static const char* kCategories[] = {"health",        "metadata",     "inference",
                                      "shared-memory", "model-config", "model-repository",
                                      "statistics",    "trace",        "logging"};
  const size_t colon = spec.rfind(':');
  KILN_CHECK_ARG(colon != std::string_view::npos,
                 "--http-restricted-api '{}' must be <categories>:<key>=<value>", spec);
  std::string_view cats = spec.substr(0, colon);
  std::string_view kv = spec.substr(colon + 1);
  const size_t eq = kv.find('=');
  KILN_CHECK_ARG(eq != std::string_view::npos && eq > 0,
                 "--http-restricted-api '{}' must be <categories>:<key>=<value>", spec);
  std::string key(kv.substr(0, eq));
  for (char& c : key) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const std::string value(kv.substr(eq + 1));
  size_t start = 0;
  while (start <= cats.size()) {
    size_t comma = cats.find(',', start);
    if (comma == std::string_view::npos) comma = cats.size();
    const std::string cat(cats.substr(start, comma - start));
    bool known = false;
    for (const char* k : kCategories) known |= cat == k;
    KILN_CHECK_ARG(known, "--http-restricted-api: unknown API category '{}'", cat);
    KILN_CHECK_ARG(!by_category.count(cat), "--http-restricted-api: category '{}' given twice",
                   cat);
    by_category[cat] = {key, value};
    start = comma + 1;
  }
}

}  // namespace kiln::server::http
