// ai.kiln FusedConvDepthwise (passes/fuse_conv_depthwise) on the CPU: one oneDNN convolution of
// the 1x1 weights with a dw post-op computing the depthwise 3x3 convolution on the rows of the
// 1x1 result while they are in cache (the expanded tensor never goes to memory). Blocked
// (nChw16c) in and out like onednn.conv; weights packed once, the 1x1 ones into the primitive's
// layout and the depthwise ones into the layout the post-op reads. Where oneDNN refuses the fused
// primitive, the two convolutions run in turn through a blocked buffer of the kernel's own.
#include <algorithm>
#include <optional>
#include <string_view>

#include "backends/cpu/cpu_backend.hpp"
#include "backends/cpu/onednn_common.hpp"
#include "backends/cpu/work_threads.hpp"
#include "backends/kernel_table.hpp"
#include "core/log.hpp"
#include "ops/fused_conv_depthwise.hpp"

namespace kiln::backends::cpu {
namespace {

using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;
constexpr int kDwWeights = DNNL_ARG_ATTR_POST_OP_DW | DNNL_ARG_WEIGHTS;
constexpr int kDwBias = DNNL_ARG_ATTR_POST_OP_DW | DNNL_ARG_BIAS;

int64_t dw_stride(const ir::Node& node) {
  const std::vector<int64_t> s = ops::AttrReader(node).attr_ints("dw_strides", {1, 1});
  return s.size() == 2 && s[0] == s[1] ? s[0] : 0;
}

std::string check_conv_dw(const ir::Node& node) {
  if (node.inputs().size() != 5) return "not 5 inputs";
  if (std::string why = check_f32_input(node, 0, 4, 4); !why.empty()) return why;
  if (std::string why = check_f32_outputs(node); !why.empty()) return why;
  for (size_t i = 1; i < 5; ++i) {
    if (!constant_input(node, i)) return "weights or biases not constant";
    if (constant_input(node, i)->dtype() != DataType::Float32) return "not float32";
  }
  const std::vector<int64_t>& w1 = constant_input(node, 1)->dims();
  const std::vector<int64_t>& w2 = constant_input(node, 3)->dims();
  if (w1.size() != 4 || w1[2] != 1 || w1[3] != 1) return "W1 is not 1x1";
  if (w2 != std::vector<int64_t>{w1[0], 1, 3, 3})
    return "W2 is not depthwise 3x3 over W1's outputs";
  if (constant_input(node, 2)->numel() != w1[0] || constant_input(node, 4)->numel() != w1[0]) {
    return "biases do not match the channels";
  }
  const int64_t s = dw_stride(node);
  if (s != 1 && s != 2) return "depthwise stride not 1 or 2";
  try {
    dnnl::post_ops probe;
    if (!append_activation(probe, node_activation(node)) ||
        !append_activation(probe, ops::depthwise_stage_activation(node))) {
      return "activation has no oneDNN post-op";
    }
  } catch (const Error& e) {
    return e.message();
  }
  return "";
}

class OnednnConvDw final : public Kernel {
 public:
  explicit OnednnConvDw(const ir::Node& node)
      : node_(node),
        act_(node_activation(node)),
        dw_act_(ops::depthwise_stage_activation(node)),
        stride_(dw_stride(node)) {}
  std::string_view name() const override { return "onednn.conv_dw"; }

  BlockedLayouts blocked_layouts() const override { return {.input0 = true, .output0 = true}; }
  void set_layouts(Layout input0, Layout output0) override {
    in_block_ = input0.block;
    out_block_ = output0.block;
    entry_.reset();
  }

