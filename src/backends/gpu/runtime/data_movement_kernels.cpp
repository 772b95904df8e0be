// Transpose (any perm), Slice (constant starts / ends / axes / steps), Expand (constant shape)
// and Concat on the GPU: each is one strided copy per input (data_movement.hip) whose walk
// is built here from the node and the run's dims; Split writes all its outputs in one launch
// (the merged projections of merge_parallel_matmuls end in one). Any element type of 1, 2, 4 or
// 8 bytes.
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <numeric>

#include "backends/gpu/kernels/data_movement.hpp"
#include "backends/gpu/runtime/gpu_backend_impl.hpp"
#include "backends/gpu/runtime/gpu_stream.hpp"
#include "backends/gpu/runtime/kernel_util.hpp"
#include "backends/gpu/runtime/node_attrs.hpp"
#include "backends/gpu/runtime/strided_copy.hpp"
#include "backends/gpu/runtime/strided_shape.hpp"
#include "backends/kernel_table.hpp"

namespace kiln::backends::gpu {

void strided_copy(std::string_view kernel, DataType dtype, const void* src, int64_t src_numel,
                  void* dst, int64_t dst_numel, const std::vector<int64_t>& dims,
                  const std::vector<int64_t>& src_strides, const std::vector<int64_t>& dst_strides,
                  hipStream_t stream) {
  int64_t n = shape_numel(dims);
  if (n == 0) return;
  // When the innermost dim is contiguous on both sides and every offset stays 8-byte aligned, the
  // copy moves 8-byte words: 4x fewer threads for float16 (BERT's head Transposes at batch 32
  // moved 6 MB in 24 us element by element).
  int elem = static_cast<int>(dtype_size(dtype));
  std::vector<int64_t> d = dims, ss = src_strides, ds = dst_strides;
  const int64_t f = elem < 8 ? 8 / elem : 1;
  auto aligned = [&](const void* p) { return reinterpret_cast<uintptr_t>(p) % 8 == 0; };
  bool widen = f > 1 && !d.empty() && ss.back() == 1 && ds.back() == 1 && d.back() % f == 0 &&
               aligned(src) && aligned(dst) && src_numel % f == 0 && dst_numel % f == 0;
  for (size_t k = 0; widen && k + 1 < d.size(); ++k) {
    widen = ss[k] % f == 0 && ds[k] % f == 0;
  }
  if (widen) {
    d.back() /= f;
    for (size_t k = 0; k + 1 < d.size(); ++k) {
      ss[k] /= f;
      ds[k] /= f;
    }
    n /= f;
    src_numel /= f;
    dst_numel /= f;
    elem = 8;
  }
  const kernels::StridedShape shape = make_strided_shape(d, {ss, ds}, std::string(kernel).c_str());
  check_launch(kernels::launch_strided_copy(elem, src, dst, n, shape,
                                            std::max(src_numel, dst_numel), stream),
               kernel);
}

namespace {

// ---- Transpose ----

std::vector<int64_t> perm_of(const ir::Node& node, size_t rank) {
  std::vector<int64_t> perm = ints_attr(node, "perm");
  if (perm.empty()) {
    perm.resize(rank);
    std::iota(perm.rbegin(), perm.rend(), 0);
  }
  return perm;
}

bool is_permutation(std::vector<int64_t> perm, size_t rank) {
  if (perm.size() != rank) return false;
  std::sort(perm.begin(), perm.end());
  for (size_t k = 0; k < rank; ++k) {
    if (perm[k] != static_cast<int64_t>(k)) return false;
  }
  return true;
}

std::string check_transpose(const ir::Node& node) {
  if (std::string why = check_movable_input(node, 0); !why.empty()) return why;
  const std::optional<int64_t> rank = known_rank(node.input(0));
  if (!rank) return "Transpose on the GPU needs the input's rank";
  if (!is_permutation(perm_of(node, size_t(*rank)), size_t(*rank)))
    return fmt::format("Transpose perm is not a permutation of rank {}", *rank);
  return "";
}

class TransposeKernel final : public Kernel {
 public:
  explicit TransposeKernel(const ir::Node& node) : perm_attr_(ints_attr(node, "perm")) {}
  std::string_view name() const override { return "gpu.transpose"; }
  void run(std::span<const DeviceTensor> in, KernelOutputs& outputs, Stream& stream) override {
    const DeviceTensor& x = in[0];
    const size_t rank = x.dims.size();
    std::vector<int64_t> perm = perm_attr_;
    if (perm.empty()) {
      perm.resize(rank);
      std::iota(perm.rbegin(), perm.rend(), 0);
    }
    KILN_CHECK_ARG(is_permutation(perm, rank), "gpu.transpose: perm does not fit input {}",
                   dims_to_string(x.dims));
    const std::vector<int64_t> in_strides = row_major_strides(x.dims);
    std::vector<int64_t> dims(rank), src(rank);
    for (size_t k = 0; k < rank; ++k) {
      dims[k] = x.dims[size_t(perm[k])];
      src[k] = in_strides[size_t(perm[k])];
    }
    DeviceTensor y = outputs.allocate(0, x.dtype, dims);
    strided_copy(name(), x.dtype, x.data, x.numel(), y.data, y.numel(), dims, src,
                 row_major_strides(dims), gpu_stream(stream).handle());
  }

