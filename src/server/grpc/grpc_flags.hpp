#pragma once
// The gRPC flags of kiln-serve, named as tritonserver names them (--grpc-use-ssl,
// --grpc-keepalive-time, --grpc-max-connection-age, ...) plus Kiln's own (--grpc-thread-count,
// --grpc-max-receive-bytes, --grpc-max-concurrent-streams, --grpc-max-connections,
// --grpc-max-connection-idle, --grpc-max-stream-inflight,
// --grpc-bearer-token). The address, port and restricted-protocol flags live with the others in
// serve_main.cpp.
#include <CLI/CLI.hpp>
#include <optional>
#include <string>
#include <vector>

#include "server/grpc/grpc_server.hpp"

namespace kiln::server::grpc {

struct GrpcFlags {
  int threads = 4;
  size_t max_receive_bytes = size_t{64} << 20;
  GrpcSslOptions ssl;
  std::string compression = "none";
  std::optional<std::string> bearer_token;  // unset: the HTTP bearer token applies
  std::optional<int> keepalive_time_ms, keepalive_timeout_ms, max_pings_without_data,
      min_recv_ping_interval_ms, max_ping_strikes;
  std::optional<bool> keepalive_permit_without_calls;
  // HTTP/2 streams (calls) one connection may have open at once; gRPC's own default is
  // unbounded. Further calls wait in the client, or are refused with REFUSED_STREAM.
  int max_concurrent_streams = 1024;
  size_t max_connections = 0;  // 0: no cap
  size_t max_stream_inflight = 64;
  std::optional<int> max_connection_age_ms, max_connection_age_grace_ms, max_connection_idle_ms;
};

void add_grpc_flags(CLI::App& app, GrpcFlags& flags);

// The options for a GrpcServer on address:port. `restricted` are the --grpc-restricted-protocol
// values; `http_bearer_token` guards gRPC too unless --grpc-bearer-token says otherwise, so a
// token set for one protocol never leaves the other open. Throws InvalidArgument for bad values.
GrpcOptions grpc_options(const GrpcFlags& flags, const std::string& address, int port,
                         const std::vector<std::string>& restricted,
                         const std::string& http_bearer_token);

}  // namespace kiln::server::grpc