  void run(std::span<const DeviceTensor> in, KernelOutputs& out, Stream& stream) override {
    const DeviceTensor& x = in[0];
    KILN_CHECK(x.layout.block == in_block_, ErrorCode::Internal,
               "node {}: input in layout block {}, prepared for {}", node_.label(), x.layout.block,
               in_block_);
    for (size_t i = 1; i < 5; ++i) {
      KILN_CHECK(in[i].data == constant_input(node_, i)->raw_data(), ErrorCode::Internal,
                 "node {}: input {} is not the constant it was prepared for", node_.label(), i);
    }
    if (!entry_ || entry_->x_dims != x.dims) entry_ = prepare(x);
    const Entry& e = *entry_;
    DeviceTensor y = out.allocate(0, DataType::Float32, e.y_dims);
    KILN_CHECK(y.layout.block == out_block_, ErrorCode::Internal,
               "node {}: output in layout block {}, prepared for {}", node_.label(), y.layout.block,
               out_block_);
    if (y.numel() == 0 || x.numel() == 0) return;
    ThreadLimit limit(e.threads);
    dnnl::stream& s = dnnl_stream(stream);
    dnnl::memory src = wrap(tensor_desc(x), x.data), dst = wrap(tensor_desc(y), y.data);
    dnnl::memory b1 = wrap(plain_desc({e.m}), in[2].data), b2 = wrap(plain_desc({e.m}), in[4].data);
    if (e.fused) {
      e.prim.execute(s, {{DNNL_ARG_SRC, src},
                         {DNNL_ARG_WEIGHTS, e.w1.mem},
                         {DNNL_ARG_BIAS, b1},
                         {DNNL_ARG_DST, dst},
                         {kDwWeights, e.w2.mem},
                         {kDwBias, b2},
                         {DNNL_ARG_SCRATCHPAD, e.scratch}});
      return;
    }
    e.prim.execute(s, {{DNNL_ARG_SRC, src},
                       {DNNL_ARG_WEIGHTS, e.w1.mem},
                       {DNNL_ARG_BIAS, b1},
                       {DNNL_ARG_DST, e.mid},
                       {DNNL_ARG_SCRATCHPAD, e.scratch}});
    e.prim2.execute(s, {{DNNL_ARG_SRC, e.mid},
                        {DNNL_ARG_WEIGHTS, e.w2.mem},
                        {DNNL_ARG_BIAS, b2},
                        {DNNL_ARG_DST, e.out_reorder ? e.out : dst},
                        {DNNL_ARG_SCRATCHPAD, e.scratch2}});
    if (e.out_reorder) e.out_reorder->execute(s, e.out, dst);
  }

 private:
  struct Entry {
    std::vector<int64_t> x_dims, y_dims;
    int64_t m = 0;
    int threads = 1;
    bool fused = false;
    dnnl::convolution_forward prim, prim2;  // prim2, mid, scratch2: the unfused fallback
    PackedConstant w1, w2;
    mutable dnnl::memory scratch, scratch2, mid;  // oneDNN's execute takes non-const memories
    mutable dnnl::memory out;                     // a blocked result reordered to row-major
    std::optional<dnnl::reorder> out_reorder;
  };

  static dnnl::convolution_forward::primitive_desc make_pd(const dnnl::memory::desc& src,
                                                           const dnnl::memory::desc& w,
                                                           const dnnl::memory::desc& dst,
                                                           int64_t stride, int64_t pad,
                                                           const dnnl::post_ops& ops) {
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    attr.set_post_ops(ops);
    const dnnl::memory::desc bias({dst.dims()[1]}, dt::f32, tag::a);
    return dnnl::convolution_forward::primitive_desc(
        dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference,
                                        dnnl::algorithm::convolution_direct, src, w, bias, dst,
                                        {stride, stride}, {pad, pad}, {pad, pad}),
        attr, engine());
  }

  // A blocked-or-plain descriptor of `dims` in the layout block the executor chose.
  static dnnl::memory::desc layout_desc(const std::vector<int64_t>& dims, int block) {
    return block ? blocked_desc(dims, block) : plain_desc(dims);
  }

