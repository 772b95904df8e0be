#pragma once
// Element types. The numbering is ONNX's TensorProto.DataType so conversion at the edges is a cast.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/error.hpp"
#include "core/half.hpp"
#include "core/low_precision.hpp"

namespace kiln {

enum class DataType : int32_t {
  Undefined = 0,
  Float32 = 1,
  UInt8 = 2,
  Int8 = 3,
  UInt16 = 4,
  Int16 = 5,
  Int32 = 6,
  Int64 = 7,
  String = 8,
  Bool = 9,
  Float16 = 10,
  Float64 = 11,
  UInt32 = 12,
  UInt64 = 13,
  Complex64 = 14,
  Complex128 = 15,
  BFloat16 = 16,
  Float8E4M3FN = 17,
  Float8E4M3FNUZ = 18,
  Float8E5M2 = 19,
  Float8E5M2FNUZ = 20,
  UInt4 = 21,
  Int4 = 22,
  Float4E2M1 = 23,
  Float8E8M0 = 24,
  UInt2 = 25,
  Int2 = 26,
};

// Name as ONNX spells it in lower case ("float", "int64", "float8e4m3fn").
std::string_view dtype_name(DataType type);
// Bytes per element of the in-memory representation; 0 for types Kiln does not compute with.
size_t dtype_size(DataType type);
// True for the types tensors can hold and kernels can compute with today.
bool dtype_is_supported(DataType type);
bool dtype_is_float(DataType type);
bool dtype_is_integer(DataType type);
bool dtype_is_signed(DataType type);
// The ONNX low-precision types (float8, float4, 4- and 2-bit integers). Tensors hold them one
// byte per element; only kernels that opt in (DTypeSet::LowPrecision / AllWithLowPrecision)
// accept them, and dtype_is_float / dtype_is_integer are false for them.
bool dtype_is_low_precision(DataType type);
// Bits per element in a TensorProto's raw_data / int32_data: 4 for int4/uint4/float4e2m1, 2 for
// int2/uint2, 8 * dtype_size otherwise (in memory every element takes dtype_size bytes).
int dtype_packed_bits(DataType type);
// Converts an ONNX TensorProto.DataType code, refusing unknown codes and, with a clear
// Unsupported error, known types Kiln does not compute with yet (complex).
DataType dtype_from_onnx(int32_t code, std::string_view context);
// Throws Unsupported naming `context` when `type` cannot be computed with.
void dtype_require_supported(DataType type, std::string_view context);

template <typename T>
struct DTypeOf;
#define KILN_DTYPE_OF(cpp, tag)                      \
  template <>                                        \
  struct DTypeOf<cpp> {                              \
    static constexpr DataType value = DataType::tag; \
  };
KILN_DTYPE_OF(float, Float32)
KILN_DTYPE_OF(double, Float64)
KILN_DTYPE_OF(Float16, Float16)
KILN_DTYPE_OF(BFloat16, BFloat16)
KILN_DTYPE_OF(int8_t, Int8)
KILN_DTYPE_OF(int16_t, Int16)
KILN_DTYPE_OF(int32_t, Int32)
KILN_DTYPE_OF(int64_t, Int64)
KILN_DTYPE_OF(uint8_t, UInt8)
KILN_DTYPE_OF(uint16_t, UInt16)
KILN_DTYPE_OF(uint32_t, UInt32)
KILN_DTYPE_OF(uint64_t, UInt64)
KILN_DTYPE_OF(bool, Bool)
KILN_DTYPE_OF(std::string, String)
KILN_DTYPE_OF(Float8E4M3FN, Float8E4M3FN)
KILN_DTYPE_OF(Float8E4M3FNUZ, Float8E4M3FNUZ)
KILN_DTYPE_OF(Float8E5M2, Float8E5M2)
KILN_DTYPE_OF(Float8E5M2FNUZ, Float8E5M2FNUZ)
KILN_DTYPE_OF(Float8E8M0, Float8E8M0)
KILN_DTYPE_OF(Float4E2M1, Float4E2M1)
KILN_DTYPE_OF(Int4, Int4)
KILN_DTYPE_OF(UInt4, UInt4)
KILN_DTYPE_OF(Int2, Int2)
KILN_DTYPE_OF(UInt2, UInt2)
#undef KILN_DTYPE_OF

template <typename T>
inline constexpr DataType dtype_of = DTypeOf<T>::value;

template <typename T>
struct TypeTag {
  using type = T;
};

// Calls fn(TypeTag<T>{}) for the C++ type of `type`, restricted to the listed family.
// Families: all numeric types, floats only, integers only, or everything including bool/string.
// The low-precision types (low_precision.hpp) are in no family but the opt-in LowPrecision (only
// them) and AllWithLowPrecision (All plus them), so ordinary kernels never see them.
enum class DTypeSet {
  Numeric,
  Float,
  Integer,
  NumericBool,
  All,
  LowPrecision,
  AllWithLowPrecision
};

template <DTypeSet Set = DTypeSet::All, typename Fn>
decltype(auto) dispatch_dtype(DataType type, std::string_view context, Fn&& fn) {
  constexpr bool only_low = Set == DTypeSet::LowPrecision;
  constexpr bool all = Set == DTypeSet::All || Set == DTypeSet::AllWithLowPrecision;
  constexpr bool floats = !only_low && Set != DTypeSet::Integer;
  constexpr bool ints = !only_low && Set != DTypeSet::Float;
  constexpr bool bools = Set == DTypeSet::NumericBool || all;
  constexpr bool strings = all;
  constexpr bool low = only_low || Set == DTypeSet::AllWithLowPrecision;
  switch (type) {
    case DataType::Float32:
      if constexpr (floats) return fn(TypeTag<float>{});
      break;
    case DataType::Float64:
      if constexpr (floats) return fn(TypeTag<double>{});
      break;
    case DataType::Float16:
      if constexpr (floats) return fn(TypeTag<Float16>{});
      break;
    case DataType::BFloat16:
      if constexpr (floats) return fn(TypeTag<BFloat16>{});
      break;
    case DataType::Int8:
      if constexpr (ints) return fn(TypeTag<int8_t>{});
      break;
    case DataType::Int16:
      if constexpr (ints) return fn(TypeTag<int16_t>{});
      break;
    case DataType::Int32:
      if constexpr (ints) return fn(TypeTag<int32_t>{});
      break;
    case DataType::Int64:
      if constexpr (ints) return fn(TypeTag<int64_t>{});
      break;
    case DataType::UInt8:
      if constexpr (ints) return fn(TypeTag<uint8_t>{});
      break;
    case DataType::UInt16:
      if constexpr (ints) return fn(TypeTag<uint16_t>{});
      break;
    case DataType::UInt32:
      if constexpr (ints) return fn(TypeTag<uint32_t>{});
      break;
    case DataType::UInt64:
      if constexpr (ints) return fn(TypeTag<uint64_t>{});
      break;
    case DataType::Bool:
      if constexpr (bools) return fn(TypeTag<bool>{});
      break;
    case DataType::String:
      if constexpr (strings) return fn(TypeTag<std::string>{});
      break;
    case DataType::Float8E4M3FN:
      if constexpr (low) return fn(TypeTag<Float8E4M3FN>{});
      break;
    case DataType::Float8E4M3FNUZ:
      if constexpr (low) return fn(TypeTag<Float8E4M3FNUZ>{});
      break;
    case DataType::Float8E5M2:
      if constexpr (low) return fn(TypeTag<Float8E5M2>{});
      break;
    case DataType::Float8E5M2FNUZ:
      if constexpr (low) return fn(TypeTag<Float8E5M2FNUZ>{});
      break;
    case DataType::Float8E8M0:
      if constexpr (low) return fn(TypeTag<Float8E8M0>{});
      break;
    case DataType::Float4E2M1:
      if constexpr (low) return fn(TypeTag<Float4E2M1>{});
      break;
    case DataType::Int4:
      if constexpr (low) return fn(TypeTag<Int4>{});
      break;
    case DataType::UInt4:
      if constexpr (low) return fn(TypeTag<UInt4>{});
      break;
    case DataType::Int2:
      if constexpr (low) return fn(TypeTag<Int2>{});
      break;
    case DataType::UInt2:
      if constexpr (low) return fn(TypeTag<UInt2>{});
      break;
    default:
      break;
  }
  fail(ErrorCode::Unsupported, "{}: element type {} is not supported here", context,
       dtype_name(type));
}

}  // namespace kiln
