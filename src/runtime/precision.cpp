#include "runtime/precision.hpp"

#include <cmath>
#include <limits>
#include <set>
#include <unordered_map>

#include "ir/node_reads.hpp"
#include "ops/fused_activation.hpp"
#include "passes/passes.hpp"
#include "runtime/interpreter.hpp"
#include "runtime/session.hpp"

namespace kiln::runtime {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

struct Accumulator {
  double diff_sq = 0, ref_sq = 0;
  ErrorStats stats;
};

// Element reader: float32 and float64 directly, everything else through double_at.
template <typename Fn>
void for_each_pair(const Tensor& a, const Tensor& e, Fn&& fn) {
  if (a.dtype() == DataType::Float32) {
    const float* pa = a.data<float>();
    const float* pe = e.data<float>();
    for (int64_t i = 0; i < a.numel(); ++i) fn(pa[i], pe[i]);
  } else if (a.dtype() == DataType::Float64) {
    const double* pa = a.data<double>();
    const double* pe = e.data<double>();
    for (int64_t i = 0; i < a.numel(); ++i) fn(pa[i], pe[i]);
  } else {
    for (int64_t i = 0; i < a.numel(); ++i) fn(a.double_at(i), e.double_at(i));
  }
}

void accumulate(const Tensor& a, const Tensor& e, const DriftTolerance& tol, Accumulator& acc) {
  ErrorStats& s = acc.stats;
  if (a.dtype() != e.dtype()) {
    s.mismatch = fmt::format("element type {} != reference {}", dtype_name(a.dtype()),
                             dtype_name(e.dtype()));
    return;
  }
  if (a.dims() != e.dims()) {
    s.mismatch =
        fmt::format("shape {} != reference {}", dims_to_string(a.dims()), dims_to_string(e.dims()));
    return;
  }
  s.elements += a.numel();
  s.dtype = a.dtype();
  if (a.dtype() == DataType::String) {
    for (int64_t i = 0; i < a.numel(); ++i) {
      if (a.data<std::string>()[i] != e.data<std::string>()[i]) {
        s.max_abs = s.max_rel = kInf;
        ++s.outside;
      }
    }
    return;
  }
  // Integers and bools compare exactly: any difference is past every tolerance.
  DataType dt = a.dtype();
  bool exact = dtype_is_integer(dt) || dt == DataType::Bool || dt == DataType::UInt4 ||
               dt == DataType::Int4 || dt == DataType::UInt2 || dt == DataType::Int2;
  bool element_rule = tol.rtol || tol.atol;
  double rtol = tol.rtol.value_or(0), atol = tol.atol.value_or(0);
  for_each_pair(a, e, [&](double x, double y) {
    if (std::isnan(x) && std::isnan(y)) return;
    bool finite_ref = std::isfinite(y);
    if (x == y) {  // equal infinities too
      if (finite_ref) acc.ref_sq += y * y;
      return;
    }
    double abs = std::isfinite(x) && finite_ref ? std::fabs(x - y) : kInf;
    s.max_abs = std::max(s.max_abs, abs);
    if (y != 0) s.max_rel = std::max(s.max_rel, abs / std::fabs(y));
    acc.diff_sq += exact ? kInf : abs * abs;
    if (finite_ref) acc.ref_sq += y * y;
    if (exact || (element_rule && !(abs <= atol + rtol * std::fabs(y)))) ++s.outside;
  });
}

void finish(Accumulator& acc) {
  ErrorStats& s = acc.stats;
  if (!s.mismatch.empty()) return;
  double diff = std::sqrt(acc.diff_sq), ref = std::sqrt(acc.ref_sq);
  s.rel_l2 = ref > 0 ? diff / ref : diff;
}

enum class Status { NotCompared, Matches, Drifts };

// A float tensor converted to another float type (float32, float64 or float16); anything else
// as it is.
RtValue as_float_type(const RtValue& value, DataType to) {
  if (!value.is_tensor()) return value;
  const Tensor& c = value.tensor();
  if (c.dtype() == to || !dtype_is_float(c.dtype()) ||
      (to != DataType::Float32 && to != DataType::Float64 && to != DataType::Float16))
    return value;
  Tensor out(to, c.dims());
  for (int64_t i = 0; i < c.numel(); ++i) {
    const double v = c.double_at(i);
    if (to == DataType::Float32)
      out.data<float>()[i] = static_cast<float>(v);
    else if (to == DataType::Float64)
      out.data<double>()[i] = v;
    else
      out.data<Float16>()[i] = Float16(static_cast<float>(v));
  }
  return RtValue(std::move(out));
}

bool is_random(const ir::Node& n) {
  if (passes::is_nondeterministic(n)) return true;
  for (const ir::Graph* g : ir::subgraphs_of(n)) {
    for (const ir::Node* inner : g->nodes()) {
      if (is_random(*inner)) return true;
    }
  }
  return false;
}

}  // namespace