 private:
  std::vector<int64_t> perm_attr_;
};

// ---- Slice ----

struct SliceRange {
  int64_t start = 0;
  int64_t count = 0;
};

// ONNX Slice along one dim of extent d: negative starts and ends count from the end, then
// clamp to [0, d] (or [0, d - 1] and [-1, d - 1] walking backwards).
SliceRange slice_range(int64_t d, int64_t start, int64_t end, int64_t step) {
  if (d <= 0) return {};
  int64_t s = start < 0 ? start + d : start;
  int64_t e = end < 0 ? end + d : end;
  SliceRange r;
  if (step > 0) {
    s = std::clamp<int64_t>(s, 0, d);
    e = std::clamp<int64_t>(e, 0, d);
    r.count = e > s ? (e - s - 1) / step + 1 : 0;
  } else {
    s = std::clamp<int64_t>(s, 0, d - 1);
    e = std::clamp<int64_t>(e, -1, d - 1);
    const int64_t back = step == INT64_MIN ? INT64_MAX : -step;  // no overflow negating
    r.count = s > e ? (s - e - 1) / back + 1 : 0;
  }
  r.start = s;
  return r;
}

struct SliceSpec {
  std::vector<int64_t> starts, ends, axes, steps;
};

// "" and the spec when the node's starts/ends/axes/steps are attributes (opset < 10) or
// constant inputs, else why not.
std::string slice_spec(const ir::Node& node, SliceSpec& s) {
  if (node.opset() < 10) {
    s.starts = ints_attr(node, "starts");
    s.ends = ints_attr(node, "ends");
    s.axes = ints_attr(node, "axes");
  } else {
    auto read = [&](size_t slot, std::vector<int64_t>& out, const char* what) -> std::string {
      if (slot >= node.inputs().size() || !node.input(slot)) return "";
      std::optional<std::vector<int64_t>> v = constant_ints(node, slot);
      if (!v) return fmt::format("Slice {} must be a constant int32/int64 on the GPU", what);
      out = std::move(*v);
      return "";
    };
    for (auto [slot, out, what] :
         {std::tuple{size_t(1), &s.starts, "starts"}, std::tuple{size_t(2), &s.ends, "ends"},
          std::tuple{size_t(3), &s.axes, "axes"}, std::tuple{size_t(4), &s.steps, "steps"}}) {
      if (std::string why = read(slot, *out, what); !why.empty()) return why;
    }
    if (node.inputs().size() < 3 || !node.input(1) || !node.input(2))
      return "Slice without starts and ends";
  }
  if (s.ends.size() != s.starts.size()) return "Slice starts and ends differ in length";
  if (s.axes.empty()) {
    s.axes.resize(s.starts.size());
    std::iota(s.axes.begin(), s.axes.end(), 0);
  }
  if (s.steps.empty()) s.steps.assign(s.starts.size(), 1);
  if (s.axes.size() != s.starts.size() || s.steps.size() != s.starts.size())
    return "Slice axes or steps differ in length from starts";
  for (int64_t step : s.steps) {
    if (step == 0) return "Slice step 0";
  }
  return "";
}

std::string check_slice(const ir::Node& node) {
  if (std::string why = check_movable_input(node, 0); !why.empty()) return why;
  SliceSpec s;
  return slice_spec(node, s);
}

class SliceKernel final : public Kernel {
 public:
  explicit SliceKernel(const ir::Node& node) { slice_spec(node, spec_); }
  std::string_view name() const override { return "gpu.slice"; }
  void run(std::span<const DeviceTensor> in, KernelOutputs& outputs, Stream& stream) override {
    const DeviceTensor& x = in[0];
    const int64_t rank = static_cast<int64_t>(x.dims.size());
    std::vector<int64_t> dims = x.dims;
    std::vector<int64_t> src = row_major_strides(x.dims);
    int64_t base = 0;
    std::vector<bool> seen(size_t(rank), false);
    for (size_t k = 0; k < spec_.starts.size(); ++k) {
      const std::optional<int64_t> axis = normalized_axis(spec_.axes[k], rank);
      KILN_CHECK_ARG(axis && !seen[size_t(*axis)], "gpu.slice: axis {} is repeated or outside {}",
                     spec_.axes[k], dims_to_string(x.dims));
      seen[size_t(*axis)] = true;
      const SliceRange r =
          slice_range(x.dims[size_t(*axis)], spec_.starts[k], spec_.ends[k], spec_.steps[k]);
      dims[size_t(*axis)] = r.count;
      base += r.start * src[size_t(*axis)];
      // One element or none: the stride is never used (and step may be huge).
      if (r.count > 1) src[size_t(*axis)] *= spec_.steps[k];
    }
    DeviceTensor y = outputs.allocate(0, x.dtype, dims);
    if (y.numel() == 0) return;
    const char* at = static_cast<const char*>(x.data) + base * int64_t(dtype_size(x.dtype));
    strided_copy(name(), x.dtype, at, x.numel(), y.data, y.numel(), dims, src,
                 row_major_strides(dims), gpu_stream(stream).handle());
  }

