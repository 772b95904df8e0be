#include <algorithm>
#include <map>
#include <set>

#include "passes/pass.hpp"
#include "passes/passes.hpp"
#include "passes/shape_folding.hpp"

namespace kiln::passes {
namespace {

// A DequantizeLinear of an int8 constant that a convolution or matrix product reads as its
// weight: FuseQuantizedOps makes it an int8 kernel's operand (and folds it when it does not).
bool int8_weight_dequantize(const ir::Node& n,
                            const std::map<const ir::Value*, std::vector<ir::Node*>>& uses) {
  static const std::set<std::string> kReaders = {"Conv",        "FusedConv", "MatMul",
                                                 "FusedMatMul", "Gemm",      "FusedGemm"};
  if (n.op_type() != "DequantizeLinear" || !(n.domain().empty() || n.domain() == "ai.onnx") ||
      n.inputs().empty() || !n.input(0) || !n.input(0)->is_constant() ||
      (n.input(0)->constant().dtype() != DataType::Int8 &&
       n.input(0)->constant().dtype() != DataType::UInt8) ||
      n.outputs().size() != 1) {
    return false;
  }
  auto it = uses.find(n.output(0));
  if (it == uses.end()) return false;
  for (const ir::Node* r : it->second) {
    if (!kReaders.count(r->op_type()) || r->inputs().size() < 2 || r->input(1) != n.output(0) ||
        !r->input(0) || !r->input(0)->producer() ||
        r->input(0)->producer()->op_type() != "DequantizeLinear" || r->outputs().empty()) {
      continue;
    }
    // A BatchNormalization after it folds into float32 weights instead (FuseConvBatchNorm).
    auto after = uses.find(r->output(0));
    const bool batchnorm =
        after != uses.end() &&
        std::any_of(after->second.begin(), after->second.end(),
                    [](const ir::Node* b) { return b->op_type() == "BatchNormalization"; });
    if (!batchnorm) return true;
  }
  return false;
}

bool has_subgraph(const ir::Node& n) {
  for (const auto& [name, a] : n.attributes()) {
    if (a.kind() == ir::AttrKind::Graph || a.kind() == ir::AttrKind::Graphs) return true;
  }
  return false;
}

}  // namespace

bool is_nondeterministic(const ir::Node& n) {
  static const std::set<std::string> kRandomOps = {"RandomNormal",  "RandomNormalLike",
                                                   "RandomUniform", "RandomUniformLike",
                                                   "Bernoulli",     "Multinomial"};
  if (n.domain().empty() && kRandomOps.count(n.op_type())) return true;
  return n.op_type() == "Dropout" && n.input(2) && !n.input(2)->is_constant();
}

bool FoldConstants::apply(ir::Graph& root) const {
  size_t limit = max_bytes;
  const bool keep_weights = keep_int8_weights;
  return apply_recursively(root, [limit, keep_weights](ir::Graph& g) {
    bool changed = false;
    std::map<const ir::Value*, std::vector<ir::Node*>> uses;
    if (keep_weights) uses = g.compute_uses();
    for (ir::Node* n : g.nodes()) {
      if (is_nondeterministic(*n) || has_subgraph(*n)) continue;
      if (keep_weights && int8_weight_dequantize(*n, uses)) continue;
      if (auto t = fold_shape_value(*n)) {
        g.replace_node_with_constants(n, {std::move(*t)});
        changed = true;
        continue;
      }
      if (auto shape = reshape_target_from_dims(*n)) {
        n->set_input(
            1, g.add_initializer(g.unique_name(n->input(1)->name() + "_dims"), std::move(*shape)));
        changed = true;
        continue;
      }
      // A node without inputs is constant only when it is a Constant (random generators and
      // sequence constructors have none either).
      bool all_constant = !n->inputs().empty() || n->op_type() == "Constant";
      for (const ir::Value* v : n->inputs()) all_constant &= !v || v->is_constant();
      if (!all_constant) continue;
      std::vector<RtValue> inputs;
      inputs.reserve(n->inputs().size());
      for (const ir::Value* v : n->inputs())
        inputs.push_back(v ? RtValue(v->constant()) : RtValue());
      std::optional<std::vector<RtValue>> evaluated = evaluate_node(*n, inputs);
      if (!evaluated) continue;
      std::vector<RtValue>& outputs = *evaluated;
      std::vector<Tensor> values;
      size_t bytes = 0;
      bool foldable = true;
      for (size_t i = 0; i < outputs.size(); ++i) {
        if (!n->output(i)) {
          values.emplace_back();
          continue;
        }
        foldable &= outputs[i].is_tensor();
        if (!foldable) break;
        bytes += outputs[i].tensor().nbytes();
        values.push_back(outputs[i].tensor());
      }
      if (!foldable || bytes > limit) continue;
      g.replace_node_with_constants(n, std::move(values));
      changed = true;
    }
    return changed;
  });
}

}  // namespace kiln::passes
