#include "server/grpc/grpc_codec.hpp"

#include <charconv>
#include <utility>

#include "server/tensor_wire.hpp"

namespace kiln::server::grpc {
namespace {

using ParameterMap = google::protobuf::Map<std::string, inference::InferParameter>;

Parameters decode_parameters(const ParameterMap& map, std::string_view where,
                             const CodecLimits& limits) {
  KILN_CHECK_ARG(map.size() <= limits.max_parameters, "{}: more than {} parameters", where,
                 limits.max_parameters);
  Parameters out;
  for (const auto& [key, p] : map) {
    switch (p.parameter_choice_case()) {
      case inference::InferParameter::kBoolParam:
        out[key] = p.bool_param();
        break;
      case inference::InferParameter::kInt64Param:
        out[key] = p.int64_param();
        break;
      case inference::InferParameter::kUint64Param:
        out[key] = p.uint64_param();
        break;
      case inference::InferParameter::kDoubleParam:
        out[key] = p.double_param();
        break;
      case inference::InferParameter::kStringParam:
        out[key] = p.string_param();
        break;
      case inference::InferParameter::PARAMETER_CHOICE_NOT_SET:
        fail(ErrorCode::InvalidArgument, "{}: parameter '{}' has no value", where, key);
    }
  }
  return out;
}

// Sets the InferParameter field of the value's type (std::visit picks the exact overload).
struct SetParameter {
  inference::InferParameter& p;
  void operator()(bool v) const { p.set_bool_param(v); }
  void operator()(int64_t v) const { p.set_int64_param(v); }
  void operator()(uint64_t v) const { p.set_uint64_param(v); }
  void operator()(double v) const { p.set_double_param(v); }
  void operator()(const std::string& v) const { p.set_string_param(v); }
};

void encode_parameters(const Parameters& params, ParameterMap& map) {
  for (const auto& [key, value] : params) std::visit(SetParameter{map[key]}, value);
}

// Which InferTensorContents field carries a datatype (narrow integers travel widened).
enum class ContentsField { Bool, Int, Int64, Uint, Uint64, Fp32, Fp64, Bytes, None };

ContentsField contents_field(DataType dtype) {
  switch (dtype) {
    case DataType::Bool:
      return ContentsField::Bool;
    case DataType::Int8:
    case DataType::Int16:
    case DataType::Int32:
      return ContentsField::Int;
    case DataType::Int64:
      return ContentsField::Int64;
    case DataType::UInt8:
    case DataType::UInt16:
    case DataType::UInt32:
      return ContentsField::Uint;
    case DataType::UInt64:
      return ContentsField::Uint64;
    case DataType::Float32:
      return ContentsField::Fp32;
    case DataType::Float64:
      return ContentsField::Fp64;
    case DataType::String:
      return ContentsField::Bytes;
    default:
      return ContentsField::None;  // FP16, BF16: raw only
  }
}

constexpr const char* kFieldNames[] = {"bool_contents", "int_contents",    "int64_contents",
                                       "uint_contents", "uint64_contents", "fp32_contents",
                                       "fp64_contents", "bytes_contents"};

// Element counts of the eight typed fields, in ContentsField order.
std::array<int, 8> field_sizes(const inference::InferTensorContents& c) {
  return {c.bool_contents_size(), c.int_contents_size(),    c.int64_contents_size(),
          c.uint_contents_size(), c.uint64_contents_size(), c.fp32_contents_size(),
          c.fp64_contents_size(), c.bytes_contents_size()};
}

template <typename T, typename Field>
void fill(Tensor& t, const Field& src, const std::string& input) {
  T* out = t.data<T>();
  for (int i = 0; i < src.size(); ++i) {
    const auto v = src.Get(i);
    using V = std::decay_t<decltype(v)>;
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool> && !std::is_same_v<T, V>) {
      KILN_CHECK_ARG(std::in_range<T>(v), "input '{}': element {} value {} is out of range for {}",
                     input, i, v, datatype_name(t.dtype()));
    }
    out[i] = static_cast<T>(v);
  }
}

Tensor decode_contents(const inference::InferTensorContents& c, DataType dtype,
                       const std::vector<int64_t>& shape, const std::string& input) {
  const ContentsField field = contents_field(dtype);
  KILN_CHECK_ARG(field != ContentsField::None,
                 "input '{}': {} data must be sent in raw_input_contents", input,
                 datatype_name(dtype));
  const std::array<int, 8> sizes = field_sizes(c);
  const size_t wanted = static_cast<size_t>(field);
  for (size_t f = 0; f < sizes.size(); ++f) {
    KILN_CHECK_ARG(f == wanted || sizes[f] == 0, "input '{}': {} data given in {} (expected {})",
                   input, datatype_name(dtype), kFieldNames[f], kFieldNames[wanted]);
  }
  const int64_t numel = shape_numel(shape);
  KILN_CHECK_ARG(sizes[wanted] == numel, "input '{}': {} has {} elements but shape {} needs {}",
                 input, kFieldNames[wanted], sizes[wanted], dims_to_string(shape), numel);
  Tensor t(dtype, shape);
  switch (dtype) {
    case DataType::Bool:
      fill<bool>(t, c.bool_contents(), input);
      break;
    case DataType::Int8:
      fill<int8_t>(t, c.int_contents(), input);
      break;
    case DataType::Int16:
      fill<int16_t>(t, c.int_contents(), input);
      break;
    case DataType::Int32:
      fill<int32_t>(t, c.int_contents(), input);
      break;
    case DataType::Int64:
      fill<int64_t>(t, c.int64_contents(), input);
      break;
    case DataType::UInt8:
      fill<uint8_t>(t, c.uint_contents(), input);
      break;
    case DataType::UInt16:
      fill<uint16_t>(t, c.uint_contents(), input);
      break;
    case DataType::UInt32:
      fill<uint32_t>(t, c.uint_contents(), input);
      break;
    case DataType::UInt64:
      fill<uint64_t>(t, c.uint64_contents(), input);
      break;
    case DataType::Float32:
      fill<float>(t, c.fp32_contents(), input);
      break;
    case DataType::Float64:
      fill<double>(t, c.fp64_contents(), input);
      break;
    case DataType::String: {
      std::string* out = t.data<std::string>();
      for (int i = 0; i < c.bytes_contents_size(); ++i) out[i] = c.bytes_contents(i);
      break;
    }
    default:
      fail(ErrorCode::Internal, "input '{}': no typed contents for {}", input,
           datatype_name(dtype));
  }
  return t;
}

void check_name(const std::string& name, const char* what, const CodecLimits& limits) {
  KILN_CHECK_ARG(!name.empty() && name.size() <= limits.max_name_bytes,
                 "each {} needs a name of 1 to {} bytes", what, limits.max_name_bytes);
}

void encode_duration(const DurationStat& d, inference::StatisticDuration& out) {
  out.set_count(d.count);
  out.set_ns(d.ns);
}

}  // namespace

