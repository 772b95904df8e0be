#include "ops/control_utils.hpp"

#include <cstring>

#include "ops/op_utils.hpp"

namespace kiln::ops::ctl {

void copy_elements(const Tensor& src, int64_t src_off, Tensor& dst, int64_t dst_off,
                   int64_t count) {
  if (count <= 0) return;
  if (src.dtype() == DataType::String) {
    const std::string* s = src.data<std::string>() + src_off;
    std::string* d = dst.data<std::string>() + dst_off;
    for (int64_t i = 0; i < count; ++i) d[i] = s[i];
    return;
  }
  const size_t es = dtype_size(src.dtype());
  std::memcpy(static_cast<char*>(dst.raw_data()) + dst_off * es,
              static_cast<const char*>(src.raw_data()) + src_off * es, count * es);
}

namespace {
int64_t prod(const std::vector<int64_t>& d, size_t from, size_t to) {
  int64_t p = 1;
  for (size_t i = from; i < to; ++i) p *= d[i];
  return p;
}
}  // namespace

Tensor slice_axis(const Tensor& t, int64_t axis, int64_t start, int64_t len) {
  std::vector<int64_t> dims = t.dims();
  const size_t ax = static_cast<size_t>(axis);
  const int64_t outer = prod(dims, 0, ax), inner = prod(dims, ax + 1, dims.size());
  const int64_t n = dims[ax];
  dims[ax] = len;
  Tensor out(t.dtype(), dims);
  for (int64_t o = 0; o < outer; ++o) {
    copy_elements(t, (o * n + start) * inner, out, o * len * inner, len * inner);
  }
  return out;
}

Tensor take_axis(const Tensor& t, int64_t axis, int64_t index) {
  Tensor s = slice_axis(t, axis, index, 1);
  std::vector<int64_t> dims = t.dims();
  dims.erase(dims.begin() + axis);
  return s.reshaped(dims);
}

Tensor concat_axis(const AttrReader& ctx, const std::vector<Tensor>& parts, int64_t axis) {
  ctx.check(!parts.empty(), "nothing to concatenate");
  const Tensor& first = parts[0];
  const size_t ax = static_cast<size_t>(axis);
  ctx.check(ax < first.rank(), "axis {} is out of range for rank {}", axis, first.rank());
  std::vector<int64_t> dims = first.dims();
  int64_t total = 0;
  for (const Tensor& p : parts) {
    ctx.check(p.dtype() == first.dtype(), "element types differ: {} vs {}", dtype_name(p.dtype()),
              dtype_name(first.dtype()));
    ctx.check(p.rank() == first.rank(), "ranks differ: {} vs {}", p.describe(), first.describe());
    for (size_t i = 0; i < dims.size(); ++i) {
      ctx.check(i == ax || p.dim(i) == dims[i], "shapes {} and {} differ off the concat axis",
                p.describe(), first.describe());
    }
    total += p.dim(ax);
  }
  dims[ax] = total;
  Tensor out(first.dtype(), dims);
  const int64_t outer = prod(dims, 0, ax), inner = prod(dims, ax + 1, dims.size());
  int64_t offset = 0;
  for (const Tensor& p : parts) {
    const int64_t n = p.dim(ax);
    for (int64_t o = 0; o < outer; ++o) {
      copy_elements(p, o * n * inner, out, (o * total + offset) * inner, n * inner);
    }
    offset += n;
  }
  return out;
}

Tensor stack_axis(const AttrReader& ctx, const std::vector<Tensor>& parts, int64_t axis) {
  ctx.check(!parts.empty(), "nothing to stack");
  std::vector<Tensor> expanded;
  expanded.reserve(parts.size());
  for (const Tensor& p : parts) {
    ctx.check(p.dims() == parts[0].dims(), "cannot stack {} with {}", p.describe(),
              parts[0].describe());
    std::vector<int64_t> dims = p.dims();
    ctx.check(axis >= 0 && static_cast<size_t>(axis) <= dims.size(), "stack axis {} out of range",
              axis);
    dims.insert(dims.begin() + axis, 1);
    expanded.push_back(p.reshaped(dims));
  }
  return concat_axis(ctx, expanded, axis);
}

bool scalar_bool(const AttrReader& ctx, const Tensor& t, const char* what) {
  ctx.check(t.numel() == 1, "{} must hold one element, got {}", what, t.describe());
  ctx.check(t.dtype() == DataType::Bool || dtype_is_integer(t.dtype()), "{} must be bool, got {}",
            what, t.describe());
  return t.int_at(0) != 0;
}

int64_t scalar_int(const AttrReader& ctx, const Tensor& t, const char* what) {
  ctx.check(t.numel() == 1, "{} must hold one element, got {}", what, t.describe());
  ctx.check(dtype_is_integer(t.dtype()), "{} must be an integer, got {}", what, t.describe());
  return t.int_at(0);
}

}  // namespace kiln::ops::ctl
