#include "runtime/interpreter.hpp"

#include <chrono>
#include <set>

#include "ir/node_reads.hpp"
#include "runtime/node_errors.hpp"

namespace kiln::runtime {

class Interpreter::Scope {
 public:
  explicit Scope(const Scope* parent, const ValueLookup* root = nullptr)
      : parent_(parent), root_(root) {}
  const RtValue* find(const ir::Value* v) const {
    for (const Scope* s = this; s; s = s->parent_) {
      auto it = s->values_.find(v);
      if (it != s->values_.end()) return &it->second;
      if (!s->parent_ && s->root_) return (*s->root_)(v);
    }
    return nullptr;
  }
  void set(const ir::Value* v, RtValue value) { values_[v] = std::move(value); }
  void erase(const ir::Value* v) { values_.erase(v); }

 private:
  std::unordered_map<const ir::Value*, RtValue> values_;
  const Scope* parent_;
  const ValueLookup* root_;  // values outside the outermost scope (an executor's)
};

class Interpreter::BodyRunner : public ops::SubgraphRunner {
 public:
  BodyRunner(Interpreter& interp, const Scope& scope, const RunControl* control)
      : interp_(interp), scope_(scope), control_(control) {}
  std::vector<RtValue> run_subgraph(const ir::Graph& body,
                                    const std::vector<RtValue>& inputs) override {
    return interp_.execute(body, inputs, &scope_, nullptr, control_);
  }

