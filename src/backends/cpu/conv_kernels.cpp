// Convolution on the CPU: Conv and ai.kiln FusedConv (bias in the convolution, the activation in
// one pass over its output) through oneDNN on plain NCHW activations and plain OIHW weights,
// which oneDNN reads in place (no packed copy: a session's weights stay the engine file's mapped
// pages). Depthwise 2-D convolutions get Kiln's own loop, because oneDNN only has fast depthwise
// kernels for channels-last or blocked layouts.
#include <algorithm>
#include <cmath>

#include "backends/cpu/cpu_backend.hpp"
#include "backends/cpu/onednn_common.hpp"
#include "backends/cpu/vector_math.hpp"
#include "backends/kernel_table.hpp"
#include "ops/conv_utils.hpp"

namespace kiln::backends::cpu {
namespace {

using ops::window::WindowGeometry;

std::vector<int64_t> spatial(const std::vector<int64_t>& dims) {
  return std::vector<int64_t>(dims.begin() + 2, dims.end());
}

std::string check_conv(const ir::Node& node) {
  if (std::string why = check_f32_input(node, 0, 3, 5); !why.empty()) return why;
  if (std::string why = check_f32_input(node, 1, 3, 5); !why.empty()) return why;
  if (std::string why = check_f32_input(node, 2, 1, 1, true); !why.empty()) return why;
  if (std::string why = check_f32_outputs(node); !why.empty()) return why;
  if (node.inputs().size() > 3) return "more than 3 inputs";
  if (node.input(0)->type().shape->rank() != node.input(1)->type().shape->rank()) {
    return "X and W ranks differ";
  }
  ops::AttrReader attrs(node);
  if (attrs.attr_int("group", 1) < 1) return "group < 1";
  ops::FusedActivation act;
  try {
    act = node_activation(node);
  } catch (const Error& e) {
    return e.message();
  }
  dnnl::post_ops probe;
  if (!append_activation(probe, act)) return "activation has no oneDNN post-op";
  return "";
}

// Geometry of one input shape, validated like the reference kernel validates it.
struct ConvGeometry {
  WindowGeometry g;
  std::vector<int64_t> out_dims;
  int64_t group = 1;
};

ConvGeometry conv_geometry(const ir::Node& node, const DeviceTensor& x, const DeviceTensor& w) {
  ops::AttrReader attrs(node);
  ConvGeometry cg;
  cg.group = attrs.attr_int("group", 1);
  attrs.check(x.dims.size() >= 3 && w.dims.size() == x.dims.size(),
              "X {} and W {} must have the same rank >= 3", dims_to_string(x.dims),
              dims_to_string(w.dims));
  const int64_t c = x.dims[1], m = w.dims[0];
  attrs.check(c % cg.group == 0 && m % cg.group == 0 && w.dims[1] * cg.group == c,
              "W {} does not match {} input channels in {} groups", dims_to_string(w.dims), c,
              cg.group);
  std::vector<int64_t> kernel = spatial(w.dims);
  if (attrs.has_attr("kernel_shape")) {
    attrs.check(attrs.attr_ints("kernel_shape") == kernel, "kernel_shape does not match W {}",
                dims_to_string(w.dims));
  }
  cg.g = ops::window::forward_geometry(attrs, spatial(x.dims), kernel, false);
  cg.out_dims = {x.dims[0], m};
  cg.out_dims.insert(cg.out_dims.end(), cg.g.out.begin(), cg.g.out.end());
  check_output_fits(node, cg.out_dims);
  return cg;
}

void check_bias(const ir::Node& node, const DeviceTensor* b, int64_t m) {
  if (!b) return;
  KILN_CHECK_ARG(b->dims.size() == 1 && b->dims[0] == m,
                 "node {}: B must be a 1-D float tensor of {} elements, got {}", node.label(), m,
                 dims_to_string(b->dims));
}

class OnednnConv final : public Kernel {
 public:
  // The fused activation runs as a pass of its own over the output: oneDNN's sgemm-based
  // convolution applies eltwise post-ops more slowly than that pass (Relu included; measured on
  // ResNet-50 and MobileNetV2).
  explicit OnednnConv(const ir::Node& node) : node_(node), after_(node_activation(node)) {
    // Shapes known now: build the primitive at open, so the first run is not slower.
    auto x = declared_dims(node, 0), w = declared_dims(node, 1);
    bool has_bias = node.input(2) != nullptr;
    if (x && w && std::count(x->begin(), x->end(), -1) == 0 &&
        std::count(w->begin(), w->end(), -1) == 0) {
      DeviceTensor xt{DataType::Float32, *x, nullptr}, wt{DataType::Float32, *w, nullptr};
      prepared(xt, wt, has_bias);
    }
  }
  std::string_view name() const override { return "onednn.conv"; }

