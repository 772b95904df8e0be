#include "passes/shape_folding.hpp"

#include <algorithm>

#include "ops/registry.hpp"
#include "passes/pattern_utils.hpp"

namespace kiln::passes {
namespace {

// The dims Shape(x) yields (its start / end window applied); nullopt when x's rank is unknown.
std::optional<std::vector<Dim>> shape_dims(const ir::Node& shape) {
  const ir::Value* in = shape.input(0);
  if (!in || !in->type().is_tensor() || !in->type().shape) return std::nullopt;
  const std::vector<Dim>& dims = in->type().shape->dims();
  const int64_t rank = static_cast<int64_t>(dims.size());
  auto clamp = [&](int64_t v) { return std::clamp(v < 0 ? v + rank : v, int64_t{0}, rank); };
  int64_t start = 0, end = rank;
  if (const ir::Attribute* a = shape.attribute("start")) {
    start = clamp(std::get<int64_t>(a->storage()));
  }
  if (const ir::Attribute* a = shape.attribute("end")) end = clamp(std::get<int64_t>(a->storage()));
  return std::vector<Dim>(dims.begin() + start, dims.begin() + std::max(start, end));
}

const ir::Node* producer_in(const ir::Node& reader, const ir::Value* v, const char* op) {
  const ir::Node* p = v ? v->producer() : nullptr;
  return p && p->owner() == reader.owner() && is_op(p, op) ? p : nullptr;
}

// What a Gather or Slice of Shape(x) selects: x, and for each element the position of its dim in
// x and the dim.
struct Selection {
  const ir::Value* of = nullptr;
  std::vector<int64_t> positions;
  std::vector<Dim> dims;
};

// The dims of x that `sel`, a Gather or Slice of Shape(x) with constant indices, selects: the
// node's own kernel runs on the positions 0..n-1 of Shape(x)'s elements, so every indexing rule
// (negative indices, clamping, steps) is the kernel's. nullopt when it is not such a node.
std::optional<Selection> selection_of_shape(const ir::Node& sel) {
  if (!is_op(&sel, "Gather") && !is_op(&sel, "Slice")) return std::nullopt;
  const ir::Node* shape = producer_in(sel, sel.input(0), "Shape");
  if (!shape) return std::nullopt;
  for (size_t i = 1; i < sel.inputs().size(); ++i) {
    if (sel.input(i) && !sel.input(i)->is_constant()) return std::nullopt;
  }
  std::optional<std::vector<Dim>> dims = shape_dims(*shape);
  if (!dims) return std::nullopt;
  std::vector<int64_t> positions(dims->size());
  for (size_t i = 0; i < positions.size(); ++i) positions[i] = static_cast<int64_t>(i);
  std::vector<RtValue> inputs;
  inputs.emplace_back(
      Tensor::from_vector<int64_t>({static_cast<int64_t>(positions.size())}, positions));
  for (size_t i = 1; i < sel.inputs().size(); ++i) {
    inputs.push_back(sel.input(i) ? RtValue(sel.input(i)->constant()) : RtValue());
  }
  std::optional<std::vector<RtValue>> out = evaluate_node(sel, inputs);
  if (!out || out->empty() || !(*out)[0].is_tensor()) return std::nullopt;
  Selection picked{.of = shape->input(0)};
  // Shape's start window: element p of Shape(x) is dim p + start of x.
  const int64_t rank = static_cast<int64_t>(shape->input(0)->type().shape->rank());
  int64_t start = 0;
  if (const ir::Attribute* a = shape->attribute("start")) {
    start = std::get<int64_t>(a->storage());
    start = std::clamp(start < 0 ? start + rank : start, int64_t{0}, rank);
  }
  for (int64_t p : (*out)[0].tensor().to_int64_vector()) {
    picked.positions.push_back(p + start);
    picked.dims.push_back((*dims)[static_cast<size_t>(p)]);
  }
  return picked;
}

std::optional<std::vector<Dim>> selected_dims(const ir::Node& sel) {
  std::optional<Selection> picked = selection_of_shape(sel);
  if (!picked) return std::nullopt;
  return std::move(picked->dims);
}

// Gather / Slice of Shape(x) whose selected dims of x are all static: their values, in the
// shape the node produces.
std::optional<Tensor> fold_selection_of_shape(const ir::Node& n) {
  std::optional<std::vector<Dim>> dims = selected_dims(n);
  if (!dims) return std::nullopt;
  std::vector<int64_t> values;
  for (const Dim& d : *dims) {
    if (!d.is_static()) return std::nullopt;
    values.push_back(d.value());
  }
  // The node's output shape: a scalar index gives a scalar.
  const ir::Value* index = n.input(1);
  if (is_op(&n, "Gather") && index->constant().rank() == 0) {
    return Tensor::scalar<int64_t>(values.at(0));
  }
  std::vector<int64_t> out_dims = {static_cast<int64_t>(values.size())};
  if (is_op(&n, "Gather")) out_dims = index->constant().dims();
  return Tensor::from_vector<int64_t>(out_dims, values);
}

// The dims a part of a Concat'ed shape names: a Gather / Slice of a Shape, possibly made 1-D by
// an Unsqueeze. nullopt when the part is something else.
std::optional<Selection> part_dims(const ir::Node& concat, const ir::Value* part) {
  const ir::Value* v = part;
  if (const ir::Node* unsqueeze = producer_in(concat, part, "Unsqueeze")) v = unsqueeze->input(0);
  const ir::Node* sel = producer_in(concat, v, "Gather");
  if (!sel) sel = producer_in(concat, v, "Slice");
  return sel ? selection_of_shape(*sel) : std::nullopt;
}

}  // namespace

std::optional<Tensor> reshape_target_from_dims(const ir::Node& reshape) {
  if (!is_op(&reshape, "Reshape") || reshape.inputs().size() != 2) return std::nullopt;
  const ir::Attribute* allowzero = reshape.attribute("allowzero");
  if (allowzero && std::get<int64_t>(allowzero->storage()) != 0) return std::nullopt;
  const ir::Value* data = reshape.input(0);
  const ir::Node* concat = producer_in(reshape, reshape.input(1), "Concat");
  if (!concat || !data->type().is_tensor() || !data->type().shape) return std::nullopt;
  const std::vector<Dim>& in_dims = data->type().shape->dims();
  std::vector<int64_t> target;
  for (const ir::Value* part : concat->inputs()) {
    if (!part) return std::nullopt;
    if (part->is_constant()) {
      const Tensor& c = part->constant();
      if (c.dtype() != DataType::Int64 || c.rank() != 1) return std::nullopt;
      for (int64_t v : c.values<int64_t>()) target.push_back(v);
      continue;
    }
    std::optional<Selection> picked = part_dims(*concat, part);
    if (!picked) return std::nullopt;
    for (size_t i = 0; i < picked->dims.size(); ++i) {
      const size_t at = target.size();
      if (at >= in_dims.size()) return std::nullopt;
      // data's own dim at this position is copied whatever it is (an exporter's position-id
      // Slice leaves BERT's sequence dim unnamed, and x.view(x.size(0), x.size(1), h, d) reads
      // it from x itself); another tensor's dim only where it is provably the same.
      const bool own = picked->of == data && picked->positions[i] == static_cast<int64_t>(at);
      if (!own && !same_dim(picked->dims[i], in_dims[at])) return std::nullopt;
      target.push_back(0);
    }
  }
  return Tensor::from_vector<int64_t>({static_cast<int64_t>(target.size())}, target);
}

std::optional<std::vector<RtValue>> evaluate_node(const ir::Node& n,
                                                  const std::vector<RtValue>& inputs) {
  const ops::OpDef* def = ops::OpRegistry::instance().find(n.domain(), n.op_type(), n.opset());
  if (!def) return std::nullopt;
  std::vector<const RtValue*> ptrs;
  for (size_t i = 0; i < inputs.size(); ++i) ptrs.push_back(n.input(i) ? &inputs[i] : nullptr);
  std::vector<RtValue> outputs(n.outputs().size());
  ops::KernelContext ctx(n, ptrs, outputs, nullptr);
  try {
    def->kernel(ctx);
  } catch (const Error&) {
    return std::nullopt;
  }
  return outputs;
}

std::optional<Tensor> fold_shape_value(const ir::Node& n) {
  if (is_op(&n, "Shape") || is_op(&n, "Size")) {
    const ir::Value* in = n.input(0);
    if (!in || !in->type().is_tensor() || !in->type().shape || !in->type().shape->is_static()) {
      return std::nullopt;
    }
    if (n.op_type() == "Size") {
      return Tensor::scalar<int64_t>(shape_numel(in->type().shape->values()));
    }
    std::optional<std::vector<Dim>> dims = shape_dims(n);
    std::vector<int64_t> values;
    for (const Dim& d : *dims) values.push_back(d.value());
    return Tensor::from_vector<int64_t>({static_cast<int64_t>(values.size())}, values);
  }
  return fold_selection_of_shape(n);
}

}  // namespace kiln::passes
