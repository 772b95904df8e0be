// Pooling on the CPU: MaxPool and AveragePool through oneDNN's pooling (plain NCHW), global
// average and max pooling as Kiln's own row reductions. MaxPool also takes uint8 / int8 (a
// static INT8 network's first pooling once its QuantizeLinear moved before it: the maximum
// commutes with quantization).
#include <algorithm>
#include <cmath>
#include <limits>

#include "backends/cpu/onednn_common.hpp"
#include "backends/cpu/qlinear_params.hpp"
#include "backends/cpu/vector_math.hpp"
#include "backends/cpu/work_threads.hpp"
#include "backends/kernel_table.hpp"
#include "backends/shape_cache.hpp"
#include "core/half_convert.hpp"
#include "ops/conv_utils.hpp"

namespace kiln::backends::cpu {
namespace {

// The element type a pooling node computes in: float32, bfloat16 (a `--bf16` engine's: on the
// widening twin a ResNet-50 stem's MaxPool took 483 us against float32's 285), or for MaxPool
// uint8 / int8.
DataType pool_type(const ir::Node& node) {
  const ir::Value* x = node.input(0);
  if (!x || !x->type().is_tensor()) return DataType::Float32;
  const DataType t = x->type().dtype;
  if (node.op_type() == "MaxPool" && (t == DataType::UInt8 || t == DataType::Int8)) return t;
  return t == DataType::BFloat16 ? t : DataType::Float32;
}

bool is_8bit(DataType t) {
  return t == DataType::UInt8 || t == DataType::Int8;
}

std::string check_pool(const ir::Node& node) {
  const DataType type = pool_type(node);
  if (std::string why = check_float_input(node, 0, type, 3, 5); !why.empty()) return why;
  if (std::string why = check_float_outputs(node, type); !why.empty()) return why;
  if (node.outputs().size() > 1 && node.output(1)) return "the Indices output is requested";
  ops::AttrReader attrs(node);
  if (!attrs.has_attr("kernel_shape")) return "no kernel_shape";
  if (node.op_type() == "AveragePool") {
    // ONNX's divisor for windows that ceil_mode adds past the padding is not oneDNN's.
    if (attrs.attr_int("ceil_mode", 0) != 0) return "ceil_mode with average pooling";
    for (int64_t d : attrs.attr_ints("dilations", {})) {
      if (d != 1) return "dilated average pooling";
    }
  }
  return "";
}

class OnednnPool final : public Kernel {
 public:
  explicit OnednnPool(const ir::Node& node) : node_(node) {
    ops::AttrReader attrs(node);
    max_ = node.op_type() == "MaxPool";
    type_ = pool_type(node);
    ceil_ = attrs.attr_int("ceil_mode", 0) != 0;
    include_pad_ = attrs.attr_int("count_include_pad", 0) != 0;
    kernel_ = attrs.attr_ints("kernel_shape");
    if (auto x = declared_dims(node, 0); x && std::count(x->begin(), x->end(), -1) == 0) {
      prepared(*x);
    }
  }
  std::string_view name() const override { return "onednn.pool"; }
  // 2-D pooling reads and writes one layout: plain, blocked (the float32 convolutions'), or
  // channels-last (an int8 convolution's float32 result: a static QDQ network's first
  // MaxPool); oneDNN's jit pooling takes each.
  BlockedLayouts blocked_layouts() const override {
    return {.uniform = kernel_.size() == 2, .any_layout = true};
  }
  void set_layouts(Layout input0, Layout output0) override {
    KILN_CHECK(input0 == output0, ErrorCode::Internal, "node {}: pooling from layout {} to {}",
               node_.label(), input0.to_string(), output0.to_string());
    if (input0 == layout_ && !cache_.empty()) return;
    layout_ = input0;
    cache_.clear();
    if (auto x = declared_dims(node_, 0); x && std::count(x->begin(), x->end(), -1) == 0) {
      prepared(*x);
    }
  }

