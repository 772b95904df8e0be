#pragma once
// The per-call state machines of the gRPC frontend (internal to src/server/grpc/). Every call
// object is a completion-queue tag: the queue's thread hands it each event with its success
// flag. A call arms its successor as soon as it is taken, so each queue always has one pending
// call per RPC.
#include <grpcpp/grpcpp.h>

#include <shared_mutex>
#include <string_view>

#include "grpc_service.grpc.pb.h"
#include "server/grpc/grpc_server.hpp"

namespace kiln::server::grpc {

using Service = inference::GRPCInferenceService::AsyncService;

class Tag {
 public:
  virtual ~Tag() = default;
  // One completion-queue event for this tag; `ok` false when the operation failed or the
  // server is shutting down.
  virtual void proceed(bool ok) = 0;
};

// What the calls share. Held by shared_ptr: an inference callback may run on a scheduler thread
// after the frontend stopped (a drain that timed out), and must still find it.
class Frontend {
 public:
  Frontend(InferenceServer& core, const GrpcOptions& options, Service& service);

  InferenceServer& core;
  const GrpcOptions& options;
  Service& service;
  grpc_compression_level infer_compression = GRPC_COMPRESS_LEVEL_NONE;

  // OK, or the refusal for an RPC of `category`: UNAVAILABLE without the restricted-protocol
  // key, UNAUTHENTICATED without the bearer token (health RPCs need none).
  ::grpc::Status check_access(const ::grpc::ServerContext& context,
                              std::string_view category) const;

  // Runs `arm` (which starts an operation on a completion queue) only while the server still
  // takes new calls / while the queues are still open; returns whether it ran. Stop flips these
  // under the exclusive lock, so no operation starts on a queue being shut down.
  template <typename Fn>
  bool if_accepting(Fn&& arm) {
    std::shared_lock lock(mutex_);
    if (!accepting_) return false;
    arm();
    return true;
  }
  template <typename Fn>
  bool if_open(Fn&& start) {
    std::shared_lock lock(mutex_);
    if (!open_) return false;
    start();
    return true;
  }
  void stop_accepting();
  void close();

 private:
  std::shared_mutex mutex_;
  bool accepting_ = true;
  bool open_ = true;
};

// Arms one pending call of every RPC on `cq`.
void listen_all(const std::shared_ptr<Frontend>& frontend, ::grpc::ServerCompletionQueue* cq);

}  // namespace kiln::server::grpc
