// Generators and index-pattern ops: Range, EyeLike, Trilu, OneHot, DepthToSpace, SpaceToDepth,
// ReverseSequence, Compress, NonZero.
#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/infer_utils.hpp"
#include "ops/movement_utils.hpp"
#include "ops/op_flops.hpp"
#include "ops/op_utils.hpp"
#include "ops/registry.hpp"
#include "ops/shape_values.hpp"

namespace kiln::ops {
namespace {

// Reads element i of any real tensor as int64 (truncating floats); fails on non-finite values.
int64_t any_to_int(const AttrReader& ctx, const Tensor& t, int64_t i, const char* what) {
  if (dtype_is_integer(t.dtype()) || t.dtype() == DataType::Bool) return t.int_at(i);
  double v = t.double_at(i);
  ctx.check(std::isfinite(v) && std::fabs(v) < 9.2e18, "{} value {} is not a valid integer", what,
            v);
  return static_cast<int64_t>(v);
}

const Tensor& scalar_input(const KernelContext& ctx, size_t i, const char* what) {
  const Tensor& t = ctx.input(i);
  ctx.check(t.numel() == 1 && t.rank() <= 1, "{} must be a scalar, got {}", what, t.describe());
  return t;
}

// ---------------------------------------------------------------------------------------------
// Range

// Far beyond any allocatable tensor; keeps the length arithmetic away from overflow.
constexpr int64_t kMaxRange = int64_t{1} << 40;

void range_kernel(KernelContext& ctx) {
  const Tensor& s = scalar_input(ctx, 0, "start");
  const Tensor& l = scalar_input(ctx, 1, "limit");
  const Tensor& d = scalar_input(ctx, 2, "delta");
  ctx.check(s.dtype() == l.dtype() && s.dtype() == d.dtype(),
            "start, limit and delta types differ");
  Tensor out = dispatch_dtype<DTypeSet::Numeric>(s.dtype(), "Range", [&](auto tag) -> Tensor {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_integral_v<T>) {
      __int128 start = s.data<T>()[0], limit = l.data<T>()[0], delta = d.data<T>()[0];
      ctx.check(delta != 0, "delta cannot be 0");
      __int128 span = limit - start;
      __int128 n = span / delta + ((span % delta != 0) && ((span < 0) == (delta < 0)) ? 1 : 0);
      if (n < 0) n = 0;
      ctx.check(n <= kMaxRange, "range of more than {} elements", kMaxRange);
      Tensor t(dtype_of<T>, {static_cast<int64_t>(n)});
      T* p = t.data<T>();
      for (int64_t i = 0; i < static_cast<int64_t>(n); ++i)
        p[i] = static_cast<T>(start + i * delta);
      return t;
    } else {
      double start = static_cast<double>(static_cast<float>(s.data<T>()[0]));
      double limit = static_cast<double>(static_cast<float>(l.data<T>()[0]));
      double delta = static_cast<double>(static_cast<float>(d.data<T>()[0]));
      if constexpr (std::is_same_v<T, double>) {
        start = s.data<T>()[0];
        limit = l.data<T>()[0];
        delta = d.data<T>()[0];
      }
      ctx.check(delta != 0, "delta cannot be 0");
      double n = std::ceil((limit - start) / delta);
      ctx.check(!std::isnan(n), "range length is not a number");
      if (n < 0) n = 0;
      ctx.check(n <= static_cast<double>(kMaxRange), "range of {} elements is too large", n);
      Tensor t(dtype_of<T>, {static_cast<int64_t>(n)});
      T* p = t.data<T>();
      constexpr bool half = std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>;
      const int64_t stash = ctx.attr_int("stash_type", 1);
      if (half && stash != 1 && stash != 11) ctx.unsupported("stash_type {}", stash);
      if (half && stash == 1) {
        // Accumulate in float like numpy's float32 arange: the step is re-derived from the
        // first two elements.
        float fs = static_cast<float>(start);
        float fd = (fs + static_cast<float>(delta)) - fs;
        for (int64_t i = 0; i < static_cast<int64_t>(n); ++i)
          p[i] = T(fs + static_cast<float>(i) * fd);
      } else {
        for (int64_t i = 0; i < static_cast<int64_t>(n); ++i) {
          p[i] = static_cast<T>(start + static_cast<double>(i) * delta);
        }
      }
      return t;
    }
  });
  ctx.set_output(0, std::move(out));
}

void infer_range(InferContext& ctx) {
  const TypeInfo* t = tensor_input(ctx, 0);
  if (!t) return;
  Dim length;
  if (dtype_is_integer(t->dtype)) {
    auto start = input_sym_values(ctx, 0);
    auto limit = input_sym_values(ctx, 1);
    auto delta = input_sym_values(ctx, 2);
    if (start && limit && delta && start->size() == 1 && limit->size() == 1 && delta->size() == 1) {
      const SymValue &s = (*start)[0], &l = (*limit)[0], &d = (*delta)[0];
      if (s.number && l.number && d.number && *d.number != 0) {
        __int128 span = static_cast<__int128>(*l.number) - *s.number;
        __int128 n =
            span / *d.number + ((span % *d.number != 0) && ((span < 0) == (*d.number < 0)));
        if (n <= 0) n = 0;
        if (n <= kMaxRange) length = Dim(static_cast<int64_t>(n));
      } else if (s.number && *s.number == 0 && d.number && *d.number == 1 && !l.number) {
        length = l.dim;  // arange(0, n): positions over a symbolic length
      }
    }
  }
  ctx.set_output_type(0, TypeInfo::tensor(t->dtype, Shape({length})));
}

// ---------------------------------------------------------------------------------------------
// EyeLike

DataType eyelike_dtype(const AttrReader& ctx, DataType input) {
  if (!ctx.has_attr("dtype")) return input;
  return dtype_from_onnx(static_cast<int32_t>(ctx.attr_int("dtype")), "EyeLike dtype");
}

void eyelike_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  ctx.check(x.rank() == 2, "input must be 2-D, got {}", x.describe());
  DataType dtype = eyelike_dtype(ctx, x.dtype());
  const int64_t k = ctx.attr_int("k", 0);
  Tensor out(dtype, x.dims());
  dispatch_dtype<DTypeSet::NumericBool>(dtype, "EyeLike", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* p = out.data<T>();
    const int64_t rows = x.dim(0), cols = x.dim(1);
    for (int64_t i = 0; i < rows; ++i) {
      // Compare before adding so a huge k cannot overflow.
      if (k >= cols || k < -i) continue;
      int64_t j = i + k;
      if (j >= 0 && j < cols) p[i * cols + j] = convert_element<T>(int64_t{1});
    }
  });
  ctx.set_output(0, std::move(out));
}