  void run(std::span<const DeviceTensor> in, KernelOutputs& out, Stream& stream) override {
    const DeviceTensor& x = in[0];
    KILN_CHECK(x.layout == layout_, ErrorCode::Internal,
               "node {}: input in layout {}, prepared for {}", node_.label(), x.layout.to_string(),
               layout_.to_string());
    const Entry& e = prepared(x.dims);
    DeviceTensor y = out.allocate(0, type_, e.out_dims);
    if (y.numel() == 0) return;
    ThreadLimit limit(e.threads);
    const dnnl::stream s = dnnl_stream(stream);
    if (e.nhwc_x) {
      // Through channels-last copies (via_channels_last).
      dnnl::memory plain_x = wrap(desc_in(x.dims), x.data), plain_y = wrap(desc_in(y.dims), y.data);
      e.to_nhwc.execute(s, plain_x, e.nhwc_x);
      e.prim.execute(s, {{DNNL_ARG_SRC, e.nhwc_x}, {DNNL_ARG_DST, e.nhwc_y}});
      e.from_nhwc.execute(s, e.nhwc_y, plain_y);
      return;
    }
    e.prim.execute(s, {{DNNL_ARG_SRC, wrap(e.pd.src_desc(), x.data)},
                       {DNNL_ARG_DST, wrap(e.pd.dst_desc(), y.data)}});
  }

 private:
  struct Entry {
    std::vector<int64_t> x_dims, out_dims;
    int threads = 1;  // threads_for_work of the pooling, held when creating and running it
    dnnl::pooling_v2_forward::primitive_desc pd;
    dnnl::pooling_v2_forward prim;
    // A plain 8-bit tensor pooled in channels-last copies (via_channels_last); null otherwise.
    mutable dnnl::memory nhwc_x, nhwc_y;
    dnnl::reorder to_nhwc, from_nhwc;
  };

  // oneDNN 2.6 pools 8-bit tensors fast only channels-last: on plain NCHW it takes its
  // reference code (180 ns an output: a 2 x 8 x 9 x 9 MaxPool took 234 us, where a QDQ
  // Inception branch's pooling reads a row-major QuantizeLinear). Such a pooling runs on
  // channels-last copies instead.
  bool via_channels_last(const std::vector<int64_t>& x) const {
    return is_8bit(type_) && layout_.is_row_major() && x.size() == 4;
  }

