#include "server/http/infer_codec.hpp"

#include <rapidjson/encodedstream.h>
#include <rapidjson/error/en.h>
#include <rapidjson/memorystream.h>
#include <rapidjson/reader.h>

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
// RapidJSON's SAX parser; its stack (nesting state, a string while it is read) is charged to
// the decode's JsonMemoryScope like everything else the decoder keeps.
using Reader = rj::GenericReader<rj::UTF8<>, rj::UTF8<>, JsonAllocator>;

// ---- request decoding ------------------------------------------------------------------------
//
// Two SAX passes over the JSON, no document tree. Pass 1 (RequestScanner) keeps everything but
// tensor data: the fields below, and for each input's "data" only where its value starts and
// how many elements it holds. The checks then run on what it kept, in a fixed order whatever
// the order of the keys (so the messages are those of a DOM decoder, parse errors first), and
// each JSON input's element count is held to its shape before any tensor exists. Pass 2
// (DataWriter) parses each input's "data" again from where it starts, writing every element
// straight into its tensor. So a JSON request costs its body, the tensors it asks for and its
// small fields, and a refused one no more than its body and those fields.

// The JSON kind of a request field, Absent when the object has no such key.
enum class Kind : uint8_t { Absent, Object, Array, String, Other };

// A JSON number with what RapidJSON's DOM would say of it (IsInt64, IsUint64, GetDouble).
struct Number {
  std::optional<int64_t> i;
  std::optional<uint64_t> u;
  double d = 0;
};
Number number_of(int64_t v) {
  return {v, v >= 0 ? std::optional<uint64_t>(static_cast<uint64_t>(v)) : std::nullopt,
          static_cast<double>(v)};
}
Number number_of(uint64_t v) {
  return {v <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())
              ? std::optional<int64_t>(static_cast<int64_t>(v))
              : std::nullopt,
          v, static_cast<double>(v)};
}
Number number_of(double v) {
  return {std::nullopt, std::nullopt, v};
}

// A "parameters" object as pass 1 found it.
struct RawParameters {
  Kind kind = Kind::Absent;
  size_t count = 0;                    // members, all of them
  Parameters values;                   // those of the first max_parameters members
  std::optional<std::string> bad_key;  // the first member that is not a bool, number or string
};

struct RawInput {
  bool object = false;
  Kind name_kind = Kind::Absent, datatype_kind = Kind::Absent, shape_kind = Kind::Absent;
  std::string name, datatype;
  size_t rank = 0;             // elements of "shape"
  std::vector<int64_t> shape;  // its first max_rank integers
  bool shape_not_integers = false;
  RawParameters parameters;
  bool has_data = false;
  size_t data_key_end = 0;  // offset just past the "data" key: its value follows the colon
  uint64_t data_count = 0;  // leaves of "data" (a scalar, string or object is one)
};

struct RawOutput {
  bool object = false;
  Kind name_kind = Kind::Absent;
  std::string name;
  RawParameters parameters;
};

struct RawRequest {
  bool object = false;
  Kind id_kind = Kind::Absent;
  std::string id;
  RawParameters parameters;
  Kind inputs_kind = Kind::Absent, outputs_kind = Kind::Absent;
  size_t input_count = 0, output_count = 0;  // all of them; the first max_* are kept
  std::vector<RawInput> inputs;
  std::vector<RawOutput> outputs;
};

// What a parameter costs beyond its key and string: its map node (key, variant, tree links).
constexpr size_t kParameterBytes = sizeof(Parameters::value_type) + 32;

// Pass 1's place in the request: what the container being read is (Frame), and which field of
// a request, input or output object the next value is (Field).
enum class Frame : uint8_t { Request, Inputs, Input, Shape, Params, Data, Outputs, Output, Skip };
enum class Field : uint8_t { Other, Id, Parameters, Inputs, Outputs, Name, Datatype, Shape, Data };

