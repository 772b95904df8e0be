// Int8 convolution on the CPU: ai.onnx QLinearConv, ConvInteger (onnxruntime's dynamic INT8
// convolutions: the int32 result, no scales) and ai.kiln FusedQLinearConv (the static QDQ
// pattern that passes/fuse_quantized_ops folds) through oneDNN's u8/s8 x s8 -> s32 convolution
// (VNNI where the CPU has it), the requantization, bias and activation in its attributes
// (backends/cpu/qlinear_params.hpp); uint8 weights, or weights with zero points, folded into
// int8 where they fit (Int8Weight). oneDNN's fast int8 kernels read and write
// channels-last tensors only (on plain NCHW, and on nChw16c, it has only its reference kernel),
// so it exchanges channels-last 2-D tensors with its neighbours (BlockedLayouts::layout: the
// next int8 convolution, QuantizeLinear, a residual's float32 sum) and reorders only a row-major
// side inside (a graph input or output, a float32 kernel's channel-blocked tensor): on ResNet-50
// those reorders had cost as much as the products. The weights are packed once, into the layout
// the primitive picks (with the compensation oneDNN keeps for the source's zero point), by
// `kiln compile` for 2-D ones (an engine maps them) or when the kernel is prepared; the zero
// point holds in the padding too, as the reference's float zero padding does.
#include <algorithm>
#include <optional>

#include "backends/cpu/int8_window_sums.hpp"
#include "backends/cpu/onednn_common.hpp"
#include "backends/cpu/qlinear_epilogue.hpp"
#include "backends/cpu/qlinear_params.hpp"
#include "backends/cpu/work_threads.hpp"
#include "backends/kernel_table.hpp"
#include "backends/shape_cache.hpp"
#include "ops/conv_utils.hpp"
#include "ops/qlinear_slots.hpp"

namespace kiln::backends::cpu {
namespace {

using dnnl::memory;

// FusedQLinearConv's residual Z (passes/fuse_conv_residual): float32 for a float32 result, the
// result's 8-bit type for a quantized one (its scale and zero point in the sum post-op).
constexpr int kResidualSlot = ops::qlinear::kResidual;

bool is_channels_last(Layout layout) {
  return layout.kind == Layout::Kind::ChannelsLast;
}

bool is_conv_integer(const ir::Node& node) {
  return node.op_type() == "ConvInteger";
}

std::string check_qlinear_conv(const ir::Node& node) {
  if (is_conv_integer(node)) return check_conv_integer(node);
  if (std::string why = check_qlinear(node, 0); !why.empty()) return why;
  const size_t rank = node.input(0)->type().shape->rank();
  if (rank < 3 || rank > 5) return "not a 1-D, 2-D or 3-D convolution";
  if (constant_input(node, 3)->rank() != rank) return "x and w ranks differ";
  if (ops::AttrReader(node).attr_int("group", 1) < 1) return "group < 1";
  return "";
}

memory::format_tag channels_last_tag(size_t rank) {
  return rank == 3 ? memory::format_tag::nwc
                   : (rank == 4 ? memory::format_tag::nhwc : memory::format_tag::ndhwc);
}

class QLinearConv final : public Kernel {
 public:
  explicit QLinearConv(const ir::Node& node)
      : node_(node),
        weight_(node, is_conv_integer(node) ? size_t{1} : size_t{ops::qlinear::kW},
                is_conv_integer(node) ? size_t{3} : size_t{ops::qlinear::kWZero}, 0,
                /*correctable=*/true),
        w_(weight_.get()),
        group_(ops::AttrReader(node).attr_int("group", 1)),
        params_(is_conv_integer(node) ? conv_integer_params(node)
                                      : qlinear_params(node, w_.dim(0))) {
    // 2-D ones prepare in set_layouts, after the engine has handed over its packed weights
    // (use_packed_weight): the plain constant may not be filled then.
    if (w_.rank() != 4) prepare_declared();
  }
  void set_layouts(Layout, Layout) override { prepare_declared(); }

