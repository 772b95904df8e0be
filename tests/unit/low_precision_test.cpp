// Low-precision element types: float8 / float4 / e8m0 conversions, 4- and 2-bit integers, and
// their packed TensorProto form.
#include <gtest/gtest.h>
#include <onnx/onnx-ml.pb.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/tensor.hpp"
#include "onnx/onnx_io.hpp"

namespace kiln {
namespace {

struct Format {
  MiniFloatKind kind;
  int exp_bits, mant_bits, bias;
  double max;
  const char* name;
};

const Format kFloat8[] = {
    {MiniFloatKind::E4M3FN, 4, 3, 7, 448.0, "e4m3fn"},
    {MiniFloatKind::E4M3FNUZ, 4, 3, 8, 240.0, "e4m3fnuz"},
    {MiniFloatKind::E5M2, 5, 2, 15, 57344.0, "e5m2"},
    {MiniFloatKind::E5M2FNUZ, 5, 2, 16, 57344.0, "e5m2fnuz"},
};

// The value of a float8 pattern straight from the format definitions (ONNX float8 docs).
double reference_value(const Format& f, int b) {
  const bool neg = b & 0x80;
  const int e = (b >> f.mant_bits) & ((1 << f.exp_bits) - 1);
  const int m = b & ((1 << f.mant_bits) - 1);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  switch (f.kind) {
    case MiniFloatKind::E4M3FN:
      if ((b & 0x7f) == 0x7f) return nan;
      break;
    case MiniFloatKind::E5M2:
      if (e == 31) return m ? nan : (neg ? -inf : inf);
      break;
    default:  // fnuz: 0x80 is the only NaN and there is no -0
      if (b == 0x80) return nan;
      break;
  }
  const double frac = static_cast<double>(m) / (1 << f.mant_bits);
  const double v =
      e == 0 ? frac * std::pow(2.0, 1 - f.bias) : (1 + frac) * std::pow(2.0, e - f.bias);
  return neg ? -v : v;
}

TEST(Float8, EveryPatternDecodesToTheFormatValue) {
  for (const Format& f : kFloat8) {
    for (int b = 0; b < 256; ++b) {
      const double want = reference_value(f, b);
      const double got = minifloat_to_double(f.kind, static_cast<uint8_t>(b));
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(got)) << f.name << " " << b;
      } else {
        EXPECT_EQ(got, want) << f.name << " " << b;
        EXPECT_EQ(std::signbit(got), std::signbit(want)) << f.name << " " << b;
      }
    }
  }
  EXPECT_EQ(Float8E4M3FN::from_bits(0x7e).to_double(), 448.0);
  EXPECT_EQ(Float8E4M3FN::from_bits(0x01).to_double(), std::ldexp(1.0, -9));
  EXPECT_EQ(Float8E4M3FNUZ::from_bits(0x7f).to_double(), 240.0);
  EXPECT_EQ(Float8E5M2::from_bits(0x7b).to_double(), 57344.0);
  EXPECT_TRUE(std::isinf(Float8E5M2::from_bits(0x7c).to_double()));
  EXPECT_EQ(Float8E5M2FNUZ::from_bits(0x7f).to_double(), 57344.0);
  EXPECT_EQ(Float8E5M2FNUZ::from_bits(0x01).to_double(), std::ldexp(1.0, -17));
}

TEST(Float8, EveryFiniteValueRoundTrips) {
  for (const Format& f : kFloat8) {
    for (int b = 0; b < 256; ++b) {
      const double v = reference_value(f, b);
      if (std::isnan(v) || std::isinf(v)) continue;
      for (bool saturate : {true, false}) {
        EXPECT_EQ(double_to_minifloat(f.kind, v, saturate), b) << f.name << " " << b;
      }
    }
  }
}

