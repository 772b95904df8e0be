#include <cmath>
#include <numbers>

#include "ops/fused_activation.hpp"
#include "passes/passes.hpp"
#include "passes/pattern_utils.hpp"

namespace kiln::passes {
namespace {

// The factors of a product written as one Mul of two values, one of which may itself be a Mul
// read only by the outer one: 0.5 * x * g in any order and nesting.
struct Product {
  std::vector<ir::Value*> factors;
  std::vector<ir::Node*> nodes;  // the Muls, outer first
};

std::optional<Product> three_factors(const Rewriter& rw, ir::Node& mul) {
  if (!is_op(&mul, "Mul") || mul.inputs().size() != 2) return std::nullopt;
  for (int side = 0; side < 2; ++side) {
    ir::Value* inner_out = mul.input(side);
    ir::Node* inner = rw.producer(inner_out, "Mul");
    if (!inner || !rw.single_use(inner_out) || inner->inputs().size() != 2) continue;
    return Product{{inner->input(0), inner->input(1), mul.input(1 - side)}, {&mul, inner}};
  }
  return std::nullopt;
}

// Of `factors`, the constant 0.5, the value `gate` produced by Add(op_type(...), 1) and the
// remaining one, x. Fills `nodes` with the Add and the op node.
struct GeluParts {
  ir::Value* x = nullptr;
  ir::Node* inner = nullptr;  // the Erf or Tanh
  std::vector<ir::Node*> nodes;
};

std::optional<GeluParts> split_factors(const Rewriter& rw, const Product& p, const char* op_type) {
  for (int h = 0; h < 3; ++h) {
    if (!is_scalar_constant(p.factors[h], 0.5)) continue;
    for (int gi = 0; gi < 3; ++gi) {
      if (gi == h) continue;
      ir::Value* gate = p.factors[gi];
      ir::Node* add = rw.producer(gate, "Add");
      if (!add || !rw.single_use(gate)) continue;
      for (int s = 0; s < 2; ++s) {
        ir::Node* op = rw.producer(add->input(s), op_type);
        if (!op || !rw.single_use(add->input(s)) || !is_scalar_constant(add->input(1 - s), 1.0)) {
          continue;
        }
        GeluParts parts;
        parts.x = p.factors[3 - h - gi];
        parts.inner = op;
        parts.nodes = {add, op};
        return parts;
      }
    }
  }
  return std::nullopt;
}

// x / sqrt(2) or x * (1 / sqrt(2)), read only by the Erf.
bool is_x_over_sqrt2(const Rewriter& rw, const ir::Value* v, const ir::Value* x,
                     std::vector<ir::Node*>& nodes) {
  ir::Node* n = rw.producer(v);
  if (!n || !rw.single_use(v)) return false;
  if (is_op(n, "Div") && n->input(0) == x && is_scalar_constant(n->input(1), std::numbers::sqrt2)) {
    nodes.push_back(n);
    return true;
  }
  if (is_op(n, "Mul") && is_scalar_constant(other_input(*n, x), 1 / std::numbers::sqrt2)) {
    nodes.push_back(n);
    return true;
  }
  return false;
}

// Mul of `x` and the given constant, in either order; returns the other operand's node.
ir::Node* mul_by(const Rewriter& rw, const ir::Value* v, double constant, ir::Value** operand) {
  ir::Node* n = rw.producer(v, "Mul");
  if (!n || !rw.single_use(v) || n->inputs().size() != 2) return nullptr;
  for (int s = 0; s < 2; ++s) {
    if (is_scalar_constant(n->input(1 - s), constant)) {
      *operand = n->input(s);
      return n;
    }
  }
  return nullptr;
}

// x^3 as Pow(x, 3), x * (x * x) or (x * x) * x.
bool is_cube(const Rewriter& rw, ir::Value* v, const ir::Value* x, std::vector<ir::Node*>& nodes) {
  if (!rw.single_use(v)) return false;
  if (ir::Node* pow = rw.producer(v, "Pow")) {
    if (pow->input(0) != x || !is_scalar_constant(pow->input(1), 3.0)) return false;
    nodes.push_back(pow);
    return true;
  }
  ir::Node* mul = rw.producer(v, "Mul");
  if (!mul || mul->inputs().size() != 2) return false;
  ir::Value* sq = other_input(*mul, x);
  ir::Node* sq_node = rw.producer(sq, "Mul");
  if (!sq_node || !rw.single_use(sq) || sq_node->input(0) != x || sq_node->input(1) != x) {
    return false;
  }
  nodes.push_back(mul);
  nodes.push_back(sq_node);
  return true;
}

// sqrt(2 / pi) * (x + 0.044715 * x^3), read only by the Tanh.
bool is_tanh_argument(const Rewriter& rw, ir::Value* v, const ir::Value* x,
                      std::vector<ir::Node*>& nodes) {
  ir::Value* sum = nullptr;
  ir::Node* scale = mul_by(rw, v, std::sqrt(2 / std::numbers::pi), &sum);
  ir::Node* add = scale ? rw.producer(sum, "Add") : nullptr;
  if (!add || !rw.single_use(sum)) return false;
  ir::Value* term = other_input(*add, x);
  ir::Value* cube = nullptr;
  ir::Node* coef = term && term != x ? mul_by(rw, term, 0.044715, &cube) : nullptr;
  if (!coef) return false;
  nodes.insert(nodes.end(), {scale, add, coef});
  return is_cube(rw, cube, x, nodes);
}

bool fuse(Rewriter& rw, ir::Node& mul) {
  if (!is_float_value(mul.output(0))) return false;
  std::optional<Product> product = three_factors(rw, mul);
  if (!product) return false;
  std::vector<ir::Node*> dead = product->nodes;
  bool tanh_form = false;
  std::optional<GeluParts> parts = split_factors(rw, *product, "Erf");
  if (parts && is_x_over_sqrt2(rw, parts->inner->input(0), parts->x, parts->nodes)) {
    tanh_form = false;
  } else if ((parts = split_factors(rw, *product, "Tanh")) &&
             is_tanh_argument(rw, parts->inner->input(0), parts->x, parts->nodes)) {
    tanh_form = true;
  } else {
    return false;
  }
  if (!is_float_value(parts->x) || parts->x->type().dtype != mul.output(0)->type().dtype) {
    return false;
  }
  dead.insert(dead.end(), parts->nodes.begin(), parts->nodes.end());
  // ai.onnx Gelu exists from opset 20; older imports get Kiln's op of the same definition.
  ir::Graph& g = rw.graph();
  const int onnx_opset = imported_opset(g, "");
  const bool standard = onnx_opset >= 20;
  const int opset = standard ? onnx_opset : import_kiln_domain(g);
  ir::Value* y = mul.output(0);
  ir::Value* out = rw.new_value(y->name() + "_gelu", y->type());
  ir::Node* gelu =
      rw.insert_node(&mul, "Gelu", standard ? "" : ops::kKilnDomain, {parts->x}, {out}, opset);
  if (tanh_form) gelu->set_attribute("approximate", ir::Attribute(std::string("tanh")));
  rw.replace(y, out, dead);
  return true;
}

}  // namespace

bool FuseGelu::apply(ir::Graph& root) const {
  return rewrite_graph(root, fuse);
}

}  // namespace kiln::passes
