// The plain form of a packed weight decoded from its bytes alone (engine/packed_layout.hpp): the
// blocked layouts the CPU backend writes, and descriptions an engine file could hold that must
// be refused rather than read outside the packed bytes.
#include "engine/packed_layout.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "expect_error.hpp"

namespace kiln {
namespace {

Tensor bytes_of(const std::vector<float>& v) {
  Tensor t(DataType::UInt8, {static_cast<int64_t>(v.size() * 4)});
  std::memcpy(t.raw_data(), v.data(), v.size() * 4);
  return t;
}

std::vector<float> unpack(const engine::BlockedLayout& l, const Tensor& packed, size_t n) {
  std::vector<float> out(n);
  engine::unpack_blocked(l, packed, out.data(), n * 4);
  return out;
}

TEST(PackedLayout, RowMajorDecodesAsItIs) {
  auto l = engine::parse_blocked_layout(
      "onednn blocked f32 dims 2x3 padded 2x3 offsets 0x0 offset0 0 strides 3x1 inner none");
  ASSERT_TRUE(l);
  EXPECT_EQ(l->dims, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(unpack(*l, bytes_of({0, 1, 2, 3, 4, 5}), 6), (std::vector<float>{0, 1, 2, 3, 4, 5}));
}

TEST(PackedLayout, ChannelBlocksWithPaddingDecodeToTheLogicalElements) {
  // 3 x 2 (o x i) in blocks of 4 outputs: element (o, i) at i * 4 + o; o = 3 is padding.
  auto l = engine::parse_blocked_layout(
      "onednn blocked f32 dims 3x2 padded 4x2 offsets 0x0 offset0 0 strides 8x4 inner 4@0");
  ASSERT_TRUE(l);
  std::vector<float> packed(8, -1.f);
  for (int o = 0; o < 3; ++o)
    for (int i = 0; i < 2; ++i) packed[i * 4 + o] = static_cast<float>(o * 10 + i);
  EXPECT_EQ(unpack(*l, bytes_of(packed), 6), (std::vector<float>{0, 1, 10, 11, 20, 21}));
  // Two nested blocks (oneDNN's OIhw16i16o style): 2 x 2 in 2i2o blocks: (o, i) at i * 2 + o.
  auto nested = engine::parse_blocked_layout(
      "onednn blocked f32 dims 2x2 padded 2x2 offsets 0x0 offset0 0 strides 4x4 inner 2@1,2@0");
  ASSERT_TRUE(nested);
  EXPECT_EQ(unpack(*nested, bytes_of({0, 10, 1, 11}), 4), (std::vector<float>{0, 1, 10, 11}));
}

TEST(PackedLayout, Int8WeightsDecodeByTheByte) {
  // An int8 convolution's weights (oneDNN's AcdB64a4b style, here 3 x 2 in blocks of 4
  // outputs): element (o, i) at i * 4 + o, one byte each; o = 3 is padding.
  auto l = engine::parse_blocked_layout(
      "onednn blocked s8 dims 3x2 padded 4x2 offsets 0x0 offset0 0 strides 8x4 inner 4@0");
  ASSERT_TRUE(l);
  EXPECT_EQ(l->dtype, DataType::Int8);
  Tensor packed(DataType::UInt8, {8});
  auto* p = static_cast<int8_t*>(packed.raw_data());
  std::fill(p, p + 8, int8_t{-99});
  for (int o = 0; o < 3; ++o)
    for (int i = 0; i < 2; ++i) p[i * 4 + o] = static_cast<int8_t>(o * 10 - i);
  std::vector<int8_t> out(6);
  engine::unpack_blocked(*l, packed, out.data(), out.size());
  EXPECT_EQ(out, (std::vector<int8_t>{0, -1, 10, 9, 20, 19}));
  // Asked for float32's bytes, or reaching past the packed bytes: refused, not read.
  std::vector<float> wide(6);
  expect_error([&] { engine::unpack_blocked(*l, packed, wide.data(), 24); },
               ErrorCode::InvalidArgument, "bytes asked of a int8 layout");
  Tensor short_bytes(DataType::UInt8, {5});
  expect_error([&] { engine::unpack_blocked(*l, short_bytes, out.data(), out.size()); },
               ErrorCode::InvalidArgument, "packed buffer");
}

TEST(PackedLayout, DescriptionsItCannotDecodeAreRefused) {
  for (const char* bad : {
           "onednn blocked u8 dims 2x3 padded 2x3 offsets 0x0 offset0 0 strides 3x1 inner none",
           "onednn blocked bf16 dims 2x3 padded 2x3 offsets 0x0 offset0 0 strides 3x1 inner none",
           "onednn blocked f32 dims 2x3 padded 1x3 offsets 0x0 offset0 0 strides 3x1 inner none",
           "onednn blocked f32 dims 2x3 padded 2x3 offsets 0x0 offset0 0 strides 3x-1 inner none",
           "onednn blocked f32 dims 2x3 padded 2x3 offsets 0x0 offset0 0 strides 3x1 inner 4@2",
           "onednn blocked f32 dims 4294967296x4294967296 padded 4294967296x4294967296 offsets "
           "0x0 offset0 0 strides 1x1 inner none",
           "onednn blocked f32 dims 2x3 padded 2x3",
           "another library's layout",
       }) {
    EXPECT_FALSE(engine::parse_blocked_layout(bad)) << bad;
  }
}

TEST(PackedLayout, AnElementOutsideThePackedBytesIsAnErrorNotARead) {
  auto l = engine::parse_blocked_layout(
      "onednn blocked f32 dims 2x3 padded 2x3 offsets 0x0 offset0 100 strides 3x1 inner none");
  ASSERT_TRUE(l);
  std::vector<float> out(6);
  expect_error(
      [&] {
        engine::unpack_blocked(*l, bytes_of({0, 1, 2, 3, 4, 5}), out.data(), 24);
      },
      ErrorCode::InvalidArgument, "lies at 100 of a 6-element packed buffer");
}

TEST(PackedLayout, UnpacksToComparesEveryByte) {
  const char* key =
      "onednn blocked f32 dims 2x3 padded 2x3 offsets 0x0 offset0 0 strides 3x1 inner none";
  Tensor plain(DataType::Float32, {2, 3});
  for (int i = 0; i < 6; ++i) plain.data<float>()[i] = static_cast<float>(i);
  EXPECT_TRUE(engine::unpacks_to(key, bytes_of({0, 1, 2, 3, 4, 5}), plain));
  EXPECT_FALSE(engine::unpacks_to(key, bytes_of({0, 1, 2, 3, 4, 6}), plain));
  EXPECT_FALSE(engine::unpacks_to(key, bytes_of({0, 1, 2}), plain));
}

Tensor s8_bytes(const std::vector<int8_t>& v) {
  Tensor t(DataType::UInt8, {static_cast<int64_t>(v.size())});
  std::memcpy(t.raw_data(), v.data(), v.size());
  return t;
}

TEST(PackedLayout, AShiftedPlainFormAddsItsZeroPointsBack) {
  // An int8 kernel's w - z: uint8 weights over 0..255 packed as w - 128 (one value), and int8
  // weights with a zero point a row of 3 (per output channel).
  const std::string base =
      "onednn blocked s8 dims 2x3 padded 2x3 offsets 0x0 offset0 0 strides 3x1 inner none";
  auto u8 = engine::parse_blocked_layout(base + " plain u8 shift 1 128");
  ASSERT_TRUE(u8);
  EXPECT_EQ(u8->dtype, DataType::Int8);
  EXPECT_EQ(u8->plain_type(), DataType::UInt8);
  Tensor plain_u8(DataType::UInt8, {2, 3});
  const std::vector<uint8_t> want_u8 = {0, 1, 127, 128, 200, 255};
  std::memcpy(plain_u8.raw_data(), want_u8.data(), 6);
  const Tensor packed_u8 = s8_bytes({-128, -127, -1, 0, 72, 127});
  std::vector<uint8_t> out(6);
  engine::unpack_plain(*u8, packed_u8, out.data(), out.size());
  EXPECT_EQ(out, want_u8);
  EXPECT_TRUE(engine::unpacks_to(base + " plain u8 shift 1 128", packed_u8, plain_u8));
  EXPECT_FALSE(engine::unpacks_to(base + " plain u8 shift 1 127", packed_u8, plain_u8));
  EXPECT_FALSE(engine::unpacks_to(base, packed_u8, plain_u8));  // the type differs

  auto rows = engine::parse_blocked_layout(base + " plain s8 shift 3 -9,5");
  ASSERT_TRUE(rows);
  std::vector<int8_t> got(6);
  engine::unpack_plain(*rows, s8_bytes({1, 2, 3, 4, 5, 6}), got.data(), got.size());
  EXPECT_EQ(got, (std::vector<int8_t>{-8, -7, -6, 9, 10, 11}));
  // A shift that leaves the plain type is an error, not a wrapped byte.
  expect_error(
      [&] {
        engine::unpack_plain(*rows, s8_bytes({1, 2, 3, 127, 5, 6}), got.data(), 6);
      },
      ErrorCode::InvalidArgument, "outside int8");
}

TEST(PackedLayout, MalformedShiftsAreRefused) {
  const std::string base =
      "onednn blocked s8 dims 2x3 padded 2x3 offsets 0x0 offset0 0 strides 3x1 inner none";
  for (const std::string& bad : {
           base + " plain u16 shift 1 128",           // not an 8-bit plain type
           base + " plain u8 shift 0 128",            // EVERY below 1
           base + " plain u8 shift 7 128",            // EVERY beyond the elements
           base + " plain u8 shift 1 300",            // a value no 8-bit shift takes
           base + " plain u8 shift 1 1,2,3,4,5,6,7",  // more values than elements
           base + " plain u8 shift 1 x", base + " plain u8 move 1 128",
           std::string("onednn blocked f32 dims 2x3 padded 2x3 offsets 0x0 offset0 0 strides 3x1 "
                       "inner none plain u8 shift 1 128"),  // only int8 layouts shift
       }) {
    EXPECT_FALSE(engine::parse_blocked_layout(bad)) << bad;
  }
}

}  // namespace
}  // namespace kiln
