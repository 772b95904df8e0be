#pragma once
// ONNX low-precision element types: float8 (E4M3FN, E4M3FNUZ, E5M2, E5M2FNUZ, E8M0), float4
// (E2M1) and the 4- and 2-bit integers. In memory every element takes one byte: the minifloats as
// their bit pattern (float4 in the low nibble), the sub-byte integers as their value (int8 /
// uint8). Packing into nibbles / crumbs happens only at the TensorProto edge.
//
// Conversions are explicit (no implicit operator float), so generic kernels never compile for
// these types by accident; only the ops that opt in (Cast, QuantizeLinear, ...) use them.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

namespace kiln {

enum class MiniFloatKind : uint8_t { E4M3FN, E4M3FNUZ, E5M2, E5M2FNUZ, E2M1 };

// Layout of a minifloat: exponent / mantissa widths, exponent bias, largest finite value.
struct MiniFloatLayout {
  int exp_bits;
  int mant_bits;
  int bias;
  double max_finite;
};

constexpr MiniFloatLayout minifloat_layout(MiniFloatKind k) {
  switch (k) {
    case MiniFloatKind::E4M3FN:
      return {4, 3, 7, 448.0};
    case MiniFloatKind::E4M3FNUZ:
      return {4, 3, 8, 240.0};
    case MiniFloatKind::E5M2:
      return {5, 2, 15, 57344.0};
    case MiniFloatKind::E5M2FNUZ:
      return {5, 2, 16, 57344.0};
    case MiniFloatKind::E2M1:
      return {2, 1, 1, 6.0};
  }
  return {0, 0, 0, 0.0};
}

// "uz" formats have a single NaN (the negative-zero pattern 0x80) and no negative zero.
constexpr bool minifloat_is_uz(MiniFloatKind k) {
  return k == MiniFloatKind::E4M3FNUZ || k == MiniFloatKind::E5M2FNUZ;
}

// Exact value of a minifloat bit pattern (every one is representable in double and float).
inline double minifloat_to_double(MiniFloatKind k, uint8_t bits) {
  const MiniFloatLayout f = minifloat_layout(k);
  const int width = 1 + f.exp_bits + f.mant_bits;
  bits = static_cast<uint8_t>(bits & ((1u << width) - 1u));
  const bool neg = (bits >> (width - 1)) & 1u;
  const int exp = (bits >> f.mant_bits) & ((1 << f.exp_bits) - 1);
  const int mant = bits & ((1 << f.mant_bits) - 1);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  if (minifloat_is_uz(k) && bits == 0x80) return nan;
  if (k == MiniFloatKind::E4M3FN && (bits & 0x7f) == 0x7f) return neg ? -nan : nan;
  if (k == MiniFloatKind::E5M2 && exp == 31) {
    if (mant != 0) return neg ? -nan : nan;
    return neg ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
  }
  const double v = exp == 0 ? std::ldexp(mant, 1 - f.bias - f.mant_bits)
                            : std::ldexp((1 << f.mant_bits) + mant, exp - f.bias - f.mant_bits);
  return neg ? -v : v;
}

// Rounds `x` to the nearest minifloat, ties to even. Overflow ([x] > max finite, or +-inf):
// with `saturate` the largest finite value of the sign; without, inf for E5M2 and NaN for the
// other float8 formats (the ONNX Cast table). E2M1 has no inf/NaN and always saturates.
inline uint8_t double_to_minifloat(MiniFloatKind k, double x, bool saturate) {
  const MiniFloatLayout f = minifloat_layout(k);
  const int sign_shift = f.exp_bits + f.mant_bits;
  const bool neg = std::signbit(x);
  const uint8_t sign = neg ? static_cast<uint8_t>(1u << sign_shift) : 0;
  const bool uz = minifloat_is_uz(k);
  auto nan_bits = [&]() -> uint8_t {
    if (uz) return 0x80;
    if (k == MiniFloatKind::E4M3FN) return sign | 0x7f;
    if (k == MiniFloatKind::E5M2) return sign | 0x7e;
    // E2M1 has no NaN: the ONNX reference (ml_dtypes) gives the zero of the opposite sign.
    return neg ? 0x0 : 0x8;
  };
  if (std::isnan(x)) return nan_bits();
  double a = std::fabs(x);
  const int min_exp = 1 - f.bias;  // exponent of the smallest normal value
  if (!std::isinf(a) && a != 0) {
    int e2 = 0;
    std::frexp(a, &e2);  // a = m * 2^e2 with m in [0.5, 1)
    const int quantum_exp = std::max(e2 - 1, min_exp) - f.mant_bits;
    // Scaling by a power of two is exact, so rint rounds exactly once (ties to even).
    a = std::ldexp(std::rint(std::ldexp(a, -quantum_exp)), quantum_exp);
  }
  if (a > f.max_finite) {
    if (saturate || k == MiniFloatKind::E2M1) {
      a = f.max_finite;
    } else if (k == MiniFloatKind::E5M2) {
      return sign | 0x7c;
    } else {
      return nan_bits();
    }
  }
  if (a == 0) return uz ? 0 : sign;
  int e2 = 0;
  std::frexp(a, &e2);
  const int e = e2 - 1;
  if (e < min_exp) {  // subnormal: exponent field 0
    return sign | static_cast<uint8_t>(std::ldexp(a, f.mant_bits - min_exp));
  }
  const int mant = static_cast<int>(std::ldexp(a, f.mant_bits - e)) - (1 << f.mant_bits);
  return sign | static_cast<uint8_t>(((e + f.bias) << f.mant_bits) | mant);
}

template <MiniFloatKind K>
struct MiniFloat {
  static constexpr MiniFloatKind kind = K;
  uint8_t bits = 0;