void infer_eyelike(InferContext& ctx) {
  const TypeInfo* t = tensor_input(ctx, 0);
  if (!t) return;
  ctx.set_output_type(0, TypeInfo::tensor(eyelike_dtype(ctx, t->dtype), t->shape));
}

// ---------------------------------------------------------------------------------------------
// Trilu

void trilu_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  ctx.check(x.rank() >= 2, "input must have rank >= 2, got {}", x.describe());
  int64_t k = 0;
  if (ctx.has_input(1)) k = index_values(ctx, scalar_input(ctx, 1, "k"), "k")[0];
  const bool upper = ctx.attr_int("upper", 1) != 0;
  const size_t r = x.rank();
  const std::vector<int64_t> strides = row_major_strides(x.dims());
  ctx.set_output(0, remap(x, x.dims(), [&](const std::vector<int64_t>& idx) {
                   // Use j - i (both small) against k to stay clear of overflow.
                   int64_t diff = idx[r - 1] - idx[r - 2];
                   bool keep = upper ? diff >= k : diff <= k;
                   if (!keep) return int64_t{-1};
                   return flat_offset(idx, strides);
                 }));
}

// ---------------------------------------------------------------------------------------------
// OneHot

void onehot_kernel(KernelContext& ctx) {
  const Tensor& indices = ctx.input(0);
  const Tensor& depth_t = scalar_input(ctx, 1, "depth");
  const Tensor& values = ctx.input(2);
  ctx.check(values.rank() == 1 && values.numel() == 2, "values must be [off, on], got {}",
            values.describe());
  const int64_t depth = any_to_int(ctx, depth_t, 0, "depth");
  ctx.check(depth >= 1, "depth must be positive, got {}", depth);
  const int64_t r = static_cast<int64_t>(indices.rank());
  int64_t axis = ctx.attr_int("axis", -1);
  if (axis < 0) axis += r + 1;
  ctx.check(axis >= 0 && axis <= r, "axis {} is out of range for output rank {}",
            ctx.attr_int("axis", -1), r + 1);
  std::vector<int64_t> idx(static_cast<size_t>(indices.numel()));
  for (int64_t i = 0; i < indices.numel(); ++i) {
    int64_t v = any_to_int(ctx, indices, i, "index");
    // Opset 11 wraps negative indices; before that they are out of range. Anything still out
    // of range yields an all-off row.
    idx[static_cast<size_t>(i)] = v < 0 && ctx.opset() >= 11 ? v + depth : v;
  }
  std::vector<int64_t> out_dims = indices.dims();
  out_dims.insert(out_dims.begin() + axis, depth);
  checked_numel(ctx, out_dims);
  std::vector<int64_t> istrides = row_major_strides(indices.dims());
  const size_t a = static_cast<size_t>(axis);
  ctx.set_output(0, remap(values, out_dims, [&](const std::vector<int64_t>& o) {
                   int64_t k = 0;
                   for (size_t i = 0, j = 0; i < o.size(); ++i) {
                     if (i != a) k += o[i] * istrides[j++];
                   }
                   return idx[static_cast<size_t>(k)] == o[a] ? int64_t{1} : int64_t{0};
                 }));
}