// Pass 1. Keeps the first of a repeated key (as a DOM's FindMember does), skips unknown keys
// and everything past a count limit (counting them for the message), never throws but when its
// JsonMemoryScope runs out: the checks run once the whole document has parsed.
class RequestScanner : public rj::BaseReaderHandler<rj::UTF8<>, RequestScanner> {
 public:
  using Stream = rj::EncodedInputStream<rj::UTF8<>, rj::MemoryStream>;
  RequestScanner(RawRequest& raw, const CodecLimits& limits, JsonMemoryScope& memory,
                 const Stream& stream)
      : raw_(raw), limits_(limits), memory_(memory), stream_(stream) {}

  bool Null() { return value(Kind::Other); }
  bool Bool(bool b) { return value(Kind::Other, {}, ParameterValue(b)); }
  bool Int(int v) { return Int64(v); }
  bool Uint(unsigned v) { return Int64(v); }
  bool Int64(int64_t v) { return number(number_of(v)); }
  bool Uint64(uint64_t v) { return number(number_of(v)); }
  bool Double(double v) { return number(number_of(v)); }
  bool String(const char* s, rj::SizeType n, bool) { return value(Kind::String, {s, n}); }
  bool StartObject() { return value(Kind::Object); }
  bool StartArray() { return value(Kind::Array); }
  bool EndObject(rj::SizeType) { return end(); }
  bool EndArray(rj::SizeType) { return end(); }
  bool Key(const char* s, rj::SizeType n, bool) {
    const std::string_view key(s, n);
    field_ = Field::Other;
    switch (frames_.empty() ? Frame::Skip : frames_.back()) {
      case Frame::Request:
        if (key == "id") field_ = Field::Id;
        if (key == "parameters") field_ = Field::Parameters;
        if (key == "inputs") field_ = Field::Inputs;
        if (key == "outputs") field_ = Field::Outputs;
        break;
      case Frame::Input:
        if (key == "name") field_ = Field::Name;
        if (key == "datatype") field_ = Field::Datatype;
        if (key == "shape") field_ = Field::Shape;
        if (key == "parameters") field_ = Field::Parameters;
        if (key == "data") {
          field_ = Field::Data;
          key_end_ = stream_.Tell();
        }
        break;
      case Frame::Output:
        if (key == "name") field_ = Field::Name;
        if (key == "parameters") field_ = Field::Parameters;
        break;
      case Frame::Params:
        memory_.charge(n);
        parameter_key_.assign(s, n);
        break;
      default:
        break;
    }
    return true;
  }

 private:
  bool number(const Number& n) {
    if (n.i) return value(Kind::Other, {}, ParameterValue(*n.i), n.i);
    if (n.u) return value(Kind::Other, {}, ParameterValue(*n.u));
    return value(Kind::Other, {}, ParameterValue(n.d));
  }

  void keep(std::string& out, std::string_view s) {
    memory_.charge(s.size());
    out.assign(s);
  }

  // Records the kind of a field seen for the first time; false when it was seen before.
  static bool first(Kind& kind, Kind seen) {
    if (kind != Kind::Absent) return false;
    kind = seen;
    return true;
  }

  // Opens a "parameters" object (when `kind` is one) for the values that follow.
  Frame parameters(RawParameters& p, Kind kind) {
    if (!first(p.kind, kind) || kind != Kind::Object) return Frame::Skip;
    parameters_ = &p;
    return Frame::Params;
  }

