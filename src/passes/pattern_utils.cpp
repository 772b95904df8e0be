#include "passes/pattern_utils.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "ops/fused_activation.hpp"
#include "passes/pass.hpp"

namespace kiln::passes {

Rewriter::Rewriter(ir::Graph& graph) : graph_(graph), uses_(graph.compute_uses()) {}

const std::vector<ir::Node*>& Rewriter::readers(const ir::Value* v) const {
  static const std::vector<ir::Node*> none;
  auto it = uses_.find(v);
  return it == uses_.end() ? none : it->second;
}

bool Rewriter::single_use(const ir::Value* v) const {
  return v && !touched(v) && !graph_.is_output(v) && readers(v).size() == 1;
}

bool Rewriter::used_only_by(const ir::Value* v, const std::vector<const ir::Node*>& nodes) const {
  if (!v || touched(v) || graph_.is_output(v) || readers(v).empty()) return false;
  for (const ir::Node* r : readers(v)) {
    if (std::find(nodes.begin(), nodes.end(), r) == nodes.end()) return false;
  }
  return true;
}

ir::Node* Rewriter::producer(const ir::Value* v, std::string_view op_type) const {
  if (!v) return nullptr;
  ir::Node* p = v->producer();
  if (!p || p->owner() != &graph_ || removed(p)) return nullptr;
  if (!op_type.empty() && !is_op(p, op_type)) return nullptr;
  return p;
}

ir::Value* Rewriter::new_value(const std::string& base, TypeInfo type) {
  ir::Value* v = graph_.add_value(graph_.unique_name(base), std::move(type));
  touch(v);
  return v;
}

ir::Value* Rewriter::new_constant(const std::string& base, Tensor data) {
  ir::Value* v = graph_.add_initializer(graph_.unique_name(base), std::move(data));
  touch(v);
  return v;
}

ir::Node* Rewriter::insert_node(const ir::Node* position, std::string op_type, std::string domain,
                                std::vector<ir::Value*> inputs, std::vector<ir::Value*> outputs,
                                int opset) {
  std::string name =
      graph_.unique_name((position->name().empty() ? op_type : position->name()) + "_fused");
  ir::Node* n = graph_.insert_node_before(position, std::move(op_type), std::move(domain),
                                          std::move(name), std::move(inputs), std::move(outputs));
  n->set_opset(opset);
  touch(*n);
  return n;
}

void Rewriter::touch(const ir::Node& n) {
  for (const ir::Value* v : n.inputs()) touched_.insert(v);
  for (const ir::Value* v : n.outputs()) touched_.insert(v);
}

void Rewriter::remove(ir::Node* n) {
  touch(*n);
  removed_.insert(n);
  graph_.remove_node(n);
}

void Rewriter::replace(ir::Value* from, ir::Value* to, const std::vector<ir::Node*>& dead) {
  KILN_CHECK(graph_.replace_uses(from, to), ErrorCode::Internal,
             "cannot redirect the readers of '{}' to '{}'", from->name(), to->name());
  touch(from);
  touch(to);
  for (ir::Node* n : dead) remove(n);
}

bool Rewriter::can_replace(const ir::Value* from, const ir::Value* to) const {
  if (!graph_.is_output(from)) return true;
  return to->owner() == &graph_ && to->producer() && !graph_.is_output(to);
}

bool rewrite_graph(ir::Graph& root, const RewriteFn& rewrite) {
  // Each sweep fuses every pattern whose values no earlier rewrite of the sweep touched; chains
  // of overlapping patterns need a few sweeps, never many.
  constexpr int kMaxSweeps = 64;
  return apply_recursively(root, [&](ir::Graph& g) {
    bool any = false;
    for (int sweep = 0; sweep < kMaxSweeps; ++sweep) {
      Rewriter rw(g);
      bool changed = false;
      for (ir::Node* n : g.nodes()) {
        if (!rw.removed(n)) changed |= rewrite(rw, *n);
      }
      any |= changed;
      if (!changed) break;
    }
    return any;
  });
}

bool is_op(const ir::Node* n, std::string_view op_type) {
  return n && n->op_type() == op_type && (n->domain().empty() || n->domain() == "ai.onnx");
}

bool is_kiln_op(const ir::Node* n, std::string_view op_type) {
  return n && n->domain() == ops::kKilnDomain && n->op_type() == op_type;
}

bool is_float_dtype(DataType t) {
  return t == DataType::Float32 || t == DataType::Float64 || t == DataType::Float16 ||
         t == DataType::BFloat16;
}

bool is_float_value(const ir::Value* v) {
  return v && v->type().is_tensor() && is_float_dtype(v->type().dtype);
}

std::optional<double> scalar_constant(const ir::Value* v) {
  if (!v || !v->is_constant() || v->constant().numel() != 1) return std::nullopt;
  const DataType t = v->constant().dtype();
  if (t == DataType::String || t == DataType::Bool || t == DataType::Undefined) return std::nullopt;
  return v->constant().double_at(0);
}

bool is_scalar_constant(const ir::Value* v, double expected) {
  std::optional<double> s = scalar_constant(v);
  if (!s) return false;
  const DataType t = v->constant().dtype();
  const double tol = t == DataType::Float16 || t == DataType::BFloat16 ? 1e-2 : 1e-6;
  return std::fabs(*s - expected) <= tol * std::max(1.0, std::fabs(expected));
}

ir::Value* other_input(const ir::Node& n, const ir::Value* v) {
  if (n.inputs().size() != 2) return nullptr;
  if (n.input(0) == v) return n.input(1);
  if (n.input(1) == v) return n.input(0);
  return nullptr;
}

int64_t int_attr(const ir::Node& n, const char* name, int64_t fallback) {
  const ir::Attribute* a = n.attribute(name);
  return a && std::holds_alternative<int64_t>(a->storage()) ? std::get<int64_t>(a->storage())
                                                            : fallback;
}

float float_attr(const ir::Node& n, const char* name, float fallback) {
  const ir::Attribute* a = n.attribute(name);
  return a && std::holds_alternative<float>(a->storage()) ? std::get<float>(a->storage())
                                                          : fallback;
}

std::optional<std::vector<int64_t>> ints_attr(const ir::Node& n, const char* name) {
  const ir::Attribute* a = n.attribute(name);
  if (!a || !std::holds_alternative<std::vector<int64_t>>(a->storage())) return std::nullopt;
  return std::get<std::vector<int64_t>>(a->storage());
}

std::string string_attr(const ir::Node& n, const char* name, const std::string& fallback) {
  const ir::Attribute* a = n.attribute(name);
  return a && std::holds_alternative<std::string>(a->storage())
             ? std::get<std::string>(a->storage())
             : fallback;
}

std::optional<std::vector<int64_t>> zero_spatial_pads(const ir::Node& pad) {
  const std::optional<size_t> rank = pad.inputs().empty() ? std::nullopt : rank_of(pad.input(0));
  if (!rank || *rank < 3 || *rank > 5 || string_attr(pad, "mode", "constant") != "constant" ||
      pad.outputs().size() != 1) {
    return std::nullopt;
  }
  std::vector<int64_t> pads;
  if (pad.opset() < 11) {
    std::optional<std::vector<int64_t>> attr = ints_attr(pad, "pads");
    if (!attr || float_attr(pad, "value", 0.f) != 0.f) return std::nullopt;
    pads = *attr;
  } else {
    // Inputs: data, pads, optional constant_value (an axes input, opset 18, is refused).
    if (pad.inputs().size() < 2 || pad.inputs().size() > 3 || !pad.input(1)) return std::nullopt;
    if (pad.inputs().size() == 3 && pad.input(2) && !is_scalar_constant(pad.input(2), 0.0)) {
      return std::nullopt;
    }
    const ir::Value* pv = pad.input(1);
    if (!pv->is_constant() || pv->constant().dtype() != DataType::Int64) return std::nullopt;
    pads = pv->constant().to_int64_vector();
  }
  const size_t r = *rank;
  if (pads.size() != 2 * r || pads[0] != 0 || pads[1] != 0 || pads[r] != 0 || pads[r + 1] != 0 ||
      std::any_of(pads.begin(), pads.end(), [](int64_t v) { return v < 0; })) {
    return std::nullopt;
  }
  return pads;
}

bool has_explicit_pads(const ir::Node& conv, size_t spatial) {
  if (string_attr(conv, "auto_pad", "NOTSET") != "NOTSET") return false;
  const std::optional<std::vector<int64_t>> cp = ints_attr(conv, "pads");
  return !cp || cp->size() == 2 * spatial;
}

void add_spatial_pads(ir::Node& conv, const std::vector<int64_t>& pad_pads) {
  const size_t r = pad_pads.size() / 2, spatial = r - 2;
  std::vector<int64_t> cp = ints_attr(conv, "pads").value_or(std::vector<int64_t>(2 * spatial, 0));
  for (size_t d = 0; d < spatial; ++d) {
    cp[d] += pad_pads[2 + d];
    cp[spatial + d] += pad_pads[r + 2 + d];
  }
  conv.set_attribute("pads", ir::Attribute(cp));
}

std::optional<std::vector<int64_t>> axes_of(const ir::Node& n) {
  if (auto a = ints_attr(n, "axes")) return a;
  if (n.attribute("axes")) return std::nullopt;
  const ir::Value* in = n.input(1);
  if (!in) return std::vector<int64_t>{};
  if (!in->is_constant()) return std::nullopt;
  const Tensor& t = in->constant();
  if (t.dtype() != DataType::Int64 && t.dtype() != DataType::Int32) return std::nullopt;
  return t.to_int64_vector();
}

std::optional<size_t> rank_of(const ir::Value* v) {
  if (!v || !v->type().is_tensor() || !v->type().shape) return std::nullopt;
  return v->type().shape->rank();
}

bool same_dim(const Dim& a, const Dim& b) {
  if (a.is_static() || b.is_static())
    return a.is_static() && b.is_static() && a.value() == b.value();
  return a.is_symbolic() && b.is_symbolic() && a.symbol_name() == b.symbol_name();
}

bool same_shape(const ir::Value* a, const ir::Value* b) {
  if (!a || !b || !a->type().is_tensor() || !b->type().is_tensor()) return false;
  const std::optional<Shape>& sa = a->type().shape;
  const std::optional<Shape>& sb = b->type().shape;
  if (!sa || !sb || sa->rank() != sb->rank()) return false;
  for (size_t i = 0; i < sa->rank(); ++i) {
    if (!same_dim((*sa)[i], (*sb)[i])) return false;
  }
  return true;
}

double element(const Tensor& t, int64_t i) {
  return t.dtype() == DataType::Float64 ? t.data<double>()[i]
                                        : static_cast<double>(t.data<float>()[i]);
}

void set_element(Tensor& t, int64_t i, double v) {
  if (t.dtype() == DataType::Float64) {
    t.data<double>()[i] = v;
  } else {
    t.data<float>()[i] = static_cast<float>(v);
  }
}

int imported_opset(const ir::Graph& g, const std::string& domain) {
  auto it = g.opsets().find(domain);
  if (it == g.opsets().end() && domain.empty()) it = g.opsets().find("ai.onnx");
  return it == g.opsets().end() ? 0 : it->second;
}

int import_kiln_domain(ir::Graph& g) {
  for (ir::Graph* p = &g; p; p = p->parent()) p->opsets().emplace(ops::kKilnDomain, 1);
  return g.opsets().at(ops::kKilnDomain);
}

std::optional<std::vector<int64_t>> perm_of(const ir::Node& t) {
  if (auto p = ints_attr(t, "perm")) return p;
  std::optional<size_t> rank = rank_of(t.input(0));
  if (!rank) return std::nullopt;
  std::vector<int64_t> p(*rank);
  std::iota(p.rbegin(), p.rend(), 0);
  return p;
}

}  // namespace kiln::passes