void collect_reads(const ir::Node& n, const ir::Graph& owner, std::vector<const ir::Value*>& out) {
  ir::visit_reads(n, [&](const ir::Value* v) {
    if (v->owner() == &owner) out.push_back(v);
  });
}

double DriftTolerance::max_rel_l2_for(DataType type) const {
  if (!scale_by_type) return max_rel_l2;
  double floor = 0;
  if (type == DataType::Float16) floor = 1e-3;
  if (type == DataType::BFloat16) floor = 1e-2;
  if (dtype_is_low_precision(type) && !dtype_is_integer(type) && type != DataType::Int4 &&
      type != DataType::UInt4 && type != DataType::Int2 && type != DataType::UInt2)
    floor = 1e-1;
  return std::max(max_rel_l2, floor);
}

std::string DriftTolerance::describe() const {
  std::string s = fmt::format("relative L2 <= {:.1e}", max_rel_l2);
  if (rtol || atol) {
    s += fmt::format(", |a-e| <= {:.1e} + {:.1e}*|e| per element", atol.value_or(0),
                     rtol.value_or(0));
  }
  return s;
}

ErrorStats error_stats(const RtValue& actual, const RtValue& expected, const DriftTolerance& tol) {
  Accumulator acc;
  if (actual.kind() != expected.kind()) {
    acc.stats.mismatch =
        fmt::format("got {}, reference {}", actual.describe(), expected.describe());
  } else if (actual.is_tensor()) {
    accumulate(actual.tensor(), expected.tensor(), tol, acc);
  } else if (actual.is_sequence()) {
    const auto& a = actual.sequence();
    const auto& e = expected.sequence();
    if (a.size() != e.size()) {
      acc.stats.mismatch = fmt::format("sequence of {} tensors, reference {}", a.size(), e.size());
    }
    for (size_t i = 0; i < a.size() && acc.stats.mismatch.empty(); ++i) {
      accumulate(a[i], e[i], tol, acc);
      if (!acc.stats.mismatch.empty())
        acc.stats.mismatch = fmt::format("item {}: {}", i, acc.stats.mismatch);
    }
  }
  finish(acc);
  return acc.stats;
}

bool within_tolerance(const ErrorStats& s, const DriftTolerance& tol) {
  return s.mismatch.empty() && s.rel_l2 <= tol.max_rel_l2_for(s.dtype) && s.outside == 0;
}

void skip_nondeterministic(const ir::Graph& reference, std::vector<OutputCheck>& checks) {
  std::unordered_map<const ir::Value*, const ir::Node*> random_source;
  for (const ir::Node* n : reference.nodes()) {
    const ir::Node* source = is_random(*n) ? n : nullptr;
    if (!source) {
      std::vector<const ir::Value*> reads;
      collect_reads(*n, reference, reads);
      for (const ir::Value* r : reads) {
        auto it = random_source.find(r);
        if (it != random_source.end()) {
          source = it->second;
          break;
        }
      }
    }
    if (!source) continue;
    for (const ir::Value* o : n->outputs()) {
      if (o) random_source[o] = source;
    }
  }
  for (OutputCheck& c : checks) {
    const ir::Value* v = reference.find_local_value(c.name);
    auto it = v ? random_source.find(v) : random_source.end();
    if (it == random_source.end()) continue;
    c.skipped = fmt::format("computed from the random op {}", it->second->label());
    c.pass = true;
  }
}

std::vector<OutputCheck> compare_outputs(const Feeds& actual, const Feeds& expected,
                                         const DriftTolerance& tol) {
  std::vector<OutputCheck> checks;
  for (const auto& [name, e] : expected) {
    OutputCheck c;
    c.name = name;
    auto it = actual.find(name);
    if (it == actual.end()) {
      c.stats.mismatch = "missing from the candidate's outputs";
    } else {
      c.stats = error_stats(it->second, e, tol);
    }
    c.pass = within_tolerance(c.stats, tol);
    checks.push_back(std::move(c));
  }
  return checks;
}

