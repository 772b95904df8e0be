#include "server/infer_types.hpp"

#include <array>

namespace kiln::server {
namespace {

struct TypeRow {
  DataType type;
  std::string_view name;  // KServe v2
  int config;             // inference::DataType
  size_t wire_size;       // bytes per element; 0 for BYTES
};

// One table for the three spellings of each protocol type.
constexpr std::array<TypeRow, 14> kTypes = {{
    {DataType::Bool, "BOOL", 1, 1},
    {DataType::UInt8, "UINT8", 2, 1},
    {DataType::UInt16, "UINT16", 3, 2},
    {DataType::UInt32, "UINT32", 4, 4},
    {DataType::UInt64, "UINT64", 5, 8},
    {DataType::Int8, "INT8", 6, 1},
    {DataType::Int16, "INT16", 7, 2},
    {DataType::Int32, "INT32", 8, 4},
    {DataType::Int64, "INT64", 9, 8},
    {DataType::Float16, "FP16", 10, 2},
    {DataType::Float32, "FP32", 11, 4},
    {DataType::Float64, "FP64", 12, 8},
    {DataType::String, "BYTES", 13, 0},
    {DataType::BFloat16, "BF16", 14, 2},
}};

const TypeRow* find_type(DataType type) {
  for (const TypeRow& row : kTypes) {
    if (row.type == type) return &row;
  }
  return nullptr;
}

}  // namespace

std::string_view datatype_name(DataType type) {
  const TypeRow* row = find_type(type);
  KILN_CHECK(row != nullptr, ErrorCode::Unsupported, "element type {} has no KServe v2 datatype",
             dtype_name(type));
  return row->name;
}

std::optional<DataType> datatype_from_name(std::string_view name) {
  for (const TypeRow& row : kTypes) {
    if (row.name == name) return row.type;
  }
  return std::nullopt;
}

DataType datatype_from_config(int config_type) {
  for (const TypeRow& row : kTypes) {
    if (row.config == config_type) return row.type;
  }
  fail(ErrorCode::InvalidArgument, "invalid model config data type {}", config_type);
}

int datatype_to_config(DataType type) {
  const TypeRow* row = find_type(type);
  KILN_CHECK(row != nullptr, ErrorCode::Unsupported,
             "element type {} has no model config data type", dtype_name(type));
  return row->config;
}

size_t datatype_wire_size(DataType type) {
  const TypeRow* row = find_type(type);
  return row ? row->wire_size : 0;
}

std::optional<bool> parameter_bool(const Parameters& params, std::string_view key) {
  auto it = params.find(key);
  if (it == params.end()) return std::nullopt;
  const bool* value = std::get_if<bool>(&it->second);
  KILN_CHECK_ARG(value != nullptr, "parameter '{}' must be a bool", key);
  return *value;
}

std::optional<int64_t> parameter_int(const Parameters& params, std::string_view key) {
  auto it = params.find(key);
  if (it == params.end()) return std::nullopt;
  if (const int64_t* v = std::get_if<int64_t>(&it->second)) return *v;
  if (const uint64_t* v = std::get_if<uint64_t>(&it->second)) {
    KILN_CHECK_ARG(*v <= static_cast<uint64_t>(INT64_MAX), "parameter '{}' is out of range", key);
    return static_cast<int64_t>(*v);
  }
  fail(ErrorCode::InvalidArgument, "parameter '{}' must be an integer", key);
}

std::optional<std::string> parameter_string(const Parameters& params, std::string_view key) {
  auto it = params.find(key);
  if (it == params.end()) return std::nullopt;
  const std::string* value = std::get_if<std::string>(&it->second);
  KILN_CHECK_ARG(value != nullptr, "parameter '{}' must be a string", key);
  return *value;
}

void read_scheduling_parameters(InferRequest& request) {
  if (auto prio = parameter_int(request.parameters, "priority")) {
    KILN_CHECK_ARG(*prio >= 0, "parameter 'priority' must not be negative");
    request.priority = static_cast<uint64_t>(*prio);
  }
  if (auto timeout = parameter_int(request.parameters, "timeout")) {
    KILN_CHECK_ARG(*timeout >= 0, "parameter 'timeout' must not be negative");
    request.timeout_us = static_cast<uint64_t>(*timeout);
  }
}

std::optional<SharedMemoryRef> read_shared_memory_parameters(const Parameters& params,
                                                             std::string_view what,
                                                             const std::string& name) {
  auto region = params.find("shared_memory_region");
  if (region == params.end()) return std::nullopt;
  SharedMemoryRef ref;
  const std::string* text = std::get_if<std::string>(&region->second);
  // Internal (500) and these words, as tritonserver's JSON parser answers.
  KILN_CHECK(text != nullptr, ErrorCode::Internal,
             "Unable to parse 'shared_memory_region': attempt to access JSON non-string as string");
  ref.region = *text;
  auto unsigned_value = [&](std::string_view key) -> uint64_t {
    auto it = params.find(key);
    if (it == params.end()) return 0;
    if (const uint64_t* u = std::get_if<uint64_t>(&it->second)) return *u;
    const int64_t* i = std::get_if<int64_t>(&it->second);
    KILN_CHECK(i != nullptr && *i >= 0, ErrorCode::Internal,
               "Unable to parse '{}': attempt to access JSON non-unsigned-integer as "
               "unsigned-integer",
               key);
    return static_cast<uint64_t>(*i);
  };
  ref.offset = unsigned_value("shared_memory_offset");
  ref.byte_size = unsigned_value("shared_memory_byte_size");
  return ref;
}

ErrorCode Status::code() const {
  return error_ ? error_->code() : ErrorCode::Internal;
}

const std::string& Status::message() const {
  static const std::string kEmpty;
  return error_ ? error_->message() : kEmpty;
}

int http_status(ErrorCode code) {
  switch (code) {
    case ErrorCode::InvalidArgument:
      return 400;
    case ErrorCode::NotFound:
      return 404;
    case ErrorCode::Unavailable:
      return 503;
    case ErrorCode::Unsupported:
      return 501;
    case ErrorCode::Internal:
      return 500;
  }
  return 500;
}

}  // namespace kiln::server
