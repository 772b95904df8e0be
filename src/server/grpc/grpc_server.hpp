#pragma once
// The gRPC frontend (grpc++ async API): service inference.GRPCInferenceService from
// proto/grpc_service.proto on --grpc-port. `threads` completion queues, each drained by its own
// thread, with one pending call per RPC per queue; inference completes asynchronously (the
// scheduler's callback encodes the response and starts the write, which the queue's thread
// then finishes), so no thread waits on a model.
//
// Access control mirrors the HTTP frontend: restricted protocol categories (tritonserver's
// --grpc-restricted-protocol) answer UNAVAILABLE without the required metadata key, and an
// optional bearer token answers UNAUTHENTICATED on every RPC but health. TLS (and mutual TLS)
// through grpc's OpenSSL-backed SSL server credentials.
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "server/grpc/grpc_codec.hpp"
#include "server/http/restricted_api.hpp"
#include "server/server.hpp"

namespace kiln::server::grpc {

// tritonserver's --grpc-restricted-protocol: the same categories and value form as HTTP's
// --http-restricted-api; an RPC of a restricted category without its metadata is UNAVAILABLE.
using RestrictedProtocol = http::RestrictedApi;

struct GrpcSslOptions {
  bool use_ssl = false;     // --grpc-use-ssl
  bool mutual = false;      // --grpc-use-ssl-mutual: clients must present a cert signed by root
  std::string server_cert;  // --grpc-server-cert (PEM file)
  std::string server_key;   // --grpc-server-key (PEM file)
  std::string root_cert;    // --grpc-root-cert (PEM file; needed for mutual TLS)
};

struct GrpcOptions {
  std::string address = "0.0.0.0";
  uint16_t port = 8001;  // 0: any free port (see GrpcServer::port)
  int threads = 4;       // completion queues, one thread each
  // Largest request message; gRPC's own default (4 MiB) is too small for real tensors.
  size_t max_receive_bytes = size_t{64} << 20;
  CodecLimits codec;
  RestrictedProtocol restricted;
  std::string bearer_token;  // non-empty: every non-health RPC needs "authorization: Bearer ..."
  GrpcSslOptions ssl;
  // --grpc-infer-response-compression-level: none, low, medium or high.
  std::string infer_compression = "none";
  // Most connections open at once (0: no cap): further ones are closed as they come. Plaintext
  // only (see grpc_acceptor.hpp).
  size_t max_connections = 0;
  // Requests one ModelStreamInfer stream may have running or answered-but-unwritten; at the
  // cap the stream stops reading until an answer is written.
  size_t max_stream_inflight = 64;
  // Extra channel arguments (keepalive and HTTP/2 ping settings), name -> value.
  std::vector<std::pair<std::string, int>> channel_args;
};

class GrpcServer {
 public:
  GrpcServer(InferenceServer& core, GrpcOptions options);
  ~GrpcServer();
  GrpcServer(const GrpcServer&) = delete;
  GrpcServer& operator=(const GrpcServer&) = delete;

  // Binds and starts the queue threads; throws Unavailable naming the address when binding
  // fails, InvalidArgument naming the file when a TLS file cannot be read.
  void start();
  // Stops taking new calls, lets responses being written finish (up to `grace`), then cancels
  // what is left, shuts the queues down and joins the threads. The core drains inference first:
  // what remains are answers being written, which finish quickly, and requests a timed-out drain
  // gave up on, which would not finish anyway (hence a shorter default than HTTP's).
  void stop(std::chrono::milliseconds grace = std::chrono::seconds(2));
  uint16_t port() const { return bound_port_; }

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
  uint16_t bound_port_ = 0;
};

}  // namespace kiln::server::grpc