  // One value (a scalar, or the start of an object or array) at the current place. `scalar`:
  // a bool's or number's parameter value (none for null, strings and containers); `integer`:
  // the number when it is an integer within int64.
  bool value(Kind kind, std::string_view text = {}, std::optional<ParameterValue> scalar = {},
             std::optional<int64_t> integer = {}) {
    const bool object = kind == Kind::Object, array = kind == Kind::Array;
    Frame open = Frame::Skip;  // what an object or array starting here is read as
    const Field field = field_;
    field_ = Field::Other;
    switch (frames_.empty() ? Frame::Skip : frames_.back()) {
      case Frame::Request:
        if (field == Field::Id && first(raw_.id_kind, kind) && kind == Kind::String) {
          keep(raw_.id, text);
        } else if (field == Field::Parameters) {
          open = parameters(raw_.parameters, kind);
        } else if (field == Field::Inputs && first(raw_.inputs_kind, kind) && array) {
          open = Frame::Inputs;
        } else if (field == Field::Outputs && first(raw_.outputs_kind, kind) && array) {
          open = Frame::Outputs;
        }
        break;
      case Frame::Inputs:
        if (++raw_.input_count <= limits_.max_inputs) {
          memory_.charge(2 * sizeof(RawInput));  // the vector grows by doubling
          raw_.inputs.emplace_back().object = object;
          if (object) open = Frame::Input;
        }
        break;
      case Frame::Input: {
        RawInput& in = raw_.inputs.back();
        if (field == Field::Name && first(in.name_kind, kind) && kind == Kind::String) {
          keep(in.name, text);
        } else if (field == Field::Datatype && first(in.datatype_kind, kind) &&
                   kind == Kind::String) {
          keep(in.datatype, text);
        } else if (field == Field::Shape && first(in.shape_kind, kind) && array) {
          open = Frame::Shape;
        } else if (field == Field::Parameters) {
          open = parameters(in.parameters, kind);
        } else if (field == Field::Data && !in.has_data) {
          in.has_data = true;
          in.data_key_end = key_end_;
          if (array) {
            open = Frame::Data;
          } else {
            in.data_count = 1;  // a scalar for a one-element tensor (an object: a wrong one)
          }
        }
        break;
      }
      case Frame::Shape: {
        RawInput& in = raw_.inputs.back();
        ++in.rank;
        if (!integer) {
          in.shape_not_integers = true;
        } else if (in.shape.size() < limits_.max_rank) {
          memory_.charge(sizeof(int64_t));
          in.shape.push_back(*integer);
        }
        break;
      }
      case Frame::Params: {
        RawParameters& p = *parameters_;
        const bool kept = ++p.count <= limits_.max_parameters;
        if (kind == Kind::String || scalar) {
          if (kept) {
            memory_.charge(kParameterBytes + text.size());
            p.values[parameter_key_] =
                scalar ? *std::move(scalar) : ParameterValue(std::string(text));
          }
        } else if (!p.bad_key) {
          memory_.charge(parameter_key_.size());
          p.bad_key = parameter_key_;  // null, an object or an array
        }
        break;
      }
      case Frame::Data:
        if (array) {
          open = Frame::Data;
        } else {
          ++raw_.inputs.back().data_count;  // an object is one (wrong) element
        }
        break;
      case Frame::Outputs:
        if (++raw_.output_count <= limits_.max_outputs) {
          memory_.charge(2 * sizeof(RawOutput));
          raw_.outputs.emplace_back().object = object;
          if (object) open = Frame::Output;
        }
        break;
      case Frame::Output: {
        RawOutput& out = raw_.outputs.back();
        if (field == Field::Name && first(out.name_kind, kind) && kind == Kind::String) {
          keep(out.name, text);
        } else if (field == Field::Parameters) {
          open = parameters(out.parameters, kind);
        }
        break;
      }
      case Frame::Skip:
        if (frames_.empty()) {  // the document itself
          raw_.object = object;
          if (object) open = Frame::Request;
        }
        break;
    }
    // Nesting is bounded by the depth check before the parse.
    if (object || array) frames_.push_back(open);
    return true;
  }

  bool end() {
    frames_.pop_back();
    return true;
  }

  RawRequest& raw_;
  const CodecLimits& limits_;
  JsonMemoryScope& memory_;
  const Stream& stream_;
  std::vector<Frame> frames_;
  Field field_ = Field::Other;
  size_t key_end_ = 0;
  std::string parameter_key_;
  RawParameters* parameters_ = nullptr;  // the object a Params frame fills
};

