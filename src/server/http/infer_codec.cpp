#include "server/http/infer_codec.hpp"

#include <rapidjson/error/en.h>

#include <cstdint>
#include <limits>

#include "server/json_memory.hpp"
#include "server/tensor_wire.hpp"

namespace kiln::server::http {
namespace rj = rapidjson;
namespace {

// Iterative parsing keeps the parser's depth off the call stack (the client controls nesting);
// NaN / Infinity are accepted as Python's json module writes them.
constexpr unsigned kParseFlags = rj::kParseIterativeFlag | rj::kParseNanAndInfFlag;
using Writer = JsonWriter;

std::string_view str(const JsonValue& v) {
  return {v.GetString(), v.GetStringLength()};
}

const JsonValue* member(const JsonValue& obj, const char* key) {
  auto it = obj.FindMember(key);
  return it == obj.MemberEnd() ? nullptr : &it->value;
}

Parameters decode_parameters(const JsonValue& v, std::string_view where,
                             const CodecLimits& limits) {
  KILN_CHECK_ARG(v.IsObject(), "{}: 'parameters' must be a JSON object", where);
  KILN_CHECK_ARG(v.MemberCount() <= limits.max_parameters, "{}: more than {} parameters", where,
                 limits.max_parameters);
  Parameters out;
  for (auto it = v.MemberBegin(); it != v.MemberEnd(); ++it) {
    std::string key(str(it->name));
    const JsonValue& p = it->value;
    if (p.IsBool()) {
      out[key] = p.GetBool();
    } else if (p.IsInt64()) {
      out[key] = p.GetInt64();
    } else if (p.IsUint64()) {
      out[key] = p.GetUint64();
    } else if (p.IsDouble()) {
      out[key] = p.GetDouble();
    } else if (p.IsString()) {
      out[key] = std::string(str(p));
    } else {
      fail(ErrorCode::InvalidArgument, "{}: parameter '{}' must be a bool, number or string", where,
           key);
    }
  }
  return out;
}

std::vector<int64_t> decode_shape(const JsonValue& v, const std::string& input,
                                  const CodecLimits& limits) {
  KILN_CHECK_ARG(v.IsArray(), "input '{}': 'shape' must be an array of integers", input);
  KILN_CHECK_ARG(v.Size() <= limits.max_rank, "input '{}': rank {} is more than {}", input,
                 v.Size(), limits.max_rank);
  std::vector<int64_t> shape;
  for (const JsonValue& d : v.GetArray()) {
    KILN_CHECK_ARG(d.IsInt64(), "input '{}': 'shape' must hold non-negative integers", input);
    shape.push_back(d.GetInt64());
  }
  return shape;
}

// The leaves of a (possibly nested) "data" array in row-major order, without recursion. Stops
// as soon as there are more than `expected` so a huge array costs nothing beyond its parse.
std::vector<const JsonValue*> flatten(const JsonValue& data, int64_t expected,
                                      const std::string& input) {
  std::vector<const JsonValue*> leaves;
  if (!data.IsArray()) {
    leaves.push_back(&data);  // a scalar for a one-element tensor
    return leaves;
  }
  std::vector<std::pair<const JsonValue*, rj::SizeType>> stack{{&data, 0}};
  while (!stack.empty()) {
    auto& [arr, index] = stack.back();
    if (index == arr->Size()) {
      stack.pop_back();
      continue;
    }
    const JsonValue& v = (*arr)[index++];
    if (v.IsArray()) {
      stack.emplace_back(&v, 0);
      continue;
    }
    leaves.push_back(&v);
    KILN_CHECK_ARG(static_cast<int64_t>(leaves.size()) <= expected,
                   "input '{}': 'data' has more elements than the shape holds ({})", input,
                   expected);
  }
  return leaves;
}

template <typename T>
T json_int(const JsonValue& v, const std::string& input) {
  if constexpr (std::is_signed_v<T>) {
    KILN_CHECK_ARG(v.IsInt64() && v.GetInt64() >= std::numeric_limits<T>::min() &&
                       v.GetInt64() <= std::numeric_limits<T>::max(),
                   "input '{}': data value is not a {}-bit signed integer", input, 8 * sizeof(T));
    return static_cast<T>(v.GetInt64());
  } else {
    KILN_CHECK_ARG(v.IsUint64() && v.GetUint64() <= std::numeric_limits<T>::max(),
                   "input '{}': data value is not a {}-bit unsigned integer", input, 8 * sizeof(T));
    return static_cast<T>(v.GetUint64());
  }
}

Tensor decode_json_data(const JsonValue& data, DataType dtype, const std::vector<int64_t>& shape,
                        const std::string& input) {
  KILN_CHECK_ARG(dtype != DataType::Float16 && dtype != DataType::BFloat16,
                 "input '{}': {} data must be sent with the binary tensor data extension", input,
                 datatype_name(dtype));
  const int64_t numel = shape_numel(shape);
  std::vector<const JsonValue*> leaves = flatten(data, numel, input);
  KILN_CHECK_ARG(static_cast<int64_t>(leaves.size()) == numel,
                 "input '{}': 'data' has {} elements but shape {} needs {}", input, leaves.size(),
                 dims_to_string(shape), numel);
  Tensor t(dtype, shape);
  dispatch_dtype(dtype, "JSON tensor data", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* out = t.data<T>();
    for (size_t i = 0; i < leaves.size(); ++i) {
      const JsonValue& v = *leaves[i];
      if constexpr (std::is_same_v<T, bool>) {
        KILN_CHECK_ARG(v.IsBool(), "input '{}': BOOL data must be true or false", input);
        out[i] = v.GetBool();
      } else if constexpr (std::is_same_v<T, std::string>) {
        KILN_CHECK_ARG(v.IsString(), "input '{}': BYTES data must be strings", input);
        out[i].assign(v.GetString(), v.GetStringLength());
      } else if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
        KILN_CHECK_ARG(v.IsNumber(), "input '{}': {} data must be numbers", input,
                       datatype_name(dtype));
        out[i] = static_cast<T>(v.GetDouble());
      } else if constexpr (std::is_integral_v<T>) {
        out[i] = json_int<T>(v, input);
      } else {
        fail(ErrorCode::InvalidArgument, "input '{}': {} cannot be sent as JSON", input,
             datatype_name(dtype));
      }
    }
  });
  return t;
}

}  // namespace

