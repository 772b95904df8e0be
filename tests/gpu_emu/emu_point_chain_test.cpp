// gpu.point_chain's kernel (kernels/point_chain.hip) on the host emulation against the same
// steps applied in double (ops/point_chain.hpp): operands of the output's shape read in place,
// and a channel bias and a scalar read through broadcast strides; float32 and float16.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backends/gpu/kernels/point_chain.hpp"
#include "backends/gpu/runtime/strided_shape.hpp"

using namespace kiln::backends::gpu;
using namespace kiln::backends::gpu::kernels;
using kiln::point::PointOp;
using kiln::point::PointStep;

namespace {

std::vector<float> random_values(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-2.f, 2.f);
  std::vector<float> v(n);
  for (float& f : v) f = __half2float(__float2half(d(rng)));
  return v;
}

}  // namespace

TEST(GpuPointChainEmulated, InPlaceAndBroadcastOperands) {
  const std::vector<int64_t> dims = {2, 3, 4, 5};
  const int64_t n = 2 * 3 * 4 * 5;
  const std::vector<PointStep> steps = {
      {PointOp::Add, 1, false, 0, 0},   {PointOp::Relu, 0, false, 0, 0},
      {PointOp::Mul, 0, false, 0, 0},   {PointOp::Sub, 2, true, 0, 0},
      {PointOp::Clip, 0, false, -1, 3}, {PointOp::Mul, 3, false, 0, 0},
      {PointOp::Tanh, 0, false, 0, 0}};
  for (bool broadcast : {false, true}) {
    for (bool half : {false, true}) {
      SCOPED_TRACE(testing::Message()
                   << (broadcast ? "broadcast" : "same shape") << (half ? ", f16" : ", f32"));
      // Input 1: full shape, or a channel bias [3, 1, 1]; 2: full, or a scalar; 3: full.
      const std::vector<int64_t> d1 = broadcast ? std::vector<int64_t>{3, 1, 1} : dims;
      const std::vector<int64_t> d2 = broadcast ? std::vector<int64_t>{} : dims;
      std::vector<std::vector<float>> in = {
          random_values(n, 1), random_values(broadcast ? 3 : n, 2),
          random_values(broadcast ? 1 : n, 3), random_values(n, 4)};
      const std::vector<std::vector<int64_t>> strides = {
          broadcast_strides(dims, dims), broadcast_strides(d1, dims), broadcast_strides(d2, dims),
          broadcast_strides(dims, dims)};
      std::vector<double> ref(n);
      for (int64_t i = 0; i < n; ++i) {
        int64_t off[4] = {}, rest = i;
        for (size_t d = dims.size(); d-- > 0;) {
          const int64_t idx = rest % dims[d];
          rest /= dims[d];
          for (int k = 0; k < 4; ++k) off[k] += idx * strides[k][d];
        }
        double v = in[0][off[0]];
        for (const PointStep& s : steps) {
          const double operand = s.operand == 0 ? v : in[s.operand][off[s.operand]];
          v = kiln::point::apply_point_step<double>(s, v,
                                                    kiln::point::is_binary(s.op) ? operand : 0);
        }
        ref[i] = v;
      }
      PointProgram p;
      p.steps = static_cast<int>(steps.size());
      for (size_t k = 0; k < steps.size(); ++k) p.step[k] = steps[k];
      p.inputs = 4;
      const StridedShape shape = make_strided_shape(dims, strides, "test");
      std::vector<float> got(n);
      std::vector<std::vector<__half>> h(4);
      std::vector<__half> yh(n);
      for (int k = 0; k < 4; ++k) {
        if (half) {
          for (float f : in[k]) h[k].push_back(__float2half(f));
          p.input[k] = h[k].data();
        } else {
          p.input[k] = in[k].data();
        }
      }
      void* y = half ? static_cast<void*>(yh.data()) : static_cast<void*>(got.data());
      ASSERT_EQ(launch_point_chain(half ? FloatType::F16 : FloatType::F32, p, y, n,
                                   broadcast ? &shape : nullptr, nullptr),
                hipSuccess);
      if (half)
        for (int64_t i = 0; i < n; ++i) got[i] = __half2float(yh[i]);
      for (int64_t i = 0; i < n; ++i)
        ASSERT_NEAR(got[i], ref[i], (half ? 2e-3 : 1e-5) * (1 + std::abs(ref[i]))) << "at " << i;
    }
  }
  // A program the kernel cannot take is refused.
  PointProgram empty;
  float x = 0, y = 0;
  empty.input[0] = &x;
  EXPECT_NE(launch_point_chain(FloatType::F32, empty, &y, 1, nullptr, nullptr), hipSuccess);
}