  const Entry& prepared(const std::vector<int64_t>& x) {
    if (const Entry* hit = cache_.find([&](const Entry& e) { return e.x_dims == x; })) {
      return *hit;
    }
    ops::AttrReader attrs(node_);
    attrs.check(x.size() == kernel_.size() + 2, "kernel_shape {} does not match X {}",
                dims_to_string(kernel_), dims_to_string(x));
    ops::window::WindowGeometry g = ops::window::forward_geometry(
        attrs, std::vector<int64_t>(x.begin() + 2, x.end()), kernel_, ceil_, max_);
    Entry e;
    e.x_dims = x;
    e.out_dims = {x[0], x[1]};
    e.out_dims.insert(e.out_dims.end(), g.out.begin(), g.out.end());
    check_output_fits(node_, e.out_dims);
    if (shape_numel(e.out_dims) > 0) {
      dnnl::memory::dims strides, kernel, dil, pad_l, pad_r;
      for (size_t d = 0; d < g.nsp; ++d) {
        strides.push_back(g.strides[d]);
        kernel.push_back(g.kernel[d]);
        dil.push_back(g.dilations[d] - 1);
        pad_l.push_back(g.pad_begin(d));
        // ceil_mode's extra window reaches past the end padding: pad to where it ends.
        pad_r.push_back(std::max(
            g.pad_end(d),
            (g.out[d] - 1) * g.strides[d] + g.effective_kernel(d) - g.in[d] - g.pad_begin(d)));
      }
      const double outputs = static_cast<double>(shape_numel(e.out_dims));
      const double bytes = static_cast<double>(dtype_size(type_));
      e.threads = threads_for_work(outputs * static_cast<double>(shape_numel(g.kernel)),
                                   bytes * (static_cast<double>(shape_numel(x)) + outputs));
      ThreadLimit limit(e.threads);
      auto alg = max_ ? dnnl::algorithm::pooling_max
                      : (include_pad_ ? dnnl::algorithm::pooling_avg_include_padding
                                      : dnnl::algorithm::pooling_avg_exclude_padding);
      const bool nhwc = via_channels_last(x);
      auto md = [&](const std::vector<int64_t>& dims) {
        return nhwc ? dnnl::memory::desc(dims, qlinear_dnnl_type(type_),
                                         dnnl::memory::format_tag::nhwc)
                    : desc_in(dims);
      };
      try {
        e.pd = dnnl::pooling_v2_forward::primitive_desc(
            dnnl::pooling_v2_forward::desc(dnnl::prop_kind::forward_inference, alg, md(x),
                                           md(e.out_dims), strides, kernel, dil, pad_l, pad_r),
            engine());
        e.prim = dnnl::pooling_v2_forward(e.pd);
        if (nhwc) {
          e.nhwc_x = dnnl::memory(e.pd.src_desc(), engine());
          e.nhwc_y = dnnl::memory(e.pd.dst_desc(), engine());
          e.to_nhwc = dnnl::reorder(dnnl::memory(desc_in(x), engine(), nullptr), e.nhwc_x);
          e.from_nhwc =
              dnnl::reorder(e.nhwc_y, dnnl::memory(desc_in(e.out_dims), engine(), nullptr));
        }
        note_implementation(node_, e.pd.impl_info_str());
      } catch (const dnnl::error& err) {
        fail(ErrorCode::Unsupported, "node {}: oneDNN has no pooling for X {}: {}", node_.label(),
             dims_to_string(x), err.what());
      }
    }
    return cache_.add(std::move(e));
  }

  // A tensor of the kernel's type and `dims` in the layout the kernel was told.
  dnnl::memory::desc desc_in(const std::vector<int64_t>& dims) const {
    const dnnl::memory::data_type dt = is_8bit(type_) ? qlinear_dnnl_type(type_) : dnnl_type(type_);
    switch (layout_.kind) {
      case Layout::Kind::ChannelBlocked:
        return blocked_desc(dims, layout_.block, dt);
      case Layout::Kind::ChannelsLast:
        return dnnl::memory::desc(dims, dt, dnnl::memory::format_tag::nhwc);
      case Layout::Kind::RowMajor:
        break;
    }
    return plain_desc(dims, dt);
  }

  const ir::Node& node_;
  bool max_ = true, ceil_ = false, include_pad_ = false;
  DataType type_ = DataType::Float32;
  Layout layout_;
  std::vector<int64_t> kernel_;
  ShapeCache<Entry> cache_;
};

// Float32, or bfloat16 (a `--bf16` engine's squeeze-and-excitation blocks: on the widening
// twin they read row-major copies, and the convolutions before them reordered their outputs).
DataType global_pool_type(const ir::Node& node) {
  const ir::Value* x = node.input(0);
  return x && x->type().is_tensor() && x->type().dtype == DataType::BFloat16 ? DataType::BFloat16
                                                                             : DataType::Float32;
}

std::string check_global_pool(const ir::Node& node) {
  const DataType type = global_pool_type(node);
  if (std::string why = check_float_input(node, 0, type, 3, 8); !why.empty()) return why;
  return check_float_outputs(node, type);
}

class GlobalPool final : public Kernel {
 public:
  explicit GlobalPool(const ir::Node& node)
      : max_(node.op_type() == "GlobalMaxPool"), type_(global_pool_type(node)) {}
  std::string_view name() const override { return "cpu.global_pool"; }
  // Reads a channel-blocked or channels-last input (the end of a float32 or an int8
  // convolution stack: an int8 ResNet-50's last convolution writes channels-last float32, and a
  // row-major input there made its whole residual chain row-major, 9 reorders a run); writes
  // row-major.
  BlockedLayouts blocked_layouts() const override { return {.input0 = true, .input0_any = true}; }

