#include "compiler/flops.hpp"

#include <optional>

#include <fmt/format.h>

#include "ops/op_flops.hpp"
#include "ops/op_traits.hpp"

namespace kiln::compiler {
namespace {

using Dims = std::vector<int64_t>;

class ShapeReader {
 public:
  ShapeReader(const std::map<std::string, int64_t>& dims, FlopCount& count)
      : dims_(dims), count_(count) {}

  std::optional<Dims> operator()(const ir::Value* v) const {
    if (!v) return std::nullopt;
    if (v->is_constant()) return v->constant().dims();
    const TypeInfo& t = v->type();
    if (!t.is_tensor() || !t.shape) return std::nullopt;
    Dims out;
    for (const Dim& d : t.shape->dims()) {
      if (d.is_static()) {
        out.push_back(d.value());
      } else if (d.is_symbolic()) {
        auto it = dims_.find(d.symbol_name());
        int64_t value = it != dims_.end() ? it->second : std::max<int64_t>(1, d.min());
        count_.assumed[d.symbol_name()] = value;
        out.push_back(value);
      } else {
        return std::nullopt;
      }
    }
    return out;
  }

 private:
  const std::map<std::string, int64_t>& dims_;
  FlopCount& count_;
};

// FLOPs of one node, by its op's formula (OpTraits::flops, src/ops/op_flops.hpp); ops without
// one count one operation per output element. nullopt when a shape it needs is unknown.
std::optional<double> node_flops(const ir::Node& n, const ShapeReader& shape) {
  const ops::FlopsFn fn = ops::traits_of(n).flops;
  // Read first for every node, so `assumed` lists the symbolic dims of every output, counted or
  // not (formulas that need no shape never read one).
  shape(n.output(0));
  const ops::ValueDims dims = [&](const ir::Value* v) { return shape(v); };
  return fn ? fn(n, dims) : ops::flops_per_output(n, dims);
}

}  // namespace

FlopCount count_flops(const ir::Graph& graph, const std::map<std::string, int64_t>& dims) {
  FlopCount count;
  ShapeReader shape(dims, count);
  for (const ir::Node* n : graph.nodes()) {
    if (n->op_type() == "If" || n->op_type() == "Loop" || n->op_type() == "Scan") {
      ++count.control_flow;
      continue;
    }
    std::string key = n->domain().empty() ? n->op_type() : n->domain() + "." + n->op_type();
    std::optional<double> f = node_flops(*n, shape);
    if (!f) {
      ++count.uncounted[key];
      continue;
    }
    count.by_op_type[key] += *f;
    count.by_node[n] = *f;
    count.total += *f;
  }
  return count;
}

std::string si_number(double value) {
  static const char* kUnits[] = {"", " K", " M", " G", " T", " P"};
  int unit = 0;
  while (value >= 1000 && unit < 5) {
    value /= 1000;
    ++unit;
  }
  return unit == 0 ? fmt::format("{:.0f}", value) : fmt::format("{:.3g}{}", value, kUnits[unit]);
}

}  // namespace kiln::compiler
