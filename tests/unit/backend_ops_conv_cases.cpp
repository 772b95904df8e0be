// The harness cases of Kiln's own implicit-GEMM convolution (gpu.own.conv): 3x3 with bias, a
// network's first layer (3 channels, 7x7 stride 2: the element-wise staging), strides,
// dilations and asymmetric pads, auto_pad SAME, a 1x1 over few pixels and many channels (split
// reduction), fused activations and the residual Z; float32 and float16. The GPU runs them with
// its own kernels preferred, so they check the own convolution on NVIDIA too (where cuDNN's
// gpu.cudnn.conv is the default). Inputs and outputs are graph values: they arrive row-major and
// the kernel transposes them to channels-last and back.
#include <string>

#include "backend_ops_case.hpp"

namespace kiln::backend_ops {
namespace {

constexpr const char* kGpu = "gpu.own.conv";
constexpr const char* kCpuConv = "onednn.conv";
constexpr const char* kRef = "reference";

// Pushes `c` in float32 and float16 (the CPU runs cpu.fp16).
void both(std::vector<Case>& out, Case c) {
  c.name = "gpu_own_conv_" + c.name;
  c.gpu = kGpu;
  c.gpu_own = true;
  push_with_f16(out, std::move(c));
}

Case fused(std::string name, std::vector<In> inputs, const char* act,
           std::vector<float> params = {}) {
  Case c{.name = std::move(name),
         .op = "FusedConv",
         .inputs = std::move(inputs),
         .attrs = {ints("pads", {1, 1, 1, 1}), s("activation", act)},
         .kernel = kCpuConv,
         .domain = kKiln,
         .opset = 1};
  if (!params.empty()) c.attrs.push_back(floats("activation_params", std::move(params)));
  return c;
}

// Pushes only the float16 twin of `c`: the products the bulk-copy tiles take. Their float32
// twins' long reductions (576 terms) on the CPU's oneDNN kernel differ from the reference by
// more than float32's tolerance near zero, and float32 never reaches those tiles.
void f16_only(std::vector<Case>& out, Case c) {
  std::vector<Case> both_types;
  both(both_types, std::move(c));
  out.push_back(std::move(both_types.back()));
}

}  // namespace

std::vector<Case> gpu_conv_cases() {
  std::vector<Case> c;
  const Attr pad1 = ints("pads", {1, 1, 1, 1});
  both(c, {.name = "3x3_bias",
           .op = "Conv",
           .inputs = {x({2, 16, 9, 9}), w({24, 16, 3, 3}), w({24})},
           .attrs = {pad1},
           .kernel = kCpuConv});
  both(c, {.name = "3x3_no_bias_odd_filters",
           .op = "Conv",
           .inputs = {x({1, 8, 6, 7}), w({13, 8, 3, 3})},
           .attrs = {pad1},
           .kernel = kCpuConv});
  both(c, {.name = "stem_7x7_s2_3_channels",
           .op = "Conv",
           .inputs = {x({1, 3, 20, 18}), w({16, 3, 7, 7}), w({16})},
           .attrs = {ints("pads", {3, 3, 3, 3}), ints("strides", {2, 2})},
           .kernel = kCpuConv});
  both(c,
       {.name = "strided_dilated_asymmetric_pads",
        .op = "Conv",
        .inputs = {x({1, 8, 11, 10}), w({12, 8, 3, 3}), w({12})},
        .attrs = {ints("pads", {1, 0, 0, 2}), ints("strides", {2, 1}), ints("dilations", {1, 2})},
        .kernel = kCpuConv});
  both(c, {.name = "same_upper_s2",
           .op = "Conv",
           .inputs = {x({1, 8, 9, 9}), w({8, 8, 3, 3}), w({8})},
           .attrs = {s("auto_pad", "SAME_UPPER"), ints("strides", {2, 2})},
           .kernel = kCpuConv});
  // Channels a multiple of 64, float16: on sm_90 the bulk-copy tiles
  // (KILN_GPU_GEMM_TILE=t128x128x64) copy A in im2col mode. Output tiles that cross images and end
  // past M, strides, dilations, asymmetric pads, a strided 1x1 (ResNet's downsample) and the
  // residual.
  f16_only(c, {.name = "3x3_64_channels",
               .op = "Conv",
               .inputs = {x({2, 64, 9, 9}), w({72, 64, 3, 3}), w({72})},
               .attrs = {pad1},
               .kernel = kCpuConv});
  f16_only(
      c, {.name = "strided_dilated_asymmetric_pads_128_channels",
          .op = "Conv",
          .inputs = {x({1, 128, 11, 10}), w({40, 128, 3, 3}), w({40})},
          .attrs = {ints("pads", {1, 0, 0, 2}), ints("strides", {2, 1}), ints("dilations", {1, 2})},
          .kernel = kCpuConv});
  f16_only(c, {.name = "1x1_s2_64_channels",
               .op = "Conv",
               .inputs = {x({3, 64, 15, 15}), w({48, 64, 1, 1})},
               .attrs = {ints("strides", {2, 2})},
               .kernel = kCpuConv});
  // A 1x1 whose pads put some output pixels' windows outside the image (zeros), on the pixel
  // rows' staging of the wgmma tiles; its bias and both strides different.
  f16_only(c, {.name = "1x1_padded_strided_64_channels",
               .op = "Conv",
               .inputs = {x({2, 64, 9, 8}), w({40, 64, 1, 1}), w({40})},
               .attrs = {ints("pads", {1, 0, 2, 1}), ints("strides", {2, 3})},
               .kernel = kCpuConv});
  {
    Case r = fused("residual_64_channels",
                   {x({2, 64, 7, 7}), w({64, 64, 3, 3}), w({64}), x({2, 64, 7, 7})}, "Relu");
    r.reference_roundings = 2;
    f16_only(c, r);
  }
  // ResNet-50's last 1x1 at batch 1 in small: the reduction split into parts.
  both(c, {.name = "1x1_split_reduction",
           .op = "Conv",
           .inputs = {x({1, 512, 2, 2}), w({32, 512, 1, 1}), w({32})},
           .kernel = kCpuConv});
  for (const char* act : {"Relu", "Silu", "Sigmoid"}) {
    both(c,
         fused(std::string("fused_") + act, {x({2, 16, 7, 7}), w({16, 16, 3, 3}), w({16})}, act));
  }
  both(c, fused("fused_clip6", {x({1, 8, 8, 8}), w({32, 8, 3, 3}), w({32})}, "Clip", {0.f, 6.f}));
  // The residual Z (passes/fuse_conv_residual; the CPU adds it with oneDNN's sum post-op; the
  // reference rounds the convolution to float16 before adding Z: two roundings).
  for (const char* act : {"Relu", "None"}) {
    Case r = fused(std::string("residual_") + act,
                   {x({2, 16, 7, 7}), w({16, 16, 3, 3}), w({16}), x({2, 16, 7, 7})}, act);
    r.kernel = kCpuConv;
    r.reference_roundings = 2;
    both(c, r);
  }
  return c;
}

}  // namespace kiln::backend_ops