// The message for a "data" element of the wrong JSON kind for an input of C++ element type T.
// Internal (500), as tritonserver answers every 'data' it cannot parse; its words first, then
// which input and why.
template <typename T>
[[noreturn]] void wrong_kind(DataType dtype, const std::string& input) {
  constexpr ErrorCode kCode = ErrorCode::Internal;
  if constexpr (std::is_same_v<T, bool>) {
    fail(kCode,
         "Unable to parse 'data': attempt to access JSON non-boolean as boolean (input "
         "'{}': BOOL data must be true or false)",
         input);
  } else if constexpr (std::is_same_v<T, std::string>) {
    fail(kCode,
         "Unable to parse JSON bytes array: attempt to access JSON non-string as string (input "
         "'{}': BYTES data must be strings)",
         input);
  } else if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    fail(kCode,
         "Unable to parse 'data': attempt to access JSON non-number as double (input "
         "'{}': {} data must be numbers)",
         input, datatype_name(dtype));
  } else if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) {
    fail(kCode,
         "Unable to parse 'data': attempt to access JSON non-signed-integer as "
         "signed-integer (input '{}': data value is not a {}-bit signed integer)",
         input, 8 * sizeof(T));
  } else if constexpr (std::is_integral_v<T>) {
    fail(kCode,
         "Unable to parse 'data': attempt to access JSON non-unsigned-integer as "
         "unsigned-integer (input '{}': data value is not a {}-bit unsigned integer)",
         input, 8 * sizeof(T));
  } else {
    fail(ErrorCode::InvalidArgument, "input '{}': {} cannot be sent as JSON", input,
         datatype_name(dtype));
  }
}

// Pass 2: the elements of one input's "data" (flat or nested) into its tensor, in row-major
// order, with the checks of each element against the datatype. The element count was checked
// against the shape in pass 1.
template <typename T>
class DataWriter : public rj::BaseReaderHandler<rj::UTF8<>, DataWriter<T>> {
 public:
  DataWriter(Tensor& t, const std::string& input, JsonMemoryScope& memory)
      : out_(t.data<T>()),
        size_(static_cast<size_t>(t.numel())),
        dtype_(t.dtype()),
        input_(input),
        memory_(memory) {}

  size_t written() const { return next_; }

  bool Null() { wrong_kind<T>(dtype_, input_); }
  bool Bool(bool b) {
    if constexpr (std::is_same_v<T, bool>) return put(b);
    wrong_kind<T>(dtype_, input_);
  }
  bool Int(int v) { return number(number_of(int64_t{v})); }
  bool Uint(unsigned v) { return number(number_of(int64_t{v})); }
  bool Int64(int64_t v) { return number(number_of(v)); }
  bool Uint64(uint64_t v) { return number(number_of(v)); }
  bool Double(double v) { return number(number_of(v)); }
  bool String(const char* s, rj::SizeType n, bool) {
    if constexpr (std::is_same_v<T, std::string>) {
      memory_.charge(n);
      return put(std::string(s, n));
    }
    wrong_kind<T>(dtype_, input_);
  }
  bool StartObject() { wrong_kind<T>(dtype_, input_); }
  bool Key(const char*, rj::SizeType, bool) { return true; }
  bool EndObject(rj::SizeType) { return true; }
  bool StartArray() { return true; }
  bool EndArray(rj::SizeType) { return true; }

 private:
  bool number(const Number& n) {
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      return put(static_cast<T>(n.d));
    } else if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      // Out of range is the wrong kind too: the message names the datatype's range.
      if constexpr (std::is_signed_v<T>) {
        if (n.i && *n.i >= std::numeric_limits<T>::min() && *n.i <= std::numeric_limits<T>::max()) {
          return put(static_cast<T>(*n.i));
        }
      } else {
        if (n.u && *n.u <= std::numeric_limits<T>::max()) return put(static_cast<T>(*n.u));
      }
    }
    wrong_kind<T>(dtype_, input_);
  }

  template <typename V>
  bool put(V&& v) {
    KILN_CHECK(next_ < size_, ErrorCode::Internal,
               "input '{}': 'data' has more elements than its first read counted", input_);
    out_[next_++] = std::forward<V>(v);
    return true;
  }

  T* out_;
  size_t size_;
  size_t next_ = 0;
  DataType dtype_;
  const std::string& input_;
  JsonMemoryScope& memory_;
};