  std::unique_ptr<Entry> prepare(const DeviceTensor& x) {
    const Tensor& w1c = *constant_input(node_, 1);
    const Tensor& w2c = *constant_input(node_, 3);
    auto e = std::make_unique<Entry>();
    e->x_dims = x.dims;
    e->m = w1c.dims()[0];
    KILN_CHECK_ARG(x.dims.size() == 4 && x.dims[1] == w1c.dims()[1],
                   "node {}: X {} does not match W1 {}", node_.label(), dims_to_string(x.dims),
                   dims_to_string(w1c.dims()));
    const int64_t n = x.dims[0], h = x.dims[2], w = x.dims[3];
    const int64_t oh = (h - 1) / stride_ + 1, ow = (w - 1) / stride_ + 1;
    const std::vector<int64_t> mid_dims = {n, e->m, h, w};
    e->y_dims = {n, e->m, oh, ow};
    check_output_fits(node_, mid_dims);
    const double outputs = static_cast<double>(shape_numel(e->y_dims));
    const double mids = static_cast<double>(shape_numel(mid_dims));
    e->threads = threads_for_work(
        2.0 * mids * static_cast<double>(x.dims[1]) + 18.0 * outputs,
        4.0 * (static_cast<double>(shape_numel(x.dims) + w1c.numel() + w2c.numel()) + outputs));
    if (shape_numel(e->y_dims) == 0 || shape_numel(x.dims) == 0) return e;
    ThreadLimit limit(e->threads);

    const dnnl::memory::desc src = layout_desc(x.dims, in_block_);
    const dnnl::memory::desc dst = layout_desc(e->y_dims, out_block_);
    const dnnl::memory::desc w1_any(w1c.dims(), dt::f32, tag::any);
    const dnnl::memory plain_w1 = wrap(plain_desc(w1c.dims()), w1c.raw_data());
    // Depthwise weights as oneDNN's grouped form (G, 1, 1, 3, 3): the same bytes.
    const dnnl::memory plain_w2 =
        wrap(dnnl::memory::desc({e->m, 1, 1, 3, 3}, dt::f32, tag::goihw), w2c.raw_data());
    dnnl::post_ops ops;
    append_activation(ops, act_);
    ops.append_dw(dt::f32, dt::f32, dt::f32, 3, stride_, 1, 0, {});
    append_activation(ops, dw_act_);
    try {
      // The primitive is described as the 1x1 convolution (its dst dims are the 1x1 result's);
      // its dst_desc() is then the depthwise result, which must be the output's layout.
      const auto pd = make_pd(src, w1_any, layout_desc(mid_dims, out_block_), 1, 0, ops);
      if (pd.dst_desc() != dst) throw dnnl::error(dnnl_unimplemented, "another dst layout");
      // oneDNN's plain reference kernel (not ref_fused_convolution, which chains jit kernels).
      if (std::string_view(pd.impl_info_str()).starts_with("ref:")) {
        throw dnnl::error(dnnl_unimplemented, "only the reference kernel");
      }
      dnnl::memory::desc w2_md = pd.query_md(dnnl::query::exec_arg_md, kDwWeights);
      if (w2_md.is_zero()) {
        w2_md = dnnl::memory::desc({e->m, 1, 1, 3, 3}, dt::f32,
                                   cpu_channel_block() == 16 ? tag::Goihw16g : tag::Goihw8g);
      }
      e->prim = dnnl::convolution_forward(pd);
      e->scratch = dnnl::memory(pd.scratchpad_desc(), engine());
      e->w1 = pack_constant(plain_w1, pd.weights_desc());
      e->w2 = pack_constant(plain_w2, w2_md);
      e->fused = true;
      note_implementation(node_, pd.impl_info_str());
      return e;
    } catch (const dnnl::error& err) {
      log_info("node {}: oneDNN has no fused 1x1 + depthwise convolution here ({}): two instead",
               node_.label(), err.what());
    }
    // The fallback: the 1x1 convolution into a blocked buffer, then the depthwise one, blocked
    // too (oneDNN's depthwise kernels want blocked sides: a row-major result is a reorder).
    const int b = std::max({in_block_, out_block_, cpu_channel_block()});
    const dnnl::memory::desc mid = blocked_desc(mid_dims, b);
    dnnl::post_ops ops1, ops2;
    append_activation(ops1, act_);
    append_activation(ops2, dw_act_);
    const auto pd1 = make_pd(src, w1_any, mid, 1, 0, ops1);
    const dnnl::memory::desc dw_dst = out_block_ ? dst : blocked_desc(e->y_dims, b);
    const auto pd2 = make_pd(mid, dnnl::memory::desc({e->m, 1, 1, 3, 3}, dt::f32, tag::any), dw_dst,
                             stride_, 1, ops2);
    if (dw_dst != dst) {
      e->out = dnnl::memory(dw_dst, engine());
      e->out_reorder = dnnl::reorder(e->out, dnnl::memory(dst, engine(), nullptr));
    }
    e->prim = dnnl::convolution_forward(pd1);
    e->prim2 = dnnl::convolution_forward(pd2);
    e->scratch = dnnl::memory(pd1.scratchpad_desc(), engine());
    e->scratch2 = dnnl::memory(pd2.scratchpad_desc(), engine());
    e->mid = dnnl::memory(mid, engine());
    e->w1 = pack_constant(plain_w1, pd1.weights_desc());
    e->w2 = pack_constant(plain_w2, pd2.weights_desc());
    return e;
  }

  const ir::Node& node_;
  ops::FusedActivation act_, dw_act_;
  int64_t stride_;
  int in_block_ = 0, out_block_ = 0;
  std::unique_ptr<Entry> entry_;  // for the last input shape
};

std::unique_ptr<Kernel> create_conv_dw(const ir::Node& node) {
  return std::make_unique<OnednnConvDw>(node);
}

}  // namespace

KILN_REGISTER_KERNEL({.backend = "cpu",
                      .domain = "ai.kiln",
                      .op_type = "FusedConvDepthwise",
                      .name = "onednn.conv_dw",
                      .check = check_conv_dw,
                      .create = create_conv_dw});

}  // namespace kiln::backends::cpu