 private:
  SliceSpec spec_;
};

// ---- Expand ----

std::string check_expand(const ir::Node& node) {
  if (std::string why = check_movable_input(node, 0); !why.empty()) return why;
  if (!constant_ints(node, 1)) return "Expand on the GPU needs a constant shape";
  return "";
}

class ExpandKernel final : public Kernel {
 public:
  explicit ExpandKernel(const ir::Node& node) : shape_(*constant_ints(node, 1)) {}
  std::string_view name() const override { return "gpu.expand"; }
  void run(std::span<const DeviceTensor> in, KernelOutputs& outputs, Stream& stream) override {
    const DeviceTensor& x = in[0];
    std::vector<int64_t> dims;
    KILN_CHECK_ARG(broadcast_dims({x.dims, shape_}, dims),
                   "gpu.expand: input {} does not broadcast to {}", dims_to_string(x.dims),
                   dims_to_string(shape_));
    DeviceTensor y = outputs.allocate(0, x.dtype, dims);
    strided_copy(name(), x.dtype, x.data, x.numel(), y.data, y.numel(), dims,
                 broadcast_strides(x.dims, dims), row_major_strides(dims),
                 gpu_stream(stream).handle());
  }

 private:
  std::vector<int64_t> shape_;
};

// ---- Concat ----

std::string check_concat(const ir::Node& node) {
  if (node.inputs().empty()) return "Concat without inputs";
  std::optional<int64_t> rank;
  for (size_t k = 0; k < node.inputs().size(); ++k) {
    if (std::string why = check_movable_input(node, k); !why.empty()) return why;
    if (node.input(k)->type().dtype != node.input(0)->type().dtype)
      return "Concat of mixed element types";
    if (!rank) rank = known_rank(node.input(k));
  }
  if (!rank) return "Concat on the GPU needs the inputs' rank";
  if (!normalized_axis(int_attr(node, "axis", 0), *rank))
    return fmt::format("Concat axis {} is outside rank {}", int_attr(node, "axis", 0), *rank);
  return "";
}

class ConcatKernel final : public Kernel {
 public:
  explicit ConcatKernel(const ir::Node& node) : axis_(int_attr(node, "axis", 0)) {}
  std::string_view name() const override { return "gpu.concat"; }
  void run(std::span<const DeviceTensor> in, KernelOutputs& outputs, Stream& stream) override {
    const DeviceTensor& first = in[0];
    const int64_t rank = static_cast<int64_t>(first.dims.size());
    const std::optional<int64_t> axis = normalized_axis(axis_, rank);
    KILN_CHECK_ARG(axis.has_value(), "gpu.concat: axis {} is outside {}", axis_,
                   dims_to_string(first.dims));
    const size_t a = static_cast<size_t>(*axis);
    std::vector<int64_t> dims = first.dims;
    dims[a] = 0;
    for (const DeviceTensor& t : in) {
      bool fits = t.dtype == first.dtype && t.dims.size() == first.dims.size();
      for (size_t d = 0; fits && d < dims.size(); ++d) fits = d == a || t.dims[d] == dims[d];
      KILN_CHECK_ARG(fits, "gpu.concat: input {} {} does not fit {} {} along axis {}",
                     dtype_name(t.dtype), dims_to_string(t.dims), dtype_name(first.dtype),
                     dims_to_string(first.dims), axis_);
      dims[a] += t.dims[a];
    }
    DeviceTensor y = outputs.allocate(0, first.dtype, dims);
    const std::vector<int64_t> dst = row_major_strides(dims);
    const int64_t elem = static_cast<int64_t>(dtype_size(first.dtype));
    int64_t offset = 0;  // along the axis
    for (const DeviceTensor& t : in) {
      char* at = static_cast<char*>(y.data) + offset * dst[a] * elem;
      strided_copy(name(), t.dtype, t.data, t.numel(), at, y.numel(), t.dims,
                   row_major_strides(t.dims), dst, gpu_stream(stream).handle());
      offset += t.dims[a];
    }
  }

