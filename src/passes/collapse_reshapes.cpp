#include <algorithm>

#include "passes/passes.hpp"
#include "passes/pattern_utils.hpp"

namespace kiln::passes {
namespace {

// Ops that only change the shape: the elements keep their row-major order.
bool is_shape_only(const ir::Node* n) {
  return is_op(n, "Reshape") || is_op(n, "Flatten") || is_op(n, "Squeeze") || is_op(n, "Unsqueeze");
}

// Reshape(shape_only(x), s) == Reshape(x, s) once s holds no 0 ("copy this dim of the input",
// which names a dim of the intermediate): 0s are replaced by the intermediate's static dims.
bool collapse_reshape(Rewriter& rw, ir::Node& outer) {
  if (!is_op(&outer, "Reshape") || outer.inputs().size() != 2) return false;
  ir::Value* mid = outer.input(0);
  ir::Node* inner = rw.producer(mid);
  const ir::Value* shape = outer.input(1);
  if (!is_shape_only(inner) || rw.touched(mid) || !shape->is_constant() ||
      shape->constant().dtype() != DataType::Int64) {
    return false;
  }
  std::vector<int64_t> dims = shape->constant().to_int64_vector();
  bool changed_dims = false;
  if (int_attr(outer, "allowzero", 0) == 0) {
    for (size_t i = 0; i < dims.size(); ++i) {
      if (dims[i] != 0) continue;
      const std::optional<Shape>& ms = mid->type().shape;
      if (!ms || i >= ms->rank() || !(*ms)[i].is_static()) return false;
      dims[i] = (*ms)[i].value();
      changed_dims = true;
    }
  }
  if (changed_dims) {
    outer.set_input(1, rw.new_constant(shape->name() + "_resolved",
                                       Tensor::from_vector<int64_t>(
                                           {static_cast<int64_t>(dims.size())}, dims)));
  }
  const bool inner_dead = rw.single_use(mid);
  outer.set_input(0, inner->input(0));
  rw.touch(outer);
  if (inner_dead) rw.remove(inner);
  return true;
}

// Squeeze and Unsqueeze over the same axes undo each other. Both read their axes against the
// same rank (the Unsqueeze's output is the Squeeze's input, or the Squeeze's input is the
// Unsqueeze's output), so equal axis lists mean equal axes.
bool cancel_squeeze_pair(Rewriter& rw, ir::Node& outer) {
  const bool outer_squeeze = is_op(&outer, "Squeeze");
  if (!outer_squeeze && !is_op(&outer, "Unsqueeze")) return false;
  ir::Value* mid = outer.input(0);
  ir::Node* inner = rw.producer(mid, outer_squeeze ? "Unsqueeze" : "Squeeze");
  if (!inner || rw.touched(mid)) return false;
  std::optional<std::vector<int64_t>> a = axes_of(*inner), b = axes_of(outer);
  if (!a || !b || a->empty()) return false;
  std::sort(a->begin(), a->end());
  std::sort(b->begin(), b->end());
  if (*a != *b) return false;
  ir::Value* x = inner->input(0);
  if (!outer_squeeze) {
    // Unsqueeze(Squeeze(x)) is x only if the squeezed dims were 1: require that statically, as
    // dropping the Squeeze drops its check.
    const std::optional<Shape>& xs = x->type().shape;
    if (!xs) return false;
    const int64_t rank = static_cast<int64_t>(xs->rank());
    for (int64_t axis : *a) {
      const int64_t i = axis < 0 ? axis + rank : axis;
      if (i < 0 || i >= rank || !(*xs)[static_cast<size_t>(i)].is_static() ||
          (*xs)[static_cast<size_t>(i)].value() != 1) {
        return false;
      }
    }
  }
  if (!rw.can_replace(outer.output(0), x)) return false;
  std::vector<ir::Node*> dead = {&outer};
  if (rw.single_use(mid)) dead.push_back(inner);
  rw.replace(outer.output(0), x, dead);
  return true;
}

bool rewrite(Rewriter& rw, ir::Node& n) {
  return collapse_reshape(rw, n) || cancel_squeeze_pair(rw, n);
}

}  // namespace

bool CollapseReshapes::apply(ir::Graph& root) const {
  return rewrite_graph(root, rewrite);
}

}  // namespace kiln::passes
