#pragma once
// The HTTP/REST frontend (Boost.Beast over Asio): KServe v2 / Triton endpoints on the API port
// and Prometheus text on the metrics port, each served by its own HttpServer. One io_context
// with --http-thread-count threads; each connection is handled on its own strand, one request at
// a time (keep-alive), and inference completes asynchronously: the scheduler's callback posts
// the encoded response back to the connection's strand, so no I/O thread waits on a model.
// Request bodies lease their memory from the server core's request budget; at the connection
// limit, the connection that has waited longest for a request (idle or slow) makes room for the
// new one, so slow clients cannot lock others (health probes) out.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "server/http/infer_codec.hpp"
#include "server/http/restricted_api.hpp"
#include "server/server.hpp"

namespace kiln::server::http {

struct HttpOptions {
  std::string address = "0.0.0.0";
  uint16_t port = 8000;  // 0: any free port (see HttpServer::port)
  int threads = 8;
  size_t max_body_bytes = size_t{64} << 20;
  size_t max_header_bytes = size_t{64} << 10;
  size_t max_connections = 4096;
  int idle_timeout_secs = 300;  // a connection silent this long between requests is closed
  // Once the first byte of a request arrived, its header must be complete within this; its body
  // may take this plus its size at `min_body_bytes_per_sec` (a slow client cannot hold a
  // connection, or the body memory it leased, for long).
  int read_timeout_secs = 30;
  size_t min_body_bytes_per_sec = size_t{64} << 10;
  // Largest response body; a larger one is refused before it is encoded.
  size_t max_response_bytes = size_t{512} << 20;
  CodecLimits codec;
  RestrictedApi restricted;  // a request of a restricted category without its header: 403
  std::string bearer_token;  // non-empty: every non-health request needs "Authorization: Bearer"
  bool metrics = false;      // serve /metrics instead of the API
  // With `metrics`: /metrics needs the bearer token too (Prometheus sends it with
  // `authorization: {credentials: ...}`); off, the metrics port stays open.
  bool metrics_auth = false;
  // HTTPS (OpenSSL): PEM certificate chain and private key; with a client CA, clients must
  // present a certificate it signed (mutual TLS). Empty: plain HTTP.
  std::string tls_cert, tls_key, tls_client_ca;
};

class HttpServer {
 public:
  HttpServer(InferenceServer& core, HttpOptions options);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds and starts the I/O threads; throws Unavailable naming the address when binding fails.
  void start();
  // Stops accepting, waits up to `grace` for responses being written, then closes connections
  // and joins the threads.
  void stop(std::chrono::milliseconds grace = std::chrono::seconds(5));
  uint16_t port() const { return bound_port_; }

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
  uint16_t bound_port_ = 0;
};

}  // namespace kiln::server::http
