// Element-wise ops in a row (each result read only by the next, all of one shape) become one
// ai.kiln PointChain: one kernel reads the chain's input and its operands once and writes the
// last result, where each op would read and write the whole tensor. A binary op's other operand
// (a constant, a bias, another activation) must broadcast into the chain's shape without
// growing it; at most three such operands and eight ops a chain (ops/point_chain.hpp).
//
// A device pass (add_device_passes): the GPU runs the chain as one kernel; the CPU's element-wise
// kernels are oneDNN's and its fusions its own.
#include <algorithm>
#include <vector>

#include "ops/fused_activation.hpp"
#include "ops/point_chain_nodes.hpp"
#include "passes/passes.hpp"
#include "passes/pattern_utils.hpp"

namespace kiln::passes {
namespace {

// `v` broadcasts into `shape` without growing it: no more dims, each one equal or 1.
bool broadcasts_into(const ir::Value* v, const Shape& shape) {
  if (!v || !v->type().is_tensor() || !v->type().shape) return false;
  const Shape& s = *v->type().shape;
  if (s.rank() > shape.rank()) return false;
  for (size_t k = 0; k < s.rank(); ++k) {
    const Dim& d = s[s.rank() - 1 - k];
    const Dim& out = shape[shape.rank() - 1 - k];
    if (!(d.is_static() && d.value() == 1) && !same_dim(d, out)) return false;
  }
  return true;
}

// The step of `node` on the running value `value` (a node input), its other operand added to
// `extras` (at most kMaxPointInputs - 1); false when the node cannot join.
bool as_step(const ir::Node& node, const ir::Value* value, const TypeInfo& type,
             std::vector<ir::Value*>& extras, point::PointStep& step) {
  try {
    if (!ops::point_step_of(node, step).empty()) return false;
  } catch (const Error&) {
    return false;  // an attribute of the wrong kind: the op's own kernel says so
  }
  if (node.outputs().size() != 1 || !node.output(0) || node.output(0)->type().dtype != type.dtype ||
      !same_shape(node.output(0), value)) {
    return false;
  }
  if (!point::is_binary(step.op)) return node.input(0) == value;
  ir::Value* a = node.input(0);
  ir::Value* b = node.input(1);
  if (a == value && b == value) {
    step.operand = 0;
    return true;
  }
  if (a != value && b != value) return false;
  ir::Value* other = a == value ? b : a;
  step.value_second = b == value;
  if (!is_float_value(other) || other->type().dtype != type.dtype ||
      !broadcasts_into(other, *type.shape)) {
    return false;
  }
  auto at = std::find(extras.begin(), extras.end(), other);
  if (at == extras.end()) {
    if (extras.size() + 1 >= static_cast<size_t>(point::kMaxPointInputs)) return false;
    extras.push_back(other);
    at = extras.end() - 1;
  }
  step.operand = static_cast<int8_t>(at - extras.begin() + 1);
  return true;
}

bool fuse(Rewriter& rw, ir::Node& head) {
  if (head.outputs().size() != 1 || !is_float_value(head.output(0))) return false;
  const TypeInfo& type = head.output(0)->type();
  if (!type.shape) return false;
  // The chain's input: the head's operand of the head's own shape.
  ir::Value* x = nullptr;
  for (ir::Value* in : head.inputs()) {
    if (in && same_shape(in, head.output(0)) && in->type().dtype == type.dtype) {
      x = in;
      break;
    }
  }
  if (!x) return false;
  std::vector<ir::Value*> extras;
  std::vector<point::PointStep> steps;
  std::vector<ir::Node*> nodes;
  point::PointStep step;
  if (!as_step(head, x, type, extras, step)) return false;
  steps.push_back(step);
  nodes.push_back(&head);
  ir::Value* value = head.output(0);
  while (steps.size() < static_cast<size_t>(point::kMaxPointSteps)) {
    // One reader (x * x reads the value twice), no graph output.
    const std::vector<ir::Node*>& readers = rw.readers(value);
    if (readers.empty() || !rw.used_only_by(value, {readers.front()})) break;
    ir::Node* next = readers.front();
    std::vector<ir::Value*> trial = extras;
    if (rw.removed(next) || !as_step(*next, value, type, trial, step)) break;
    extras = std::move(trial);
    steps.push_back(step);
    nodes.push_back(next);
    value = next->output(0);
  }
  if (nodes.size() < 2) return false;
  std::vector<ir::Value*> inputs = {x};
  inputs.insert(inputs.end(), extras.begin(), extras.end());
  ir::Value* out = rw.new_value(value->name() + "_chain", value->type());
  // Before the last op: every operand is defined by then.
  ir::Node* chain = rw.insert_node(nodes.back(), "PointChain", ops::kKilnDomain, std::move(inputs),
                                   {out}, import_kiln_domain(rw.graph()));
  ops::write_point_chain(*chain, steps);
  rw.replace(value, out, nodes);
  return true;
}

}  // namespace

bool FusePointChains::apply(ir::Graph& root) const {
  return rewrite_graph(root, fuse);
}

}  // namespace kiln::passes