int64_t parse_model_version(const std::string& text) {
  if (text.empty()) return -1;
  int64_t v = -1;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  // tritonserver's words (its parser is std::stol).
  KILN_CHECK_ARG(ec == std::errc() && p == text.data() + text.size() && v >= 0,
                 "failed to get model version from specified version string '{}' (details: "
                 "stol), version should be an integral value > 0",
                 text);
  return v;
}

std::unique_ptr<InferRequest> decode_infer_request(const inference::ModelInferRequest& message,
                                                   const CodecLimits& limits) {
  auto request = std::make_unique<InferRequest>();
  KILN_CHECK_ARG(!message.model_name().empty(), "the request names no model");
  request->model_name = message.model_name();
  request->model_version = parse_model_version(message.model_version());
  request->id = message.id();
  request->parameters = decode_parameters(message.parameters(), "request", limits);
  read_scheduling_parameters(*request);

  const int n_inputs = message.inputs_size();
  KILN_CHECK_ARG(static_cast<size_t>(n_inputs) <= limits.max_inputs,
                 "request has {} inputs; at most {}", n_inputs, limits.max_inputs);
  // Inputs in shared memory have no raw_input_contents entry (tritonclient sends none for them).
  int n_shm = 0;
  for (const auto& in : message.inputs()) n_shm += in.parameters().count("shared_memory_region");
  const int n_raw = message.raw_input_contents_size();
  KILN_CHECK_ARG(n_raw == 0 || n_raw == n_inputs - n_shm,
                 "raw_input_contents has {} entries for {} inputs{}: give one per input or none",
                 n_raw, n_inputs - n_shm,
                 n_shm ? fmt::format(" not in shared memory ({} are)", n_shm) : std::string());
  int raw_index = 0;
  request->inputs.reserve(static_cast<size_t>(n_inputs));
  for (int i = 0; i < n_inputs; ++i) {
    const inference::ModelInferRequest::InferInputTensor& in = message.inputs(i);
    check_name(in.name(), "input", limits);
    InferInput input;
    input.name = in.name();
    input.datatype = wire_datatype(in.datatype(), input.name);
    input.shape.assign(in.shape().begin(), in.shape().end());
    check_wire_shape(input.shape, limits.max_rank, input.name);
    input.parameters = decode_parameters(in.parameters(), "input '" + input.name + "'", limits);
    input.shm = read_shared_memory_parameters(input.parameters, "input", input.name);
    if (input.shm) {
      // The server reads it from the region.
      const std::array<int, 8> sizes = field_sizes(in.contents());
      bool contents = false;
      for (int size : sizes) contents = contents || size != 0;
      KILN_CHECK_ARG(!contents, "input '{}' has both data and 'shared_memory_region': give one",
                     input.name);
    } else if (n_raw > 0) {
      const std::array<int, 8> sizes = field_sizes(in.contents());
      for (size_t f = 0; f < sizes.size(); ++f) {
        KILN_CHECK_ARG(sizes[f] == 0,
                       "input '{}' has both contents and raw_input_contents: give one", input.name);
      }
      input.data = decode_raw_tensor(message.raw_input_contents(raw_index++), input.datatype,
                                     input.shape, input.name, *request);
    } else {
      input.data = decode_contents(in.contents(), input.datatype, input.shape, input.name);
    }
    request->inputs.push_back(std::move(input));
  }

  KILN_CHECK_ARG(static_cast<size_t>(message.outputs_size()) <= limits.max_outputs,
                 "request asks for {} outputs; at most {}", message.outputs_size(),
                 limits.max_outputs);
  for (const auto& out : message.outputs()) {
    check_name(out.name(), "requested output", limits);
    RequestedOutput o;
    o.name = out.name();
    o.parameters = decode_parameters(out.parameters(), "output '" + o.name + "'", limits);
    o.shm = read_shared_memory_parameters(o.parameters, "output", o.name);
    request->outputs.push_back(std::move(o));
  }
  return request;
}