  void run(std::span<const DeviceTensor> in, KernelOutputs& out, Stream&) override {
    const DeviceTensor& x = in[0];
    std::vector<int64_t> dims = x.dims;
    std::fill(dims.begin() + 2, dims.end(), 1);
    DeviceTensor y = out.allocate(0, type_, dims);
    if (type_ == DataType::BFloat16) {
      run_bf16(x, y);
      return;
    }
    if (x.layout.kind == Layout::Kind::ChannelsLast) {
      run_channels_last(x, y);
      return;
    }
    if (!x.layout.is_row_major()) {
      run_blocked(x, y);
      return;
    }
    const int64_t rows = x.dims[0] * x.dims[1];
    const int64_t len = rows > 0 ? shape_numel(x.dims) / rows : 0;
    const auto* px = static_cast<const float*>(x.data);
    auto* py = static_cast<float*>(y.data);
    // Chunks of rows, so small tensors do not pay for a parallel region per row.
    const int64_t chunk = std::max<int64_t>(1, 65536 / std::max<int64_t>(len, 1));
    const int64_t chunks = (rows + chunk - 1) / chunk;
    const bool max = max_;
#pragma omp parallel for schedule(static) if (chunks > 1)
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t r0 = c * chunk, n = std::min(chunk, rows - r0);
      if (max)
        row_maxes(px + r0 * len, n, len, py + r0);
      else
        row_means(px + r0 * len, n, len, py + r0);
    }
  }

 private:
  // x is (N, H, W, C): each (n, run of channels) adds or takes the maximum of H*W rows.
  void run_channels_last(const DeviceTensor& x, const DeviceTensor& y) {
    const int64_t n = x.dims[0], c = x.dims[1];
    const int64_t hw = n > 0 && c > 0 ? shape_numel(x.dims) / (n * c) : 0;
    constexpr int64_t kRun = 256;
    const int64_t runs = (c + kRun - 1) / kRun;
    const auto* px = static_cast<const float*>(x.data);
    auto* py = static_cast<float*>(y.data);
    const bool max = max_;
#pragma omp parallel for schedule(static) if (n * c * hw > 65536)
    for (int64_t i = 0; i < n * runs; ++i) {
      const int64_t nn = i / runs, c0 = (i % runs) * kRun, len = std::min(kRun, c - c0);
      float* out = py + nn * c + c0;
      std::fill(out, out + len, max ? -std::numeric_limits<float>::infinity() : 0.f);
      for (int64_t r = 0; r < hw; ++r) {
        const float* row = px + (nn * hw + r) * c + c0;
        for (int64_t k = 0; k < len; ++k) out[k] = max ? std::max(out[k], row[k]) : out[k] + row[k];
      }
      if (!max) {
        for (int64_t k = 0; k < len; ++k) out[k] /= static_cast<float>(hw);
      }
    }
  }

  // x is (N, C/b, H, W, b): each (n, channel block) reduces H*W rows of b lanes.
  void run_blocked(const DeviceTensor& x, const DeviceTensor& y) {
    const int64_t n = x.dims[0], c = x.dims[1], hw = x.dims[2] * x.dims[3], b = x.layout.block;
    const int64_t cb = (c + b - 1) / b;
    const auto* px = static_cast<const float*>(x.data);
    auto* py = static_cast<float*>(y.data);
    const bool max = max_;
#pragma omp parallel for schedule(static) if (n * cb * hw > 65536)
    for (int64_t i = 0; i < n * cb; ++i) {
      float acc[64];
      blocked_lane_reduce(px + i * hw * b, hw, static_cast<int>(b), max, acc);
      const int64_t nn = i / cb, c0 = (i % cb) * b;
      for (int64_t l = 0; l < b && c0 + l < c; ++l) {
        py[nn * c + c0 + l] = max ? acc[l] : acc[l] / static_cast<float>(hw);
      }
    }
  }