  void run(std::span<const DeviceTensor> in, KernelOutputs& out, Stream& stream) override {
    const DeviceTensor& x = in[0];
    const DeviceTensor& w = in[1];
    const DeviceTensor* b = in.size() > 2 && in[2].defined() ? &in[2] : nullptr;
    const Entry& e = prepared(x, w, b != nullptr);
    check_bias(node_, b, w.dims[0]);
    DeviceTensor y = out.allocate(0, DataType::Float32, e.out_dims);
    if (y.numel() == 0) return;
    KILN_CHECK_ARG(x.numel() > 0, "node {}: empty input {} for a non-empty output", node_.label(),
                   dims_to_string(x.dims));
    std::unordered_map<int, dnnl::memory> args = {
        {DNNL_ARG_SRC, wrap(e.pd.src_desc(), x.data)},
        {DNNL_ARG_WEIGHTS, wrap(e.pd.weights_desc(), w.data)},
        {DNNL_ARG_DST, wrap(e.pd.dst_desc(), y.data)}};
    if (b) args[DNNL_ARG_BIAS] = wrap(e.pd.bias_desc(), b->data);
    e.prim.execute(dnnl_stream(stream), args);
    after_.run(static_cast<float*>(y.data), y.numel(), stream);
  }

 private:
  struct Entry {
    std::vector<int64_t> x_dims, w_dims;
    bool bias = false;
    std::vector<int64_t> out_dims;
    dnnl::convolution_forward::primitive_desc pd;
    dnnl::convolution_forward prim;
  };

  const Entry& prepared(const DeviceTensor& x, const DeviceTensor& w, bool bias) {
    for (const Entry& e : cache_) {
      if (e.x_dims == x.dims && e.w_dims == w.dims && e.bias == bias) return e;
    }
    ConvGeometry cg = conv_geometry(node_, x, w);
    Entry e;
    e.x_dims = x.dims;
    e.w_dims = w.dims;
    e.bias = bias;
    e.out_dims = cg.out_dims;
    if (shape_numel(cg.out_dims) > 0 && shape_numel(x.dims) > 0) {
      const size_t nsp = cg.g.nsp;
      dnnl::memory::dims strides, dil, pad_l, pad_r;
      for (size_t d = 0; d < nsp; ++d) {
        strides.push_back(cg.g.strides[d]);
        dil.push_back(cg.g.dilations[d] - 1);  // oneDNN counts the gaps, ONNX the step
        pad_l.push_back(cg.g.pad_begin(d));
        pad_r.push_back(cg.g.pad_end(d));
      }
      // Grouped weights are the same bytes viewed as (G, M/G, C/G, k...).
      std::vector<int64_t> wd = w.dims;
      if (cg.group > 1) {
        wd[0] /= cg.group;
        wd.insert(wd.begin(), cg.group);
      }
      dnnl::memory::desc bias_md = bias ? plain_desc({w.dims[0]}) : dnnl::memory::desc();
      try {
        e.pd = dnnl::convolution_forward::primitive_desc(
            dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference,
                                            dnnl::algorithm::convolution_direct, plain_desc(x.dims),
                                            plain_desc(wd), bias_md, plain_desc(cg.out_dims),
                                            strides, dil, pad_l, pad_r),
            engine());
        e.prim = dnnl::convolution_forward(e.pd);
        note_implementation(node_, e.pd.impl_info_str());
      } catch (const dnnl::error& err) {
        fail(ErrorCode::Unsupported, "node {}: oneDNN has no convolution for X {} W {}: {}",
             node_.label(), dims_to_string(x.dims), dims_to_string(w.dims), err.what());
      }
    }
    cache_.push_back(std::move(e));
    return cache_.back();
  }

  const ir::Node& node_;
  ActivationPass after_;
  std::vector<Entry> cache_;  // one entry per input shape seen (a few at most)
};

// Depthwise: group == C == M, 2-D. W is (C, 1, kh, kw).
std::string check_depthwise(const ir::Node& node) {
  if (std::string why = check_conv(node); !why.empty()) return why;
  auto x = declared_dims(node, 0), w = declared_dims(node, 1);
  if (x->size() != 4) return "not a 2-D convolution";
  int64_t group = ops::AttrReader(node).attr_int("group", 1);
  if ((*x)[1] < 0 || (*w)[0] < 0 || (*w)[1] < 0) return "channel counts are not static";
  if (group == 1 || group != (*x)[1] || (*w)[0] != group || (*w)[1] != 1) return "not depthwise";
  return "";
}

class DepthwiseConv final : public Kernel {
 public:
  explicit DepthwiseConv(const ir::Node& node)
      : node_(node), act_(node_activation(node)), after_(act_) {}
  std::string_view name() const override { return "cpu.depthwise_conv"; }

