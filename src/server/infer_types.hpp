#pragma once
// The protocol-neutral inference request and response of the server core. The HTTP and gRPC
// frontends decode the wire into these types, hand them to InferenceServer::infer_async and
// encode what comes back; nothing below the frontends knows JSON, protobuf or sockets.
//
// Tensors are kiln::Tensor: KServe v2's BYTES is DataType::String (one std::string per element,
// NUL bytes allowed), FP16 / BF16 are Float16 / BFloat16, BOOL is Bool (one byte per element).
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "core/error.hpp"
#include "core/tensor.hpp"

namespace kiln::server {

using Clock = std::chrono::steady_clock;

class RequestTrace;  // server/trace.hpp

// ---- datatypes -------------------------------------------------------------------------------

// The KServe v2 datatype string ("FP32", "BYTES", ...) of an element type; throws Unsupported
// for element types the protocol cannot carry (float8, int4, complex ...).
std::string_view datatype_name(DataType type);
// The element type of a KServe v2 datatype string; nullopt for an unknown string.
std::optional<DataType> datatype_from_name(std::string_view name);
// The element type of a model configuration data type (inference::DataType, "TYPE_FP32" = 11);
// throws InvalidArgument for TYPE_INVALID or an unknown value.
DataType datatype_from_config(int config_type);
// The inference::DataType value of an element type; throws Unsupported when it has none.
int datatype_to_config(DataType type);
// Bytes per element on the wire (BOOL 1, FP16 2 ...); 0 for BYTES, whose elements vary.
size_t datatype_wire_size(DataType type);

// ---- parameters ------------------------------------------------------------------------------

// A request, input or output parameter (KServe v2 "parameters" object / gRPC InferParameter).
using ParameterValue = std::variant<bool, int64_t, uint64_t, double, std::string>;
using Parameters = std::map<std::string, ParameterValue, std::less<>>;

// Typed lookups: nullopt when absent; InvalidArgument naming the key when present with another
// type (an int64 is accepted for a uint64 when not negative, and for a double).
std::optional<bool> parameter_bool(const Parameters& params, std::string_view key);
std::optional<int64_t> parameter_int(const Parameters& params, std::string_view key);
std::optional<std::string> parameter_string(const Parameters& params, std::string_view key);

// ---- request / response ----------------------------------------------------------------------

// Where a tensor lives in a registered system shared memory region: the input or output
// parameters "shared_memory_region", "shared_memory_offset" and "shared_memory_byte_size".
struct SharedMemoryRef {
  std::string region;
  uint64_t offset = 0;
  uint64_t byte_size = 0;
};

struct InferInput {
  std::string name;
  DataType datatype = DataType::Undefined;
  std::vector<int64_t> shape;  // as the client sent it, batch dim included when batching
  Parameters parameters;
  Tensor data;  // dtype == datatype, dims == shape; undefined until the server reads `shm`
  std::optional<SharedMemoryRef> shm;  // set: the data is in this region, not in the request
};

struct RequestedOutput {
  std::string name;
  // Frontend hints kept for the encoder ("binary_data"); "classification" is refused.
  Parameters parameters;
  std::optional<SharedMemoryRef> shm;  // set: the server writes the output into this region
};

struct InferRequest {
  std::string model_name;
  int64_t model_version = -1;  // -1: the highest ready version
  std::string id;
  Parameters parameters;  // all request parameters as sent (the frontend reads its own back)
  std::vector<InferInput> inputs;
  std::vector<RequestedOutput> outputs;  // empty: every output of the model
  // Scheduling, decoded from the parameters "priority" and "timeout" by the frontend.
  uint64_t priority = 0;    // 0: the model's default priority level
  uint64_t timeout_us = 0;  // 0: the model's default queue timeout
  // When the frontend received the request; request duration statistics start here.
  Clock::time_point received = Clock::now();
  // A run deadline set from outside the request's own timeout: an ensemble step inherits its
  // ensemble request's, so every step counts against the time the client's request was given.
  Clock::time_point deadline = Clock::time_point::max();
  // Set by the frontend when the client has gone (a cancelled gRPC call or stream): a request
  // still queued then leaves the queue without running.
  std::shared_ptr<const std::atomic<bool>> cancelled;
  // Set when the request is sampled for tracing (Tracer::start); every stage stamps it.
  std::shared_ptr<RequestTrace> trace;
  bool is_cancelled() const { return cancelled && cancelled->load(std::memory_order_relaxed); }
};

// Both frontends' checks on what they decoded, so HTTP and gRPC refuse the same things alike:
// - the request parameters "priority" and "timeout" (microseconds) into the scheduling fields
//   (InvalidArgument when negative or not integers);
void read_scheduling_parameters(InferRequest& request);
// - the shared memory parameters of an input or output `name` ("input" / "output" in `what`):
//   nullopt without "shared_memory_region"; the region's name, offset (default 0) and byte size
//   otherwise, in tritonserver's words when one has the wrong type or is negative.
std::optional<SharedMemoryRef> read_shared_memory_parameters(const Parameters& params,
                                                             std::string_view what,
                                                             const std::string& name);

struct InferOutput {
  std::string name;
  DataType datatype = DataType::Undefined;
  std::vector<int64_t> shape;
  Parameters parameters;
  Tensor data;  // undefined once written into shared memory
  // Written into the region the request named: the frontends send no data for it (as Triton,
  // which sends the output's name, datatype and shape only).
  bool in_shared_memory = false;
};

// The compute time charged to one request (a request in a merged batch is charged the batch's),
// as Triton's statistics count it: an ensemble adds up its steps' for its own statistics.
struct ComputeTimes {
  uint64_t input_ns = 0;
  uint64_t infer_ns = 0;
  uint64_t output_ns = 0;
};

struct InferResponse {
  std::string model_name;
  int64_t model_version = 0;
  std::string id;
  Parameters parameters;
  std::vector<InferOutput> outputs;  // in the order requested (model order when all)
  ComputeTimes compute;              // not sent: what the server spent computing it
};

// ---- status ----------------------------------------------------------------------------------

// The result of an operation at the server edge: ok, or a kiln error code and message. The
// frontends map it to HTTP (http_status) and gRPC status codes.
class Status {
 public:
  Status() = default;  // ok
  Status(ErrorCode code, std::string message) : error_(Error(code, std::move(message))) {}
  explicit Status(const Error& error) : error_(error) {}
  static Status ok() { return {}; }

  bool is_ok() const { return !error_.has_value(); }
  explicit operator bool() const { return is_ok(); }
  ErrorCode code() const;  // Internal when called on ok
  const std::string& message() const;
  // A refusal the client should retry later (admission control under a latency objective) says
  // when: the HTTP frontend sends it as Retry-After, the gRPC one as trailing metadata. 0: none.
  uint64_t retry_after_ms() const { return retry_after_ms_; }
  void set_retry_after_ms(uint64_t ms) { retry_after_ms_ = ms; }

 private:
  std::optional<Error> error_;
  uint64_t retry_after_ms_ = 0;
};

// Triton's HTTP mapping: InvalidArgument 400, NotFound 404, Unavailable 503, Unsupported 501,
// Internal 500.
int http_status(ErrorCode code);

// Completion of one request: exactly one call, from any thread, with a response when ok.
using InferCallback = std::function<void(Status status, std::unique_ptr<InferResponse> response)>;

}  // namespace kiln::server