void infer_onehot(InferContext& ctx) {
  const TypeInfo* i = tensor_input(ctx, 0);
  const TypeInfo* v = tensor_input(ctx, 2);
  if (!v) return;
  std::optional<Shape> out;
  if (i && i->shape) {
    const int64_t r = static_cast<int64_t>(i->shape->rank());
    int64_t axis = ctx.attr_int("axis", -1);
    if (axis < 0) axis += r + 1;
    ctx.check(axis >= 0 && axis <= r, "axis is out of range for output rank {}", r + 1);
    std::vector<Dim> dims = i->shape->dims();
    Dim depth;
    if (auto c = constant_ints(ctx, 1); c && c->size() == 1 && (*c)[0] >= 1) depth = Dim((*c)[0]);
    dims.insert(dims.begin() + axis, depth);
    out = Shape(std::move(dims));
  }
  ctx.set_output_type(0, TypeInfo::tensor(v->dtype, out));
}

// ---------------------------------------------------------------------------------------------
// DepthToSpace / SpaceToDepth (NCHW)

int64_t block_size(const AttrReader& ctx) {
  int64_t b = ctx.attr_int("blocksize");
  // The bound keeps b * b and b * dim of any real tensor within int64.
  ctx.check(b >= 1 && b <= (int64_t{1} << 20), "blocksize {} is out of range", b);
  return b;
}

bool depth_to_space_crd(const AttrReader& ctx) {
  std::string mode = ctx.attr_string("mode", "DCR");
  ctx.check(mode == "DCR" || mode == "CRD", "unknown mode '{}'", mode);
  return mode == "CRD";
}

void depth_to_space_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  ctx.check(x.rank() == 4, "input must be 4-D NCHW, got {}", x.describe());
  const int64_t b = block_size(ctx);
  const bool crd = depth_to_space_crd(ctx);
  const int64_t n = x.dim(0), c = x.dim(1), h = x.dim(2), w = x.dim(3);
  ctx.check(mul_dims(h, b) && mul_dims(w, b), "output dims overflow");
  ctx.check(c % (b * b) == 0, "channels {} are not divisible by blocksize^2 = {}", c, b * b);
  const int64_t oc = c / (b * b);
  std::vector<int64_t> out_dims = {n, oc, h * b, w * b};
  checked_numel(ctx, out_dims);
  ctx.set_output(0, remap(x, out_dims, [&](const std::vector<int64_t>& o) {
                   int64_t bh = o[2] % b, bw = o[3] % b;
                   int64_t ic = crd ? (o[1] * b + bh) * b + bw : (bh * b + bw) * oc + o[1];
                   return ((o[0] * c + ic) * h + o[2] / b) * w + o[3] / b;
                 }));
}

void space_to_depth_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  ctx.check(x.rank() == 4, "input must be 4-D NCHW, got {}", x.describe());
  const int64_t b = block_size(ctx);
  const int64_t n = x.dim(0), c = x.dim(1), h = x.dim(2), w = x.dim(3);
  ctx.check(mul_dims(c, b * b).has_value(), "output channels overflow");
  ctx.check(h % b == 0 && w % b == 0, "spatial dims {}x{} are not divisible by blocksize {}", h, w,
            b);
  std::vector<int64_t> out_dims = {n, c * b * b, h / b, w / b};
  checked_numel(ctx, out_dims);
  ctx.set_output(0, remap(x, out_dims, [&](const std::vector<int64_t>& o) {
                   int64_t blk = o[1] / c, ic = o[1] % c;
                   int64_t bh = blk / b, bw = blk % b;
                   return ((o[0] * c + ic) * h + o[2] * b + bh) * w + o[3] * b + bw;
                 }));
}

