// layout_key / desc_from_layout_key (backends/cpu/onednn_common.hpp): the description of a
// packed weight's layout that an engine stores, and its inverse, for float32 blocked weights and
// for int8 weights with oneDNN's compensations appended (a source zero point's); what an engine
// file could hold that does not describe them is refused.
#include <gtest/gtest.h>

#include <string>

#include "backends/cpu/onednn_common.hpp"
#include "engine/packed_layout.hpp"

namespace kiln::backends::cpu {
namespace {

using dnnl::memory;

// The weights' layout oneDNN's u8 x s8 matmul picks for [k, n] with a source zero point given at
// run time: int8 blocks with a per-column compensation after them.
memory::desc int8_matmul_weights(int64_t k, int64_t n) {
  dnnl::primitive_attr attr;
  attr.set_zero_points(DNNL_ARG_SRC, 0, {DNNL_RUNTIME_S32_VAL});
  const dnnl::matmul::primitive_desc pd(
      dnnl::matmul::desc(plain_desc({8, k}, memory::data_type::u8),
                         memory::desc({k, n}, memory::data_type::s8, memory::format_tag::any),
                         plain_desc({8, n}, memory::data_type::s32)),
      attr, engine());
  return pd.weights_desc();
}

TEST(OnednnLayoutKey, Float32BlockedWeightsRoundTrip) {
  const dnnl::convolution_forward::primitive_desc pd(
      dnnl::convolution_forward::desc(
          dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
          blocked_desc({1, 32, 8, 8}, cpu_channel_block()),
          memory::desc({32, 32, 1, 1}, memory::data_type::f32, memory::format_tag::any),
          memory::desc(), blocked_desc({1, 32, 8, 8}, cpu_channel_block()), {1, 1}, {0, 0}, {0, 0}),
      engine());
  const memory::desc md = pd.weights_desc();
  const std::string key = layout_key(md);
  ASSERT_EQ(key.rfind("onednn blocked f32 dims 32x32x1x1", 0), 0u) << key;
  EXPECT_EQ(key.find("extra"), std::string::npos) << key;
  EXPECT_EQ(desc_from_layout_key(key, md.get_size()), md);
  EXPECT_FALSE(desc_from_layout_key(key, md.get_size() - 1)) << "past the stored bytes";
}

TEST(OnednnLayoutKey, Int8WeightsKeepTheirCompensations) {
  const memory::desc md = int8_matmul_weights(64, 48);
  const std::string key = layout_key(md);
  ASSERT_EQ(key.rfind("onednn blocked s8 dims 64x48", 0), 0u) << key;
  ASSERT_NE(key.find(" extra 8 "), std::string::npos) << key;  // the source zero point's
  // The compensations lie after the elements: the descriptor's size counts them.
  EXPECT_GT(md.get_size(), size_t{64 * 48});
  EXPECT_EQ(desc_from_layout_key(key, md.get_size()), md);
  EXPECT_FALSE(desc_from_layout_key(key, md.get_size() - 1)) << "the compensations cut off";
  // The engine's own decoder reads the elements and ignores what follows them.
  std::optional<engine::BlockedLayout> layout = engine::parse_blocked_layout(key);
  ASSERT_TRUE(layout);
  EXPECT_EQ(layout->dtype, DataType::Int8);
  EXPECT_EQ(layout->dims, (std::vector<int64_t>{64, 48}));
}

TEST(OnednnLayoutKey, ExtrasItDoesNotKnowAreRefused) {
  const memory::desc md = int8_matmul_weights(32, 16);
  std::string key = layout_key(md);
  const size_t at = key.find(" extra ");
  ASSERT_NE(at, std::string::npos);
  const std::string base = key.substr(0, at);
  for (const std::string& bad : {
           base + " extra 2 0 2",    // scale_adjust: not stored
           base + " extra 0 0 0",    // no flags but the words
           base + " extra 8 0",      // a word short
           base + " extra 8 0 2 9",  // a word too many
           base + " extras 8 0 2",   // another word
       }) {
    EXPECT_FALSE(desc_from_layout_key(bad, md.get_size())) << bad;
  }
  std::string f32 = key;
  f32.replace(f32.find(" s8 "), 4, " f32 ");
  EXPECT_FALSE(desc_from_layout_key(f32, md.get_size() * 4)) << "compensations are int8's";
  EXPECT_FALSE(engine::parse_blocked_layout(f32)) << f32;
}

}  // namespace
}  // namespace kiln::backends::cpu