  // Compile time: the 2-D weights packed for the declared input shape (a dynamic batch taken as
  // 1), in oneDNN's int8 layout with its compensations, for the engine to store.
  std::vector<PackedWeight> pack_weights() override {
    if (w_.rank() != 4) return {};
    const Entry* e = cache_.find([](const Entry& c) { return static_cast<bool>(c.packed_w); });
    if (!e) e = prepare_declared(/*any_batch=*/true);
    if (!e || !e->packed_w) return {};
    return weight_to_store(weight_slot_, e->packed_w.mem, weight_.plain_suffix());
  }
  void use_packed_weight(PackedWeight packed) override {
    if (packed.input == weight_slot_) stored_w_ = std::move(packed);
  }
  std::string_view name() const override { return "onednn.qlinear_conv"; }
  // 2-D: the input, the output and the residual (which becomes the result's memory before the
  // product) channels-last, each independently of the input.
  BlockedLayouts blocked_layouts() const override {
    if (w_.rank() != 4) return {};
    return {.input0 = true,
            .output0 = true,
            .follows = params_.residual ? kResidualSlot : -1,
            .layout = Layout::channels_last()};
  }

  void run(std::span<const DeviceTensor> in, KernelOutputs& out, Stream& stream) override {
    const DeviceTensor& x = in[0];
    const Entry& e = prepared(x.dims);
    DeviceTensor y = out.allocate(0, params_.y_type, e.out_dims);
    if (y.numel() == 0) return;
    KILN_CHECK_ARG(x.numel() > 0, "node {}: empty input {} for a non-empty output", node_.label(),
                   dims_to_string(x.dims));
    const bool src_last = is_channels_last(x.layout), dst_last = is_channels_last(y.layout);
    dnnl::stream& s = dnnl_stream(stream);
    ThreadLimit limit(e.threads);
    // A channels-last side is the primitive's memory itself; a row-major one goes through the
    // entry's buffer.
    memory src = src_last ? wrap(e.pd.src_desc(), x.data) : e.src_buf;
    if (!src_last) {
      memory plain_x = wrap(plain_desc(x.dims, e.src_dt), x.data);
      e.src_reorder.execute(s, plain_x, src);
    }
    memory dst = dst_last ? wrap(e.dst_md, y.data) : e.dst_buf;
    std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, src},
                                            {DNNL_ARG_WEIGHTS, e.packed_w.mem},
                                            {DNNL_ARG_DST, dst},
                                            {DNNL_ARG_SCRATCHPAD, e.scratch}};
    if (!params_.bias.empty() && !widened()) {  // the widened path adds it itself
      args[DNNL_ARG_BIAS] = wrap(e.pd.bias_desc(), params_.bias.data());
    }
    if (params_.x_zero_at_run) {
      run_x_zero_ = runtime_x_zero(in);
      args[DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC] = memory(
          memory::desc({1}, memory::data_type::s32, memory::format_tag::x), engine(), &run_x_zero_);
    }
    if (widened()) {
      run_widened(e, s, in, src, dst, dst_last, y, args);
    } else {
      run_fused(e, s, in, src, dst, dst_last, y, args);
    }
    if (!dst_last) {
      memory plain_y = wrap(plain_desc(e.out_dims, e.dst_dt), y.data);
      e.dst_reorder.execute(s, dst, plain_y);
    }
  }

 private:
  struct Entry;

  // FusedQLinearConv's residual Z, checked against the result y.
  const DeviceTensor& residual_of(std::span<const DeviceTensor> in, const Entry& e,
                                  const DeviceTensor& y) const {
    const DeviceTensor& z = in[kResidualSlot];
    KILN_CHECK_ARG(z.dims == e.out_dims && z.dtype == params_.residual_type,
                   "node {}: the residual is {} {}, the result {} {}", node_.label(),
                   dtype_name(z.dtype), dims_to_string(z.dims), dtype_name(params_.y_type),
                   dims_to_string(e.out_dims));
    KILN_CHECK(z.layout == y.layout, ErrorCode::Internal,
               "node {}: the residual in layout {}, the result in {}", node_.label(),
               z.layout.to_string(), y.layout.to_string());
    return z;
  }

  // The product with its requantization, bias, residual and activation in oneDNN's attributes;
  // ConvInteger's int32 result corrected after it where its weight's zero points leave int8.
  void run_fused(const Entry& e, dnnl::stream& s, std::span<const DeviceTensor> in, memory& src,
                 memory& dst, bool dst_last, const DeviceTensor& y,
                 std::unordered_map<int, memory>& args) const {
    if (params_.residual) {
      // The sum post-op adds the product to what dst holds: the residual first (nothing to
      // copy when the result took its space).
      const DeviceTensor& z = residual_of(in, e, y);
      if (!dst_last) {
        memory plain_z = wrap(plain_desc(e.out_dims, e.dst_dt), z.data);
        e.residual_reorder.execute(s, plain_z, dst);
      } else if (z.data != y.data) {
        memory last_z = wrap(e.dst_md, z.data);
        e.residual_copy.execute(s, last_z, dst);
      }
    }
    e.prim.execute(s, args);
    if (!weight_.correction().empty()) correct(e, s, src, dst);
  }