 private:
  int64_t axis_;
};

// ---- Split ----

// The sizes along the axis: the constant `split` input (opset 13+) or attribute, else equal
// parts (num_outputs of opset 18 rounds up, the last part taking the rest; older opsets need
// the axis to divide). Empty `sizes` means equal parts, resolved per run from the dims.
struct SplitSpec {
  int64_t axis = 0;
  std::vector<int64_t> sizes;
  size_t outputs = 0;
};

std::string split_spec(const ir::Node& node, SplitSpec& s) {
  s.axis = int_attr(node, "axis", 0);
  s.outputs = node.outputs().size();
  if (s.outputs == 0) return "Split without outputs";
  if (node.opset() < 13) {
    s.sizes = ints_attr(node, "split");
  } else if (node.inputs().size() > 1 && node.input(1)) {
    std::optional<std::vector<int64_t>> v = constant_ints(node, 1);
    if (!v) return "Split sizes must be a constant int64 input on the GPU";
    s.sizes = std::move(*v);
  }
  if (!s.sizes.empty() && s.sizes.size() != s.outputs)
    return fmt::format("Split gives {} sizes for {} outputs", s.sizes.size(), s.outputs);
  for (int64_t n : s.sizes) {
    if (n < 0) return fmt::format("Split size {} is negative", n);
  }
  return "";
}

std::string check_split(const ir::Node& node) {
  if (std::string why = check_movable_input(node, 0); !why.empty()) return why;
  if (!known_rank(node.input(0))) return "Split on the GPU needs the input's rank";
  SplitSpec s;
  return split_spec(node, s);
}

class SplitKernel final : public Kernel {
 public:
  explicit SplitKernel(const ir::Node& node) : rounds_up_(node.opset() >= 18) {
    split_spec(node, spec_);
  }
  std::string_view name() const override { return "gpu.split"; }
  void run(std::span<const DeviceTensor> in, KernelOutputs& outputs, Stream& stream) override {
    const DeviceTensor& x = in[0];
    const int64_t rank = static_cast<int64_t>(x.dims.size());
    const std::optional<int64_t> axis = normalized_axis(spec_.axis, rank);
    KILN_CHECK_ARG(axis.has_value(), "gpu.split: axis {} is outside {}", spec_.axis,
                   dims_to_string(x.dims));
    const size_t a = static_cast<size_t>(*axis);
    const int64_t length = x.dims[a];
    const std::vector<int64_t> sizes = part_sizes(length);
    int64_t outer = 1, inner = 1;
    for (size_t d = 0; d < a; ++d) outer *= x.dims[d];
    for (size_t d = a + 1; d < x.dims.size(); ++d) inner *= x.dims[d];
    kernels::SplitParts parts{};
    int64_t at = 0;
    auto flush = [&] {
      if (parts.count == 0) return;
      check_launch(kernels::launch_split(static_cast<int>(dtype_size(x.dtype)), x.data, outer,
                                         length, inner, parts, gpu_stream(stream).handle()),
                   name());
      parts.count = 0;
    };
    for (size_t k = 0; k < sizes.size(); ++k) {
      std::vector<int64_t> dims = x.dims;
      dims[a] = sizes[k];
      DeviceTensor y = outputs.allocate(k, x.dtype, dims);
      if (parts.count == kernels::SplitParts::kMaxParts) flush();
      parts.dst[parts.count] = y.data;
      parts.begin[parts.count] = at;
      at += sizes[k];
      parts.begin[++parts.count] = at;
    }
    flush();
  }

