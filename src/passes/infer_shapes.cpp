#include "onnx/shape_inference.hpp"
#include "passes/pass.hpp"
#include "passes/passes.hpp"

namespace kiln::passes {

bool InferShapes::apply(ir::Graph& graph) const {
  bool changed = false;
  for (ir::Node* n : graph.nodes()) {
    // What the value already carries acts as the declaration: newly static dims (from a fixed
    // input shape) replace symbols, and a real contradiction is an error naming the node.
    std::unordered_map<std::string, TypeInfo> known;
    std::vector<std::string> before;
    for (const ir::Value* v : n->outputs()) {
      if (!v) continue;
      known[v->name()] = v->type();
      before.push_back(v->type().to_string());
    }
    onnx_io::infer_node(*n, known);
    size_t k = 0;
    for (const ir::Value* v : n->outputs()) {
      if (v) changed |= v->type().to_string() != before[k++];
    }
  }
  return changed;
}

void set_input_shape(ir::Graph& graph, const std::string& name, const Shape& shape) {
  for (ir::Value* v : graph.inputs()) {
    if (v->name() != name) continue;
    KILN_CHECK_ARG(v->type().is_tensor(), "input '{}' is not a tensor", name);
    const auto& old = v->type().shape;
    KILN_CHECK_ARG(!old || old->rank() == shape.rank(),
                   "input '{}' has rank {}, the shape {} has {}", name, old->rank(),
                   shape.to_string(), shape.rank());
    Shape merged = shape;
    for (size_t i = 0; old && i < shape.rank(); ++i) {
      const Dim& d = (*old)[i];
      KILN_CHECK_ARG(!d.is_static() || (shape[i].min() <= d.value() && d.value() <= shape[i].max()),
                     "input '{}': dim {} is fixed at {} by the model, cannot be {}", name, i,
                     d.value(), shape[i].to_string());
      if (d.is_static()) merged[i] = d;
      // A range keeps the model's symbol name so equal dims elsewhere stay recognisably equal.
      if (!shape[i].is_static() && d.is_symbolic()) {
        merged[i] = Dim::symbol(d.symbol_name(), shape[i].min(), shape[i].max());
      }
    }
    v->set_type(TypeInfo::tensor(v->type().dtype, merged));
    return;
  }
  fail(ErrorCode::NotFound, "the model has no input named '{}'", name);
}

}  // namespace kiln::passes
