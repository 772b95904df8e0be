// ConvertToFloat16: float32 compute of allowlisted ops becomes float16, with Casts at every
// boundary between the two precisions (see passes.hpp and docs/FP16.md).
#include <algorithm>
#include <cstring>
#include <map>
#include <set>

#include "core/half_convert.hpp"
#include "core/log.hpp"
#include "ir/node_reads.hpp"
#include "ops/fused_activation.hpp"
#include "ops/op_traits.hpp"
#include "ops/registry.hpp"
#include "passes/pass.hpp"
#include "passes/passes.hpp"

namespace kiln::passes {
namespace {

// The ops that may compute in float16 say so in their traits (OpTraits::fp16, set where each op
// is registered): the input and output slots whose type constraint is the op's main float type.
// Slots outside the masks keep their type (Resize's float-only `scales`, LayerNormalization's
// float32 statistics). Only float32 tensors in those slots change; integer inputs (shapes,
// indices, axes) never do.
//
// Why each group is float16-safe (measured on the CI-size models, docs/FP16.md):
// - convolutions and matrix products are the work; their CPU kernels compute in float32 from
//   float16 storage, the reference kernels accumulate in double;
// - element-wise ops whose result stays within the inputs' magnitude (activations, Add/Sub/Mul/
//   Div between fp16 tensors, Max/Min, Where) and data movement (no arithmetic at all);
// - normalizations and Softmax: their kernels compute the statistics in float32 or wider and
//   only store float16, so the large intermediate sums never live in float16;
// - ReduceMean / ReduceMax / ReduceMin: bounded by the inputs.
// Left float32: reductions whose result can exceed 65504 (ReduceSum, ReduceSumSquare,
// ReduceL1/L2, ReduceProd, ReduceLogSumExp), Exp / Log / Pow / Reciprocal (overflow or
// cancellation), CumSum, Range, Resize's scales, anything with a subgraph, random ops.
// An ai.kiln PointChain converts when every op in it would (its `ops` names the ai.onnx ops it
// replaced; GeluTanh is Gelu): a chain with Exp stays float32, as Exp alone would.
const ops::Fp16Slots* point_chain_rule(const ir::Node& n) {
  static const ops::Fp16Slots kSafe{.safe = true};
  const ir::Attribute* a = n.attribute("ops");
  if (!a || a->kind() != ir::AttrKind::Strings) return nullptr;
  for (std::string op : std::get<std::vector<std::string>>(a->storage())) {
    if (op == "GeluTanh") op = "Gelu";
    const ops::OpDef* def = ops::OpRegistry::instance().newest("", op);
    if (!def || !def->traits.fp16.safe) return nullptr;
  }
  return &kSafe;
}

const ops::Fp16Slots* rule_of(const ir::Node& n, DataType half_type) {
  if (n.domain() == ops::kKilnDomain && n.op_type() == "PointChain") return point_chain_rule(n);
  const ops::Fp16Slots& slots = ops::traits_of(n).fp16;
  if (!slots.safe || (slots.bf16_only && half_type != DataType::BFloat16)) return nullptr;
  return &slots;
}

bool is_float32_tensor(const ir::Value* v) {
  return v && v->type().is_tensor() && v->type().dtype == DataType::Float32;
}

bool has_subgraph(const ir::Node& n) {
  for (const auto& [name, a] : n.attributes()) {
    if (a.kind() == ir::AttrKind::Graph || a.kind() == ir::AttrKind::Graphs) return true;
  }
  return false;
}

// Values of `outer` that nodes inside the subgraphs of `n` read by name (captures): their type
// is fixed by the subgraph, which this pass leaves float32.
void collect_captures(const ir::Node& n, const ir::Graph& outer, std::set<const ir::Value*>& out) {
  auto keep_outer = [&](const ir::Value* v) {
    if (v->owner() == &outer) out.insert(v);
  };
  for (const ir::Graph* g : ir::subgraphs_of(n)) {
    for (const ir::Node* inner : g->nodes()) ir::visit_reads(*inner, keep_outer);
    for (const ir::Value* v : g->outputs()) keep_outer(v);
  }
}

bool in_mask(ops::SlotMask mask, size_t slot) {
  return ops::has_slot(mask, slot);
}

// Every T slot must hold float32 (or nothing): a node already mixing other float types is not
// this pass's to change.
bool node_converts(const ir::Node& n, DataType half_type, const std::set<std::string>& keep_ops,
                   const std::set<const ir::Value*>& captured) {
  const ops::Fp16Slots* r = rule_of(n, half_type);
  if (!r || keep_ops.count(n.op_type()) || has_subgraph(n)) return false;
  bool any = false;
  auto check_slot = [&](const ir::Value* v) {
    if (!v) return true;
    if (!v->type().is_tensor()) return false;
    if (v->type().dtype == DataType::Float32) {
      any = true;
      return true;
    }
    return !dtype_is_float(v->type().dtype);
  };
  for (size_t i = 0; i < n.inputs().size(); ++i) {
    if (in_mask(r->inputs, i) && !check_slot(n.input(i))) return false;
  }
  for (size_t i = 0; i < n.outputs().size(); ++i) {
    if (!in_mask(r->outputs, i)) continue;
    if (!check_slot(n.output(i))) return false;
    if (n.output(i) && captured.count(n.output(i))) return false;
  }
  return any;
}

TypeInfo with_dtype(const TypeInfo& t, DataType dtype) {
  TypeInfo out = t;
  out.dtype = dtype;
  return out;
}

Tensor to_half(const Tensor& t, DataType half_type, const std::string& name, Fp16Summary* summary) {
  Tensor out(half_type, t.dims());
  const size_t n = static_cast<size_t>(t.numel());
  if (half_type == DataType::BFloat16) {
    // float32's range: nothing to clamp.
    floats_to_bfloat16s(t.data<float>(), static_cast<uint16_t*>(out.raw_data()), n);
    return out;
  }
  size_t clamped =
      floats_to_halves_clamped(t.data<float>(), static_cast<uint16_t*>(out.raw_data()), n);
  if (clamped) {
    log_warning(
        "fp16: initializer '{}': {} of {} values beyond the float16 range (|x| > 65504) clamped "
        "to +-65504",
        name, clamped, n);
    if (summary) summary->clamped.push_back(name);
  }
  return out;
}

}  // namespace

bool fp16_convertible(const ir::Node& node, DataType half_type) {
  return rule_of(node, half_type) != nullptr;
}

bool ConvertToFloat16::apply(ir::Graph& graph) const {
  KILN_CHECK(half_type == DataType::Float16 || half_type == DataType::BFloat16, ErrorCode::Internal,
             "convert_to_fp16: target {} is neither float16 nor bfloat16", dtype_name(half_type));
  const std::string suffix = half_type == DataType::BFloat16 ? "_bf16" : "_fp16";
  KILN_CHECK(!graph.opsets().count("") || graph.opsets().at("") >= 6, ErrorCode::Unsupported,
             "fp16: the model imports ai.onnx opset {}; Cast with an integer 'to' needs 6 or later",
             graph.opsets().at(""));
  const std::vector<ir::Node*> nodes = graph.nodes();
  std::map<const ir::Node*, size_t> order;
  for (size_t i = 0; i < nodes.size(); ++i) order[nodes[i]] = i;

  std::set<const ir::Value*> captured;
  for (const ir::Node* n : nodes) collect_captures(*n, graph, captured);

  // A node that reads or writes a value the range check found past float16's range stays
  // float32 (compiler/fp16_range.hpp), with the Casts at its edges like any other.
  auto out_of_range = [&](const ir::Node& n) {
    if (keep_values.empty()) return false;
    for (const ir::Value* v : n.inputs()) {
      if (v && keep_values.count(v->name())) return true;
    }
    for (const ir::Value* v : n.outputs()) {
      if (v && keep_values.count(v->name())) return true;
    }
    return false;
  };
  // Whether `v` will hold the half type: written in a converted node's half slot, or a graph
  // input that is retyped. Nodes come in order, so a producer is decided before its readers.
  std::set<const ir::Node*> converted;
  auto arrives_half = [&](const ir::Value* v) {
    if (const ir::Node* p = v->producer()) {
      if (!converted.count(p)) return false;
      const ops::Fp16Slots* r = rule_of(*p, half_type);
      for (size_t k = 0; k < p->outputs().size(); ++k) {
        if (p->output(k) == v) return in_mask(r->outputs, k);
      }
      return false;
    }
    const auto& ins = graph.inputs();
    return !keep_io_types && !v->is_constant() && !captured.count(v) &&
           std::find(ins.begin(), ins.end(), v) != ins.end();
  };
  auto inputs_arrive_half = [&](const ir::Node& n) {
    const ops::Fp16Slots* r = rule_of(n, half_type);
    for (size_t i = 0; i < n.inputs().size(); ++i) {
      const ir::Value* v = n.input(i);
      if (in_mask(r->inputs, i) && is_float32_tensor(v) && !arrives_half(v)) return false;
    }
    return true;
  };
  for (const ir::Node* n : nodes) {
    if (!node_converts(*n, half_type, keep_ops, captured)) continue;
    if (out_of_range(*n)) {
      if (summary) ++summary->kept_for_range;
      continue;
    }
    if (rule_of(*n, half_type)->after_half_inputs && !inputs_arrive_half(*n)) continue;
    converted.insert(n);
  }

  // Readers of each float32 value, split by the precision they want; decided before any type
  // changes.
  struct Reads {
    std::vector<std::pair<ir::Node*, size_t>> half, full;
  };
  std::map<ir::Value*, Reads> reads;
  for (ir::Node* n : nodes) {
    const ops::Fp16Slots* r = converted.count(n) ? rule_of(*n, half_type) : nullptr;
    for (size_t i = 0; i < n->inputs().size(); ++i) {
      ir::Value* v = n->input(i);
      if (!is_float32_tensor(v) || v->owner() != &graph) continue;
      if (r && in_mask(r->inputs, i))
        reads[v].half.emplace_back(n, i);
      else
        reads[v].full.emplace_back(n, i);
    }
  }
  std::set<ir::Value*> half_values;  // float32 values that float16 will now hold
  for (ir::Node* n : nodes) {
    if (!converted.count(n)) continue;
    const ops::Fp16Slots* r = rule_of(*n, half_type);
    if (r->output_type_attribute) {
      n->set_attribute(r->output_type_attribute, ir::Attribute(static_cast<int64_t>(half_type)));
    }
    for (size_t k = 0; k < n->outputs().size(); ++k) {
      if (in_mask(r->outputs, k) && is_float32_tensor(n->output(k)))
        half_values.insert(n->output(k));
    }
  }
  std::vector<ir::Value*> retyped_inputs;
  if (!keep_io_types) {
    for (ir::Value* v : graph.inputs()) {
      if (is_float32_tensor(v) && !v->is_constant() && !captured.count(v)) {
        half_values.insert(v);
        retyped_inputs.push_back(v);
      }
    }
  }

  Fp16Summary local;
  Fp16Summary& summary = this->summary ? *this->summary : local;
  summary.converted_nodes += converted.size();
  for (const ir::Node* n : nodes) {
    bool float_op = false;
    for (const ir::Value* v : n->outputs()) float_op |= is_float32_tensor(v);
    summary.float_nodes += float_op;
  }

  auto first_reader = [&](const std::vector<std::pair<ir::Node*, size_t>>& rs) -> ir::Node* {
    ir::Node* first = nullptr;
    for (const auto& [n, slot] : rs) {
      if (!first || order.at(n) < order.at(first)) first = n;
    }
    return first;
  };
  const int opset = graph.opsets().count("") ? graph.opsets().at("") : 13;
  // Cast(from) -> a new value `to_name` of type `to`, placed before the first of `readers`
  // (at the end when there are none: a graph output).
  auto add_cast = [&](ir::Value* from, const std::string& to_name, DataType to,
                      const std::vector<std::pair<ir::Node*, size_t>>& readers) {
    ir::Value* out = graph.add_value(to_name, with_dtype(from->type(), to));
    std::string node_name = graph.unique_name(to_name + "_cast");
    ir::Node* cast;
    if (ir::Node* at = first_reader(readers))
      cast = graph.insert_node_before(at, "Cast", "", node_name, {from}, {out});
    else
      cast = graph.add_node("Cast", "", node_name, {from}, {out});
    cast->set_opset(opset);
    cast->set_attribute("to", ir::Attribute(static_cast<int64_t>(to)));
    for (const auto& [n, slot] : readers) n->set_input(slot, out);
    ++summary.casts;
    return out;
  };
  auto replace_output = [&](ir::Value* old_value, ir::Value* new_value) {
    for (ir::Value*& o : graph.mutable_outputs()) {
      if (o == old_value) o = new_value;
    }
  };

  bool changed = !converted.empty() || !retyped_inputs.empty();
  // Initializers read in float16: converted here (clamped), not Cast at run time.
  for (ir::Value* v : std::vector<ir::Value*>(graph.initializers())) {
    auto it = reads.find(v);
    if (it == reads.end() || it->second.half.empty() || !is_float32_tensor(v)) continue;
    bool is_input =
        std::find(graph.inputs().begin(), graph.inputs().end(), v) != graph.inputs().end();
    if (is_input) continue;  // an overridable default: handled like a graph input below
    Tensor half = to_half(v->constant(), half_type, v->name(), &summary);
    summary.weight_bytes_converted += v->constant().nbytes();
    if (it->second.full.empty() && !graph.is_output(v)) {
      v->set_constant(std::move(half));
      v->set_type(with_dtype(v->type(), half_type));
    } else {
      ir::Value* h = graph.add_initializer(graph.unique_name(v->name() + suffix), std::move(half));
      h->set_type(with_dtype(v->type(), half_type));
      for (const auto& [n, slot] : it->second.half) n->set_input(slot, h);
    }
    reads.erase(it);
  }

  // Every other float32 value: retype what float16 produces; Cast where the precisions meet.
  std::vector<ir::Value*> values;
  for (const auto& v : graph.values()) values.push_back(v.get());
  for (ir::Value* v : values) {
    if (!is_float32_tensor(v)) continue;
    const Reads& r = reads[v];
    const bool output = graph.is_output(v);
    const bool is_input =
        std::find(graph.inputs().begin(), graph.inputs().end(), v) != graph.inputs().end();
    if (half_values.count(v)) {
      v->set_type(with_dtype(v->type(), half_type));
      const bool output_full = output && keep_io_types;
      if (r.full.empty() && !output_full) continue;
      if (output_full) {
        // The graph output keeps its name and float32: the float16 value is renamed.
        std::string name = v->name();
        graph.rename_value(v, graph.unique_name(name + suffix));
        ir::Value* out = add_cast(v, name, DataType::Float32, r.full);
        replace_output(v, out);
      } else {
        add_cast(v, graph.unique_name(v->name() + "_fp32"), DataType::Float32, r.full);
      }
      changed = true;
    } else {
      const bool output_half = output && !keep_io_types && !is_input;
      if (r.half.empty() && !output_half) continue;
      if (output_half) {
        std::string name = v->name();
        graph.rename_value(v, graph.unique_name(name + "_fp32"));
        ir::Value* out = add_cast(v, name, half_type, r.half);
        replace_output(v, out);
      } else {
        add_cast(v, graph.unique_name(v->name() + suffix), half_type, r.half);
      }
      changed = true;
    }
  }
  return changed;
}

}  // namespace kiln::passes
