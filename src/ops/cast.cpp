// Cast and CastLike between every element type Kiln holds, including string <-> number and the
// low-precision types (float8, float8e8m0, float4e2m1, 4- and 2-bit integers).
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <limits>

#include "ops/elementwise_utils.hpp"
#include "ops/op_flops.hpp"
#include "ops/registry.hpp"

namespace kiln::ops {
namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\n\r");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\n\r");
  return s.substr(b, e - b + 1);
}

// Parses a decimal or scientific literal, or INF/+INF/-INF/NaN in any case.
double parse_double(const AttrReader& ctx, const std::string& text) {
  std::string s = trim(text);
  std::string l = lower(s);
  if (l == "inf" || l == "+inf") return std::numeric_limits<double>::infinity();
  if (l == "-inf") return -std::numeric_limits<double>::infinity();
  if (l == "nan" || l == "+nan" || l == "-nan") return std::numeric_limits<double>::quiet_NaN();
  if (l == "true") return 1.0;
  if (l == "false") return 0.0;
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(s.c_str(), &end);
  ctx.check(!s.empty() && end == s.c_str() + s.size(), "cannot convert string '{}' to a number",
            text);
  return v;
}

// Integer targets parse exact integers directly (so int64 keeps all its digits) and fall back to
// truncating a float literal ("100.5" -> 100).
template <typename T>
T parse_int(const AttrReader& ctx, const std::string& text) {
  std::string s = trim(text);
  if (!s.empty()) {
    char* end = nullptr;
    errno = 0;
    if constexpr (std::is_signed_v<T>) {
      long long v = std::strtoll(s.c_str(), &end, 10);
      if (errno == 0 && end == s.c_str() + s.size()) return static_cast<T>(v);
    } else {
      if (s[0] != '-') {
        unsigned long long v = std::strtoull(s.c_str(), &end, 10);
        if (errno == 0 && end == s.c_str() + s.size()) return static_cast<T>(v);
      }
    }
  }
  return saturate_to_int<T>(parse_double(ctx, text));
}

// Shortest text that reads back as the same value, spelled like Python/numpy ("1.0", "0.1",
// "1e-05", "inf", "nan").
template <typename T>
std::string float_to_string(T v) {
  std::string s;
  if constexpr (is_half_v<T>) {
    float f = static_cast<float>(v);
    if (std::isnan(f)) return "nan";
    // Fewest significant digits that read back as the same half, then spelled like a float.
    for (int p = 1; p <= 9; ++p) {
      float shortest = std::strtof(fmt::format("{:.{}g}", f, p).c_str(), nullptr);
      if (T(shortest).bits == v.bits) {
        f = shortest;
        break;
      }
    }
    s = fmt::format("{}", f);
  } else {
    if (std::isnan(v)) return "nan";
    s = fmt::format("{}", v);
  }
  if (s.find_first_of(".eni") == std::string::npos) s += ".0";
  return s;
}

// Float -> integer is undefined out of range. Truncate to int64 (saturating, NaN -> 0), then
// wrap into the target like numpy and x86 conversions do, so negative floats cast to unsigned
// types agree with the ONNX reference.
template <typename To>
To float_to_int(double d) {
  if constexpr (std::is_same_v<To, uint64_t>) {
    if (d >= 0) return saturate_to_int<uint64_t>(d);
  }
  return static_cast<To>(saturate_to_int<int64_t>(d));
}

template <typename To, typename From>
To convert(const AttrReader& ctx, const From& v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (std::is_same_v<From, std::string>) {
    if constexpr (std::is_same_v<To, bool>) {
      return parse_double(ctx, v) != 0.0;
    } else if constexpr (is_float_v<To>) {
      return from_double<To>(parse_double(ctx, v));
    } else {
      return parse_int<To>(ctx, v);
    }
  } else if constexpr (std::is_same_v<To, std::string>) {
    if constexpr (std::is_same_v<From, bool>) {
      return v ? "True" : "False";
    } else if constexpr (is_float_v<From>) {
      return float_to_string(v);
    } else {
      return std::to_string(v);
    }
  } else if constexpr (std::is_same_v<To, bool>) {
    if constexpr (is_float_v<From>) {
      return to_double(v) != 0.0;  // NaN is true
    } else {
      return v != 0;
    }
  } else if constexpr (is_float_v<From>) {
    if constexpr (is_float_v<To>) {
      if constexpr (std::is_same_v<To, float> || is_half_v<To>) {
        // Halves round through float; the double rounding this allows is within half an ulp.
        return To(static_cast<float>(to_double(v)));
      } else {
        return to_double(v);
      }
    } else {
      return float_to_int<To>(to_double(v));
    }
  } else {
    // From integer or bool.
    if constexpr (is_float_v<To>) {
      return from_double<To>(static_cast<double>(v));
    } else {
      return static_cast<To>(v);  // integer narrowing wraps (two's complement, C++20)
    }
  }
}

// How a cast to a float8 / float8e8m0 target rounds (Cast opset 19+ `saturate`, 24+ `round_mode`).
struct LowPrecisionRounding {
  bool saturate = true;
  E8M0Rounding e8m0 = E8M0Rounding::Up;
};

// Low-precision sources decode exactly to a wide type: minifloats and e8m0 to float, 4-/2-bit
// integers to int8/uint8. The ordinary conversion rules then apply from there.
Tensor widen_low_precision(const Tensor& x) {
  return dispatch_dtype<DTypeSet::LowPrecision>(x.dtype(), "Cast input", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (is_sub_byte_int_v<T>) {
      using S = typename T::Storage;
      return map_unary<S, T>(x, [](const T& v) { return v.value; });
    } else {
      return map_unary<float, T>(x, [](const T& v) { return static_cast<float>(v); });
    }
  });
}

