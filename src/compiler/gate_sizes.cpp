#include "compiler/gate_sizes.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "compiler/flops.hpp"

namespace kiln::compiler {
namespace {

struct Range {
  int64_t min = 1, max = 1;
};

// The symbolic dims of the inputs with a bounded range wider than one value, that the caller did
// not fix.
std::map<std::string, Range> ranged_dims(const std::vector<IoInfo>& inputs,
                                         const std::map<std::string, int64_t>& fixed) {
  std::map<std::string, Range> out;
  auto visit = [&](const TypeInfo& t, auto& self) -> void {
    if (t.shape) {
      for (const Dim& d : t.shape->dims()) {
        if (!d.is_symbolic() || fixed.count(d.symbol_name())) continue;
        if (d.max() == std::numeric_limits<int64_t>::max() || d.max() <= d.min()) continue;
        out[d.symbol_name()] = {std::max<int64_t>(1, d.min()), d.max()};
      }
    }
    if (t.elem) self(*t.elem, self);
  };
  for (const IoInfo& in : inputs) visit(in.type, visit);
  return out;
}

// Every ranged dim at `scale` of the way from its low end to its top (0: the low end, 1: the
// top), rounded down.
std::map<std::string, int64_t> dims_at(const std::map<std::string, Range>& ranges,
                                       const std::map<std::string, int64_t>& fixed, double scale) {
  std::map<std::string, int64_t> dims = fixed;
  for (const auto& [name, r] : ranges)
    dims[name] =
        r.min + static_cast<int64_t>(std::floor(scale * static_cast<double>(r.max - r.min)));
  return dims;
}

}  // namespace

std::vector<GateSize> choose_gate_sizes(const std::vector<IoInfo>& inputs,
                                        const ir::Graph& compiled,
                                        const std::map<std::string, int64_t>& fixed,
                                        double budget) {
  const std::map<std::string, Range> ranges = ranged_dims(inputs, fixed);
  auto size_at = [&](double scale, std::string label) {
    GateSize s;
    s.dims = dims_at(ranges, fixed, scale);
    s.flops = count_flops(compiled, s.dims).total;
    s.label = std::move(label);
    return s;
  };
  std::vector<GateSize> sizes{size_at(0, "low end")};
  if (ranges.empty()) return sizes;
  GateSize top = size_at(1, "top");
  if (budget <= 0 || top.flops <= budget) {
    sizes.push_back(std::move(top));
    return sizes;
  }
  // The largest scale whose reference run fits the budget (FLOPs grow with every dim, so the
  // search is a bisection), taken when it moves some dim off its low end.
  double lo = 0, hi = 1;
  for (int i = 0; i < 24; ++i) {
    const double mid = (lo + hi) / 2;
    (count_flops(compiled, dims_at(ranges, fixed, mid)).total <= budget ? lo : hi) = mid;
  }
  GateSize inside = size_at(lo, "inside the range");
  if (inside.dims != sizes.front().dims) sizes.push_back(std::move(inside));
  top.reference = false;
  sizes.push_back(std::move(top));
  return sizes;
}

std::string describe_dims(const GateSize& size, const std::map<std::string, int64_t>& fixed) {
  std::string s;
  for (const auto& [name, value] : size.dims) {
    if (fixed.count(name)) continue;
    s += fmt::format("{}{}={}", s.empty() ? "" : ", ", name, value);
  }
  return s;
}

}  // namespace kiln::compiler
