#pragma once
// Conversions between the gRPC protocol messages (proto/grpc_service.proto) and the server
// core's protocol-neutral types, separate from the completion-queue machinery so they can be
// tested and fuzzed without a network.
//
// Inference inputs arrive either as typed InferTensorContents or as raw_input_contents (one
// entry per input, raw layout of server/tensor_wire.hpp; all inputs or none). Outputs always
// leave in raw_output_contents, as Triton answers. Untrusted input: every count and size is
// checked against the shape before anything is allocated.
#include <grpcpp/support/status.h>

#include <memory>
#include <string>
#include <vector>

#include "grpc_service.pb.h"
#include "server/http/infer_codec.hpp"
#include "server/server.hpp"

namespace kiln::server::grpc {

// The request limits are the same for both protocols.
using CodecLimits = http::CodecLimits;

// A version field: "" means the highest ready version (-1); otherwise a non-negative integer,
// InvalidArgument for anything else.
int64_t parse_model_version(const std::string& text);

// ModelInferRequest -> InferRequest (model name and version included, `received` left to the
// caller). Throws InvalidArgument naming the field, Unsupported for shared-memory tensors.
std::unique_ptr<InferRequest> decode_infer_request(const inference::ModelInferRequest& message,
                                                   const CodecLimits& limits = {});

// InferResponse -> ModelInferResponse, every output in raw_output_contents.
void encode_infer_response(const InferResponse& response, inference::ModelInferResponse& message);

void encode_server_metadata(const ServerMetadata& metadata,
                            inference::ServerMetadataResponse& message);
void encode_model_metadata(const ModelMetadata& metadata,
                           inference::ModelMetadataResponse& message);
void encode_statistics(const std::vector<ModelStatisticsEntry>& entries,
                       inference::ModelStatisticsResponse& message);
void encode_repository_index(const std::vector<RepositoryIndexEntry>& entries,
                             inference::RepositoryIndexResponse& message);

// The status code of a kiln error code, as Triton maps its own: InvalidArgument ->
// INVALID_ARGUMENT, NotFound -> NOT_FOUND, Unavailable -> UNAVAILABLE, Unsupported ->
// UNIMPLEMENTED, Internal -> INTERNAL.
::grpc::StatusCode grpc_status_code(ErrorCode code);
::grpc::Status to_grpc_status(const Status& status);

}  // namespace kiln::server::grpc
