#include "compiler/prune_targets.hpp"

#include <fmt/format.h>

#include <map>

namespace kiln::compiler {

std::string node_display(const ir::Node& node, int index) {
  return node.name().empty() ? fmt::format("{} #{}", node.op_type(), index) : node.name();
}

WeightLayers find_weight_layers(const ir::Graph& g, const std::vector<std::string>& op_types,
                                const std::set<std::string>& excluded) {
  const std::set<std::string> ops(op_types.begin(), op_types.end());
  WeightLayers out;
  std::map<std::string, int> seen;
  for (ir::Node* n : g.nodes()) {
    if (!n->domain().empty() || !ops.count(n->op_type())) continue;
    // Counted before any skip, so that names stay the same whatever is pruned.
    const std::string display = node_display(*n, seen[n->op_type()]++);
    if (excluded.count(display)) continue;
    ir::Value* w = n->input(1);
    if (!w) {
      out.skipped.emplace_back(display, "it has no weight input");
      continue;
    }
    if (!w->is_constant()) {
      out.skipped.emplace_back(
          display, fmt::format("its weight '{}' is computed, not an initializer", w->name()));
      continue;
    }
    if (w->constant().dtype() != DataType::Float32) {
      out.skipped.emplace_back(display, fmt::format("its weight '{}' is {}, not float32", w->name(),
                                                    w->constant().describe()));
      continue;
    }
    const size_t rank = w->constant().rank();
    WeightLayer layer{n, w, display, 0, 1};
    if (n->op_type() == "Conv") {
      if (rank < 3) {
        out.skipped.emplace_back(display, "its weight has rank below 3");
        continue;
      }
    } else if (rank != 2) {
      out.skipped.emplace_back(display, fmt::format("its weight has rank {}, not 2", rank));
      continue;
    } else if (n->op_type() == "Gemm") {
      const ir::Attribute* ta = n->attribute("transA");
      if (ta && ta->get<int64_t>("transA") != 0) {
        out.skipped.emplace_back(display, "transA is set");
        continue;
      }
      const ir::Attribute* tb = n->attribute("transB");
      const bool trans_b = tb && tb->get<int64_t>("transB") != 0;
      layer.output_axis = trans_b ? 0 : 1;
      layer.reduction_axis = trans_b ? 1 : 0;
    } else {  // MatMul: [K, N]
      layer.output_axis = 1;
      layer.reduction_axis = 0;
    }
    out.layers.push_back(layer);
  }
  return out;
}

}  // namespace kiln::compiler