// Between two neighbouring values the midpoint goes to the one with an even mantissa, and
// anything off the midpoint to the nearer one.
TEST(Float8, RoundsToNearestEven) {
  for (const Format& f : kFloat8) {
    for (int b = 0; b < 0x7f; ++b) {
      const double lo = reference_value(f, b), hi = reference_value(f, b + 1);
      if (std::isnan(lo) || std::isnan(hi) || std::isinf(hi)) continue;
      const double mid = (lo + hi) / 2, eps = (hi - lo) / 64;
      const int even = (b % 2 == 0) ? b : b + 1;
      EXPECT_EQ(double_to_minifloat(f.kind, mid, true), even) << f.name << " " << b;
      EXPECT_EQ(double_to_minifloat(f.kind, mid - eps, true), b) << f.name << " " << b;
      EXPECT_EQ(double_to_minifloat(f.kind, mid + eps, true), b + 1) << f.name << " " << b;
      // Negative values mirror the positive ones (fnuz has no -0: -tiny rounds to +0).
      const int neg_lo = (b == 0 && minifloat_is_uz(f.kind)) ? 0 : (b | 0x80);
      EXPECT_EQ(double_to_minifloat(f.kind, -(mid - eps), true), neg_lo) << f.name << " " << b;
    }
  }
}

TEST(Float8, SaturatesOrOverflowsPerTheCastTable) {
  const double inf = std::numeric_limits<double>::infinity();
  for (const Format& f : kFloat8) {
    const uint8_t max = double_to_minifloat(f.kind, f.max, true);
    EXPECT_EQ(minifloat_to_double(f.kind, max), f.max);
    for (double big : {f.max * 2, inf, 1e30}) {
      EXPECT_EQ(double_to_minifloat(f.kind, big, true), max) << f.name;
      EXPECT_EQ(minifloat_to_double(f.kind, double_to_minifloat(f.kind, -big, true)), -f.max);
      const double ns = minifloat_to_double(f.kind, double_to_minifloat(f.kind, big, false));
      if (f.kind == MiniFloatKind::E5M2) {
        EXPECT_EQ(ns, inf) << f.name;
      } else {
        EXPECT_TRUE(std::isnan(ns)) << f.name;
      }
    }
    EXPECT_TRUE(std::isnan(minifloat_to_double(
        f.kind, double_to_minifloat(f.kind, std::numeric_limits<double>::quiet_NaN(), true))));
  }
  // 464 is halfway between 448 (even mantissa) and 480, which e4m3fn cannot hold.
  EXPECT_EQ(double_to_minifloat(MiniFloatKind::E4M3FN, 464, false), 0x7e);
  EXPECT_EQ(double_to_minifloat(MiniFloatKind::E4M3FN, 465, false), 0x7f);
  EXPECT_EQ(double_to_minifloat(MiniFloatKind::E4M3FN, -inf, false), 0xff);
  // e5m2: 61440 is halfway between 57344 and 65536 (even): overflows to inf.
  EXPECT_EQ(double_to_minifloat(MiniFloatKind::E5M2, 61439, false), 0x7b);
  EXPECT_EQ(double_to_minifloat(MiniFloatKind::E5M2, 61440, false), 0x7c);
  EXPECT_EQ(double_to_minifloat(MiniFloatKind::E5M2, -inf, false), 0xfc);
  // fnuz: one NaN, no negative zero.
  EXPECT_EQ(double_to_minifloat(MiniFloatKind::E4M3FNUZ, -0.0, true), 0x00);
  EXPECT_EQ(double_to_minifloat(MiniFloatKind::E5M2FNUZ, -inf, false), 0x80);
  EXPECT_EQ(double_to_minifloat(MiniFloatKind::E4M3FN, -0.0, true), 0x80);
}

