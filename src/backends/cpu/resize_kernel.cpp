// Resize (opset 10 and 11+) on the CPU with the reference's plan (ops/resize_plan.hpp: the same
// sizes, coordinates and taps): nearest copies each output row's elements through per-axis
// source offsets (any type but strings); linear and cubic (antialiased too) run the separable
// passes in float32 over rows of the dims after the axis, which the compiler vectorizes, one
// resized axis at a time (float32 only; the reference takes the other types).
#include <algorithm>
#include <cstring>
#include <memory>

#include "backends/cpu/cpu_backend.hpp"
#include "backends/cpu/element_bits.hpp"
#include "backends/cpu/movement_inputs.hpp"
#include "backends/kernel_table.hpp"
#include "ops/conv_utils.hpp"
#include "ops/kernel_context.hpp"
#include "ops/op_utils.hpp"
#include "ops/resize_plan.hpp"

namespace kiln::backends::cpu {
namespace {

using ops::resizing::Mode;

std::string check_resize(const ir::Node& node) {
  if (std::string why = check_data_input(node); !why.empty()) return why;
  if (node.opset() < 10) return "Resize before opset 10";
  const std::string mode = ops::AttrReader(node).attr_string("mode", "nearest");
  if (mode != "nearest" && node.input(0)->type().dtype != DataType::Float32) {
    return "interpolation of other types than float32 (the reference takes them)";
  }
  return "";
}

// A float input (scales, roi) as doubles.
std::vector<double> float_values(const ops::AttrReader& attrs, const DeviceTensor& t,
                                 const char* what) {
  std::vector<double> out(static_cast<size_t>(t.numel()));
  if (t.dtype == DataType::Float32) {
    const auto* p = static_cast<const float*>(t.data);
    std::copy(p, p + t.numel(), out.begin());
  } else {
    attrs.check(t.dtype == DataType::Float64, "{} must be float32 or float64, not {}", what,
                dtype_name(t.dtype));
    const auto* p = static_cast<const double*>(t.data);
    std::copy(p, p + t.numel(), out.begin());
  }
  return out;
}

// An optional input given and not empty (ONNX models pass an empty roi or scales for "none").
bool nonempty(std::span<const DeviceTensor> in, size_t slot) {
  return given(in, slot) && in[slot].numel() > 0;
}

template <typename T>
void nearest_rows(const T* x, const std::vector<std::vector<int64_t>>& offs,
                  const std::vector<int64_t>& dims, T fill, T* y) {
  const size_t rank = dims.size();
  const int64_t width = dims[rank - 1];
  int64_t rows = 1;
  for (size_t d = 0; d + 1 < rank; ++d) rows *= dims[d];
  const std::vector<int64_t>& last = offs[rank - 1];
#pragma omp parallel for schedule(static) if (rows > 1 && rows * width > 32768)
  for (int64_t r = 0; r < rows; ++r) {
    int64_t base = 0;
    bool outside = false;
    for (size_t k = rank - 1, rest = static_cast<size_t>(r); k-- > 0;) {
      const int64_t i = static_cast<int64_t>(rest % static_cast<size_t>(dims[k]));
      rest /= static_cast<size_t>(dims[k]);
      if (offs[k][static_cast<size_t>(i)] < 0) outside = true;
      base += offs[k][static_cast<size_t>(i)];
    }
    T* row = y + r * width;
    if (outside) {
      std::fill(row, row + width, fill);
      continue;
    }
    for (int64_t j = 0; j < width; ++j) {
      const int64_t o = last[static_cast<size_t>(j)];
      row[j] = o < 0 ? fill : x[base + o];
    }
  }
}

class ResizeKernel final : public Kernel {
 public:
  explicit ResizeKernel(const ir::Node& node) : node_(node) {}
  std::string_view name() const override { return "cpu.resize"; }

