#include <algorithm>
#include <numeric>

#include "ops/fused_activation.hpp"
#include "passes/passes.hpp"
#include "passes/pattern_utils.hpp"

namespace kiln::passes {
namespace {

// ReduceMean over the trailing axes with keepdims; returns how many trailing axes (0: no match).
size_t trailing_mean_axes(const ir::Node& n, const ir::Value* x) {
  if (!is_op(&n, "ReduceMean") || int_attr(n, "keepdims", 1) != 1) return 0;
  std::optional<std::vector<int64_t>> axes = axes_of(n);
  if (!axes || axes->empty()) return 0;
  std::vector<int64_t> a = *axes;
  const std::optional<size_t> rank = rank_of(x);
  for (int64_t& v : a) {
    if (v >= 0) {
      if (!rank) return 0;
      v -= static_cast<int64_t>(*rank);
    }
  }
  std::sort(a.begin(), a.end());
  const int64_t k = static_cast<int64_t>(a.size());
  for (int64_t i = 0; i < k; ++i) {
    if (a[static_cast<size_t>(i)] != i - k) return 0;
  }
  if (rank && static_cast<int64_t>(*rank) < k) return 0;
  return static_cast<size_t>(k);
}

// `p` (gamma or beta) broadcasts over the `k` normalized dims of x only, so that y * p and
// LayerNormalization's Scale agree.
bool is_norm_param(const ir::Value* p, const ir::Value* x, size_t k) {
  if (!p || !p->type().is_tensor() || p->type().dtype != x->type().dtype || !p->type().shape) {
    return false;
  }
  const Shape& ps = *p->type().shape;
  if (ps.rank() > k) return false;
  const std::optional<Shape>& xs = x->type().shape;
  for (size_t i = 0; i < ps.rank(); ++i) {
    const Dim& d = ps[i];
    if (d.is_static() && d.value() == 1) continue;
    if (!xs) return false;
    if (!same_dim(d, (*xs)[xs->rank() - ps.rank() + i])) return false;
  }
  return true;
}

// From the Div that normalizes (x - mean) by sqrt(var + eps), back to x:
//   mean = ReduceMean(x); d = Sub(x, mean); var = ReduceMean(Pow(d, 2) | Mul(d, d));
//   y = Div(d, Sqrt(Add(var, eps)))      then optionally Mul(y, gamma), Add(., beta).
bool fuse(Rewriter& rw, ir::Node& div) {
  if (!is_op(&div, "Div") || !is_float_value(div.output(0))) return false;
  ir::Value* d = div.input(0);
  ir::Node* sub = rw.producer(d, "Sub");
  ir::Node* sqrt = rw.producer(div.input(1), "Sqrt");
  if (!sub || !sqrt || !rw.single_use(div.input(1))) return false;
  ir::Node* add_eps = rw.producer(sqrt->input(0), "Add");
  if (!add_eps || !rw.single_use(sqrt->input(0))) return false;
  ir::Value* var = nullptr;
  std::optional<double> eps;
  for (int s = 0; s < 2 && !eps; ++s) {
    if ((eps = scalar_constant(add_eps->input(1 - s)))) var = add_eps->input(s);
  }
  ir::Node* var_mean = rw.producer(var, "ReduceMean");
  if (!eps || !var_mean || !rw.single_use(var)) return false;
  ir::Node* square = rw.producer(var_mean->input(0));
  if (!square || !rw.single_use(var_mean->input(0))) return false;
  const bool is_pow =
      is_op(square, "Pow") && square->input(0) == d && is_scalar_constant(square->input(1), 2.0);
  const bool is_mul = is_op(square, "Mul") && square->input(0) == d && square->input(1) == d;
  if ((!is_pow && !is_mul) || !rw.used_only_by(d, {square, &div})) return false;
  ir::Value* x = sub->input(0);
  ir::Node* mean = rw.producer(sub->input(1), "ReduceMean");
  if (!mean || mean->input(0) != x || !rw.single_use(sub->input(1)) || !is_float_value(x) ||
      x->type().dtype != div.output(0)->type().dtype) {
    return false;
  }
  const size_t k = trailing_mean_axes(*mean, x);
  if (k == 0 || trailing_mean_axes(*var_mean, x) != k) return false;

  std::vector<ir::Node*> dead = {&div, sqrt, add_eps, var_mean, square, sub, mean};
  ir::Node* last = &div;
  ir::Value* gamma = nullptr;
  ir::Value* beta = nullptr;
  if (rw.single_use(last->output(0))) {
    ir::Node* mul = rw.readers(last->output(0))[0];
    ir::Value* g = is_op(mul, "Mul") ? other_input(*mul, last->output(0)) : nullptr;
    if (g && g != last->output(0) && is_norm_param(g, x, k)) {
      gamma = g;
      last = mul;
      dead.insert(dead.begin(), mul);
    }
  }
  if (rw.single_use(last->output(0))) {
    ir::Node* add = rw.readers(last->output(0))[0];
    ir::Value* b = is_op(add, "Add") ? other_input(*add, last->output(0)) : nullptr;
    if (b && b != last->output(0) && is_norm_param(b, x, k)) {
      beta = b;
      last = add;
      dead.insert(dead.begin(), add);
    }
  }
  if (!gamma) {
    // LayerNormalization needs a Scale: ones over the normalized dims, when they are static.
    if (!x->type().shape) return false;
    const Shape& xs = *x->type().shape;
    std::vector<int64_t> dims;
    for (size_t i = xs.rank() - k; i < xs.rank(); ++i) {
      if (!xs[i].is_static()) return false;
      dims.push_back(xs[i].value());
    }
    const DataType t = x->type().dtype;
    if (t != DataType::Float32 && t != DataType::Float64) return false;
    Tensor ones(t, dims);
    for (int64_t i = 0; i < ones.numel(); ++i) set_element(ones, i, 1.0);
    gamma = rw.new_constant(x->name() + "_ln_scale", std::move(ones));
  }

  // ai.onnx LayerNormalization exists from opset 17; older imports get Kiln's op.
  ir::Graph& g = rw.graph();
  const int onnx_opset = imported_opset(g, "");
  const bool standard = onnx_opset >= 17;
  const int opset = standard ? onnx_opset : import_kiln_domain(g);
  ir::Value* y = last->output(0);
  ir::Value* out = rw.new_value(y->name() + "_ln", y->type());
  std::vector<ir::Value*> inputs = {x, gamma};
  if (beta) inputs.push_back(beta);
  ir::Node* ln = rw.insert_node(last, "LayerNormalization", standard ? "" : ops::kKilnDomain,
                                std::move(inputs), {out}, opset);
  ln->set_attribute("axis", ir::Attribute(-static_cast<int64_t>(k)));
  ln->set_attribute("epsilon", ir::Attribute(static_cast<float>(*eps)));
  rw.replace(y, out, dead);
  return true;
}

}  // namespace

bool FuseLayerNorm::apply(ir::Graph& root) const {
  return rewrite_graph(root, fuse);
}

}  // namespace kiln::passes