// Pass 2 for one input: its tensor, allocated here (after every check of pass 1), filled from
// the "data" value that follows the key ending at `key_end`.
Tensor decode_json_data(std::string_view json, size_t key_end, DataType dtype,
                        const std::vector<int64_t>& shape, const std::string& input, Reader& reader,
                        JsonMemoryScope& memory) {
  size_t start = key_end;  // past the whitespace and the colon pass 1 already checked
  while (start < json.size() && json[start] != ':') ++start;
  KILN_CHECK(start < json.size(), ErrorCode::Internal, "input '{}': 'data' has no value", input);
  ++start;
  Tensor t(dtype, shape);
  dispatch_dtype(dtype, "JSON tensor data", [&](auto tag) {
    using T = typename decltype(tag)::type;
    DataWriter<T> writer(t, input, memory);
    rj::MemoryStream stream(json.data() + start, json.size() - start);
    const rj::ParseResult ok =
        reader.Parse<kParseFlags | rj::kParseStopWhenDoneFlag>(stream, writer);
    KILN_CHECK(!ok.IsError() && writer.written() == static_cast<size_t>(t.numel()),
               ErrorCode::Internal, "input '{}': 'data' read back differently", input);
  });
  return t;
}

// A member the request must hold as `want` ("string", "array"): missing or of another kind is
// Internal (500) in tritonserver's words, as it answers every JSON it cannot read.
void check_member(Kind kind, Kind want, std::string_view member, std::string_view want_name) {
  KILN_CHECK(kind != Kind::Absent, ErrorCode::Internal,
             "Unable to parse '{}': attempt to access non-existing object member '{}'", member,
             member);
  KILN_CHECK(kind == want, ErrorCode::Internal,
             "Unable to parse '{}': attempt to access JSON non-{} as {}", member, want_name,
             want_name);
}

Parameters decode_parameters(RawParameters& p, std::string_view where, const CodecLimits& limits) {
  KILN_CHECK_ARG(p.kind == Kind::Object, "{}: 'parameters' must be a JSON object", where);
  KILN_CHECK_ARG(p.count <= limits.max_parameters, "{}: more than {} parameters", where,
                 limits.max_parameters);
  if (p.bad_key) {
    fail(ErrorCode::InvalidArgument, "{}: parameter '{}' must be a bool, number or string", where,
         *p.bad_key);
  }
  return std::move(p.values);
}

// Triton's HTTP frontend reads the sequence parameters with typed accessors (an unsigned
// integer, else a string; bools): another JSON type fails as they do, with a 500.
void check_sequence_parameters(const Parameters& params) {
  auto id = params.find("sequence_id");
  if (id != params.end()) {
    const ParameterValue& v = id->second;
    const bool ok = std::holds_alternative<std::string>(v) || std::holds_alternative<uint64_t>(v) ||
                    (std::holds_alternative<int64_t>(v) && std::get<int64_t>(v) >= 0);
    KILN_CHECK(ok, ErrorCode::Internal,
               "Unable to parse 'sequence_id': attempt to access JSON non-string as string");
  }
  for (const char* key : {"sequence_start", "sequence_end"}) {
    auto flag = params.find(key);
    KILN_CHECK(flag == params.end() || std::holds_alternative<bool>(flag->second),
               ErrorCode::Internal,
               "Unable to parse '{}': attempt to access JSON non-boolean as boolean", key);
  }
}

std::vector<int64_t> decode_shape(RawInput& in, const std::string& input,
                                  const CodecLimits& limits) {
  check_member(in.shape_kind, Kind::Array, "shape", "array");
  KILN_CHECK_ARG(in.shape_kind == Kind::Array, "input '{}': 'shape' must be an array of integers",
                 input);
  KILN_CHECK_ARG(in.rank <= limits.max_rank, "input '{}': rank {} is more than {}", input, in.rank,
                 limits.max_rank);
  KILN_CHECK_ARG(!in.shape_not_integers, "input '{}': 'shape' must hold non-negative integers",
                 input);
  return std::move(in.shape);
}

// An input as the checks left it: what pass 2 still has to decode.
struct PendingInput {
  std::string_view binary;  // its binary data; unused for JSON data
  size_t data_key_end = 0;
  bool json = false;
  bool shm = false;  // in a shared memory region: no data in the body
};

}  // namespace