  void run(std::span<const DeviceTensor> in, KernelOutputs& out, Stream&) override {
    const DeviceTensor& x = in[0];
    ops::AttrReader attrs(node_);
    const bool legacy = attrs.opset() < 11;
    const ops::resizing::ResizeAttrs a = ops::resizing::read_resize_attrs(attrs, legacy);
    const std::vector<int64_t> axes = ops::resizing::resize_axes(attrs, x.dims.size());
    std::vector<double> scales, roi;
    std::vector<int64_t> sizes;
    if (legacy) {
      attrs.check(nonempty(in, 1), "needs scales");
      scales = float_values(attrs, in[1], "scales");
    } else {
      if (nonempty(in, 1) && a.coord == "tf_crop_and_resize")
        roi = float_values(attrs, in[1], "roi");
      if (nonempty(in, 2)) scales = float_values(attrs, in[2], "scales");
      if (nonempty(in, 3)) sizes = index_values(attrs, in[3], "sizes");
      attrs.check(scales.empty() != sizes.empty(), "exactly one of scales and sizes must be given");
    }
    const ops::resizing::ResizePlan plan =
        ops::resizing::make_resize_plan(attrs, a, x.dims, axes, scales, sizes, roi);
    DeviceTensor y = out.allocate(0, x.dtype, plan.out_dims);
    if (y.numel() == 0) return;
    const size_t rank = x.dims.size();
    if (rank == 0) {
      std::memcpy(y.data, x.data, dtype_size(x.dtype));
      return;
    }
    if (a.mode == Mode::Nearest) {
      nearest(x, plan, a, y);
    } else {
      interpolate(x, plan, a, y);
    }
  }

 private:
  void nearest(const DeviceTensor& x, const ops::resizing::ResizePlan& plan,
               const ops::resizing::ResizeAttrs& a, DeviceTensor& y) const {
    const size_t rank = x.dims.size();
    const std::vector<int64_t> strides = ops::row_major_strides(x.dims);
    // Per axis: the source offset of each output index, or -1 for the extrapolation value.
    std::vector<std::vector<int64_t>> offs(rank);
    for (size_t d = 0; d < rank; ++d) {
      const ops::resizing::AxisPlan& p = plan.axes[d];
      offs[d].resize(static_cast<size_t>(p.out));
      for (int64_t o = 0; o < p.out; ++o) {
        offs[d][static_cast<size_t>(o)] =
            p.identity ? o * strides[d]
                       : (p.extrapolate[static_cast<size_t>(o)]
                              ? -1
                              : p.index[static_cast<size_t>(o)] * strides[d]);
      }
    }
    with_element_bits(dtype_size(x.dtype), [&](auto tag) {
      using T = decltype(tag);
      nearest_rows(static_cast<const T*>(x.data), offs, plan.out_dims, fill_bits<T>(x.dtype, a),
                   static_cast<T*>(y.data));
    });
  }

  // The extrapolation value in the element type's bits (float32 and float64 exactly; other types
  // only ever extrapolate 0, as tf_crop_and_resize models use).
  template <typename Bits>
  Bits fill_bits(DataType t, const ops::resizing::ResizeAttrs& a) const {
    Bits bits{};
    if (t == DataType::Float32 && sizeof(Bits) == 4) {
      const float v = static_cast<float>(a.extrapolation);
      std::memcpy(&bits, &v, sizeof v);
    } else if (t == DataType::Float64 && sizeof(Bits) == 8) {
      const double v = a.extrapolation;
      std::memcpy(&bits, &v, sizeof v);
    } else {
      ops::AttrReader(node_).check(a.extrapolation == 0 || a.coord != "tf_crop_and_resize",
                                   "an extrapolation value of {} for {} elements on the CPU kernel",
                                   a.extrapolation, dtype_name(t));
    }
    return bits;
  }

