#include <gtest/gtest.h>

#include "core/half.hpp"
#include "core/shape.hpp"
#include "core/tensor.hpp"

namespace kiln {
namespace {

TEST(Half, RoundTripsExactValuesAndRoundsToNearestEven) {
  for (float f : {0.0f, 1.0f, -2.5f, 65504.0f, 6.103515625e-05f, 5.960464477539063e-08f}) {
    EXPECT_EQ(static_cast<float>(Float16(f)), f) << f;
  }
  EXPECT_EQ(Float16(1.0f + 1.0f / 2048).bits, Float16(1.0f).bits);  // tie rounds to even
  EXPECT_EQ(Float16(1.0f + 3.0f / 2048).bits, 0x3c02);              // tie rounds up to even
  EXPECT_TRUE(std::isinf(static_cast<float>(Float16(1e6f))));
  EXPECT_TRUE(std::isnan(static_cast<float>(Float16(NAN))));
  EXPECT_EQ(static_cast<float>(BFloat16(1.0f)), 1.0f);
  EXPECT_EQ(BFloat16(1.00390625f).bits, 0x3f80);  // halfway, rounds to even
}

TEST(Shape, SymbolicDimsPrintAndAreNotStatic) {
  Shape s({Dim::symbol("batch", 1, 64), Dim(3), Dim()});
  EXPECT_FALSE(s.is_static());
  EXPECT_EQ(s.to_string(), "[batch[1..64],3,?]");
  EXPECT_THROW(s.values(), Error);
  EXPECT_EQ(Shape::from_values({2, 3}).values(), (std::vector<int64_t>{2, 3}));
}

TEST(Shape, NumelRejectsOverflowAndNegativeDims) {
  EXPECT_EQ(shape_numel({}), 1);
  EXPECT_EQ(shape_numel({2, 0, 5}), 0);
  EXPECT_THROW(shape_numel({-1}), Error);
  EXPECT_THROW(shape_numel({int64_t{1} << 40, int64_t{1} << 40}), Error);
}

TEST(Tensor, OwnsAlignedZeroedStorageAndSharesOnCopy) {
  Tensor t(DataType::Float32, {2, 3});
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw_data()) % kTensorAlignment, 0u);
  for (float v : t.values<float>()) EXPECT_EQ(v, 0.0f);
  Tensor alias = t;
  alias.data<float>()[4] = 7;
  EXPECT_EQ(t.data<float>()[4], 7);
  Tensor deep = t.clone();
  deep.data<float>()[4] = 1;
  EXPECT_EQ(t.data<float>()[4], 7);
  EXPECT_THROW(t.data<int32_t>(), Error);
  EXPECT_THROW(t.reshaped({4}), Error);
  EXPECT_EQ(t.reshaped({3, 2}).dims(), (std::vector<int64_t>{3, 2}));
}

TEST(Tensor, StringsAreConstructedAndCloned) {
  Tensor t(DataType::String, {2});
  t.data<std::string>()[1] = std::string("a\0b", 3);
  Tensor c = t.clone();
  EXPECT_EQ(c.data<std::string>()[1].size(), 3u);
  EXPECT_EQ(c.data<std::string>()[0], "");
}

TEST(Tensor, RefusesUnsupportedTypesAndHugeAllocations) {
  EXPECT_THROW(Tensor(DataType::Complex64, {1}), Error);
  // Low-precision types are held one byte per element.
  Tensor f8(DataType::Float8E4M3FN, {3});
  EXPECT_EQ(f8.nbytes(), 3u);
  Tensor i4(DataType::Int4, {5});
  EXPECT_EQ(i4.nbytes(), 5u);
  size_t old = Tensor::max_bytes();
  Tensor::set_max_bytes(1024);
  EXPECT_THROW(Tensor(DataType::Float32, {1024}), Error);
  Tensor::set_max_bytes(old);
}

}  // namespace
}  // namespace kiln