  void run(std::span<const DeviceTensor> in, KernelOutputs& out, Stream& stream) override {
    const DeviceTensor& x = in[0];
    const DeviceTensor& w = in[1];
    const DeviceTensor* b = in.size() > 2 && in[2].defined() ? &in[2] : nullptr;
    if (!geo_ || geo_->x_dims != x.dims || geo_->w_dims != w.dims) {
      geo_ = Geo{x.dims, w.dims, conv_geometry(node_, x, w)};
    }
    const ConvGeometry& cg = geo_->cg;
    KILN_CHECK_ARG(cg.group == x.dims[1] && w.dims[1] == 1 && w.dims[0] == cg.group,
                   "node {}: W {} is not depthwise for X {}", node_.label(), dims_to_string(w.dims),
                   dims_to_string(x.dims));
    check_bias(node_, b, w.dims[0]);
    DeviceTensor y = out.allocate(0, DataType::Float32, cg.out_dims);
    if (y.numel() == 0) return;
    DepthwiseArgs a;
    a.h = x.dims[2];
    a.w = x.dims[3];
    a.oh = cg.out_dims[2];
    a.ow = cg.out_dims[3];
    a.kh = w.dims[2];
    a.kw = w.dims[3];
    a.sh = cg.g.strides[0];
    a.sw = cg.g.strides[1];
    a.dh = cg.g.dilations[0];
    a.dw = cg.g.dilations[1];
    a.pt = cg.g.pad_begin(0);
    a.pl = cg.g.pad_begin(1);
    const int64_t planes = x.dims[0] * x.dims[1], channels = x.dims[1];
    const auto* px = static_cast<const float*>(x.data);
    const auto* pw = static_cast<const float*>(w.data);
    const auto* pb = b ? static_cast<const float*>(b->data) : nullptr;
    auto* py = static_cast<float*>(y.data);
    const ops::FusedActivation act = act_;
    // Piecewise-linear activations while the plane is in cache; the others in one oneDNN pass.
    const bool piecewise = is_piecewise_linear(act.kind);
    const size_t scratch_floats = depthwise_scratch_floats(a);
#pragma omp parallel
    {
      std::vector<float> scratch(scratch_floats);
#pragma omp for schedule(static)
      for (int64_t p = 0; p < planes; ++p) {
        const int64_t c = p % channels;
        depthwise_plane(a, px + p * a.h * a.w, pw + c * a.kh * a.kw, pb ? pb[c] : 0.f,
                        py + p * a.oh * a.ow, scratch.data());
        if (piecewise) apply_activation(act, py + p * a.oh * a.ow, a.oh * a.ow);
      }
    }
    if (!piecewise) after_.run(py, y.numel(), stream);
  }

 private:
  struct Geo {
    std::vector<int64_t> x_dims, w_dims;
    ConvGeometry cg;
  };
  const ir::Node& node_;
  ops::FusedActivation act_;
  ActivationPass after_;
  std::optional<Geo> geo_;
};

std::unique_ptr<Kernel> create_conv(const ir::Node& node) {
  return std::make_unique<OnednnConv>(node);
}
std::unique_ptr<Kernel> create_depthwise(const ir::Node& node) {
  return std::make_unique<DepthwiseConv>(node);
}

}  // namespace

KILN_REGISTER_KERNEL({.backend = "cpu",
                      .op_type = "Conv",
                      .name = "cpu.depthwise_conv",
                      .priority = 1,
                      .check = check_depthwise,
                      .create = create_depthwise});
KILN_REGISTER_KERNEL({.backend = "cpu",
                      .op_type = "Conv",
                      .name = "onednn.conv",
                      .check = check_conv,
                      .create = create_conv});
KILN_REGISTER_KERNEL({.backend = "cpu",
                      .domain = "ai.kiln",
                      .op_type = "FusedConv",
                      .name = "cpu.depthwise_conv",
                      .priority = 1,
                      .check = check_depthwise,
                      .create = create_depthwise});
KILN_REGISTER_KERNEL({.backend = "cpu",
                      .domain = "ai.kiln",
                      .op_type = "FusedConv",
                      .name = "onednn.conv",
                      .check = check_conv,
                      .create = create_conv});

}  // namespace kiln::backends::cpu
