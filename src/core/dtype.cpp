#include "core/dtype.hpp"

namespace kiln {

std::string_view dtype_name(DataType type) {
  switch (type) {
    case DataType::Undefined:
      return "undefined";
    case DataType::Float32:
      return "float";
    case DataType::UInt8:
      return "uint8";
    case DataType::Int8:
      return "int8";
    case DataType::UInt16:
      return "uint16";
    case DataType::Int16:
      return "int16";
    case DataType::Int32:
      return "int32";
    case DataType::Int64:
      return "int64";
    case DataType::String:
      return "string";
    case DataType::Bool:
      return "bool";
    case DataType::Float16:
      return "float16";
    case DataType::Float64:
      return "double";
    case DataType::UInt32:
      return "uint32";
    case DataType::UInt64:
      return "uint64";
    case DataType::Complex64:
      return "complex64";
    case DataType::Complex128:
      return "complex128";
    case DataType::BFloat16:
      return "bfloat16";
    case DataType::Float8E4M3FN:
      return "float8e4m3fn";
    case DataType::Float8E4M3FNUZ:
      return "float8e4m3fnuz";
    case DataType::Float8E5M2:
      return "float8e5m2";
    case DataType::Float8E5M2FNUZ:
      return "float8e5m2fnuz";
    case DataType::UInt4:
      return "uint4";
    case DataType::Int4:
      return "int4";
    case DataType::Float4E2M1:
      return "float4e2m1";
    case DataType::Float8E8M0:
      return "float8e8m0";
    case DataType::UInt2:
      return "uint2";
    case DataType::Int2:
      return "int2";
  }
  return "unknown";
}

size_t dtype_size(DataType type) {
  if (dtype_is_low_precision(type)) return 1;  // unpacked: see low_precision.hpp
  switch (type) {
    case DataType::Float32:
    case DataType::Int32:
    case DataType::UInt32:
      return 4;
    case DataType::Float64:
    case DataType::Int64:
    case DataType::UInt64:
      return 8;
    case DataType::Float16:
    case DataType::BFloat16:
    case DataType::Int16:
    case DataType::UInt16:
      return 2;
    case DataType::Int8:
    case DataType::UInt8:
    case DataType::Bool:
      return 1;
    case DataType::String:
      return sizeof(std::string);
    default:
      return 0;
  }
}

bool dtype_is_supported(DataType type) {
  return dtype_size(type) != 0;
}

bool dtype_is_float(DataType type) {
  return type == DataType::Float32 || type == DataType::Float64 || type == DataType::Float16 ||
         type == DataType::BFloat16;
}

bool dtype_is_integer(DataType type) {
  switch (type) {
    case DataType::Int8:
    case DataType::Int16:
    case DataType::Int32:
    case DataType::Int64:
    case DataType::UInt8:
    case DataType::UInt16:
    case DataType::UInt32:
    case DataType::UInt64:
      return true;
    default:
      return false;
  }
}

bool dtype_is_signed(DataType type) {
  return dtype_is_float(type) || type == DataType::Int8 || type == DataType::Int16 ||
         type == DataType::Int32 || type == DataType::Int64;
}

bool dtype_is_low_precision(DataType type) {
  switch (type) {
    case DataType::Float8E4M3FN:
    case DataType::Float8E4M3FNUZ:
    case DataType::Float8E5M2:
    case DataType::Float8E5M2FNUZ:
    case DataType::Float8E8M0:
    case DataType::Float4E2M1:
    case DataType::Int4:
    case DataType::UInt4:
    case DataType::Int2:
    case DataType::UInt2:
      return true;
    default:
      return false;
  }
}

int dtype_packed_bits(DataType type) {
  switch (type) {
    case DataType::Int4:
    case DataType::UInt4:
    case DataType::Float4E2M1:
      return 4;
    case DataType::Int2:
    case DataType::UInt2:
      return 2;
    default:
      return static_cast<int>(8 * dtype_size(type));
  }
}

DataType dtype_from_onnx(int32_t code, std::string_view context) {
  KILN_CHECK_ARG(code > 0 && code <= static_cast<int32_t>(DataType::Int2),
                 "{}: unknown ONNX element type code {}", context, code);
  return static_cast<DataType>(code);
}

void dtype_require_supported(DataType type, std::string_view context) {
  KILN_CHECK(dtype_is_supported(type), ErrorCode::Unsupported,
             "{}: element type {} is recognized but not supported yet", context, dtype_name(type));
}

}  // namespace kiln