std::unique_ptr<InferRequest> decode_infer_request(std::string_view body,
                                                   std::optional<size_t> header_length,
                                                   const CodecLimits& limits,
                                                   std::string_view model) {
  const size_t json_size = header_length.value_or(body.size());
  KILN_CHECK_ARG(json_size <= body.size(),
                 "Inference-Header-Content-Length {} is larger than the body ({} bytes)", json_size,
                 body.size());
  const std::string_view json = body.substr(0, json_size);
  KILN_CHECK_ARG(json_nesting_depth(json) <= limits.max_json_depth,
                 "the request JSON is nested deeper than {} levels", limits.max_json_depth);
  // What the decoder keeps besides the tensors (names, shapes, parameters, BYTES elements, the
  // parser's stack) is charged here; past the limit the decode stops with an error instead of
  // growing with the client's input.
  JsonMemoryScope memory(json_size * limits.json_memory_factor + (size_t{1} << 20),
                         "decoding the request JSON");
  JsonAllocator stack_allocator;
  Reader reader(&stack_allocator);

  // Pass 1.
  RawRequest raw;
  {
    rj::MemoryStream ms(json.data(), json.size());
    RequestScanner::Stream stream(ms);
    RequestScanner scanner(raw, limits, memory, stream);
    const rj::ParseResult ok = reader.Parse<kParseFlags>(stream, scanner);
    // Internal (500): tritonserver's status for a body that does not parse.
    KILN_CHECK(!ok.IsError(), ErrorCode::Internal,
               "failed to parse the request JSON buffer: {} at {}", rj::GetParseError_En(ok.Code()),
               ok.Offset());
  }
  KILN_CHECK(raw.object && raw.inputs_kind != Kind::Absent, ErrorCode::Internal,
             "Unable to parse 'inputs': attempt to access non-existing object member 'inputs'{}",
             raw.object ? "" : " (the inference request must be a JSON object)");
  std::string_view binary = body.substr(json_size);
  size_t binary_used = 0;

  // The checks, all before any tensor is allocated.
  auto request = std::make_unique<InferRequest>();
  request->model_name = model;
  KILN_CHECK_ARG(raw.id_kind == Kind::Absent || raw.id_kind == Kind::String,
                 "'id' must be a string");
  request->id = std::move(raw.id);
  if (raw.parameters.kind != Kind::Absent) {
    request->parameters = decode_parameters(raw.parameters, "request", limits);
    read_scheduling_parameters(*request);
    check_sequence_parameters(request->parameters);
    parameter_bool(request->parameters, "binary_data_output");
  }
  check_member(raw.inputs_kind, Kind::Array, "inputs", "array");
  KILN_CHECK_ARG(raw.input_count <= limits.max_inputs, "request has {} inputs; at most {}",
                 raw.input_count, limits.max_inputs);
  std::vector<PendingInput> pending;
  for (RawInput& in : raw.inputs) {
    KILN_CHECK_ARG(in.object, "each input must be a JSON object");
    InferInput input;
    check_member(in.name_kind, Kind::String, "name", "string");
    KILN_CHECK_ARG(!in.name.empty() && in.name.size() <= limits.max_name_bytes,
                   "each input needs a 'name' string of 1 to {} bytes", limits.max_name_bytes);
    input.name = std::move(in.name);
    check_member(in.datatype_kind, Kind::String, "datatype", "string");
    input.datatype = wire_datatype(in.datatype, input.name);
    input.shape = decode_shape(in, input.name, limits);
    check_wire_shape(input.shape, limits.max_rank, input.name);
    if (in.parameters.kind != Kind::Absent) {
      input.parameters = decode_parameters(in.parameters, "input '" + input.name + "'", limits);
    }
    input.shm = read_shared_memory_parameters(input.parameters, "input", input.name);
    std::optional<int64_t> binary_size = parameter_int(input.parameters, "binary_data_size");
    PendingInput p;
    if (input.shm) {
      // tritonserver's words: the data comes from exactly one place.
      KILN_CHECK_ARG(!in.has_data && !binary_size,
                     "Input must set only one of the following fields: 'data', 'binary_data_size' "
                     "in 'parameters', 'shared_memory_region' in 'parameters'. But set{}{} "
                     "'shared_memory_region'",
                     in.has_data ? " 'data'" : "", binary_size ? " 'binary_data_size'" : "");
      p.shm = true;  // the server reads it from the region
    } else if (binary_size) {
      KILN_CHECK_ARG(!in.has_data, "input '{}' has both 'data' and 'binary_data_size'", input.name);
      KILN_CHECK_ARG(
          *binary_size >= 0 && static_cast<uint64_t>(*binary_size) <= binary.size() - binary_used,
          "unexpected size {} for input '{}': only {} bytes of binary data remain", *binary_size,
          input.name, binary.size() - binary_used);
      p.binary = binary.substr(binary_used, static_cast<size_t>(*binary_size));
      binary_used += static_cast<size_t>(*binary_size);
    } else {
      KILN_CHECK_ARG(in.has_data, "input '{}' has neither 'data' nor 'binary_data_size'",
                     input.name);
      KILN_CHECK_ARG(input.datatype != DataType::Float16 && input.datatype != DataType::BFloat16,
                     "input '{}': {} data must be sent with the binary tensor data extension",
                     input.name, datatype_name(input.datatype));
      const auto numel = static_cast<uint64_t>(shape_numel(input.shape));
      // Internal (500) and these words, as tritonserver; then which input and how many.
      KILN_CHECK(in.data_count == numel, ErrorCode::Internal,
                 "Unable to parse 'data': Shape does not match true shape of 'data' field (input "
                 "'{}': 'data' has {} elements, shape {} holds {})",
                 input.name, in.data_count, dims_to_string(input.shape), numel);
      p.json = true;
      p.data_key_end = in.data_key_end;
    }
    pending.push_back(p);
    request->inputs.push_back(std::move(input));
  }
  // tritonserver's words, then how many bytes.
  KILN_CHECK_ARG(binary_used == binary.size(),
                 "unexpected additional input data for model '{}' ({} bytes of binary data follow "
                 "the JSON header but the inputs use {})",
                 request->model_name, binary.size(), binary_used);
  if (raw.outputs_kind != Kind::Absent) {
    KILN_CHECK_ARG(raw.outputs_kind == Kind::Array, "'outputs' must be an array");
    KILN_CHECK_ARG(raw.output_count <= limits.max_outputs,
                   "request asks for {} outputs; at most {}", raw.output_count, limits.max_outputs);
    for (RawOutput& out : raw.outputs) {
      KILN_CHECK_ARG(out.object, "each requested output must be a JSON object");
      RequestedOutput o;
      KILN_CHECK_ARG(out.name_kind == Kind::String && out.name.size() <= limits.max_name_bytes,
                     "each requested output needs a 'name' string");
      o.name = std::move(out.name);
      if (out.parameters.kind != Kind::Absent) {
        o.parameters = decode_parameters(out.parameters, "output '" + o.name + "'", limits);
        const std::optional<bool> binary_data = parameter_bool(o.parameters, "binary_data");
        o.shm = read_shared_memory_parameters(o.parameters, "output", o.name);
        KILN_CHECK_ARG(!(o.shm && binary_data.value_or(false)),
                       "Output can't set both 'shared_memory_region' and 'binary_data'");
      }
      request->outputs.push_back(std::move(o));
    }
  }

  // Pass 2: the tensors.
  for (size_t i = 0; i < pending.size(); ++i) {
    InferInput& input = request->inputs[i];
    if (pending[i].shm) continue;
    input.data = pending[i].json ? decode_json_data(json, pending[i].data_key_end, input.datatype,
                                                    input.shape, input.name, reader, memory)
                                 : decode_raw_tensor(pending[i].binary, input.datatype, input.shape,
                                                     input.name, *request);
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
    if (out.in_shared_memory) {
      json_bytes += out.name.size() + 64;
    } else if (output_is_binary(out, encoding)) {
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
    if (out.in_shared_memory) {
      // Written into the client's region: as tritonserver, no data and no parameters.
    } else if (as_binary) {
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