  // bfloat16 in and out, float32 inside: each (n, channel block) or row widened a few hundred
  // elements at a time.
  void run_bf16(const DeviceTensor& x, const DeviceTensor& y) {
    const bool blocked = !x.layout.is_row_major();
    const int64_t n = x.dims[0], c = x.dims[1];
    const int64_t hw = c > 0 && n > 0 ? shape_numel(x.dims) / (n * c) : 0;
    const int64_t b = blocked ? x.layout.block : 1;
    const int64_t groups = n * ((c + b - 1) / b);
    const auto* px = static_cast<const uint16_t*>(x.data);
    auto* py = static_cast<uint16_t*>(y.data);
    const bool max = max_;
    constexpr int64_t kStep = 1024;
    const int64_t rows_per_step = std::max<int64_t>(1, kStep / b);
#pragma omp parallel for schedule(static) if (groups * hw * b > 65536)
    for (int64_t g = 0; g < groups; ++g) {
      float buf[kStep], part[64], acc[64];
      std::fill(acc, acc + b, max ? -std::numeric_limits<float>::infinity() : 0.f);
      for (int64_t r = 0; r < hw; r += rows_per_step) {
        const int64_t rows = std::min(rows_per_step, hw - r);
        bfloat16s_to_floats(px + (g * hw + r) * b, buf, static_cast<size_t>(rows * b));
        if (blocked) {
          blocked_lane_reduce(buf, rows, static_cast<int>(b), max, part);
        } else if (max) {
          row_maxes(buf, 1, rows, part);
        } else {
          row_means(buf, 1, rows, part);
          part[0] *= static_cast<float>(rows);
        }
        for (int64_t l = 0; l < b; ++l) {
          // NaN wins a max, as in the float32 reduction.
          acc[l] =
              max ? (part[l] > acc[l] || std::isnan(part[l]) ? part[l] : acc[l]) : acc[l] + part[l];
        }
      }
      const int64_t nn = blocked ? g / ((c + b - 1) / b) : g / c;
      const int64_t c0 = blocked ? (g % ((c + b - 1) / b)) * b : g % c;
      for (int64_t l = 0; l < b && c0 + l < c; ++l) {
        const float v = max ? acc[l] : acc[l] / static_cast<float>(hw);
        floats_to_bfloat16s(&v, py + nn * c + c0 + l, 1);
      }
    }
  }

  bool max_;
  DataType type_;
};

std::unique_ptr<Kernel> create_pool(const ir::Node& node) {
  return std::make_unique<OnednnPool>(node);
}
std::unique_ptr<Kernel> create_global_pool(const ir::Node& node) {
  return std::make_unique<GlobalPool>(node);
}

}  // namespace

KILN_REGISTER_KERNEL({.backend = "cpu",
                      .op_type = "MaxPool",
                      .name = "onednn.pool",
                      .check = check_pool,
                      .create = create_pool});
KILN_REGISTER_KERNEL({.backend = "cpu",
                      .op_type = "AveragePool",
                      .name = "onednn.pool",
                      .check = check_pool,
                      .create = create_pool});
KILN_REGISTER_KERNEL({.backend = "cpu",
                      .op_type = "GlobalAveragePool",
                      .name = "cpu.global_pool",
                      .check = check_global_pool,
                      .create = create_global_pool});
KILN_REGISTER_KERNEL({.backend = "cpu",
                      .op_type = "GlobalMaxPool",
                      .name = "cpu.global_pool",
                      .check = check_global_pool,
                      .create = create_global_pool});

}  // namespace kiln::backends::cpu
