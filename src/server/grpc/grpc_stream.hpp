#pragma once
// ModelStreamInfer: a bidirectional stream of inference requests and responses (internal to
// src/server/grpc/). Requests are read one after another and run concurrently; each response
// (or its error, in error_message, leaving the stream open) is written as soon as it is ready,
// so responses may come in another order than the requests: clients match them by `id`.
#include "server/grpc/grpc_calls.hpp"

namespace kiln::server::grpc {

// Arms one pending ModelStreamInfer call on `cq`.
void listen_stream(const std::shared_ptr<Frontend>& frontend, ::grpc::ServerCompletionQueue* cq);

}  // namespace kiln::server::grpc
