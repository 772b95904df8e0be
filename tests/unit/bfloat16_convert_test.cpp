// Bulk float32 <-> bfloat16 conversion (core/half_convert.hpp) gives exactly the scalar
// routines' bits, on the vector path (16 at a time) and its scalar tail alike: ties to even,
// infinities, NaN quieted, denormals kept (not flushed).
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "core/half.hpp"
#include "core/half_convert.hpp"

namespace kiln {
namespace {

std::vector<float> tricky_floats() {
  std::vector<float> v = {0.f,
                          -0.f,
                          1.f,
                          -1.f,
                          std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN(),
                          std::bit_cast<float>(0x7f800001u),  // signalling NaN
                          std::numeric_limits<float>::denorm_min(),
                          -std::numeric_limits<float>::denorm_min() * 77,
                          std::numeric_limits<float>::max(),
                          std::bit_cast<float>(0x3f808000u),   // a tie: rounds to even (down)
                          std::bit_cast<float>(0x3f818000u),   // a tie: rounds to even (up)
                          std::bit_cast<float>(0x7f7fffffu)};  // rounds up to infinity
  std::mt19937 rng(7);
  for (int i = 0; i < 1000; ++i) v.push_back(std::bit_cast<float>(static_cast<uint32_t>(rng())));
  v.push_back(3.f);  // a length that leaves a scalar tail
  return v;
}

TEST(BFloat16Convert, NarrowingMatchesScalarRounding) {
  const std::vector<float> in = tricky_floats();
  std::vector<uint16_t> bulk(in.size());
  floats_to_bfloat16s(in.data(), bulk.data(), in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    ASSERT_EQ(bulk[i], float_to_bfloat16_bits(in[i]))
        << "input bits " << std::hex << std::bit_cast<uint32_t>(in[i]);
  }
  EXPECT_EQ(bulk[11], 0x3f80u);
  EXPECT_EQ(bulk[12], 0x3f82u);
  EXPECT_EQ(bulk[13], 0x7f80u);
  EXPECT_EQ(bulk[7] & 0x40u, 0x40u);  // quieted
}

TEST(BFloat16Convert, WideningIsExact) {
  std::vector<uint16_t> in(1027);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<uint16_t>(i * 61u);
  std::vector<float> out(in.size());
  bfloat16s_to_floats(in.data(), out.data(), in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    ASSERT_EQ(std::bit_cast<uint32_t>(out[i]), static_cast<uint32_t>(in[i]) << 16);
  }
}

}  // namespace
}  // namespace kiln