std::unique_ptr<InferRequest> decode_infer_request(std::string_view body,
                                                   std::optional<size_t> header_length,
                                                   const CodecLimits& limits) {
  const size_t json_size = header_length.value_or(body.size());
  KILN_CHECK_ARG(json_size <= body.size(),
                 "Inference-Header-Content-Length {} is larger than the body ({} bytes)", json_size,
                 body.size());
  const std::string_view json = body.substr(0, json_size);
  KILN_CHECK_ARG(json_nesting_depth(json) <= limits.max_json_depth,
                 "the request JSON is nested deeper than {} levels", limits.max_json_depth);
  // The document costs about 16 bytes per value (at least 2 bytes of text each); past the
  // scope's limit the parse stops with an error instead of growing with the client's input.
  JsonMemoryScope memory(json_size * limits.json_memory_factor + (size_t{1} << 20),
                         "parsing the request JSON");
  JsonDocument doc;
  doc.Parse<kParseFlags>(json.data(), json.size());
  KILN_CHECK_ARG(!doc.HasParseError(), "failed to parse the request JSON buffer: {} at {}",
                 rj::GetParseError_En(doc.GetParseError()), doc.GetErrorOffset());
  KILN_CHECK_ARG(doc.IsObject(), "the inference request must be a JSON object");
  std::string_view binary = body.substr(json_size);
  size_t binary_used = 0;

  auto request = std::make_unique<InferRequest>();
  if (const JsonValue* id = member(doc, "id")) {
    KILN_CHECK_ARG(id->IsString(), "'id' must be a string");
    request->id = std::string(str(*id));
  }
  if (const JsonValue* p = member(doc, "parameters")) {
    request->parameters = decode_parameters(*p, "request", limits);
    read_scheduling_parameters(*request);
    parameter_bool(request->parameters, "binary_data_output");
  }
  const JsonValue* inputs = member(doc, "inputs");
  KILN_CHECK_ARG(inputs != nullptr && inputs->IsArray(), "'inputs' must be an array");
  KILN_CHECK_ARG(inputs->Size() <= limits.max_inputs, "request has {} inputs; at most {}",
                 inputs->Size(), limits.max_inputs);
  for (const JsonValue& in : inputs->GetArray()) {
    KILN_CHECK_ARG(in.IsObject(), "each input must be a JSON object");
    InferInput input;
    const JsonValue* name = member(in, "name");
    KILN_CHECK_ARG(name && name->IsString() && name->GetStringLength() > 0 &&
                       name->GetStringLength() <= limits.max_name_bytes,
                   "each input needs a 'name' string");
    input.name = std::string(str(*name));
    const JsonValue* datatype = member(in, "datatype");
    KILN_CHECK_ARG(datatype && datatype->IsString(), "input '{}': 'datatype' must be a string",
                   input.name);
    input.datatype = wire_datatype(str(*datatype), input.name);
    const JsonValue* shape = member(in, "shape");
    KILN_CHECK_ARG(shape != nullptr, "input '{}': 'shape' is missing", input.name);
    input.shape = decode_shape(*shape, input.name, limits);
    check_wire_shape(input.shape, limits.max_rank, input.name);
    if (const JsonValue* p = member(in, "parameters")) {
      input.parameters = decode_parameters(*p, "input '" + input.name + "'", limits);
    }
    refuse_shared_memory(input.parameters, "input", input.name);
    std::optional<int64_t> binary_size = parameter_int(input.parameters, "binary_data_size");
    const JsonValue* data = member(in, "data");
    if (binary_size) {
      KILN_CHECK_ARG(data == nullptr, "input '{}' has both 'data' and 'binary_data_size'",
                     input.name);
      KILN_CHECK_ARG(
          *binary_size >= 0 && static_cast<uint64_t>(*binary_size) <= binary.size() - binary_used,
          "unexpected size {} for input '{}': only {} bytes of binary data remain", *binary_size,
          input.name, binary.size() - binary_used);
      input.data = decode_raw_tensor(binary.substr(binary_used, static_cast<size_t>(*binary_size)),
                                     input.datatype, input.shape, input.name);
      binary_used += static_cast<size_t>(*binary_size);
    } else {
      KILN_CHECK_ARG(data != nullptr, "input '{}' has neither 'data' nor 'binary_data_size'",
                     input.name);
      input.data = decode_json_data(*data, input.datatype, input.shape, input.name);
    }
    request->inputs.push_back(std::move(input));
  }
  KILN_CHECK_ARG(binary_used == binary.size(),
                 "{} bytes of binary data follow the JSON header but the inputs use {}",
                 binary.size(), binary_used);
  if (const JsonValue* outputs = member(doc, "outputs")) {
    KILN_CHECK_ARG(outputs->IsArray(), "'outputs' must be an array");
    KILN_CHECK_ARG(outputs->Size() <= limits.max_outputs, "request asks for {} outputs; at most {}",
                   outputs->Size(), limits.max_outputs);
    for (const JsonValue& out : outputs->GetArray()) {
      KILN_CHECK_ARG(out.IsObject(), "each requested output must be a JSON object");
      RequestedOutput o;
      const JsonValue* name = member(out, "name");
      KILN_CHECK_ARG(name && name->IsString() && name->GetStringLength() <= limits.max_name_bytes,
                     "each requested output needs a 'name' string");
      o.name = std::string(str(*name));
      if (const JsonValue* p = member(out, "parameters")) {
        o.parameters = decode_parameters(*p, "output '" + o.name + "'", limits);
        parameter_bool(o.parameters, "binary_data");
        refuse_shared_memory(o.parameters, "output", o.name);
      }
      request->outputs.push_back(std::move(o));
    }
  }
  return request;
}

