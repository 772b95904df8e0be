// If, Loop and Scan: run subgraph bodies through KernelContext::run_subgraph, which executes
// them in the scope of the node so bodies read captured outer values.
#include <algorithm>

#include "ops/control_utils.hpp"
#include "ops/op_utils.hpp"
#include "ops/registry.hpp"

namespace kiln::ops {
namespace {

using ctl::scalar_bool;
using ctl::scalar_int;

// A body output's static type with the shape dropped: it can change between iterations or
// branches, the element type cannot.
TypeInfo without_shape(const TypeInfo& t) {
  if (t.kind != TypeInfo::Kind::Tensor) return t;
  return TypeInfo::tensor(t.dtype);
}

// An empty stacked scan output (zero iterations): [0, ...per-iteration dims] when the body
// declares them.
Tensor empty_scan_output(const AttrReader& ctx, const TypeInfo& type, size_t axis) {
  if (type.kind != TypeInfo::Kind::Tensor || type.dtype == DataType::Undefined) {
    ctx.unsupported("zero iterations with a scan output of unknown element type");
  }
  std::vector<int64_t> dims;
  if (type.shape && type.shape->is_static()) dims = type.shape->values();
  axis = std::min(axis, dims.size());
  dims.insert(dims.begin() + static_cast<int64_t>(axis), 0);
  return Tensor(type.dtype, dims);
}

// ---- If ----

void if_kernel(KernelContext& ctx) {
  bool cond = scalar_bool(ctx, ctx.input(0), "cond");
  const ir::Graph& branch = ctx.attr_graph(cond ? "then_branch" : "else_branch");
  std::vector<RtValue> outs = ctx.run_subgraph(branch, {});
  ctx.check(outs.size() == ctx.output_count(), "branch produced {} outputs, the node has {}",
            outs.size(), ctx.output_count());
  for (size_t i = 0; i < outs.size(); ++i) ctx.set_output(i, std::move(outs[i]));
}

void infer_if(InferContext& ctx) {
  const ir::Graph& then_g = ctx.attr_graph("then_branch");
  const ir::Graph& else_g = ctx.attr_graph("else_branch");
  for (size_t i = 0; i < ctx.output_count() && i < then_g.outputs().size(); ++i) {
    const TypeInfo& a = then_g.outputs()[i]->type();
    if (a.kind == TypeInfo::Kind::Unknown) continue;
    TypeInfo t = without_shape(a);
    if (i < else_g.outputs().size()) {
      const TypeInfo& b = else_g.outputs()[i]->type();
      if (b.kind != a.kind) continue;
      if (a.kind == TypeInfo::Kind::Tensor && a.shape && b.shape && *a.shape == *b.shape &&
          a.shape->is_static()) {
        t.shape = a.shape;
      }
    }
    ctx.set_output_type(i, t);
  }
}

// ---- Loop ----

void loop_kernel(KernelContext& ctx) {
  const ir::Graph& body = ctx.attr_graph("body");
  const size_t n_carried = ctx.input_count() >= 2 ? ctx.input_count() - 2 : 0;
  ctx.check(body.inputs().size() == 2 + n_carried, "body takes {} inputs, expected {}",
            body.inputs().size(), 2 + n_carried);
  ctx.check(body.outputs().size() >= 1 + n_carried, "body has {} outputs, expected at least {}",
            body.outputs().size(), 1 + n_carried);
  const size_t n_scan = body.outputs().size() - 1 - n_carried;
  ctx.check(ctx.output_count() <= n_carried + n_scan, "node has {} outputs, body gives {}",
            ctx.output_count(), n_carried + n_scan);

  const bool has_max = ctx.has_input(0);
  const int64_t max_trip = has_max ? scalar_int(ctx, ctx.input(0), "M") : 0;
  const bool has_cond = ctx.has_input(1);
  bool cond = has_cond ? scalar_bool(ctx, ctx.input(1), "cond") : true;
  ctx.check(has_max || has_cond, "a Loop with neither M nor cond never ends");

  std::vector<RtValue> carried;
  for (size_t i = 0; i < n_carried; ++i) carried.push_back(ctx.input_value(2 + i));
  std::vector<std::vector<Tensor>> scans(n_scan);
  for (int64_t iter = 0; (!has_max || iter < max_trip) && (!has_cond || cond); ++iter) {
    std::vector<RtValue> in;
    in.reserve(2 + n_carried);
    in.emplace_back(Tensor::scalar<int64_t>(iter));
    in.emplace_back(Tensor::scalar<bool>(cond));
    for (RtValue& v : carried) in.push_back(v);
    std::vector<RtValue> out = ctx.run_subgraph(body, in);
    if (has_cond) {
      ctx.check(out[0].is_tensor(), "body condition must be a tensor");
      cond = scalar_bool(ctx, out[0].tensor(), "body condition");
    }
    for (size_t i = 0; i < n_carried; ++i) carried[i] = std::move(out[1 + i]);
    for (size_t k = 0; k < n_scan; ++k) {
      RtValue& v = out[1 + n_carried + k];
      if (!v.is_tensor()) ctx.unsupported("scan output {} is {}, not a tensor", k, v.describe());
      scans[k].push_back(v.tensor());
    }
  }
  for (size_t i = 0; i < n_carried && i < ctx.output_count(); ++i) {
    ctx.set_output(i, std::move(carried[i]));
  }
  for (size_t k = 0; k < n_scan && n_carried + k < ctx.output_count(); ++k) {
    Tensor t = scans[k].empty()
                   ? empty_scan_output(ctx, body.outputs()[1 + n_carried + k]->type(), 0)
                   : ctl::stack_axis(ctx, scans[k], 0);
    ctx.set_output(n_carried + k, std::move(t));
  }
}

void infer_loop(InferContext& ctx) {
  const ir::Graph& body = ctx.attr_graph("body");
  for (size_t i = 0; i < ctx.output_count() && i + 1 < body.outputs().size(); ++i) {
    const TypeInfo& t = body.outputs()[i + 1]->type();
    if (t.kind == TypeInfo::Kind::Unknown) continue;
    // Loop-carried values keep their kind; scan outputs are tensors of the same element type.
    ctx.set_output_type(i, without_shape(t));
  }
}

// ---- Scan ----

// Runs the body over T steps. states: N values; inputs: M tensors scanned along in_axes.
// Returns N final states then K stacked outputs.
std::vector<RtValue> run_scan(const KernelContext& ctx, const ir::Graph& body,
                              std::vector<RtValue> states, const std::vector<Tensor>& inputs,
                              const std::vector<int64_t>& in_axes,
                              const std::vector<int64_t>& in_dirs,
                              const std::vector<int64_t>& out_axes,
                              const std::vector<int64_t>& out_dirs) {
  const size_t n = states.size(), m = inputs.size();
  ctx.check(body.inputs().size() == n + m, "body takes {} inputs, expected {}",
            body.inputs().size(), n + m);
  ctx.check(body.outputs().size() >= n, "body has {} outputs, expected at least {}",
            body.outputs().size(), n);
  const size_t k_out = body.outputs().size() - n;
  int64_t steps = -1;
  for (size_t j = 0; j < m; ++j) {
    const int64_t len = inputs[j].dim(static_cast<size_t>(in_axes[j]));
    ctx.check(steps < 0 || len == steps, "scan inputs have different lengths: {} vs {}", len,
              steps);
    steps = len;
  }
  ctx.check(m > 0, "Scan needs at least one scan input");
  std::vector<std::vector<Tensor>> collected(k_out);
  for (int64_t t = 0; t < steps; ++t) {
    std::vector<RtValue> in = states;
    for (size_t j = 0; j < m; ++j) {
      const int64_t idx = in_dirs[j] ? steps - 1 - t : t;
      in.emplace_back(ctl::take_axis(inputs[j], in_axes[j], idx));
    }
    std::vector<RtValue> out = ctx.run_subgraph(body, in);
    for (size_t i = 0; i < n; ++i) states[i] = std::move(out[i]);
    for (size_t k = 0; k < k_out; ++k) {
      if (!out[n + k].is_tensor()) ctx.fail("scan output {} is not a tensor", k);
      collected[k].push_back(out[n + k].tensor());
    }
  }
  std::vector<RtValue> result = std::move(states);
  for (size_t k = 0; k < k_out; ++k) {
    std::vector<Tensor>& c = collected[k];
    if (out_dirs[k]) std::reverse(c.begin(), c.end());
    int64_t axis = out_axes[k];
    if (c.empty()) {
      result.emplace_back(empty_scan_output(ctx, body.outputs()[n + k]->type(),
                                            static_cast<size_t>(std::max<int64_t>(axis, 0))));
      continue;
    }
    axis = normalize_axis(ctx, axis, static_cast<int64_t>(c[0].rank()) + 1);
    result.emplace_back(ctl::stack_axis(ctx, c, axis));
  }
  return result;
}

std::vector<int64_t> per_item_attr(const KernelContext& ctx, const char* name, size_t count) {
  std::vector<int64_t> v = ctx.attr_ints(name, std::vector<int64_t>(count, 0));
  ctx.check(v.size() == count, "attribute '{}' has {} entries, expected {}", name, v.size(), count);
  return v;
}

void scan9_kernel(KernelContext& ctx) {
  const ir::Graph& body = ctx.attr_graph("body");
  const int64_t m = ctx.attr_int("num_scan_inputs");
  ctx.check(m >= 1 && static_cast<size_t>(m) <= ctx.input_count(),
            "num_scan_inputs {} is out of range", m);
  const size_t n = ctx.input_count() - static_cast<size_t>(m);
  ctx.check(body.outputs().size() >= n, "body has too few outputs");
  const size_t k = body.outputs().size() - n;
  std::vector<RtValue> states;
  for (size_t i = 0; i < n; ++i) states.push_back(ctx.input_value(i));
  std::vector<Tensor> inputs;
  for (size_t j = 0; j < static_cast<size_t>(m); ++j) inputs.push_back(ctx.input(n + j));
  std::vector<int64_t> in_axes = per_item_attr(ctx, "scan_input_axes", inputs.size());
  for (size_t j = 0; j < inputs.size(); ++j) {
    ctx.check(inputs[j].rank() >= 1, "scan input {} is a scalar", j);
    in_axes[j] = normalize_axis(ctx, in_axes[j], static_cast<int64_t>(inputs[j].rank()));
  }
  std::vector<int64_t> in_dirs = per_item_attr(ctx, "scan_input_directions", inputs.size());
  std::vector<int64_t> out_axes = per_item_attr(ctx, "scan_output_axes", k);
  std::vector<int64_t> out_dirs = per_item_attr(ctx, "scan_output_directions", k);
  std::vector<RtValue> out =
      run_scan(ctx, body, std::move(states), inputs, in_axes, in_dirs, out_axes, out_dirs);
  for (size_t i = 0; i < out.size() && i < ctx.output_count(); ++i) {
    ctx.set_output(i, std::move(out[i]));
  }
}

// Opset 8: a leading batch axis on every state and scan input, an optional sequence_lens.
void scan8_kernel(KernelContext& ctx) {
  const ir::Graph& body = ctx.attr_graph("body");
  const int64_t m = ctx.attr_int("num_scan_inputs");
  ctx.check(m >= 1 && static_cast<size_t>(m) + 1 <= ctx.input_count(),
            "num_scan_inputs {} is out of range", m);
  const size_t n = ctx.input_count() - 1 - static_cast<size_t>(m);
  ctx.check(body.outputs().size() >= n, "body has too few outputs");
  const size_t k = body.outputs().size() - n;
  std::vector<Tensor> states, inputs;
  for (size_t i = 0; i < n; ++i) states.push_back(ctx.input(1 + i));
  for (size_t j = 0; j < static_cast<size_t>(m); ++j) inputs.push_back(ctx.input(1 + n + j));
  int64_t batch = -1;
  for (const auto& group : {&states, &inputs}) {
    for (const Tensor& t : *group) {
      ctx.check(t.rank() >= 1, "state and scan inputs need a batch axis, got {}", t.describe());
      ctx.check(batch < 0 || t.dim(0) == batch, "batch sizes differ");
      batch = t.dim(0);
    }
  }
  for (const Tensor& t : inputs) {
    ctx.check(t.rank() >= 2, "scan inputs need [batch, sequence, ...], got {}", t.describe());
  }
  if (ctx.has_input(0)) {
    const Tensor& lens = ctx.input(0);
    for (int64_t b = 0; b < lens.numel(); ++b) {
      if (lens.int_at(b) != inputs[0].dim(1)) {
        ctx.unsupported("sequence_lens shorter than the scan length");
      }
    }
  }
  std::vector<int64_t> dirs = per_item_attr(ctx, "directions", inputs.size());
  std::vector<int64_t> zeros_in(inputs.size(), 0), zeros_out(k, 0);
  std::vector<std::vector<Tensor>> per_batch(n + k);
  for (int64_t b = 0; b < batch; ++b) {
    std::vector<RtValue> st;
    for (const Tensor& s : states) st.emplace_back(ctl::take_axis(s, 0, b));
    std::vector<Tensor> in;
    for (const Tensor& t : inputs) in.push_back(ctl::take_axis(t, 0, b));
    std::vector<RtValue> out =
        run_scan(ctx, body, std::move(st), in, zeros_in, dirs, zeros_out, zeros_out);
    for (size_t i = 0; i < out.size(); ++i) {
      if (!out[i].is_tensor()) ctx.fail("Scan output {} is not a tensor", i);
      per_batch[i].push_back(out[i].tensor());
    }
  }
  for (size_t i = 0; i < n + k && i < ctx.output_count(); ++i) {
    if (per_batch[i].empty()) ctx.unsupported("Scan over an empty batch");
    ctx.set_output(i, ctl::stack_axis(ctx, per_batch[i], 0));
  }
}

void infer_scan(InferContext& ctx) {
  const ir::Graph& body = ctx.attr_graph("body");
  for (size_t i = 0; i < ctx.output_count() && i < body.outputs().size(); ++i) {
    const TypeInfo& t = body.outputs()[i]->type();
    if (t.kind == TypeInfo::Kind::Tensor) ctx.set_output_type(i, without_shape(t));
  }
}

KILN_REGISTER_OP({.op_type = "If", .kernel = if_kernel, .infer = infer_if});
KILN_REGISTER_OP({.op_type = "Loop", .kernel = loop_kernel, .infer = infer_loop});
KILN_REGISTER_OP(
    {.op_type = "Scan", .kernel = scan8_kernel, .infer = infer_scan, .until_opset = 8});
KILN_REGISTER_OP(
    {.op_type = "Scan", .kernel = scan9_kernel, .infer = infer_scan, .since_opset = 9});

}  // namespace
}  // namespace kiln::ops