  // A QLinear form whose weight's zero points leave int8: the product into int32 (e.acc), the
  // window sums, then finish_widened_product into dst (which holds the residual first when the
  // result is row-major).
  void run_widened(const Entry& e, dnnl::stream& s, std::span<const DeviceTensor> in, memory& src,
                   memory& dst, bool dst_last, const DeviceTensor& y,
                   std::unordered_map<int, memory>& args) const {
    const void* residual = nullptr;
    if (params_.residual) {
      const DeviceTensor& z = residual_of(in, e, y);
      if (dst_last) {
        residual = z.data;
      } else {
        memory plain_z = wrap(plain_desc(e.out_dims, e.dst_dt), z.data);
        e.residual_reorder.execute(s, plain_z, dst);
        residual = dst.get_data_handle();
      }
    }
    args[DNNL_ARG_DST] = e.acc;
    e.prim.execute(s, args);
    window_sums(e, s, src);
    const int64_t m = e.out_dims[1];
    finish_widened_product(params_, {.acc = static_cast<const int32_t*>(e.acc.get_data_handle()),
                                     .rows = shape_numel(e.out_dims) / m,
                                     .channels = m,
                                     .sums = e.sums.data(),
                                     .groups = group_,
                                     .d = weight_.correction(),
                                     .residual = residual,
                                     .y = dst.get_data_handle(),
                                     .threads = e.threads});
  }

  // The path for the node: a QLinear form (not ConvInteger, whose int32 result is corrected in
  // place) whose weight's zero points leave int8.
  bool widened() const { return !weight_.correction().empty() && !is_conv_integer(node_); }

  struct Entry {
    std::vector<int64_t> x_dims, out_dims;
    memory::data_type src_dt, dst_dt;
    memory::desc dst_md;  // the result's channels-last form
    int threads = 1;
    dnnl::convolution_forward::primitive_desc pd;
    dnnl::convolution_forward prim;
    dnnl::reorder src_reorder, dst_reorder, residual_reorder, residual_copy;
    // oneDNN's execute takes non-const memories; the kernel's runs are serialized.
    mutable memory src_buf, dst_buf, scratch;
    PackedConstant packed_w;
    // The window sums for the correction (int8_window_sums).
    WindowSumGeometry sum_geometry;
    mutable std::vector<int32_t> sums, pixel_sums;  // pixel_sums: int8_window_sums' scratch
    mutable memory acc;                             // the int32 product of the widened path
  };

  // A ConvInteger weight whose zero points leave int8 (Int8Weight::correction): the product ran
  // with w - c; take d[m] times the window sums of x - x_zero from each output channel m.
  // int32, exact.
  void correct(const Entry& e, dnnl::stream& s, memory& src, memory& dst) const;
  // The window sums of x - x_zero into e.sums (one a group and output pixel).
  void window_sums(const Entry& e, dnnl::stream& s, memory& src) const;

