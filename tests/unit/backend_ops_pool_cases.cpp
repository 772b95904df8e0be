// The harness cases of Kiln's own pooling (gpu.own.pool): max and average over symmetric and
// asymmetric pads, ceil_mode's partial last windows, dilations, auto_pad, count_include_pad, the
// global forms; float32 and float16, bfloat16 for a few. The GPU runs them with its own kernels
// preferred (on NVIDIA cuDNN's pooling is the default where it serves). Inputs and outputs are
// graph values, so the kernel reads and writes them row-major here; its channels-last path is
// checked in tests/gpu_emu and by the models.
#include <string>

#include "backend_ops_case.hpp"

namespace kiln::backend_ops {
namespace {

constexpr const char* kGpu = "gpu.own.pool";

// Pushes `c` in float32, float16 (the CPU runs cpu.fp16) and, when asked, bfloat16 (cpu.bf16).
void add(std::vector<Case>& out, Case c, bool with_bf16 = false) {
  c.name = "gpu_own_pool_" + c.name;
  c.gpu = kGpu;
  c.gpu_own = true;
  if (with_bf16) {
    Case b = c;
    b.name += "_bf16";
    b.dtype = DataType::BFloat16;
    // The CPU pools bfloat16 itself (oneDNN's pooling, Kiln's global pooling); what its
    // float32 kernel refuses widens (cpu.bf16).
    b.kernel = c.op.starts_with("Global")               ? "cpu.global_pool"
               : c.kernel == std::string("onednn.pool") ? "onednn.pool"
                                                        : "cpu.bf16";
    out.push_back(std::move(b));
  }
  push_with_f16(out, std::move(c));
}

Case pool(std::string name, const char* op, std::vector<int64_t> xd, std::vector<Attr> attrs,
          const char* cpu = "onednn.pool") {
  return {.name = std::move(name),
          .op = op,
          .inputs = {x(std::move(xd))},
          .attrs = std::move(attrs),
          .kernel = cpu};
}

}  // namespace

std::vector<Case> gpu_pool_cases() {
  std::vector<Case> c;
  const Attr k3 = ints("kernel_shape", {3, 3}), s2 = ints("strides", {2, 2});
  // ResNet's stem pooling, and what cuDNN's pooling refuses.
  add(c, pool("max_3x3_s2_p1", "MaxPool", {2, 8, 13, 13}, {k3, s2, ints("pads", {1, 1, 1, 1})}),
      true);
  add(c, pool("max_asymmetric_pads", "MaxPool", {1, 5, 9, 8}, {k3, ints("pads", {0, 1, 2, 1})}));
  add(c, pool("max_ceil_mode", "MaxPool", {2, 3, 8, 7}, {k3, s2, i("ceil_mode", 1)}), true);
  add(c,
      pool("max_dilated", "MaxPool", {1, 4, 11, 10},
           {ints("kernel_shape", {2, 3}), ints("dilations", {2, 2}), ints("pads", {1, 0, 1, 2})}));
  add(c, pool("max_same_upper", "MaxPool", {1, 3, 9, 10}, {k3, s2, s("auto_pad", "SAME_UPPER")}));
  add(c, pool("avg_exclude_pad", "AveragePool", {1, 6, 7, 7}, {k3, ints("pads", {1, 1, 1, 1})}),
      true);
  add(c, pool("avg_include_pad_asymmetric", "AveragePool", {2, 3, 9, 8},
              {k3, s2, ints("pads", {1, 0, 2, 1}), i("count_include_pad", 1)}));
  // ceil_mode's last window reaches past the padded input: count_include_pad counts only what
  // lies inside it (oneDNN takes no ceil_mode average: the CPU runs the reference).
  add(c, pool("avg_ceil_include_pad", "AveragePool", {1, 4, 8, 8},
              {k3, s2, ints("pads", {1, 1, 1, 1}), i("ceil_mode", 1), i("count_include_pad", 1)},
              "reference"));
  add(c, pool("global_avg", "GlobalAveragePool", {2, 16, 7, 7}, {}, "cpu.global_pool"), true);
  add(c, pool("global_max", "GlobalMaxPool", {2, 5, 3, 4}, {}, "cpu.global_pool"), true);
  return c;
}

}  // namespace kiln::backend_ops