// The wide type a low-precision target is produced from: int64 for 4-/2-bit integers (then
// wrapped like any integer narrowing), double for the float formats (then rounded once).
DataType wide_type_for(DataType to) {
  return to == DataType::Int4 || to == DataType::UInt4 || to == DataType::Int2 ||
                 to == DataType::UInt2
             ? DataType::Int64
             : DataType::Float64;
}

Tensor narrow_to_low_precision(const Tensor& wide, DataType to, LowPrecisionRounding r) {
  return dispatch_dtype<DTypeSet::LowPrecision>(to, "Cast target", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (is_sub_byte_int_v<T>) {
      return map_unary<T, int64_t>(wide, [](int64_t v) { return T::wrap(v); });
    } else if constexpr (std::is_same_v<T, Float8E8M0>) {
      // The reference rounds the float32 value (its exponent and mantissa bits).
      return map_unary<T, double>(
          wide, [&](double v) { return T::from_float(static_cast<float>(v), r.saturate, r.e8m0); });
    } else {
      return map_unary<T, double>(wide, [&](double v) { return T::from_double(v, r.saturate); });
    }
  });
}

Tensor cast_tensor(const KernelContext& ctx, const Tensor& x_in, DataType to,
                   LowPrecisionRounding rounding = {}) {
  if (!dtype_is_supported(to)) {
    ctx.unsupported("cast to {} is not supported", dtype_name(to));
  }
  if (x_in.dtype() == to) return x_in;
  const Tensor x = dtype_is_low_precision(x_in.dtype()) ? widen_low_precision(x_in) : x_in;
  if (dtype_is_low_precision(to)) {
    return narrow_to_low_precision(cast_tensor(ctx, x, wide_type_for(to)), to, rounding);
  }
  return dispatch_dtype<DTypeSet::All>(x.dtype(), "Cast input", [&](auto from_tag) {
    using From = typename decltype(from_tag)::type;
    return dispatch_dtype<DTypeSet::All>(to, "Cast target", [&](auto to_tag) {
      using To = typename decltype(to_tag)::type;
      return map_unary<To, From>(x, [&](const From& v) { return convert<To, From>(ctx, v); });
    });
  });
}

// Before opset 6 `to` was a string naming the TensorProto type ("FLOAT", "INT64", ...).
DataType cast_target(const AttrReader& ctx) {
  const ir::Attribute* a = ctx.node().attribute("to");
  if (!a) ctx.fail("required attribute 'to' is missing");
  if (const auto* name = std::get_if<std::string>(&a->storage())) {
    static const std::pair<const char*, DataType> kNames[] = {
        {"FLOAT", DataType::Float32},  {"UINT8", DataType::UInt8},
        {"INT8", DataType::Int8},      {"UINT16", DataType::UInt16},
        {"INT16", DataType::Int16},    {"INT32", DataType::Int32},
        {"INT64", DataType::Int64},    {"STRING", DataType::String},
        {"BOOL", DataType::Bool},      {"FLOAT16", DataType::Float16},
        {"DOUBLE", DataType::Float64}, {"UINT32", DataType::UInt32},
        {"UINT64", DataType::UInt64},  {"BFLOAT16", DataType::BFloat16}};
    std::string upper = *name;
    for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    for (const auto& [n, t] : kNames) {
      if (upper == n) return t;
    }
    ctx.fail("unknown target type name '{}'", *name);
  }
  int64_t code = ctx.attr_int("to");
  ctx.check(code > 0 && code <= static_cast<int64_t>(DataType::Int2), "unknown target type code {}",
            code);
  return static_cast<DataType>(code);
}

LowPrecisionRounding rounding_attrs(const AttrReader& ctx) {
  LowPrecisionRounding r;
  // Before opset 19 no float8 type existed; 19+ defaults to saturating.
  r.saturate = ctx.attr_int("saturate", 1) != 0;
  const std::string mode = lower(ctx.attr_string("round_mode", "up"));
  if (mode == "up") {
    r.e8m0 = E8M0Rounding::Up;
  } else if (mode == "down") {
    r.e8m0 = E8M0Rounding::Down;
  } else if (mode == "nearest") {
    r.e8m0 = E8M0Rounding::Nearest;
  } else {
    ctx.fail("round_mode must be 'up', 'down' or 'nearest', got '{}'", mode);
  }
  return r;
}

void cast_op(KernelContext& ctx) {
  ctx.set_output(0, cast_tensor(ctx, ctx.input(0), cast_target(ctx), rounding_attrs(ctx)));
}

void infer_cast(InferContext& ctx) {
  infer_same_shape_as(ctx, cast_target(ctx));
}

void cast_like_op(KernelContext& ctx) {
  ctx.set_output(0, cast_tensor(ctx, ctx.input(0), ctx.input(1).dtype(), rounding_attrs(ctx)));
}

void infer_cast_like(InferContext& ctx) {
  const TypeInfo* target = ctx.input_type(1);
  if (!target || !target->is_tensor() || target->dtype == DataType::Undefined) return;
  infer_same_shape_as(ctx, target->dtype);
}

KILN_REGISTER_OP({.op_type = "Cast",
                  .kernel = cast_op,
                  .infer = infer_cast,
                  .traits = {
                      .pointwise = Pointwise::Unary, .transposes = true, .flops = flops_zero}});
KILN_REGISTER_OP({.op_type = "CastLike",
                  .kernel = cast_like_op,
                  .infer = infer_cast_like,
                  .traits = {.flops = flops_zero}});

}  // namespace
}  // namespace kiln::ops