TEST(Float4E2M1, ValuesRoundingAndSaturation) {
  const double values[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  for (int b = 0; b < 16; ++b) {
    const double want = (b & 8) ? -values[b & 7] : values[b & 7];
    EXPECT_EQ(Float4E2M1::from_bits(static_cast<uint8_t>(b)).to_double(), want) << b;
    EXPECT_EQ(Float4E2M1::from_double(want).bits, b) << b;
  }
  EXPECT_EQ(Float4E2M1::from_double(0.25).to_double(), 0.0);  // ties to even
  EXPECT_EQ(Float4E2M1::from_double(0.75).to_double(), 1.0);
  EXPECT_EQ(Float4E2M1::from_double(2.5).to_double(), 2.0);
  EXPECT_EQ(Float4E2M1::from_double(3.5).to_double(), 4.0);
  EXPECT_EQ(Float4E2M1::from_double(5.0).to_double(), 4.0);
  EXPECT_EQ(Float4E2M1::from_double(5.01).to_double(), 6.0);
  // No inf or NaN: always saturates, with or without `saturate`.
  EXPECT_EQ(Float4E2M1::from_double(1e9, false).to_double(), 6.0);
  EXPECT_EQ(Float4E2M1::from_double(-std::numeric_limits<double>::infinity()).to_double(), -6.0);
  EXPECT_EQ(Float4E2M1::from_double(std::numeric_limits<double>::quiet_NaN()).to_double(), 0.0);
}

TEST(Float8E8M0, PowersOfTwoAndRoundModes) {
  EXPECT_EQ(Float8E8M0::from_bits(127).to_double(), 1.0);
  EXPECT_EQ(Float8E8M0::from_bits(0).to_double(), std::ldexp(1.0, -127));
  EXPECT_EQ(Float8E8M0::from_bits(254).to_double(), std::ldexp(1.0, 127));
  EXPECT_TRUE(std::isnan(Float8E8M0::from_bits(255).to_double()));
  for (int e = -126; e <= 127; ++e) {  // 2^-127 is a float subnormal: see below
    EXPECT_EQ(Float8E8M0::from_float(std::ldexp(1.0f, e)).bits, e + 127) << e;
  }
  using R = E8M0Rounding;
  EXPECT_EQ(Float8E8M0::from_float(1.1f, true, R::Up).to_double(), 2.0);
  EXPECT_EQ(Float8E8M0::from_float(1.9f, true, R::Down).to_double(), 1.0);
  EXPECT_EQ(Float8E8M0::from_float(1.4f, true, R::Nearest).to_double(), 1.0);
  EXPECT_EQ(Float8E8M0::from_float(1.5f, true, R::Nearest).to_double(), 2.0);
  EXPECT_EQ(Float8E8M0::from_float(1.6f, true, R::Nearest).to_double(), 2.0);
  EXPECT_EQ(Float8E8M0::from_float(0.0f, true, R::Up).bits, 0);
  // Like the ONNX reference, rounding looks at the float32 fields only: a subnormal input has
  // exponent field 0 and a fraction, so "up" rounds it to 2^-126.
  EXPECT_EQ(Float8E8M0::from_float(std::ldexp(1.0f, -127), true, R::Up).bits, 1);
  EXPECT_EQ(Float8E8M0::from_float(std::ldexp(1.0f, -127), true, R::Down).bits, 0);
  const float big = std::numeric_limits<float>::max();
  EXPECT_EQ(Float8E8M0::from_float(big, true, R::Up).bits, 254);
  EXPECT_EQ(Float8E8M0::from_float(big, false, R::Up).bits, 255);
  EXPECT_EQ(Float8E8M0::from_float(std::numeric_limits<float>::quiet_NaN()).bits, 255);
}

TEST(SubByteInt, WrapsLikeIntegerNarrowing) {
  EXPECT_EQ(Int4::wrap(7).value, 7);
  EXPECT_EQ(Int4::wrap(8).value, -8);
  EXPECT_EQ(Int4::wrap(-9).value, 7);
  EXPECT_EQ(UInt4::wrap(-2).value, 14);
  EXPECT_EQ(UInt4::wrap(100).value, 4);
  EXPECT_EQ(Int2::wrap(2).value, -2);
  EXPECT_EQ(UInt2::wrap(-1).value, 3);
  EXPECT_EQ(Int4::wrap(-1).field(), 0xf);
  EXPECT_EQ(Int4::from_field(0xf).value, -1);
  EXPECT_EQ(Int4::min, -8);
  EXPECT_EQ(UInt2::max, 3);
}

TEST(LowPrecision, OnlyOptInDispatchFamiliesAcceptThem) {
  EXPECT_THROW(dispatch_dtype<DTypeSet::All>(DataType::Float8E4M3FN, "t", [](auto) {}), Error);
  EXPECT_THROW(dispatch_dtype<DTypeSet::Integer>(DataType::Int4, "t", [](auto) {}), Error);
  EXPECT_THROW(dispatch_dtype<DTypeSet::LowPrecision>(DataType::Float32, "t", [](auto) {}), Error);
  bool int4 = dispatch_dtype<DTypeSet::AllWithLowPrecision>(DataType::Int4, "t", [](auto tag) {
    return std::is_same_v<typename decltype(tag)::type, Int4>;
  });
  EXPECT_TRUE(int4);
  EXPECT_FALSE(dtype_is_integer(DataType::Int4));
  EXPECT_FALSE(dtype_is_float(DataType::Float8E5M2));
  EXPECT_TRUE(dtype_is_low_precision(DataType::UInt2));
}

TEST(LowPrecisionProto, Int4PacksTwoPerByteLowNibbleFirst) {
  Tensor t = Tensor::from_vector<Int4>(
      {5}, {Int4::wrap(-8), Int4::wrap(-1), Int4::wrap(0), Int4::wrap(7), Int4::wrap(3)});
  onnx::TensorProto p = onnx_io::tensor_to_proto(t, "x");
  ASSERT_EQ(p.raw_data().size(), 3u);  // odd count: the last byte is half used
  EXPECT_EQ(static_cast<uint8_t>(p.raw_data()[0]), 0xf8);
  EXPECT_EQ(static_cast<uint8_t>(p.raw_data()[1]), 0x70);
  EXPECT_EQ(static_cast<uint8_t>(p.raw_data()[2]), 0x03);
  Tensor back = onnx_io::tensor_from_proto(p, "", "test");
  ASSERT_EQ(back.dtype(), DataType::Int4);
  for (int64_t i = 0; i < 5; ++i) EXPECT_EQ(back.int_at(i), t.int_at(i)) << i;

  p.set_raw_data(std::string(2, '\0'));  // too short for 5 elements
  EXPECT_THROW(onnx_io::tensor_from_proto(p, "", "test"), Error);
}

TEST(LowPrecisionProto, TwoBitAndTypedFieldForms) {
  Tensor t = Tensor::from_vector<UInt2>(
      {5}, {UInt2::wrap(1), UInt2::wrap(2), UInt2::wrap(3), UInt2::wrap(0), UInt2::wrap(2)});
  onnx::TensorProto p = onnx_io::tensor_to_proto(t, "x");
  ASSERT_EQ(p.raw_data().size(), 2u);
  EXPECT_EQ(static_cast<uint8_t>(p.raw_data()[0]), 0x39);  // 00 11 10 01
  EXPECT_EQ(static_cast<uint8_t>(p.raw_data()[1]), 0x02);
  Tensor back = onnx_io::tensor_from_proto(p, "", "test");
  for (int64_t i = 0; i < 5; ++i) EXPECT_EQ(back.int_at(i), t.int_at(i)) << i;

  // int32_data: one packed byte per entry for 4-bit types, one pattern per entry for float8.
  onnx::TensorProto q;
  q.set_data_type(onnx::TensorProto::INT4);
  q.add_dims(3);
  q.add_int32_data(0x9f);  // -1, -7
  q.add_int32_data(0x05);  // 5
  Tensor i4 = onnx_io::tensor_from_proto(q, "", "test");
  EXPECT_EQ(i4.int_at(0), -1);
  EXPECT_EQ(i4.int_at(1), -7);
  EXPECT_EQ(i4.int_at(2), 5);

  onnx::TensorProto f;
  f.set_data_type(onnx::TensorProto::FLOAT8E4M3FN);
  f.add_dims(2);
  f.add_int32_data(0x7e);
  f.add_int32_data(0xb8);
  Tensor f8 = onnx_io::tensor_from_proto(f, "", "test");
  EXPECT_EQ(f8.double_at(0), 448.0);
  EXPECT_EQ(f8.double_at(1), -1.0);
  f.add_int32_data(0);  // 3 values for 2 elements
  EXPECT_THROW(onnx_io::tensor_from_proto(f, "", "test"), Error);
}

}  // namespace
}  // namespace kiln
