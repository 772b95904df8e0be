#include "ops/op_utils.hpp"

#include "core/shape.hpp"

namespace kiln::ops {

int64_t normalize_axis(const AttrReader& ctx, int64_t axis, int64_t rank) {
  int64_t a = axis < 0 ? axis + rank : axis;
  ctx.check(a >= 0 && a < std::max<int64_t>(rank, 1), "axis {} is out of range for rank {}", axis,
            rank);
  return a;
}

std::vector<int64_t> row_major_strides(const std::vector<int64_t>& dims) {
  std::vector<int64_t> strides(dims.size(), 1);
  for (size_t i = dims.size(); i-- > 1;) strides[i - 1] = strides[i] * dims[i];
  return strides;
}

std::vector<int64_t> broadcast_dims(const AttrReader& ctx,
                                    const std::vector<std::vector<int64_t>>& shapes) {
  size_t rank = 0;
  for (const auto& s : shapes) rank = std::max(rank, s.size());
  std::vector<int64_t> out(rank, 1);
  for (const auto& s : shapes) {
    size_t off = rank - s.size();
    for (size_t i = 0; i < s.size(); ++i) {
      int64_t d = s[i];
      int64_t& o = out[off + i];
      if (d == o || d == 1) continue;
      if (o == 1) {
        o = d;
        continue;
      }
      std::string all;
      for (const auto& x : shapes) all += dims_to_string(x) + " ";
      ctx.fail("shapes {}cannot be broadcast together", all);
    }
  }
  return out;
}

std::vector<int64_t> broadcast_strides(const std::vector<int64_t>& in_dims,
                                       const std::vector<int64_t>& out_dims) {
  std::vector<int64_t> in_strides = row_major_strides(in_dims);
  std::vector<int64_t> out(out_dims.size(), 0);
  size_t off = out_dims.size() - in_dims.size();
  for (size_t i = 0; i < in_dims.size(); ++i) {
    out[off + i] = in_dims[i] == 1 ? 0 : in_strides[i];
  }
  return out;
}

std::vector<int64_t> optional_int_input(const KernelContext& ctx, size_t i) {
  if (!ctx.has_input(i)) return {};
  return ctx.input(i).to_int64_vector();
}

}  // namespace kiln::ops