// Output of DepthToSpace (to_space) or SpaceToDepth for a possibly symbolic NCHW shape.
void infer_block(InferContext& ctx, bool to_space) {
  const TypeInfo* t = tensor_input(ctx, 0);
  if (!t) return;
  std::optional<Shape> out;
  if (t->shape) {
    ctx.check(t->shape->rank() == 4, "input must be 4-D NCHW");
    const int64_t b = block_size(ctx);
    const Shape& s = *t->shape;
    auto scale = [&](const Dim& d, bool up, int64_t f) {
      if (!d.is_static()) return Dim();
      if (up) {
        auto v = mul_dims(d.value(), f);
        return v ? Dim(*v) : Dim();
      }
      ctx.check(d.value() % f == 0, "dimension {} is not divisible by {}", d.value(), f);
      return Dim(d.value() / f);
    };
    out = Shape(
        {s[0], scale(s[1], !to_space, b * b), scale(s[2], to_space, b), scale(s[3], to_space, b)});
  }
  ctx.set_output_type(0, TypeInfo::tensor(t->dtype, out));
}

void infer_depth_to_space(InferContext& ctx) {
  infer_block(ctx, true);
}
void infer_space_to_depth(InferContext& ctx) {
  infer_block(ctx, false);
}

// ---------------------------------------------------------------------------------------------
// ReverseSequence

void reverse_sequence_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& lens_t = ctx.input(1);
  ctx.check(x.rank() >= 2, "input must have rank >= 2, got {}", x.describe());
  const int64_t batch_axis = ctx.attr_int("batch_axis", 1);
  const int64_t time_axis = ctx.attr_int("time_axis", 0);
  ctx.check((batch_axis == 0 || batch_axis == 1) && (time_axis == 0 || time_axis == 1) &&
                batch_axis != time_axis,
            "batch_axis {} and time_axis {} must be 0 and 1 in some order", batch_axis, time_axis);
  const size_t ba = static_cast<size_t>(batch_axis), ta = static_cast<size_t>(time_axis);
  ctx.check(lens_t.rank() == 1 && lens_t.dim(0) == x.dim(ba),
            "sequence_lens must have shape [{}], got {}", x.dim(ba), lens_t.describe());
  std::vector<int64_t> lens = index_values(ctx, lens_t, "sequence_lens");
  for (int64_t l : lens) {
    ctx.check(l >= 0 && l <= x.dim(ta), "sequence length {} is out of range [0, {}]", l, x.dim(ta));
  }
  std::vector<int64_t> strides = row_major_strides(x.dims());
  ctx.set_output(0, remap(x, x.dims(), [&](const std::vector<int64_t>& o) {
                   int64_t len = lens[static_cast<size_t>(o[ba])];
                   int64_t t = o[ta] < len ? len - 1 - o[ta] : o[ta];
                   return flat_offset(o, strides) + (t - o[ta]) * strides[ta];
                 }));
}

// ---------------------------------------------------------------------------------------------
// Compress

void compress_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& cond = ctx.input(1);
  ctx.check(cond.dtype() == DataType::Bool && cond.rank() == 1,
            "condition must be a 1-D bool tensor, got {}", cond.describe());
  Tensor src = x;
  size_t axis = 0;
  if (ctx.has_attr("axis")) {
    ctx.check(x.rank() >= 1, "input must have rank >= 1 when axis is given");
    axis = static_cast<size_t>(
        normalize_axis(ctx, ctx.attr_int("axis"), static_cast<int64_t>(x.rank())));
  } else {
    src = x.reshaped({x.numel()});
  }
  const bool* c = cond.data<bool>();
  std::vector<int64_t> picked;
  for (int64_t i = 0; i < cond.numel(); ++i) {
    if (!c[i]) continue;
    ctx.check(i < src.dim(axis), "condition selects index {} beyond axis size {}", i,
              src.dim(axis));
    picked.push_back(i);
  }
  std::vector<int64_t> out_dims = src.dims();
  out_dims[axis] = static_cast<int64_t>(picked.size());
  std::vector<int64_t> strides = row_major_strides(src.dims());
  ctx.set_output(0, remap(src, out_dims, [&](const std::vector<int64_t>& o) {
                   return flat_offset(o, strides) +
                          (picked[static_cast<size_t>(o[axis])] - o[axis]) * strides[axis];
                 }));
}