 private:
  Interpreter& interp_;
  const Scope& scope_;
  const RunControl* control_;
};

void collect_reads(const ir::Node& n, std::set<const ir::Value*>& out) {
  ir::visit_reads(n, [&](const ir::Value* v) { out.insert(v); });
}

void check_value_matches(const RtValue& value, const TypeInfo& type, const std::string& what) {
  if (type.kind == TypeInfo::Kind::Tensor) {
    KILN_CHECK_ARG(value.is_tensor(), "{}: expected a tensor, got {}", what, value.describe());
    const Tensor& t = value.tensor();
    KILN_CHECK_ARG(type.dtype == DataType::Undefined || t.dtype() == type.dtype,
                   "{}: expected element type {}, got {}", what, dtype_name(type.dtype),
                   dtype_name(t.dtype()));
    if (type.shape) {
      KILN_CHECK_ARG(type.shape->rank() == t.rank(), "{}: expected shape {}, got {}", what,
                     type.shape->to_string(), dims_to_string(t.dims()));
      for (size_t i = 0; i < t.rank(); ++i) {
        const Dim& d = (*type.shape)[i];
        KILN_CHECK_ARG(!d.is_static() || d.value() == t.dim(i), "{}: expected shape {}, got {}",
                       what, type.shape->to_string(), dims_to_string(t.dims()));
        KILN_CHECK_ARG(d.is_static() || (t.dim(i) >= d.min() && t.dim(i) <= d.max()),
                       "{}: dim {} = {} is outside the declared range of {}", what, i, t.dim(i),
                       d.to_string());
      }
    }
  } else if (type.kind == TypeInfo::Kind::Sequence) {
    KILN_CHECK_ARG(value.is_sequence(), "{}: expected a sequence, got {}", what, value.describe());
  }
}

Interpreter::Interpreter(std::shared_ptr<const ir::Graph> graph) : graph_(std::move(graph)) {
  plan(*graph_);
}

void Interpreter::plan(const ir::Graph& g) {
  GraphPlan p;
  std::map<const ir::Value*, size_t> last_use;
  std::vector<const ir::Node*> nodes;
  for (const ir::Node* n : g.nodes()) nodes.push_back(n);
  for (size_t i = 0; i < nodes.size(); ++i) {
    const ir::Node& n = *nodes[i];
    p.defs.push_back(&ops::OpRegistry::instance().get(n.domain(), n.op_type(), n.opset()));
    std::set<const ir::Value*> reads;
    collect_reads(n, reads);
    for (const ir::Value* v : reads) {
      if (v->owner() == &g && !v->is_constant()) last_use[v] = i;
    }
    for (const ir::Graph* s : ir::subgraphs_of(n)) plan(*s);
  }
  std::set<const ir::Value*> outputs(g.outputs().begin(), g.outputs().end());
  p.release_after.resize(nodes.size());
  for (const auto& [v, i] : last_use) {
    if (!outputs.count(v)) p.release_after[i].push_back(v);
  }
  p.nodes = std::move(nodes);
  plans_[&g] = std::move(p);
}

std::vector<RtValue> Interpreter::execute(const ir::Graph& g, const std::vector<RtValue>& inputs,
                                          const Scope* outer, const ValueLookup* root,
                                          const RunControl* control) {
  // Every subgraph run starts here: one check per Loop or Scan iteration.
  check_run(control);
  const GraphPlan& p = plans_.at(&g);
  Scope scope(outer, root);
  KILN_CHECK_ARG(inputs.size() <= g.inputs().size(), "graph '{}' takes {} inputs, got {}", g.name(),
                 g.inputs().size(), inputs.size());
  for (size_t i = 0; i < g.inputs().size(); ++i) {
    const ir::Value* v = g.inputs()[i];
    if (i < inputs.size() && !inputs[i].is_none()) {
      check_value_matches(inputs[i], v->type(), fmt::format("input '{}'", v->name()));
      scope.set(v, inputs[i]);
    } else if (v->is_constant()) {
      scope.set(v, v->constant());
    } else if (v->type().kind != TypeInfo::Kind::Optional) {
      fail(ErrorCode::InvalidArgument, "graph '{}': input '{}' was not given", g.name(), v->name());
    } else {
      scope.set(v, RtValue());  // an empty optional: readers see None
    }
  }
  auto lookup = [&](const ir::Value* v) -> const RtValue* {
    if (!v) return nullptr;
    if (const RtValue* r = scope.find(v)) return r;
    if (v->is_constant()) return nullptr;  // handled by caller
    fail(ErrorCode::Internal, "value '{}' has not been computed", v->name());
  };
  BodyRunner runner(*this, scope, control);
  std::vector<RtValue> constants_holder;
  std::vector<const RtValue*> in_ptrs;
  for (size_t i = 0; i < p.nodes.size(); ++i) {
    const ir::Node& n = *p.nodes[i];
    if (i > 0) check_run(control);
    in_ptrs.clear();
    constants_holder.clear();
    constants_holder.reserve(n.inputs().size());
    for (const ir::Value* v : n.inputs()) {
      const RtValue* r = lookup(v);
      if (!r && v && v->is_constant()) {
        constants_holder.emplace_back(v->constant());
        r = &constants_holder.back();
      }
      in_ptrs.push_back(r);
    }
    std::vector<RtValue> outs(n.outputs().size());
    ops::KernelContext ctx(n, in_ptrs, outs, &runner);
    auto start = std::chrono::steady_clock::now();
    with_node_errors(n, [&] { p.defs[i]->kernel(ctx); });
    if (profiling_ && &g == graph_.get()) {
      double us =
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
              .count();
      profile_.push_back({&n, us, start});
      for (const RtValue& v : outs) profile_.back().record_output(&v);
    }
    if (observer_ && &g == graph_.get()) observer_(n, outs);
    for (size_t k = 0; k < outs.size(); ++k) {
      if (const ir::Value* v = n.output(k)) scope.set(v, std::move(outs[k]));
    }
    for (const ir::Value* v : p.release_after[i]) scope.erase(v);
  }
  std::vector<RtValue> results;
  results.reserve(g.outputs().size());
  for (const ir::Value* v : g.outputs()) {
    const RtValue* r = lookup(v);
    results.push_back(r ? *r : RtValue(v->constant()));
  }
  return results;
}

std::vector<RtValue> Interpreter::run(const std::vector<RtValue>& inputs,
                                      const RunControl* control) {
  profile_.clear();
  return execute(*graph_, inputs, nullptr, nullptr, control);
}

std::vector<RtValue> Interpreter::run_subgraph(const ir::Graph& body,
                                               const std::vector<RtValue>& inputs,
                                               const ValueLookup& outer,
                                               const RunControl* control) {
  KILN_CHECK(plans_.count(&body), ErrorCode::Internal,
             "graph '{}' is not a subgraph of the interpreter's graph", body.name());
  return execute(body, inputs, nullptr, &outer, control);
}

std::map<std::string, RtValue> Interpreter::run(const std::map<std::string, RtValue>& inputs,
                                                const RunControl* control) {
  std::vector<RtValue> ordered(graph_->inputs().size());
  size_t used = 0;
  for (size_t i = 0; i < graph_->inputs().size(); ++i) {
    auto it = inputs.find(graph_->inputs()[i]->name());
    if (it != inputs.end()) {
      ordered[i] = it->second;
      ++used;
    }
  }
  if (used != inputs.size()) {
    for (const auto& [name, v] : inputs) {
      bool known = false;
      for (const ir::Value* in : graph_->inputs()) known = known || in->name() == name;
      KILN_CHECK(known, ErrorCode::NotFound, "the model has no input named '{}'", name);
    }
  }
  std::vector<RtValue> outs = run(ordered, control);
  std::map<std::string, RtValue> named;
  for (size_t i = 0; i < outs.size(); ++i) named[graph_->outputs()[i]->name()] = std::move(outs[i]);
  return named;
}

}  // namespace kiln::runtime