void encode_infer_response(const InferResponse& response, inference::ModelInferResponse& message) {
  message.set_model_name(response.model_name);
  message.set_model_version(std::to_string(response.model_version));
  message.set_id(response.id);
  encode_parameters(response.parameters, *message.mutable_parameters());
  for (const InferOutput& out : response.outputs) {
    inference::ModelInferResponse::InferOutputTensor* t = message.add_outputs();
    t->set_name(out.name);
    t->set_datatype(std::string(datatype_name(out.datatype)));
    for (int64_t d : out.shape) t->add_shape(d);
    encode_parameters(out.parameters, *t->mutable_parameters());
    std::string* raw = message.add_raw_output_contents();
    // Written into the client's region: an empty entry keeps raw_output_contents one per output,
    // as tritonserver's answer.
    if (out.in_shared_memory) continue;
    raw->reserve(raw_tensor_size(out.data));
    append_raw_tensor(*raw, out.data);
  }
}

void encode_server_metadata(const ServerMetadata& metadata,
                            inference::ServerMetadataResponse& message) {
  message.set_name(metadata.name);
  message.set_version(metadata.version);
  for (const std::string& e : metadata.extensions) message.add_extensions(e);
}

void encode_model_metadata(const ModelMetadata& metadata,
                           inference::ModelMetadataResponse& message) {
  message.set_name(metadata.name);
  for (const std::string& v : metadata.versions) message.add_versions(v);
  message.set_platform(metadata.platform);
  auto tensors = [](const std::vector<TensorMetadata>& from, auto* to) {
    for (const TensorMetadata& t : from) {
      inference::ModelMetadataResponse::TensorMetadata* m = to->Add();
      m->set_name(t.name);
      m->set_datatype(t.datatype);
      for (int64_t d : t.shape) m->add_shape(d);
    }
  };
  tensors(metadata.inputs, message.mutable_inputs());
  tensors(metadata.outputs, message.mutable_outputs());
}

