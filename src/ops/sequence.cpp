// Sequence and optional ops. A sequence is RtValue::sequence; an empty optional is RtValue None
// and a full one is the tensor or sequence it holds.
#include "ops/control_utils.hpp"
#include "ops/op_flops.hpp"
#include "ops/op_utils.hpp"
#include "ops/registry.hpp"

namespace kiln::ops {
namespace {

const std::vector<Tensor>& input_sequence(const KernelContext& ctx, size_t i) {
  const RtValue& v = ctx.input_value(i);
  if (!v.is_sequence()) ctx.fail("input {} must be a sequence, got {}", i, v.describe());
  return v.sequence();
}

// Position input: [-n, n - 1] (or [-n, n] when `allow_end`), negative counting from the back.
int64_t sequence_position(const KernelContext& ctx, size_t input, int64_t n, bool allow_end) {
  const int64_t p = ctl::scalar_int(ctx, ctx.input(input), "position");
  const int64_t hi = allow_end ? n : n - 1;
  ctx.check(p >= -n && p <= hi, "position {} is out of range for a sequence of {}", p, n);
  return p < 0 ? p + n : p;
}

TypeInfo seq_of(DataType dtype) {
  return TypeInfo::wrap(TypeInfo::Kind::Sequence, TypeInfo::tensor(dtype));
}

void set_seq_of_input0(InferContext& ctx) {
  if (const TypeInfo* t = ctx.input_type(0); t && t->is_tensor()) {
    ctx.set_output_type(0, seq_of(t->dtype));
  }
}

void check_dtype(const KernelContext& ctx, const std::vector<Tensor>& seq, const Tensor& t) {
  if (!seq.empty()) {
    ctx.check(seq[0].dtype() == t.dtype(), "tensor of type {} in a sequence of {}",
              dtype_name(t.dtype()), dtype_name(seq[0].dtype()));
  }
}

void sequence_empty(KernelContext& ctx) {
  ctx.set_output(0, RtValue::sequence({}));
}

void infer_sequence_empty(InferContext& ctx) {
  int64_t code = ctx.attr_int("dtype", static_cast<int64_t>(DataType::Float32));
  ctx.set_output_type(0,
                      seq_of(dtype_from_onnx(static_cast<int32_t>(code), "SequenceEmpty dtype")));
}

void sequence_construct(KernelContext& ctx) {
  std::vector<Tensor> items;
  for (size_t i = 0; i < ctx.input_count(); ++i) {
    const Tensor& t = ctx.input(i);
    check_dtype(ctx, items, t);
    items.push_back(t);
  }
  ctx.set_output(0, RtValue::sequence(std::move(items)));
}

void sequence_insert(KernelContext& ctx) {
  std::vector<Tensor> seq = input_sequence(ctx, 0);
  const Tensor& t = ctx.input(1);
  check_dtype(ctx, seq, t);
  const int64_t n = static_cast<int64_t>(seq.size());
  const int64_t pos = ctx.has_input(2) ? sequence_position(ctx, 2, n, true) : n;
  seq.insert(seq.begin() + pos, t);
  ctx.set_output(0, RtValue::sequence(std::move(seq)));
}

void sequence_at(KernelContext& ctx) {
  const std::vector<Tensor>& seq = input_sequence(ctx, 0);
  const int64_t pos = sequence_position(ctx, 1, static_cast<int64_t>(seq.size()), false);
  ctx.set_output(0, seq[static_cast<size_t>(pos)]);
}

void infer_sequence_at(InferContext& ctx) {
  const TypeInfo* t = ctx.input_type(0);
  if (t && t->kind == TypeInfo::Kind::Sequence && t->elem && t->elem->is_tensor()) {
    ctx.set_output_type(0, TypeInfo::tensor(t->elem->dtype));
  }
}

void sequence_erase(KernelContext& ctx) {
  std::vector<Tensor> seq = input_sequence(ctx, 0);
  const int64_t n = static_cast<int64_t>(seq.size());
  ctx.check(n > 0, "cannot erase from an empty sequence");
  const int64_t pos = ctx.has_input(1) ? sequence_position(ctx, 1, n, false) : n - 1;
  seq.erase(seq.begin() + pos);
  ctx.set_output(0, RtValue::sequence(std::move(seq)));
}

void infer_same_sequence(InferContext& ctx) {
  const TypeInfo* t = ctx.input_type(0);
  if (t && t->kind == TypeInfo::Kind::Sequence) ctx.set_output_type(0, *t);
}

void sequence_length(KernelContext& ctx) {
  ctx.set_output(0, Tensor::scalar<int64_t>(static_cast<int64_t>(input_sequence(ctx, 0).size())));
}

void infer_sequence_length(InferContext& ctx) {
  ctx.set_output_type(0, TypeInfo::tensor(DataType::Int64, Shape()));
}

void split_to_sequence(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  ctx.check(x.rank() >= 1, "cannot split a scalar");
  const int64_t axis = normalize_axis(ctx, ctx.attr_int("axis", 0), static_cast<int64_t>(x.rank()));
  const int64_t len = x.dim(static_cast<size_t>(axis));
  std::vector<Tensor> out;
  if (!ctx.has_input(1)) {
    const bool keepdims = ctx.attr_int("keepdims", 1) != 0;
    for (int64_t i = 0; i < len; ++i) {
      out.push_back(keepdims ? ctl::slice_axis(x, axis, i, 1) : ctl::take_axis(x, axis, i));
    }
  } else {
    const Tensor& split = ctx.input(1);
    ctx.check(dtype_is_integer(split.dtype()), "split must be an integer tensor");
    std::vector<int64_t> sizes;
    if (split.rank() == 0) {
      const int64_t chunk = split.int_at(0);
      ctx.check(chunk > 0, "split size must be positive, got {}", chunk);
      for (int64_t s = 0; s < len; s += chunk) sizes.push_back(std::min(chunk, len - s));
    } else {
      ctx.check(split.rank() == 1, "split must be a scalar or 1-D, got {}", split.describe());
      int64_t total = 0;
      for (int64_t i = 0; i < split.numel(); ++i) {
        const int64_t s = split.int_at(i);
        ctx.check(s >= 0, "split sizes must be non-negative, got {}", s);
        sizes.push_back(s);
        total += s;
      }
      ctx.check(total == len, "split sizes sum to {}, the axis has {}", total, len);
    }
    int64_t start = 0;
    for (int64_t s : sizes) {
      out.push_back(ctl::slice_axis(x, axis, start, s));
      start += s;
    }
  }
  ctx.set_output(0, RtValue::sequence(std::move(out)));
}

void concat_from_sequence(KernelContext& ctx) {
  const std::vector<Tensor>& seq = input_sequence(ctx, 0);
  ctx.check(!seq.empty(), "cannot concatenate an empty sequence");
  const bool new_axis = ctx.attr_int("new_axis", 0) != 0;
  const int64_t rank = static_cast<int64_t>(seq[0].rank()) + (new_axis ? 1 : 0);
  const int64_t axis = normalize_axis(ctx, ctx.attr_int("axis"), rank);
  ctx.set_output(0, new_axis ? ctl::stack_axis(ctx, seq, axis) : ctl::concat_axis(ctx, seq, axis));
}

void infer_concat_from_sequence(InferContext& ctx) {
  const TypeInfo* t = ctx.input_type(0);
  if (t && t->kind == TypeInfo::Kind::Sequence && t->elem && t->elem->is_tensor()) {
    ctx.set_output_type(0, TypeInfo::tensor(t->elem->dtype));
  }
}

void sequence_map(KernelContext& ctx) {
  const ir::Graph& body = ctx.attr_graph("body");
  const std::vector<Tensor>& seq = input_sequence(ctx, 0);
  ctx.check(body.inputs().size() == ctx.input_count(), "body takes {} inputs, the node gives {}",
            body.inputs().size(), ctx.input_count());
  ctx.check(body.outputs().size() == ctx.output_count(), "body has {} outputs, the node {}",
            body.outputs().size(), ctx.output_count());
  for (size_t j = 1; j < ctx.input_count(); ++j) {
    const RtValue& v = ctx.input_value(j);
    ctx.check(!v.is_sequence() || v.sequence().size() == seq.size(),
              "sequence input {} has {} items, input 0 has {}", j,
              v.is_sequence() ? v.sequence().size() : 0, seq.size());
  }
  std::vector<std::vector<Tensor>> outs(ctx.output_count());
  for (size_t i = 0; i < seq.size(); ++i) {
    std::vector<RtValue> in{seq[i]};
    for (size_t j = 1; j < ctx.input_count(); ++j) {
      const RtValue& v = ctx.input_value(j);
      in.push_back(v.is_sequence() ? RtValue(v.sequence()[i]) : v);
    }
    std::vector<RtValue> r = ctx.run_subgraph(body, in);
    for (size_t k = 0; k < r.size() && k < outs.size(); ++k) {
      if (!r[k].is_tensor()) ctx.fail("body output {} is not a tensor", k);
      outs[k].push_back(r[k].tensor());
    }
  }
  for (size_t k = 0; k < outs.size(); ++k) ctx.set_output(k, RtValue::sequence(std::move(outs[k])));
}

void infer_sequence_map(InferContext& ctx) {
  const ir::Graph& body = ctx.attr_graph("body");
  for (size_t k = 0; k < ctx.output_count() && k < body.outputs().size(); ++k) {
    const TypeInfo& t = body.outputs()[k]->type();
    if (t.is_tensor()) ctx.set_output_type(k, seq_of(t.dtype));
  }
}

// ---- Optional ----

void optional_kernel(KernelContext& ctx) {
  ctx.set_output(0, ctx.has_input(0) ? ctx.input_value(0) : RtValue());
}

void infer_optional(InferContext& ctx) {
  if (const TypeInfo* t = ctx.input_type(0); t && t->kind != TypeInfo::Kind::Unknown) {
    ctx.set_output_type(0, TypeInfo::wrap(TypeInfo::Kind::Optional, *t));
  } else if (ctx.has_attr("type")) {
    ctx.set_output_type(0, TypeInfo::wrap(TypeInfo::Kind::Optional, ctx.attr_type("type")));
  }
}

void optional_has_element(KernelContext& ctx) {
  ctx.set_output(0, Tensor::scalar<bool>(ctx.has_input(0)));
}

void infer_bool_scalar(InferContext& ctx) {
  ctx.set_output_type(0, TypeInfo::tensor(DataType::Bool, Shape()));
}

void optional_get_element(KernelContext& ctx) {
  ctx.check(ctx.has_input(0), "the optional is empty");
  ctx.set_output(0, ctx.input_value(0));
}

void infer_optional_get_element(InferContext& ctx) {
  const TypeInfo* t = ctx.input_type(0);
  if (!t) return;
  if (t->kind == TypeInfo::Kind::Optional) {
    if (t->elem && t->elem->kind != TypeInfo::Kind::Unknown) ctx.set_output_type(0, *t->elem);
  } else if (t->kind != TypeInfo::Kind::Unknown) {
    ctx.set_output_type(0, *t);
  }
}

KILN_REGISTER_OP({.op_type = "SequenceEmpty",
                  .kernel = sequence_empty,
                  .infer = infer_sequence_empty});
KILN_REGISTER_OP({.op_type = "SequenceConstruct",
                  .kernel = sequence_construct,
                  .infer = set_seq_of_input0,
                  .traits = {.flops = flops_zero}});
KILN_REGISTER_OP({.op_type = "SequenceInsert",
                  .kernel = sequence_insert,
                  .infer = infer_same_sequence,
                  .traits = {.flops = flops_zero}});
KILN_REGISTER_OP({.op_type = "SequenceAt",
                  .kernel = sequence_at,
                  .infer = infer_sequence_at,
                  .traits = {.flops = flops_zero}});
KILN_REGISTER_OP({.op_type = "SequenceErase",
                  .kernel = sequence_erase,
                  .infer = infer_same_sequence});
KILN_REGISTER_OP({.op_type = "SequenceLength",
                  .kernel = sequence_length,
                  .infer = infer_sequence_length});
KILN_REGISTER_OP({.op_type = "SplitToSequence",
                  .kernel = split_to_sequence,
                  .infer = set_seq_of_input0,
                  .traits = {.flops = flops_zero}});
KILN_REGISTER_OP({.op_type = "ConcatFromSequence",
                  .kernel = concat_from_sequence,
                  .infer = infer_concat_from_sequence,
                  .traits = {.flops = flops_zero}});
KILN_REGISTER_OP({.op_type = "SequenceMap", .kernel = sequence_map, .infer = infer_sequence_map});
KILN_REGISTER_OP({.op_type = "Optional",
                  .kernel = optional_kernel,
                  .infer = infer_optional,
                  .traits = {.flops = flops_zero}});
KILN_REGISTER_OP({.op_type = "OptionalHasElement",
                  .kernel = optional_has_element,
                  .infer = infer_bool_scalar});
KILN_REGISTER_OP({.op_type = "OptionalGetElement",
                  .kernel = optional_get_element,
                  .infer = infer_optional_get_element,
                  .traits = {.flops = flops_zero}});

}  // namespace
}  // namespace kiln::ops