  const Entry& prepared(const std::vector<int64_t>& x_dims) {
    if (const Entry* hit = cache_.find([&](const Entry& e) { return e.x_dims == x_dims; })) {
      return *hit;
    }
    ops::AttrReader attrs(node_);
    const std::vector<int64_t>& wd = w_.dims();
    attrs.check(x_dims.size() == wd.size(), "X {} and W {} must have the same rank",
                dims_to_string(x_dims), dims_to_string(wd));
    const int64_t c = x_dims[1], m = wd[0];
    attrs.check(c % group_ == 0 && m % group_ == 0 && wd[1] * group_ == c,
                "W {} does not match {} input channels in {} groups", dims_to_string(wd), c,
                group_);
    const std::vector<int64_t> kernel(wd.begin() + 2, wd.end());
    if (attrs.has_attr("kernel_shape")) {
      attrs.check(attrs.attr_ints("kernel_shape") == kernel, "kernel_shape does not match W {}",
                  dims_to_string(wd));
    }
    const ops::window::WindowGeometry g = ops::window::forward_geometry(
        attrs, std::vector<int64_t>(x_dims.begin() + 2, x_dims.end()), kernel, false);
    Entry e;
    e.x_dims = x_dims;
    e.out_dims = {x_dims[0], m};
    e.out_dims.insert(e.out_dims.end(), g.out.begin(), g.out.end());
    check_output_fits(node_, e.out_dims);
    e.src_dt = qlinear_dnnl_type(params_.x_type);
    e.dst_dt = qlinear_dnnl_type(params_.y_type);
    if (shape_numel(e.out_dims) == 0 || shape_numel(x_dims) == 0) {
      return cache_.add(std::move(e));
    }
    memory::dims strides, dil, pad_l, pad_r;
    for (size_t d = 0; d < g.nsp; ++d) {
      strides.push_back(g.strides[d]);
      dil.push_back(g.dilations[d] - 1);  // oneDNN counts the gaps, ONNX the step
      pad_l.push_back(g.pad_begin(d));
      pad_r.push_back(g.pad_end(d));
    }
    // Grouped weights are the same bytes viewed as (G, M/G, C/G, k...).
    std::vector<int64_t> gw = wd;
    if (group_ > 1) {
      gw[0] /= group_;
      gw.insert(gw.begin(), group_);
    }
    const memory::format_tag tag = channels_last_tag(x_dims.size());
    const memory::desc src_md(x_dims, e.src_dt, tag), dst_md(e.out_dims, e.dst_dt, tag);
    e.dst_md = dst_md;
    // The widened path's product: int32, its bias and the rest in finish_widened_product.
    const memory::desc bias_md = params_.bias.empty() || widened()
                                     ? memory::desc()
                                     : plain_desc({m}, memory::data_type::f32);
    const memory::desc product_md =
        widened() ? memory::desc(e.out_dims, memory::data_type::s32, tag) : dst_md;
    const double outputs = static_cast<double>(shape_numel(e.out_dims));
    const double w_numel = static_cast<double>(w_.numel());
    e.threads = threads_for_work(2.0 * outputs * w_numel / static_cast<double>(m),
                                 static_cast<double>(shape_numel(x_dims)) + w_numel + outputs);
    ThreadLimit limit(e.threads);
    try {
      e.pd = dnnl::convolution_forward::primitive_desc(
          dnnl::convolution_forward::desc(
              dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, src_md,
              memory::desc(gw, memory::data_type::s8, memory::format_tag::any), bias_md, product_md,
              strides, dil, pad_l, pad_r),
          widened() ? widened_product_params(params_).attr(m, 1 << 1) : params_.attr(m, 1 << 1),
          engine());
      e.prim = dnnl::convolution_forward(e.pd);
      e.scratch = memory(e.pd.scratchpad_desc(), engine());
      note_implementation(node_, e.pd.impl_info_str());
      e.src_buf = memory(e.pd.src_desc(), engine());
      e.dst_buf = memory(dst_md, engine());
      if (widened()) e.acc = memory(product_md, engine());
      e.src_reorder =
          dnnl::reorder(memory(plain_desc(x_dims, e.src_dt), engine(), nullptr), e.src_buf);
      e.dst_reorder =
          dnnl::reorder(e.dst_buf, memory(plain_desc(e.out_dims, e.dst_dt), engine(), nullptr));
      // The residual into dst before the product (the sum post-op adds to what dst holds).
      if (params_.residual) {
        e.residual_reorder =
            dnnl::reorder(memory(plain_desc(e.out_dims, e.dst_dt), engine(), nullptr), e.dst_buf);
        e.residual_copy =
            dnnl::reorder(memory(dst_md, engine(), nullptr), memory(dst_md, engine(), nullptr));
      }
      // The weights packed once per layout (with the source zero point's compensation where
      // oneDNN keeps one in them): an entry of another input shape whose primitive took the
      // same layout lends its bytes.
      e.packed_w = int8_weights_in(
          cache_, [](const Entry& c) -> const PackedConstant& { return c.packed_w; }, stored_w_,
          weight_, gw, e.pd.weights_desc(), node_);
      if (!weight_.correction().empty()) {
        // The window sums' geometry, spatial dims right-aligned into (D, H, W).
        WindowSumGeometry& w = e.sum_geometry;
        w.batch = x_dims[0];
        w.channels = c;
        w.groups = group_;
        const size_t skip = 3 - g.nsp;
        for (size_t d = 0; d < g.nsp; ++d) {
          w.in[skip + d] = x_dims[2 + d];
          w.out[skip + d] = e.out_dims[2 + d];
          w.kernel[skip + d] = kernel[d];
          w.stride[skip + d] = g.strides[d];
          w.dilation[skip + d] = g.dilations[d];
          w.pad[skip + d] = g.pad_begin(d);
        }
        e.sums.resize(static_cast<size_t>(shape_numel(e.out_dims) / m * group_));
      }
    } catch (const dnnl::error& err) {
      fail(ErrorCode::Unsupported, "node {}: oneDNN has no int8 convolution for X {} W {}: {}",
           node_.label(), dims_to_string(x_dims), dims_to_string(wd), err.what());
    }
    return cache_.add(std::move(e));
  }

