// The harness cases of Kiln's own depthwise convolution (gpu.depthwise_conv): 3x3 and 5x5
// filters at strides 1 and 2 (the tiled kernels), dilation, asymmetric pads, auto_pad, a 7x7
// filter and odd channel counts (the generic kernel), no bias, every fused activation, the
// residual Z; float32 and float16, bfloat16 for a few. Inputs and outputs are graph values, so
// they arrive row-major and the kernel transposes them to channels-last and back: its tiled
// kernels run on the transposed copies.
#include <string>

#include "backend_ops_case.hpp"
#include "backends/cpu/onednn_common.hpp"

namespace kiln::backend_ops {
namespace {

constexpr const char* kGpu = "gpu.depthwise_conv";
constexpr const char* kCpuDw = "cpu.depthwise_conv";
constexpr const char* kRef = "reference";
constexpr const char* kCpuConv = "onednn.conv";

// A depthwise case over input dims {n, c, h, w} with a k x k filter (a bias unless `bias` is
// false); `attrs` beyond group.
Case dw(std::string name, const char* op, std::vector<int64_t> xd, int64_t k,
        std::vector<Attr> attrs, bool bias = true) {
  const int64_t c = xd[1];
  Case out{.name = "gpu_dw_" + name,
           .op = op,
           .inputs = {x(std::move(xd)), w({c, 1, k, k})},
           .kernel = kCpuDw,
           .gpu = kGpu};
  if (bias) out.inputs.push_back(w({c}));
  attrs.push_back(i("group", c));
  out.attrs = std::move(attrs);
  if (std::string(op) == "FusedConv") {
    out.domain = kKiln;
    out.opset = 1;
  }
  return out;
}

// Pushes `c` in float32 and float16 (the CPU runs cpu.fp16), and in bfloat16 (the reference)
// when asked.
void add(std::vector<Case>& out, Case c, bool with_bf16 = false) {
  Case h = c;
  h.name += "_f16";
  h.dtype = DataType::Float16;
  h.kernel = "cpu.fp16";
  if (with_bf16) {
    Case b = c;
    b.name += "_bf16";
    b.dtype = DataType::BFloat16;
    // oneDNN's bfloat16 convolution where the CPU has the instructions, else (and for what the
    // CPU runs on its reference kernel in float32) the widening twin.
    b.kernel = c.kernel != kRef && backends::cpu::cpu_has_bf16() ? "onednn.conv" : "cpu.bf16";
    out.push_back(std::move(b));
  }
  out.push_back(std::move(c));
  out.push_back(std::move(h));
}

std::vector<Attr> act(const char* name, std::vector<float> params = {}) {
  std::vector<Attr> a = {s("activation", name), ints("pads", {1, 1, 1, 1})};
  if (!params.empty()) a.push_back(floats("activation_params", std::move(params)));
  return a;
}

}  // namespace

std::vector<Case> gpu_depthwise_cases() {
  std::vector<Case> c;
  const Attr pad1 = ints("pads", {1, 1, 1, 1}), pad2 = ints("pads", {2, 2, 2, 2});
  const Attr s2 = ints("strides", {2, 2});
  // The tiled kernels: MobileNetV2's 3x3 at strides 1 and 2, and 5x5 (EfficientNet's).
  add(c, dw("3x3_s1", "Conv", {2, 32, 9, 9}, 3, {pad1}), true);
  add(c, dw("3x3_s2", "Conv", {1, 24, 11, 11}, 3, {pad1, s2}), true);
  add(c, dw("5x5_s1_relu", "FusedConv", {2, 16, 10, 10}, 5, {pad2, s("activation", "Relu")}));
  add(c, dw("5x5_s2", "Conv", {1, 40, 13, 13}, 5, {pad2, s2}));
  add(c, dw("3x3_no_bias", "Conv", {1, 64, 7, 7}, 3, {pad1}, false), true);
  add(c, dw("3x3_valid", "Conv", {1, 16, 6, 6}, 3, {}));
  add(c, dw("3x3_asymmetric_pads", "Conv", {2, 8, 7, 9}, 3, {ints("pads", {0, 1, 2, 1})}));
  add(c, dw("3x3_same_upper_s2", "Conv", {1, 16, 9, 9}, 3, {s("auto_pad", "SAME_UPPER"), s2}));
  // MobileNetV2's stride-2 block at batch 1, ReLU6 (96 channels: the wide vectors).
  add(c, dw("mobilenet_s2_relu6", "FusedConv", {1, 96, 14, 14}, 3,
            {pad1, s2, s("activation", "Clip"), floats("activation_params", {0.f, 6.f})}));
  // The generic kernel: dilation, a 7x7 filter, channels that are no whole vector.
  add(c, dw("3x3_dilation2", "Conv", {1, 16, 12, 12}, 3, {pad2, ints("dilations", {2, 2})}));
  add(c, dw("7x7", "Conv", {1, 8, 10, 10}, 7, {ints("pads", {3, 3, 3, 3})}));
  add(c, dw("3x3_33_channels", "Conv", {2, 33, 8, 8}, 3, {pad1}), true);
  add(c, dw("3x3_3_channels", "Conv", {1, 3, 10, 10}, 3, {pad1, s2}));
  // Every fused activation the GPU's FusedConv carries.
  struct Act {
    const char* name;
    std::vector<float> params;
  };
  const Act acts[] = {
      {"Relu", {}}, {"Clip", {-0.5f, 0.75f}}, {"Sigmoid", {}},       {"Tanh", {}},
      {"Silu", {}}, {"HardSwish", {}},        {"LeakyRelu", {0.1f}}, {"HardSigmoid", {0.2f, 0.5f}},
      {"Gelu", {}}};
  for (const Act& a : acts) {
    add(c, dw(std::string("3x3_") + a.name, "FusedConv", {2, 24, 7, 7}, 3, act(a.name, a.params)));
  }
  // The residual Z (passes/fuse_conv_residual; the CPU's own depthwise loop refuses it, oneDNN's
  // convolution adds it with its sum post-op).
  for (const char* a : {"None", "Relu"}) {
    Case r = dw(std::string("residual_") + a, "FusedConv", {2, 32, 8, 8}, 3, act(a));
    r.inputs.push_back(x({2, 32, 8, 8}));
    r.kernel = kCpuConv;
    add(c, r, std::string(a) == "None");
  }
  Case r = dw("residual_s2_relu6", "FusedConv", {1, 16, 9, 9}, 3, act("Clip", {0.f, 6.f}));
  r.attrs.push_back(s2);
  r.inputs.push_back(x({1, 16, 5, 5}));
  r.kernel = kCpuConv;
  add(c, r);
  return c;
}

}  // namespace kiln::backend_ops