OutputEncoding output_encoding_of(const InferRequest& request) {
  OutputEncoding e;
  e.binary_default = parameter_bool(request.parameters, "binary_data_output").value_or(false);
  for (const RequestedOutput& o : request.outputs) {
    if (auto b = parameter_bool(o.parameters, "binary_data")) e.per_output.emplace_back(o.name, *b);
  }
  return e;
}

namespace {

bool output_is_binary(const InferOutput& out, const OutputEncoding& encoding) {
  // FP16 / BF16 have no JSON form.
  if (out.datatype == DataType::Float16 || out.datatype == DataType::BFloat16) return true;
  bool as_binary = encoding.binary_default;
  for (const auto& [name, b] : encoding.per_output) {
    if (name == out.name) as_binary = b;
  }
  return as_binary;
}

// Writes the JSON value of the parameter's type (std::visit picks the exact overload).
struct WriteParameter {
  Writer& w;
  void operator()(bool v) const { w.Bool(v); }
  void operator()(int64_t v) const { w.Int64(v); }
  void operator()(uint64_t v) const { w.Uint64(v); }
  void operator()(double v) const { w.Double(v); }
  void operator()(const std::string& v) const {
    w.String(v.data(), static_cast<rj::SizeType>(v.size()));
  }
};

void write_json_data(Writer& w, const Tensor& t) {
  w.StartArray();
  dispatch_dtype(t.dtype(), "JSON output", [&](auto tag) {
    using T = typename decltype(tag)::type;
    for (const T& v : t.values<T>()) {
      if constexpr (std::is_same_v<T, bool>) {
        w.Bool(v);
      } else if constexpr (std::is_same_v<T, std::string>) {
        w.String(v.data(), static_cast<rj::SizeType>(v.size()));
      } else if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
        w.Double(static_cast<double>(v));
      } else if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) {
        w.Int64(static_cast<int64_t>(v));
      } else if constexpr (std::is_integral_v<T>) {
        w.Uint64(static_cast<uint64_t>(v));
      } else {
        fail(ErrorCode::Internal, "JSON output of {}", dtype_name(t.dtype()));
      }
    }
  });
  w.EndArray();
}

}  // namespace

