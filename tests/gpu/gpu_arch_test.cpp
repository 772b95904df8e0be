// GPU targets as data: parsing, printing and what follows from the arch. No GPU needed.
#include <gtest/gtest.h>

#include "backends/gpu/gpu_arch.hpp"
#include "core/error.hpp"

namespace kiln::backends {
namespace {

void expect_invalid(const std::string& text, const std::string& needle) {
  try {
    parse_gpu_target(text);
    ADD_FAILURE() << text << " parsed";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(GpuTarget, ParsesAndPrintsBothVendors) {
  GpuTarget cuda = parse_gpu_target("cuda:sm_90");
  EXPECT_EQ(cuda.vendor, "cuda");
  EXPECT_EQ(cuda.arch, "sm_90");
  EXPECT_TRUE(cuda.features.empty());
  EXPECT_EQ(cuda.to_string(), "cuda:sm_90");
  EXPECT_EQ(cuda, cuda_target(9, 0));

  GpuTarget amd = parse_gpu_target("hip:gfx90a:sramecc+:xnack-");
  EXPECT_EQ(amd.arch, "gfx90a");
  EXPECT_EQ(amd.features, (std::vector<std::string>{"sramecc+", "xnack-"}));
  EXPECT_EQ(amd.to_string(), "hip:gfx90a:sramecc+:xnack-");
  EXPECT_EQ(amd, hip_target("gfx90a:sramecc+:xnack-"));
  EXPECT_EQ(hip_target("gfx1030").to_string(), "hip:gfx1030");
  EXPECT_EQ(parse_gpu_target("cuda:sm_90a").arch, "sm_90a");
}

TEST(GpuTarget, RefusesMalformedTargets) {
  expect_invalid("gpu", "not vendor:arch");
  expect_invalid("cuda:gfx90a", "sm_<number>");
  expect_invalid("cuda:sm_", "sm_<number>");
  expect_invalid("cuda:sm_90:xnack-", "take no features");
  expect_invalid("hip:sm_90", "gfx<id>");
  expect_invalid("hip:gfx90a:xnack", "name+ or name-");
  expect_invalid("metal:m3", "unknown vendor 'metal'");
}

TEST(GpuTarget, MatrixInstructionsFollowTheArch) {
  auto has = [](const GpuTarget& t, const std::string& insn) {
    auto v = matrix_instructions(t);
    return std::find(v.begin(), v.end(), insn) != v.end();
  };
  EXPECT_TRUE(has(cuda_target(9, 0), "wgmma"));
  EXPECT_TRUE(has(cuda_target(9, 0), "mma.sync.f16"));
  EXPECT_FALSE(has(cuda_target(8, 0), "wgmma"));
  EXPECT_TRUE(has(cuda_target(8, 0), "mma.sync.bf16"));
  EXPECT_FALSE(has(cuda_target(7, 0), "mma.sync.bf16"));
  EXPECT_TRUE(has(hip_target("gfx908"), "mfma.f16"));
  EXPECT_TRUE(has(hip_target("gfx90a:sramecc+:xnack-"), "mfma.f64"));
  EXPECT_FALSE(has(hip_target("gfx908"), "mfma.f64"));
  EXPECT_TRUE(has(hip_target("gfx940"), "mfma.fp8"));
  EXPECT_TRUE(matrix_instructions(hip_target("gfx1030")).empty());
  EXPECT_TRUE(has(hip_target("gfx1100"), "wmma.f16"));
}

TEST(GpuTarget, WavefrontSizeByArch) {
  EXPECT_EQ(default_wavefront_size(cuda_target(9, 0)), 32);
  EXPECT_EQ(default_wavefront_size(hip_target("gfx908")), 64);
  EXPECT_EQ(default_wavefront_size(hip_target("gfx90a")), 64);
  EXPECT_EQ(default_wavefront_size(hip_target("gfx940")), 64);
  EXPECT_EQ(default_wavefront_size(hip_target("gfx1030")), 32);
  EXPECT_EQ(default_wavefront_size(hip_target("gfx1100")), 32);
}

}  // namespace
}  // namespace kiln::backends