  void interpolate(const DeviceTensor& x, const ops::resizing::ResizePlan& plan,
                   const ops::resizing::ResizeAttrs& a, DeviceTensor& y) const {
    std::vector<int64_t> dims = x.dims;
    const float extrapolation = static_cast<float>(a.extrapolation);
    std::vector<int64_t> passes;
    for (int64_t ax : plan.order) {
      if (!plan.axes[static_cast<size_t>(ax)].identity) passes.push_back(ax);
    }
    if (passes.empty()) {
      std::memcpy(y.data, x.data, static_cast<size_t>(x.numel()) * sizeof(float));
      return;
    }
    // The first pass reads the input, the last writes the output; the ones between go
    // through two scratch buffers (not zeroed: each output's first tap assigns).
    std::unique_ptr<float[]> scratch[2];
    const float* src_all = static_cast<const float*>(x.data);
    for (size_t k = 0; k < passes.size(); ++k) {
      const int64_t ax = passes[k];
      const ops::resizing::AxisPlan& p = plan.axes[static_cast<size_t>(ax)];
      int64_t outer = 1, inner = 1;
      for (int64_t d = 0; d < ax; ++d) outer *= dims[static_cast<size_t>(d)];
      for (size_t d = static_cast<size_t>(ax) + 1; d < dims.size(); ++d) inner *= dims[d];
      float* dst_all = static_cast<float*>(y.data);
      if (k + 1 < passes.size()) {
        // An intermediate can outgrow both ends (one axis enlarged before another shrinks):
        // bounded as the reference bounds its own.
        std::vector<int64_t> between = dims;
        between[static_cast<size_t>(ax)] = p.out;
        const int64_t count = shape_numel(between);  // throws on overflow
        ops::window::check_scratch(ops::AttrReader(node_), count, sizeof(float));
        scratch[k % 2].reset(new float[static_cast<size_t>(count)]);
        dst_all = scratch[k % 2].get();
      }
      if (inner == 1) {
        // The innermost axis: each output element is its taps' weighted sum, row by row.
#pragma omp parallel for schedule(static) if (outer * p.out > 32768 && outer > 1)
        for (int64_t o = 0; o < outer; ++o) {
          const float* src = src_all + o * p.in;
          float* row = dst_all + o * p.out;
          for (int64_t q = 0; q < p.out; ++q) {
            if (p.extrapolate[static_cast<size_t>(q)]) {
              row[q] = extrapolation;
              continue;
            }
            const int64_t* idx = p.index.data() + q * p.taps;
            const double* w = p.weight.data() + q * p.taps;
            float sum = 0.f;
            for (int64_t t = 0; t < p.taps; ++t) sum += static_cast<float>(w[t]) * src[idx[t]];
            row[q] = sum;
          }
        }
      } else {
#pragma omp parallel for schedule(static) if (outer * p.out * inner > 32768 && outer * p.out > 1)
        for (int64_t r = 0; r < outer * p.out; ++r) {
          const int64_t o = r / p.out, q = r % p.out;
          float* row = dst_all + r * inner;
          if (p.extrapolate[static_cast<size_t>(q)]) {
            std::fill(row, row + inner, extrapolation);
            continue;
          }
          const float* src = src_all + o * p.in * inner;
          const int64_t* idx = p.index.data() + q * p.taps;
          const double* w = p.weight.data() + q * p.taps;
          const float w0 = static_cast<float>(w[0]);
          const float* s0 = src + idx[0] * inner;
          for (int64_t i = 0; i < inner; ++i) row[i] = w0 * s0[i];
          for (int64_t t = 1; t < p.taps; ++t) {
            const float wt = static_cast<float>(w[t]);
            if (wt == 0.f) continue;
            const float* st = src + idx[t] * inner;
            for (int64_t i = 0; i < inner; ++i) row[i] += wt * st[i];
          }
        }
      }
      src_all = dst_all;
      dims[static_cast<size_t>(ax)] = p.out;
    }
  }

  const ir::Node& node_;
};

std::unique_ptr<Kernel> create_resize(const ir::Node& node) {
  return std::make_unique<ResizeKernel>(node);
}

}  // namespace

KILN_REGISTER_KERNEL({.backend = "cpu",
                      .op_type = "Resize",
                      .name = "cpu.resize",
                      .check = check_resize,
                      .create = create_resize});

}  // namespace kiln::backends::cpu