  static MiniFloat from_bits(uint8_t b) {
    MiniFloat v;
    v.bits = b;
    return v;
  }
  static MiniFloat from_double(double x, bool saturate = true) {
    return from_bits(double_to_minifloat(K, x, saturate));
  }
  double to_double() const { return minifloat_to_double(K, bits); }
  explicit operator float() const { return static_cast<float>(to_double()); }
};

using Float8E4M3FN = MiniFloat<MiniFloatKind::E4M3FN>;
using Float8E4M3FNUZ = MiniFloat<MiniFloatKind::E4M3FNUZ>;
using Float8E5M2 = MiniFloat<MiniFloatKind::E5M2>;
using Float8E5M2FNUZ = MiniFloat<MiniFloatKind::E5M2FNUZ>;
using Float4E2M1 = MiniFloat<MiniFloatKind::E2M1>;

// Cast's round_mode for FLOAT8E8M0 targets (opset 24+; default "up").
enum class E8M0Rounding : uint8_t { Up, Down, Nearest };

// FLOAT8E8M0: a bare power of two, 2^(bits - 127); 0xFF is NaN. No sign, no zero.
struct Float8E8M0 {
  uint8_t bits = 0;

  static Float8E8M0 from_bits(uint8_t b) {
    Float8E8M0 v;
    v.bits = b;
    return v;
  }
  // Takes the float32 exponent and rounds on its mantissa as the ONNX reference
  // (numpy_helper.to_float8e8m0) does: NaN and inf give 0xFF, the sign is ignored (negative
  // inputs are undefined by the spec), and with `saturate` rounding never carries into 0xFF.
  static Float8E8M0 from_float(float x, bool saturate = true,
                               E8M0Rounding mode = E8M0Rounding::Up) {
    const uint32_t u = std::bit_cast<uint32_t>(x);
    const uint32_t exp = (u >> 23) & 0xffu;
    if (exp == 0xffu) return from_bits(0xff);
    bool up = false;
    if (mode == E8M0Rounding::Up) {
      up = (u & 0x7fffffu) != 0;
    } else if (mode == E8M0Rounding::Nearest) {
      const bool guard = u & 0x400000u;
      const bool round = u & 0x200000u;
      const bool sticky = (u & 0x1fffffu) != 0;
      up = guard && (round || sticky || exp > 0);
    }
    if (up && saturate && exp == 0xfeu) up = false;
    return from_bits(static_cast<uint8_t>(exp + (up ? 1 : 0)));
  }
  double to_double() const {
    if (bits == 0xff) return std::numeric_limits<double>::quiet_NaN();
    return std::ldexp(1.0, static_cast<int>(bits) - 127);
  }
  explicit operator float() const { return static_cast<float>(to_double()); }
};

// 4- and 2-bit integers, held as their (sign-extended) value in one byte.
template <int Bits, bool Signed>
struct SubByteInt {
  using Storage = std::conditional_t<Signed, int8_t, uint8_t>;
  static constexpr int bits_width = Bits;
  static constexpr int64_t min = Signed ? -(int64_t{1} << (Bits - 1)) : 0;
  static constexpr int64_t max = Signed ? (int64_t{1} << (Bits - 1)) - 1 : (int64_t{1} << Bits) - 1;
  Storage value = 0;

  // Keeps the low Bits bits of v (two's complement wrap, like integer narrowing casts).
  static SubByteInt wrap(int64_t v) {
    const uint64_t mask = (uint64_t{1} << Bits) - 1;
    uint64_t low = static_cast<uint64_t>(v) & mask;
    SubByteInt r;
    if (Signed && (low >> (Bits - 1))) {
      r.value = static_cast<Storage>(static_cast<int64_t>(low) - (int64_t{1} << Bits));
    } else {
      r.value = static_cast<Storage>(low);
    }
    return r;
  }
  // From its packed bit field (the low Bits bits of `field`).
  static SubByteInt from_field(uint8_t field) { return wrap(field); }
  // The packed bit field: the low Bits bits of the value.
  uint8_t field() const {
    return static_cast<uint8_t>(static_cast<uint8_t>(value) & ((1u << Bits) - 1u));
  }
  int64_t to_int64() const { return value; }
};

using Int4 = SubByteInt<4, true>;
using UInt4 = SubByteInt<4, false>;
using Int2 = SubByteInt<2, true>;
using UInt2 = SubByteInt<2, false>;

static_assert(sizeof(Float8E4M3FN) == 1 && sizeof(Float8E8M0) == 1 && sizeof(Int4) == 1 &&
              sizeof(UInt2) == 1);

template <typename T>
inline constexpr bool is_minifloat_v = false;
template <MiniFloatKind K>
inline constexpr bool is_minifloat_v<MiniFloat<K>> = true;

template <typename T>
inline constexpr bool is_sub_byte_int_v = false;
template <int B, bool S>
inline constexpr bool is_sub_byte_int_v<SubByteInt<B, S>> = true;

}  // namespace kiln
