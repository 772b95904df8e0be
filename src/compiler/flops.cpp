#include "compiler/flops.hpp"

#include <optional>
#include <set>

#include <fmt/format.h>

#include "ops/fused_activation.hpp"

namespace kiln::compiler {
namespace {

using Dims = std::vector<int64_t>;

double numel(const Dims& d) {
  double n = 1;
  for (int64_t x : d) n *= static_cast<double>(x);
  return n;
}

double product_from(const Dims& d, size_t first) {
  double n = 1;
  for (size_t i = first; i < d.size(); ++i) n *= static_cast<double>(d[i]);
  return n;
}

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

const std::set<std::string>& data_movement_ops() {
  static const std::set<std::string> ops = {"Reshape",
                                            "Transpose",
                                            "Flatten",
                                            "Squeeze",
                                            "Unsqueeze",
                                            "Concat",
                                            "Split",
                                            "Slice",
                                            "Gather",
                                            "GatherND",
                                            "GatherElements",
                                            "Shape",
                                            "Size",
                                            "Identity",
                                            "Cast",
                                            "CastLike",
                                            "Expand",
                                            "Pad",
                                            "Tile",
                                            "Constant",
                                            "ConstantOfShape",
                                            "Range",
                                            "Dropout",
                                            "ScatterND",
                                            "ScatterElements",
                                            "DepthToSpace",
                                            "SpaceToDepth",
                                            "Optional",
                                            "OptionalGetElement",
                                            "SequenceConstruct",
                                            "SequenceAt",
                                            "SequenceInsert",
                                            "SplitToSequence",
                                            "ConcatFromSequence"};
  return ops;
}

bool is_reduction(const std::string& op) {
  return op.rfind("Reduce", 0) == 0 || op == "GlobalAveragePool" || op == "GlobalMaxPool" ||
         op == "GlobalLpPool" || op == "ArgMax" || op == "ArgMin";
}

// FLOPs of one node; nullopt when a shape it needs is unknown.
std::optional<double> node_flops(const ir::Node& n, const ShapeReader& shape) {
  std::string op = n.op_type();
  bool fused = n.domain() == ops::kKilnDomain && op.rfind("Fused", 0) == 0;
  if (fused) op = op.substr(5);
  std::optional<Dims> y = shape(n.output(0));
  double extra = 0;  // the fused activation and the bias: one op per output element each
  if (op == "Conv" || op == "ConvTranspose" || op == "Gemm" || op == "MatMul") {
    if (!y) return std::nullopt;
    if (fused) extra += numel(*y);
    if (n.input(2)) extra += numel(*y);  // bias (plain MatMul has none)
  }
  if (op == "Conv") {
    auto w = shape(n.input(1));
    if (!w || w->size() < 2) return std::nullopt;
    return 2 * numel(*y) * product_from(*w, 1) + extra;
  }
  if (op == "ConvTranspose") {
    auto x = shape(n.input(0));
    auto w = shape(n.input(1));
    if (!x || !w || w->size() < 2) return std::nullopt;
    return 2 * numel(*x) * product_from(*w, 1) + extra;
  }
  if (op == "Gemm") {
    auto a = shape(n.input(0));
    if (!a || a->size() != 2) return std::nullopt;
    const ir::Attribute* trans = n.attribute("transA");
    bool trans_a = trans && std::get_if<int64_t>(&trans->storage()) &&
                   *std::get_if<int64_t>(&trans->storage()) != 0;
    double k = static_cast<double>(trans_a ? (*a)[0] : (*a)[1]);
    return 2 * numel(*y) * k + extra;
  }
  if (op == "MatMul") {
    auto a = shape(n.input(0));
    if (!a || a->empty()) return std::nullopt;
    return 2 * numel(*y) * static_cast<double>(a->back()) + extra;
  }
  if (data_movement_ops().count(op)) return 0.0;
  if (op == "MaxPool" || op == "AveragePool" || op == "LpPool") {
    const ir::Attribute* k = n.attribute("kernel_shape");
    auto* ks = k ? std::get_if<std::vector<int64_t>>(&k->storage()) : nullptr;
    if (!y || !ks) return std::nullopt;
    double window = 1;
    for (int64_t v : *ks) window *= static_cast<double>(v);
    return numel(*y) * window;
  }
  if (is_reduction(op)) {
    auto x = shape(n.input(0));
    if (!x) return std::nullopt;
    return numel(*x);
  }
  if (!y) return std::nullopt;
  return numel(*y);
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