void infer_compress(InferContext& ctx) {
  const TypeInfo* t = tensor_input(ctx, 0);
  if (!t) return;
  std::optional<Shape> out = unknown_dims(1);
  if (ctx.has_attr("axis")) {
    out = std::nullopt;
    if (t->shape) {
      ctx.check(t->shape->rank() >= 1, "input must have rank >= 1 when axis is given");
      out = *t->shape;
      size_t axis = static_cast<size_t>(
          normalize_axis(ctx, ctx.attr_int("axis"), static_cast<int64_t>(out->rank())));
      (*out)[axis] = Dim();
    }
  }
  ctx.set_output_type(0, TypeInfo::tensor(t->dtype, out));
}

// ---------------------------------------------------------------------------------------------
// NonZero

void nonzero_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  std::vector<bool> nz(static_cast<size_t>(x.numel()));
  dispatch_dtype<DTypeSet::All>(x.dtype(), "NonZero", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* p = x.data<T>();
    for (int64_t i = 0; i < x.numel(); ++i) {
      if constexpr (std::is_same_v<T, std::string>) {
        nz[static_cast<size_t>(i)] = !p[i].empty();
      } else if constexpr (std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>) {
        nz[static_cast<size_t>(i)] = static_cast<float>(p[i]) != 0.0f;
      } else {
        nz[static_cast<size_t>(i)] = p[i] != T(0);
      }
    }
  });
  int64_t count = 0;
  for (bool b : nz) count += b ? 1 : 0;
  // A scalar is treated as a 1-element vector (numpy's atleast_1d), giving indices of shape
  // [1, count].
  const int64_t r = std::max<int64_t>(static_cast<int64_t>(x.rank()), 1);
  Tensor out(DataType::Int64, {r, count});
  int64_t* po = out.data<int64_t>();
  std::vector<int64_t> index(x.rank(), 0);
  int64_t col = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    if (nz[static_cast<size_t>(i)]) {
      for (size_t a = 0; a < index.size(); ++a)
        po[static_cast<int64_t>(a) * count + col] = index[a];
      ++col;
    }
    detail::next_index(index, x.dims());
  }
  ctx.set_output(0, std::move(out));
}

void infer_nonzero(InferContext& ctx) {
  const TypeInfo* t = tensor_input(ctx, 0);
  Dim rank;
  if (t && t->shape) rank = Dim(std::max<int64_t>(static_cast<int64_t>(t->shape->rank()), 1));
  ctx.set_output_type(0, TypeInfo::tensor(DataType::Int64, Shape({rank, Dim()})));
}

KILN_REGISTER_OP({.op_type = "Range",
                  .kernel = range_kernel,
                  .infer = lenient<infer_range>,
                  .traits = {.flops = flops_zero}});
KILN_REGISTER_OP({.op_type = "EyeLike", .kernel = eyelike_kernel, .infer = lenient<infer_eyelike>});
KILN_REGISTER_OP({.op_type = "Trilu", .kernel = trilu_kernel, .infer = infer_same_as_input0});
KILN_REGISTER_OP({.op_type = "OneHot",
                  .kernel = onehot_kernel,
                  .infer = lenient<infer_onehot>,
                  .traits = {.shape_inputs = slots({1})}});
KILN_REGISTER_OP({.op_type = "DepthToSpace",
                  .kernel = depth_to_space_kernel,
                  .infer = lenient<infer_depth_to_space>,
                  .traits = {.fp16 = {.safe = true}, .quantization = true, .flops = flops_zero}});
KILN_REGISTER_OP({.op_type = "SpaceToDepth",
                  .kernel = space_to_depth_kernel,
                  .infer = lenient<infer_space_to_depth>,
                  .traits = {.fp16 = {.safe = true}, .quantization = true, .flops = flops_zero}});
KILN_REGISTER_OP({.op_type = "ReverseSequence",
                  .kernel = reverse_sequence_kernel,
                  .infer = infer_same_as_input0});
KILN_REGISTER_OP({.op_type = "Compress",
                  .kernel = compress_kernel,
                  .infer = lenient<infer_compress>});
KILN_REGISTER_OP({.op_type = "NonZero", .kernel = nonzero_kernel, .infer = lenient<infer_nonzero>});

}  // namespace
}  // namespace kiln::ops