EncodedResponse encode_infer_response(const InferResponse& response,
                                      const OutputEncoding& encoding) {
  // The size is checked before it is spent: binary outputs exactly, JSON ones at the fewest
  // bytes an element can take; the writer's buffer is then held to what is left.
  size_t binary_bytes = 0, json_bytes = 1024;
  for (const InferOutput& out : response.outputs) {
    if (output_is_binary(out, encoding)) {
      binary_bytes += raw_tensor_size(out.data);
    } else {
      json_bytes += 2 * static_cast<size_t>(out.data.numel()) + out.name.size() + 64;
    }
  }
  KILN_CHECK_ARG(
      binary_bytes <= encoding.max_bytes && json_bytes <= encoding.max_bytes - binary_bytes,
      "the response would be larger than the limit of {} bytes; ask for fewer or "
      "binary outputs",
      encoding.max_bytes);
  JsonMemoryScope memory(encoding.max_bytes - binary_bytes,
                         fmt::format("the response (limit {} bytes; ask for fewer or binary "
                                     "outputs)",
                                     encoding.max_bytes));
  JsonBuffer buffer;
  Writer w(buffer);
  std::string binary;
  bool any_binary = false;
  w.StartObject();
  w.Key("model_name");
  w.String(response.model_name.data(), static_cast<rj::SizeType>(response.model_name.size()));
  w.Key("model_version");
  const std::string version = std::to_string(response.model_version);
  w.String(version.data(), static_cast<rj::SizeType>(version.size()));
  if (!response.id.empty()) {
    w.Key("id");
    w.String(response.id.data(), static_cast<rj::SizeType>(response.id.size()));
  }
  if (!response.parameters.empty()) {
    w.Key("parameters");
    w.StartObject();
    for (const auto& [k, v] : response.parameters) {
      w.Key(k.data(), static_cast<rj::SizeType>(k.size()));
      std::visit(WriteParameter{w}, v);
    }
    w.EndObject();
  }
  w.Key("outputs");
  w.StartArray();
  for (const InferOutput& out : response.outputs) {
    const bool as_binary = output_is_binary(out, encoding);
    w.StartObject();
    w.Key("name");
    w.String(out.name.data(), static_cast<rj::SizeType>(out.name.size()));
    w.Key("datatype");
    const std::string_view dt = datatype_name(out.datatype);
    w.String(dt.data(), static_cast<rj::SizeType>(dt.size()));
    w.Key("shape");
    w.StartArray();
    for (int64_t d : out.shape) w.Int64(d);
    w.EndArray();
    if (as_binary) {
      any_binary = true;
      const size_t before = binary.size();
      if (binary.empty()) binary.reserve(binary_bytes);
      append_raw_tensor(binary, out.data);
      w.Key("parameters");
      w.StartObject();
      w.Key("binary_data_size");
      w.Uint64(binary.size() - before);
      w.EndObject();
    } else {
      w.Key("data");
      write_json_data(w, out.data);
    }
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  EncodedResponse encoded;
  encoded.body.reserve(buffer.GetSize() + binary.size());
  encoded.body.assign(buffer.GetString(), buffer.GetSize());
  if (any_binary) encoded.header_length = buffer.GetSize();
  encoded.body += binary;
  return encoded;
}

EncodedResponse encode_infer_response(const InferResponse& response, const InferRequest& request) {
  return encode_infer_response(response, output_encoding_of(request));
}

std::string error_json(std::string_view message) {
  JsonBuffer buffer;
  Writer w(buffer);
  w.StartObject();
  w.Key("error");
  w.String(message.data(), static_cast<rj::SizeType>(message.size()));
  w.EndObject();
  return std::string(buffer.GetString(), buffer.GetSize());
}

}  // namespace kiln::server::http
