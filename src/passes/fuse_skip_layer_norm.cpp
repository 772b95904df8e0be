#include <algorithm>

#include "ops/fused_activation.hpp"
#include "passes/passes.hpp"
#include "passes/pattern_utils.hpp"

namespace kiln::passes {
namespace {

bool is_layer_norm(const ir::Node& n) {
  return n.op_type() == "LayerNormalization" &&
         (n.domain().empty() || n.domain() == "ai.onnx" || n.domain() == ops::kKilnDomain);
}

// Known before any node runs: a constant, a graph input or a value of an enclosing graph.
bool defined_up_front(const ir::Graph& g, const ir::Value* v) {
  if (!v) return true;
  if (v->is_constant() || v->owner() != &g) return true;
  const std::vector<ir::Value*>& in = g.inputs();
  return std::find(in.begin(), in.end(), v) != in.end();
}

// LayerNormalization over the last dim of Add(x, skip), where x may itself be Add(h, bias) with
// a constant 1-D bias: one ai.kiln SkipLayerNormalization (as in ONNX Runtime). When the sum is
// read elsewhere too (a pre-norm residual stream), the node also yields it as output 3.
bool fuse(Rewriter& rw, ir::Node& ln) {
  if (!is_layer_norm(ln) || ln.inputs().size() < 2 || !ln.output(0)) return false;
  for (size_t i = 1; i < ln.outputs().size(); ++i) {
    if (ln.output(i) && (rw.graph().is_output(ln.output(i)) || !rw.readers(ln.output(i)).empty())) {
      return false;  // the statistics are read
    }
  }
  ir::Value* sum = ln.input(0);
  ir::Node* add = rw.producer(sum, "Add");
  const std::optional<size_t> rank = rank_of(sum);
  if (!add || rw.touched(sum) || !rank || *rank < 1 || !is_float_value(sum)) return false;
  const int64_t axis = int_attr(ln, "axis", -1);
  if (axis != -1 && axis != static_cast<int64_t>(*rank) - 1) return false;
  ir::Graph& g = rw.graph();
  if (!defined_up_front(g, ln.input(1)) || !defined_up_front(g, ln.input(2))) return false;

  std::vector<ir::Node*> sum_nodes = {add};
  ir::Value* x = add->input(0);
  ir::Value* skip = add->input(1);
  ir::Value* bias = nullptr;
  for (int s = 0; s < 2 && !bias; ++s) {
    ir::Value* side = add->input(s);
    ir::Node* bias_add = rw.producer(side, "Add");
    if (!bias_add || !rw.single_use(side)) continue;
    for (int b = 0; b < 2; ++b) {
      ir::Value* c = bias_add->input(b);
      if (c && c->is_constant() && c->constant().rank() == 1 &&
          c->constant().dtype() == sum->type().dtype &&
          same_dim(Dim(c->constant().dim(0)), sum->type().shape->dims().back()) &&
          same_shape(bias_add->input(1 - b), sum)) {
        bias = c;
        x = bias_add->input(1 - b);
        skip = add->input(1 - s);
        sum_nodes.push_back(bias_add);
        break;
      }
    }
  }
  if (!same_shape(x, sum) || !same_shape(skip, sum)) return false;

  const int opset = import_kiln_domain(g);
  const bool sum_read_elsewhere = g.is_output(sum) || rw.readers(sum).size() > 1;
  ir::Value* y = ln.output(0);
  ir::Value* out = rw.new_value(y->name() + "_skip_ln", y->type());
  ir::Value* sum_out =
      sum_read_elsewhere ? rw.new_value(sum->name() + "_sum", sum->type()) : nullptr;
  std::vector<ir::Value*> outputs = {out};
  if (sum_out) outputs.insert(outputs.end(), {nullptr, nullptr, sum_out});
  std::vector<ir::Value*> inputs = {x, skip, ln.input(1), ln.input(2), bias};
  while (!inputs.back()) inputs.pop_back();
  // Placed where the sum was computed, so that its other readers still come after it (x, skip
  // and the bias are read by the Add nodes, gamma and beta are known up front).
  ir::Node* fused = rw.insert_node(add, "SkipLayerNormalization", ops::kKilnDomain,
                                   std::move(inputs), std::move(outputs), opset);
  fused->set_attribute("epsilon", ir::Attribute(float_attr(ln, "epsilon", 1e-5f)));
  rw.replace(y, out, {&ln});
  if (sum_out) {
    rw.replace(sum, sum_out, sum_nodes);
  } else {
    for (ir::Node* n : sum_nodes) rw.remove(n);
  }
  return true;
}

}  // namespace

bool FuseSkipLayerNorm::apply(ir::Graph& root) const {
  return rewrite_graph(root, fuse);
}

}  // namespace kiln::passes