  // The entry of the declared input shape when it is static; with `any_batch`, a dynamic batch
  // taken as 1 (the weights' layout does not depend on it).
  const Entry* prepare_declared(bool any_batch = false) {
    std::optional<std::vector<int64_t>> x = declared_dims(node_, 0);
    if (!x || x->empty()) return nullptr;
    if (any_batch && (*x)[0] == -1) (*x)[0] = 1;
    if (std::count(x->begin(), x->end(), -1) != 0) return nullptr;
    return &prepared(*x);
  }

  const ir::Node& node_;
  // The node input the weights are (ConvInteger's 1, the QLinear forms' 3).
  const size_t weight_slot_ = is_conv_integer(node_) ? size_t{1} : size_t{ops::qlinear::kW};
  std::optional<PackedWeight> stored_w_;  // the engine's packed w, when it stores one
  Int8Weight weight_;  // the constant w, with its zero points folded in when it has any
  const Tensor& w_;
  int64_t group_;
  QLinearParams params_;
  // This run's input zero point (x_zero_at_run), where the primitive reads it.
  int32_t run_x_zero_ = 0;
  ShapeCache<Entry> cache_;  // an entry per input shape seen (bounded)
};

void QLinearConv::window_sums(const Entry& e, dnnl::stream& s, memory& src) const {
  s.wait();  // src may be the reorder's buffer
  const int32_t zero = params_.x_zero_at_run ? run_x_zero_ : params_.x_zero;
  int8_window_sums(e.sum_geometry, src.get_data_handle(), params_.x_type == DataType::UInt8, zero,
                   e.sums.data(), e.pixel_sums, e.threads);
}

void QLinearConv::correct(const Entry& e, dnnl::stream& s, memory& src, memory& dst) const {
  window_sums(e, s, src);
  // Both channels-last: pixel q's M results and its G sums are contiguous.
  const int64_t m = e.out_dims[1], per_group = m / group_;
  const int64_t pixels = shape_numel(e.out_dims) / m;
  auto* y = static_cast<int32_t*>(dst.get_data_handle());
  const int32_t* sums = e.sums.data();
  const int32_t* d = weight_.correction().data();
#pragma omp parallel for schedule(static) num_threads(e.threads) if (e.threads > 1)
  for (int64_t q = 0; q < pixels; ++q) {
    int32_t* row = y + q * m;
    const int32_t* sum = sums + q * group_;
    for (int64_t c = 0; c < m; ++c) row[c] -= d[c] * sum[c / per_group];
  }
}

std::unique_ptr<Kernel> create(const ir::Node& node) {
  return std::make_unique<QLinearConv>(node);
}

}  // namespace

KILN_REGISTER_KERNEL({.backend = "cpu",
                      .op_type = "QLinearConv",
                      .name = "onednn.qlinear_conv",
                      .check = check_qlinear_conv,
                      .create = create});
KILN_REGISTER_KERNEL({.backend = "cpu",
                      .op_type = "ConvInteger",
                      .name = "onednn.qlinear_conv",
                      .check = check_qlinear_conv,
                      .create = create});
KILN_REGISTER_KERNEL({.backend = "cpu",
                      .domain = "ai.kiln",
                      .op_type = "FusedQLinearConv",
                      .name = "onednn.qlinear_conv",
                      // The residual's space: it is read into the result before the product.
                      .in_place_inputs = {kResidualSlot},
                      .check = check_qlinear_conv,
                      .create = create});

}  // namespace kiln::backends::cpu
