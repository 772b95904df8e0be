#include "server/grpc/grpc_flags.hpp"

#include <grpcpp/grpcpp.h>

namespace kiln::server::grpc {

void add_grpc_flags(CLI::App& app, GrpcFlags& f) {
  app.add_option("--grpc-thread-count", f.threads, "gRPC completion queues (one thread each)")
      ->check(CLI::Range(1, 1024));
  app.add_option("--grpc-max-receive-bytes", f.max_receive_bytes, "largest gRPC request message")
      ->check(CLI::Range(size_t{1}, size_t{INT32_MAX}));
  app.add_option("--grpc-use-ssl", f.ssl.use_ssl, "serve gRPC over TLS");
  app.add_option("--grpc-use-ssl-mutual", f.ssl.mutual,
                 "serve gRPC over mutual TLS (clients need a certificate signed by the root)");
  app.add_option("--grpc-server-cert", f.ssl.server_cert, "server certificate (PEM) for TLS");
  app.add_option("--grpc-server-key", f.ssl.server_key, "server private key (PEM) for TLS");
  app.add_option("--grpc-root-cert", f.ssl.root_cert, "root certificate (PEM) for mutual TLS");
  app.add_option("--grpc-infer-response-compression-level", f.compression,
                 "compression of inference responses: none, low, medium or high")
      ->check(CLI::IsMember({"none", "low", "medium", "high"}));
  app.add_option("--grpc-bearer-token", f.bearer_token,
                 "require 'authorization: Bearer <token>' on every non-health gRPC call "
                 "(default: the --http-bearer-token)");
  app.add_option("--grpc-keepalive-time", f.keepalive_time_ms, "keepalive ping period (ms)");
  app.add_option("--grpc-keepalive-timeout", f.keepalive_timeout_ms,
                 "keepalive ping acknowledgement timeout (ms)");
  app.add_option("--grpc-keepalive-permit-without-calls", f.keepalive_permit_without_calls,
                 "allow keepalive pings without calls in flight");
  app.add_option("--grpc-http2-max-pings-without-data", f.max_pings_without_data,
                 "HTTP/2 pings allowed without data");
  app.add_option("--grpc-http2-min-recv-ping-interval-without-data", f.min_recv_ping_interval_ms,
                 "minimum interval (ms) between pings received without data");
  app.add_option("--grpc-http2-max-ping-strikes", f.max_ping_strikes,
                 "bad pings tolerated before the connection is closed");
  app.add_option("--grpc-max-concurrent-streams", f.max_concurrent_streams,
                 "most calls open at once on one gRPC connection (HTTP/2 streams)")
      ->check(CLI::Range(1, INT32_MAX));
  app.add_option("--grpc-max-stream-inflight", f.max_stream_inflight,
                 "requests one ModelStreamInfer stream may have running or unwritten; at the cap "
                 "the stream is not read until an answer is written")
      ->check(CLI::Range(size_t{1}, size_t{1} << 20));
  app.add_option("--grpc-max-connections", f.max_connections,
                 "most gRPC connections open at once; further ones are closed (0: no cap; "
                 "plaintext only)");
  app.add_option("--grpc-max-connection-age", f.max_connection_age_ms,
                 "close a connection (GOAWAY) after this many ms, so clients rebalance")
      ->check(CLI::Range(1, INT32_MAX));
  app.add_option("--grpc-max-connection-age-grace", f.max_connection_age_grace_ms,
                 "ms a connection past its age has to finish its calls")
      ->check(CLI::Range(0, INT32_MAX));
  app.add_option("--grpc-max-connection-idle", f.max_connection_idle_ms,
                 "close a connection without calls for this many ms")
      ->check(CLI::Range(1, INT32_MAX));
}

GrpcOptions grpc_options(const GrpcFlags& f, const std::string& address, int port,
                         const std::vector<std::string>& restricted,
                         const std::string& http_bearer_token) {
  GrpcOptions o;
  o.address = address;
  o.port = static_cast<uint16_t>(port);
  o.threads = f.threads;
  o.max_receive_bytes = f.max_receive_bytes;
  o.max_connections = f.max_connections;
  o.max_stream_inflight = f.max_stream_inflight;
  o.ssl = f.ssl;
  if (o.ssl.mutual) o.ssl.use_ssl = true;
  o.infer_compression = f.compression;
  o.bearer_token = f.bearer_token.value_or(http_bearer_token);
  for (const std::string& spec : restricted) o.restricted.add(spec, "--grpc-restricted-protocol");
  auto arg = [&](const char* name, const auto& value) {
    if (value) o.channel_args.emplace_back(name, static_cast<int>(*value));
  };
  arg(GRPC_ARG_KEEPALIVE_TIME_MS, f.keepalive_time_ms);
  arg(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, f.keepalive_timeout_ms);
  arg(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, f.keepalive_permit_without_calls);
  arg(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, f.max_pings_without_data);
  arg(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, f.min_recv_ping_interval_ms);
  arg(GRPC_ARG_HTTP2_MAX_PING_STRIKES, f.max_ping_strikes);
  arg(GRPC_ARG_MAX_CONCURRENT_STREAMS, std::optional<int>(f.max_concurrent_streams));
  arg(GRPC_ARG_MAX_CONNECTION_AGE_MS, f.max_connection_age_ms);
  arg(GRPC_ARG_MAX_CONNECTION_AGE_GRACE_MS, f.max_connection_age_grace_ms);
  arg(GRPC_ARG_MAX_CONNECTION_IDLE_MS, f.max_connection_idle_ms);
  return o;
}

}  // namespace kiln::server::grpc