void encode_statistics(const std::vector<ModelStatisticsEntry>& entries,
                       inference::ModelStatisticsResponse& message) {
  for (const ModelStatisticsEntry& e : entries) {
    const StatisticsSnapshot& s = e.stats;
    inference::ModelStatistics* m = message.add_model_stats();
    m->set_name(e.name);
    m->set_version(std::to_string(e.version));
    m->set_last_inference(s.last_inference_ms);
    m->set_inference_count(s.inference_count);
    m->set_execution_count(s.execution_count);
    inference::InferStatistics* is = m->mutable_inference_stats();
    encode_duration(s.inference.success, *is->mutable_success());
    encode_duration(s.inference.fail, *is->mutable_fail());
    encode_duration(s.inference.queue, *is->mutable_queue());
    encode_duration(s.inference.compute_input, *is->mutable_compute_input());
    encode_duration(s.inference.compute_infer, *is->mutable_compute_infer());
    encode_duration(s.inference.compute_output, *is->mutable_compute_output());
    encode_duration(s.inference.cache_hit, *is->mutable_cache_hit());
    encode_duration(s.inference.cache_miss, *is->mutable_cache_miss());
    for (const auto& [size, bs] : s.batches) {
      inference::InferBatchStatistics* b = m->add_batch_stats();
      b->set_batch_size(size);
      encode_duration(bs.compute_input, *b->mutable_compute_input());
      encode_duration(bs.compute_infer, *b->mutable_compute_infer());
      encode_duration(bs.compute_output, *b->mutable_compute_output());
    }
  }
}

void encode_repository_index(const std::vector<RepositoryIndexEntry>& entries,
                             inference::RepositoryIndexResponse& message) {
  for (const RepositoryIndexEntry& e : entries) {
    inference::RepositoryIndexResponse::ModelIndex* m = message.add_models();
    m->set_name(e.name);
    m->set_version(e.version);
    m->set_state(std::string(model_state_name(e.state)));
    // As over HTTP: a model never loaded has no reason (the load answer and the log say why).
    if (e.state != ModelState::NotLoaded) m->set_reason(e.reason);
  }
}

::grpc::StatusCode grpc_status_code(ErrorCode code) {
  switch (code) {
    case ErrorCode::InvalidArgument:
      return ::grpc::StatusCode::INVALID_ARGUMENT;
    case ErrorCode::NotFound:
      return ::grpc::StatusCode::NOT_FOUND;
    case ErrorCode::Unavailable:
      return ::grpc::StatusCode::UNAVAILABLE;
    case ErrorCode::Unsupported:
      return ::grpc::StatusCode::UNIMPLEMENTED;
    case ErrorCode::Internal:
      return ::grpc::StatusCode::INTERNAL;
  }
  return ::grpc::StatusCode::INTERNAL;
}

::grpc::Status to_grpc_status(const Status& status) {
  if (status.is_ok()) return ::grpc::Status::OK;
  return {grpc_status_code(status.code()), status.message()};
}

}  // namespace kiln::server::grpc
