// Unique: distinct elements (or distinct slices along an axis) with first-occurrence indices,
// inverse indices and counts, sorted or in order of appearance.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "ops/movement_utils.hpp"
#include "ops/op_utils.hpp"
#include "ops/registry.hpp"

namespace kiln::ops {
namespace {

// Three-way compare with NaN ordered after every number and equal to other NaNs (numpy's
// sort order), so the sort below sees a strict weak ordering.
template <typename T>
int compare_elems(const T& a, const T& b) {
  if constexpr (std::is_same_v<T, std::string> || std::is_integral_v<T>) {
    return a < b ? -1 : (b < a ? 1 : 0);
  } else {
    double x = static_cast<double>(static_cast<float>(a));
    double y = static_cast<double>(static_cast<float>(b));
    if constexpr (std::is_same_v<T, double>) {
      x = a;
      y = b;
    }
    bool nx = std::isnan(x), ny = std::isnan(y);
    if (nx || ny) return nx == ny ? 0 : (nx ? 1 : -1);
    return x < y ? -1 : (y < x ? 1 : 0);
  }
}

void unique_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const bool sorted = ctx.attr_int("sorted", 1) != 0;
  const bool has_axis = ctx.has_attr("axis");
  Tensor src = has_axis ? x : x.reshaped({x.numel()});
  if (has_axis) ctx.check(x.rank() >= 1, "input must have rank >= 1 when axis is given");
  const size_t axis = has_axis ? static_cast<size_t>(normalize_axis(ctx, ctx.attr_int("axis"),
                                                                    static_cast<int64_t>(x.rank())))
                               : 0;
  // Item k is the slice src[..., k, ...] along `axis`; its elements are visited in row-major
  // order of the remaining dims, which is how numpy compares sub-arrays.
  const int64_t n = src.dim(axis);
  int64_t outer = 1, inner = 1;
  for (size_t i = 0; i < src.rank(); ++i) {
    if (i < axis) outer *= src.dim(i);
    if (i > axis) inner *= src.dim(i);
  }
  std::vector<int64_t> elem_offsets;
  elem_offsets.reserve(static_cast<size_t>(outer * inner));
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t in = 0; in < inner; ++in) elem_offsets.push_back(o * n * inner + in);
  }
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  std::vector<bool> same_as_prev(static_cast<size_t>(n), false);
  dispatch_dtype<DTypeSet::All>(x.dtype(), "Unique", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* p = src.data<T>();
    auto cmp = [&](int64_t a, int64_t b) {
      for (int64_t off : elem_offsets) {
        int c = compare_elems<T>(p[off + a * inner], p[off + b * inner]);
        if (c != 0) return c;
      }
      return 0;
    };
    // Stable: within a group of equal items the first occurrence comes first.
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return cmp(a, b) < 0; });
    for (size_t i = 1; i < order.size(); ++i) same_as_prev[i] = cmp(order[i - 1], order[i]) == 0;
  });
  // Groups in value order: first occurrence and count.
  std::vector<int64_t> first, counts, group_of(static_cast<size_t>(n));
  for (size_t i = 0; i < order.size(); ++i) {
    if (i == 0 || !same_as_prev[i]) {
      first.push_back(order[i]);
      counts.push_back(0);
    }
    ++counts.back();
    group_of[static_cast<size_t>(order[i])] = static_cast<int64_t>(first.size()) - 1;
  }
  const size_t u = first.size();
  std::vector<size_t> pos(u);  // output position of each group
  std::iota(pos.begin(), pos.end(), size_t{0});
  if (!sorted) {
    std::vector<size_t> by_first(u);
    std::iota(by_first.begin(), by_first.end(), size_t{0});
    std::sort(by_first.begin(), by_first.end(),
              [&](size_t a, size_t b) { return first[a] < first[b]; });
    for (size_t i = 0; i < u; ++i) pos[by_first[i]] = i;
  }
  std::vector<int64_t> indices(u), out_counts(u), inverse(static_cast<size_t>(n));
  for (size_t g = 0; g < u; ++g) {
    indices[pos[g]] = first[g];
    out_counts[pos[g]] = counts[g];
  }
  for (size_t k = 0; k < inverse.size(); ++k) {
    inverse[k] = static_cast<int64_t>(pos[static_cast<size_t>(group_of[k])]);
  }
  std::vector<int64_t> y_dims = src.dims();
  y_dims[axis] = static_cast<int64_t>(u);
  std::vector<int64_t> strides = row_major_strides(src.dims());
  ctx.set_output(0, remap(src, y_dims, [&](const std::vector<int64_t>& o) {
                   return flat_offset(o, strides) +
                          (indices[static_cast<size_t>(o[axis])] - o[axis]) * strides[axis];
                 }));
  const int64_t ul = static_cast<int64_t>(u);
  if (ctx.wants_output(1)) ctx.set_output(1, Tensor::from_vector<int64_t>({ul}, indices));
  if (ctx.wants_output(2)) ctx.set_output(2, Tensor::from_vector<int64_t>({n}, inverse));
  if (ctx.wants_output(3)) ctx.set_output(3, Tensor::from_vector<int64_t>({ul}, out_counts));
}

void infer_unique(InferContext& ctx) {
  const TypeInfo* t = tensor_input(ctx, 0);
  if (!t) return;
  std::optional<Shape> y = unknown_dims(1);
  Dim n;
  if (ctx.has_attr("axis")) {
    y = std::nullopt;
    if (t->shape) {
      ctx.check(t->shape->rank() >= 1, "input must have rank >= 1 when axis is given");
      y = *t->shape;
      size_t axis = static_cast<size_t>(
          normalize_axis(ctx, ctx.attr_int("axis"), static_cast<int64_t>(y->rank())));
      n = (*y)[axis];
      (*y)[axis] = Dim();
    }
  } else if (t->shape && t->shape->is_static()) {
    int64_t count = 1;
    bool ok = true;
    for (const Dim& d : t->shape->dims()) {
      auto v = mul_dims(count, d.value());
      ok = ok && v.has_value();
      if (ok) count = *v;
    }
    if (ok) n = Dim(count);
  }
  ctx.set_output_type(0, TypeInfo::tensor(t->dtype, y));
  for (size_t i = 1; i < ctx.output_count() && i < 4; ++i) {
    ctx.set_output_type(i, TypeInfo::tensor(DataType::Int64, Shape({i == 2 ? n : Dim()})));
  }
}

KILN_REGISTER_OP({.op_type = "Unique", .kernel = unique_kernel, .infer = lenient<infer_unique>});

}  // namespace
}  // namespace kiln::ops