Feeds run_keeping_values(std::shared_ptr<const ir::Graph> graph, const Feeds& feeds,
                         const RunControl* control) {
  Feeds kept;
  Interpreter interp(graph);
  interp.set_observer([&](const ir::Node& n, const std::vector<RtValue>& outs) {
    for (size_t k = 0; k < outs.size(); ++k) {
      if (const ir::Value* v = n.output(k)) kept[v->name()] = outs[k];
    }
  });
  Feeds own;
  for (const ir::Value* v : graph->inputs()) {
    auto it = feeds.find(v->name());
    if (it != feeds.end()) own[v->name()] = it->second;
  }
  interp.run(own, control);
  return kept;
}

namespace {

// The candidate's values under reference names: as they are, plus renamed ones matched by place.
Feeds align_candidate(const ir::Graph& reference, const ir::Graph& candidate, const Feeds& values) {
  Feeds aligned = values;
  auto same_op = [](const ir::Node& c, const ir::Node& r) {
    if (c.domain() == r.domain() && c.op_type() == r.op_type()) return true;
    return c.domain() == ops::kKilnDomain && r.domain().empty() &&
           c.op_type() == "Fused" + r.op_type();
  };
  for (const ir::Node* c : candidate.nodes()) {
    const ir::Node* r = nullptr;
    for (const ir::Value* out : c->outputs()) {
      const ir::Value* twin = out ? reference.find_local_value(out->name()) : nullptr;
      if (twin && twin->producer()) {
        r = twin->producer();
        break;
      }
    }
    if (!r || !same_op(*c, *r)) continue;
    for (size_t k = 0; k < std::min(c->inputs().size(), r->inputs().size()); ++k) {
      const ir::Value* cv = c->input(k);
      const ir::Value* rv = r->input(k);
      if (!cv || !rv || cv->is_constant() || rv->is_constant() || cv->name() == rv->name())
        continue;
      // Only a value the candidate renamed, standing where a value it lacks stood.
      if (reference.find_local_value(cv->name()) || values.count(rv->name())) continue;
      auto it = values.find(cv->name());
      if (it != values.end()) aligned.emplace(rv->name(), it->second);
    }
  }
  return aligned;
}

}  // namespace

std::optional<NodeDrift> first_drift_in(const ir::Graph& reference, const Feeds& reference_values,
                                        const Feeds& given_candidate_values,
                                        const DriftTolerance& tol, const ir::Graph* candidate) {
  Feeds candidate_values = candidate
                               ? align_candidate(reference, *candidate, given_candidate_values)
                               : given_candidate_values;
  std::unordered_map<const ir::Value*, Status> status;
  std::unordered_map<const ir::Value*, ErrorStats> stats;
  for (const ir::Node* n : reference.nodes()) {
    for (const ir::Value* v : n->outputs()) {
      if (!v) continue;
      auto r = reference_values.find(v->name());
      auto c = candidate_values.find(v->name());
      if (r == reference_values.end() || c == candidate_values.end()) continue;
      ErrorStats s = error_stats(as_reference_float_type(c->second, r->second), r->second, tol);
      // Another shape or type under the same name is a rewritten value (a layout change), not
      // evidence either way; the graph outputs are checked on their own.
      if (!s.mismatch.empty() && !reference.is_output(v)) continue;
      status[v] = within_tolerance(s, tol) ? Status::Matches : Status::Drifts;
      stats[v] = std::move(s);
    }
  }
  // Walk back from the drifting outputs through values that drift or were not compared; a value
  // that matches stops the walk, since what it depends on evidently did not spoil it.
  auto status_of = [&](const ir::Value* v) {
    auto it = status.find(v);
    return it == status.end() ? Status::NotCompared : it->second;
  };
  std::set<const ir::Value*> seen;
  std::vector<const ir::Value*> stack;
  for (const ir::Value* v : reference.outputs()) {
    if (status_of(v) == Status::Drifts) stack.push_back(v);
  }
  std::set<const ir::Node*> blamed;
  while (!stack.empty()) {
    const ir::Value* v = stack.back();
    stack.pop_back();
    Status st = status_of(v);
    if (!seen.insert(v).second || st == Status::Matches) continue;
    const ir::Node* p = v->producer();
    if (!p) continue;
    if (st == Status::Drifts) blamed.insert(p);
    std::vector<const ir::Value*> reads;
    collect_reads(*p, reference, reads);
    for (const ir::Value* r : reads) stack.push_back(r);
  }
  for (const ir::Node* n : reference.nodes()) {
    if (!blamed.count(n)) continue;
    for (const ir::Value* v : n->outputs()) {
      if (!v || status_of(v) != Status::Drifts) continue;
      NodeDrift drift{n->label(), v->name(), stats[v], {}};
      // The nodes feeding it through values nobody could compare; those computing from weights
      // alone (an Identity of an initializer, folded away) cannot be where data drifts.
      std::set<const ir::Value*> dynamic;
      for (const ir::Value* in : reference.inputs()) {
        if (!in->is_constant()) dynamic.insert(in);
      }
      for (const ir::Node* m : reference.nodes()) {
        std::vector<const ir::Value*> in;
        collect_reads(*m, reference, in);
        bool reads_data = false;
        for (const ir::Value* r : in) reads_data = reads_data || dynamic.count(r);
        if (!reads_data) continue;
        for (const ir::Value* o : m->outputs()) {
          if (o) dynamic.insert(o);
        }
      }
      std::set<const ir::Node*> hidden;
      std::vector<const ir::Value*> reads;
      collect_reads(*n, reference, reads);
      std::set<const ir::Value*> visited;
      while (!reads.empty()) {
        const ir::Value* r = reads.back();
        reads.pop_back();
        if (!visited.insert(r).second || status_of(r) != Status::NotCompared) continue;
        if (!r->producer() || !dynamic.count(r)) continue;
        hidden.insert(r->producer());
        collect_reads(*r->producer(), reference, reads);
      }
      for (const ir::Node* h : reference.nodes()) {
        if (hidden.count(h)) drift.unobserved.push_back(h->label());
      }
      return drift;
    }
  }
  return std::nullopt;
}

