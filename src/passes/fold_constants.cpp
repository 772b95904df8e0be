#include <algorithm>
#include <set>

#include "ops/registry.hpp"
#include "passes/pass.hpp"
#include "passes/passes.hpp"

namespace kiln::passes {
namespace {

bool has_subgraph(const ir::Node& n) {
  for (const auto& [name, a] : n.attributes()) {
    if (a.kind() == ir::AttrKind::Graph || a.kind() == ir::AttrKind::Graphs) return true;
  }
  return false;
}

// Shape and Size only need the static shape of their input, not its data.
std::optional<Tensor> fold_from_shape(const ir::Node& n) {
  if (!n.domain().empty() || (n.op_type() != "Shape" && n.op_type() != "Size")) return std::nullopt;
  const ir::Value* in = n.input(0);
  if (!in || !in->type().is_tensor() || !in->type().shape || !in->type().shape->is_static()) {
    return std::nullopt;
  }
  std::vector<int64_t> dims = in->type().shape->values();
  if (n.op_type() == "Size") return Tensor::scalar<int64_t>(shape_numel(dims));
  int64_t rank = static_cast<int64_t>(dims.size());
  auto clamp = [&](int64_t v) { return std::clamp(v < 0 ? v + rank : v, int64_t{0}, rank); };
  int64_t start = 0, end = rank;
  if (const ir::Attribute* a = n.attribute("start")) start = clamp(std::get<int64_t>(a->storage()));
  if (const ir::Attribute* a = n.attribute("end")) end = clamp(std::get<int64_t>(a->storage()));
  std::vector<int64_t> slice(dims.begin() + start, dims.begin() + std::max(start, end));
  return Tensor::from_vector<int64_t>({static_cast<int64_t>(slice.size())}, slice);
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
  return apply_recursively(root, [limit](ir::Graph& g) {
    bool changed = false;
    for (ir::Node* n : g.nodes()) {
      if (is_nondeterministic(*n) || has_subgraph(*n)) continue;
      if (auto t = fold_from_shape(*n)) {
        g.replace_node_with_constants(n, {std::move(*t)});
        changed = true;
        continue;
      }
      bool all_constant = !n->inputs().empty();
      for (const ir::Value* v : n->inputs()) all_constant &= !v || v->is_constant();
      if (!all_constant) continue;
      const ops::OpDef* def =
          ops::OpRegistry::instance().find(n->domain(), n->op_type(), n->opset());
      if (!def) continue;
      std::vector<RtValue> inputs;
      inputs.reserve(n->inputs().size());
      for (const ir::Value* v : n->inputs())
        inputs.push_back(v ? RtValue(v->constant()) : RtValue());
      std::vector<const RtValue*> ptrs;
      for (size_t i = 0; i < inputs.size(); ++i) ptrs.push_back(n->input(i) ? &inputs[i] : nullptr);
      std::vector<RtValue> outputs(n->outputs().size());
      ops::KernelContext ctx(*n, ptrs, outputs, nullptr);
      try {
        def->kernel(ctx);
      } catch (const Error&) {
        continue;  // left for run time, where the error reaches the user with its inputs
      }
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
