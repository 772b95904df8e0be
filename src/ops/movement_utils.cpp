#include "ops/movement_utils.hpp"

#include "ops/shape_values.hpp"

#include <algorithm>
#include <limits>

namespace kiln::ops {

int64_t checked_numel(const AttrReader& ctx, const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) {
    ctx.check(d >= 0, "negative dimension {} in {}", d, dims_to_string(dims));
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / d) {
      ctx.fail("element count of {} overflows", dims_to_string(dims));
    }
    n *= d;
  }
  return n;
}

std::vector<int64_t> index_values(const AttrReader& ctx, const Tensor& t, const char* what) {
  ctx.check(t.dtype() == DataType::Int64 || t.dtype() == DataType::Int32,
            "{} must be int32 or int64, got {}", what, dtype_name(t.dtype()));
  return t.to_int64_vector();
}

std::vector<int64_t> normalize_axes(const AttrReader& ctx, const std::vector<int64_t>& axes,
                                    int64_t rank) {
  std::vector<int64_t> out;
  out.reserve(axes.size());
  for (int64_t a : axes) {
    int64_t n = a < 0 ? a + rank : a;
    ctx.check(n >= 0 && n < rank, "axis {} is out of range for rank {}", a, rank);
    ctx.check(std::find(out.begin(), out.end(), n) == out.end(), "axis {} is repeated", a);
    out.push_back(n);
  }
  return out;
}

const TypeInfo* tensor_input(const InferContext& ctx, size_t i) {
  if (!ctx.has_input(i)) return nullptr;
  const TypeInfo* t = ctx.input_type(i);
  return t && t->is_tensor() ? t : nullptr;
}

std::optional<std::vector<int64_t>> constant_ints(const InferContext& ctx, size_t i) {
  if (!ctx.has_input(i)) return std::nullopt;
  if (const Tensor* t = ctx.input_constant(i)) {
    if (!(dtype_is_integer(t->dtype()) || t->dtype() == DataType::Bool)) return std::nullopt;
    return t->to_int64_vector();
  }
  auto values = input_sym_values(ctx, i);
  if (!values) return std::nullopt;
  std::vector<int64_t> out;
  for (const SymValue& v : *values) {
    if (!v.number) return std::nullopt;
    out.push_back(*v.number);
  }
  return out;
}

std::optional<int64_t> static_length(const InferContext& ctx, size_t i) {
  const TypeInfo* t = tensor_input(ctx, i);
  if (!t || !t->shape || t->shape->rank() != 1 || !(*t->shape)[0].is_static()) return std::nullopt;
  // Used as a rank: a length beyond any sensible rank is treated as unknown rather than
  // materialized as that many dims.
  int64_t n = (*t->shape)[0].value();
  if (n > 4096) return std::nullopt;
  return n;
}

Shape unknown_dims(size_t rank) {
  return Shape(std::vector<Dim>(rank));
}

}  // namespace kiln::ops