std::optional<NodeDrift> find_first_drift(std::shared_ptr<const ir::Graph> reference,
                                          std::shared_ptr<const ir::Graph> candidate,
                                          const Feeds& feeds, const DriftTolerance& tol,
                                          const RunControl* control) {
  Feeds candidate_values = run_keeping_values(candidate, feeds_for(*candidate, feeds), control);
  Feeds reference_values = run_keeping_values(reference, feeds_for(*reference, feeds), control);
  return first_drift_in(*reference, reference_values, candidate_values, tol, candidate.get());
}

// A candidate value computed in another float type than the reference's (a float16 engine's
// activations) converted to the reference's type, so the drift search can compare it.
RtValue as_reference_float_type(const RtValue& candidate, const RtValue& reference) {
  if (!reference.is_tensor() || !dtype_is_float(reference.tensor().dtype())) return candidate;
  return as_float_type(candidate, reference.tensor().dtype());
}

// The feeds with each float tensor converted to the float type `graph` declares for that input
// (a --fp16-io engine takes float16 where the original model takes float32).
Feeds feeds_for(const ir::Graph& graph, const Feeds& feeds) {
  Feeds out = feeds;
  for (const ir::Value* in : graph.inputs()) {
    auto it = out.find(in->name());
    if (it == out.end() || !in->type().is_tensor() || !dtype_is_float(in->type().dtype)) continue;
    it->second = as_float_type(it->second, in->type().dtype);
  }
  return out;
}

bool PrecisionReport::pass() const {
  for (const OutputCheck& c : outputs) {
    if (!c.pass) return false;
  }
  return true;
}

PrecisionReport check_precision(Session& candidate, std::shared_ptr<const ir::Graph> reference,
                                const Feeds& feeds, const DriftTolerance& tol,
                                const RunControl* control, Feeds* candidate_outputs) {
  PrecisionReport report;
  Interpreter ref(reference);
  Feeds expected = ref.run(feeds_for(*reference, feeds), control);
  Feeds cand_feeds;
  const Feeds typed = feeds_for(*candidate.model().graph, feeds);
  for (const IoInfo& in : candidate.inputs()) {
    auto it = typed.find(in.name);
    if (it != typed.end()) cand_feeds[in.name] = it->second;
  }
  Feeds actual = candidate.run(cand_feeds, control);
  // An engine with float16 inputs and outputs (--fp16-io) is compared in the reference's type.
  for (auto& [name, value] : actual) {
    auto it = expected.find(name);
    if (it != expected.end()) value = as_reference_float_type(value, it->second);
  }
  report.outputs = compare_outputs(actual, expected, tol);
  if (candidate_outputs) *candidate_outputs = actual;
  skip_nondeterministic(*reference, report.outputs);
  if (report.pass()) return report;
  report.first_drift = find_first_drift(reference, candidate.model().graph, feeds, tol, control);
  report.reproduced = report.first_drift.has_value();
  if (!report.first_drift) {
    for (const OutputCheck& c : report.outputs) {
      if (c.pass) continue;
      const ir::Value* v = reference->find_local_value(c.name);
      report.first_drift =
          NodeDrift{v && v->producer() ? v->producer()->label() : "(graph input)", c.name, c.stats};
      break;
    }
  }
  return report;
}

}  // namespace kiln::runtime