 private:
  std::vector<int64_t> part_sizes(int64_t length) const {
    const int64_t n = static_cast<int64_t>(spec_.outputs);
    if (!spec_.sizes.empty()) {
      int64_t total = 0;
      for (int64_t v : spec_.sizes) total += v;
      KILN_CHECK_ARG(total == length, "gpu.split: sizes add up to {}, the axis is {}", total,
                     length);
      return spec_.sizes;
    }
    if (!rounds_up_) {
      KILN_CHECK_ARG(length % n == 0, "gpu.split: {} outputs do not divide an axis of {}", n,
                     length);
    }
    const int64_t part = (length + n - 1) / n;
    std::vector<int64_t> sizes;
    int64_t left = length;
    for (int64_t k = 0; k < n; ++k) {
      sizes.push_back(std::min(part, left));
      left -= sizes.back();
    }
    return sizes;
  }

  SplitSpec spec_;
  bool rounds_up_;
};

template <typename K>
std::unique_ptr<Kernel> make(const ir::Node& node) {
  return std::make_unique<K>(node);
}

// None declares in-place inputs: each moves elements to other indices.
KILN_REGISTER_KERNEL({.backend = kGpuKernelTable,
                      .op_type = "Transpose",
                      .name = "gpu.transpose",
                      .check = check_transpose,
                      .create = make<TransposeKernel>});
KILN_REGISTER_KERNEL({.backend = kGpuKernelTable,
                      .op_type = "Slice",
                      .name = "gpu.slice",
                      .check = check_slice,
                      .create = make<SliceKernel>});
KILN_REGISTER_KERNEL({.backend = kGpuKernelTable,
                      .op_type = "Expand",
                      .name = "gpu.expand",
                      .check = check_expand,
                      .create = make<ExpandKernel>});
KILN_REGISTER_KERNEL({.backend = kGpuKernelTable,
                      .op_type = "Concat",
                      .name = "gpu.concat",
                      .check = check_concat,
                      .create = make<ConcatKernel>});
KILN_REGISTER_KERNEL({.backend = kGpuKernelTable,
                      .op_type = "Split",
                      .name = "gpu.split",
                      .check = check_split,
                      .create = make<SplitKernel>});

}  // namespace
}  // namespace kiln::backends::gpu
