// MatMuls (or bias-fused FusedMatMuls) that read the same input and differ only in their constant
// weights become one MatMul over the weights side by side, followed by one Split of its result:
// a transformer's query, key and value projections run as one GEMM of three times the width.
// On a GPU each small projection (BERT at batch 1: 128 x 768 x 768) fills a tenth of the device
// for the length of its K loop, so one wide GEMM takes about the time of one narrow one. A
// device pass (add_device_passes): the CPU's GEMMs fill the cores at either width and would pay
// for the Split's copy. Only for few rows (M, the input's elements over K): at BERT batch 1
// (M 128) the merge took 0.846 -> 0.800 ms on the H200; at batch 32 (M 4096) the three GEMMs
// already fill the device and the Split's copy (56 us a layer) cost more than the merge saved.
#include <algorithm>
#include <cstring>

#include "ops/fused_activation.hpp"
#include "passes/passes.hpp"
#include "passes/pattern_utils.hpp"

namespace kiln::passes {
namespace {

bool is_matmul(const ir::Node& n) {
  return is_op(&n, "MatMul") || (n.domain() == ops::kKilnDomain && n.op_type() == "FusedMatMul");
}

// The constant 2-D weight of a MatMul-like node, or nullptr.
const ir::Value* weight_of(const ir::Node& n) {
  const ir::Value* w = n.input(1);
  return w && w->is_constant() && w->constant().rank() == 2 ? w : nullptr;
}

// The constant 1-D bias of a FusedMatMul (nullptr when it has none).
const ir::Value* bias_of(const ir::Node& n) {
  return n.inputs().size() > 2 ? n.input(2) : nullptr;
}

std::map<std::string, std::string> attributes_text(const ir::Node& n) {
  std::map<std::string, std::string> out;
  for (const auto& [name, a] : n.attributes()) out[name] = a.to_string();
  return out;
}

// `other` computes what `first` does with other weights: same op, same attributes, input 0,
// a weight of the same type and row count, a bias exactly when `first` has one.
bool is_sibling(const Rewriter& rw, const ir::Node& first, const ir::Node& other) {
  if (&other == &first) return true;
  if (rw.removed(&other) || other.op_type() != first.op_type() ||
      other.domain() != first.domain() || other.inputs().size() != first.inputs().size() ||
      other.outputs().size() != 1 || other.input(0) != first.input(0) ||
      rw.touched(other.output(0)) || attributes_text(other) != attributes_text(first)) {
    return false;
  }
  const ir::Value* a = weight_of(first);
  const ir::Value* b = weight_of(other);
  if (!b || b->constant().dtype() != a->constant().dtype() ||
      b->constant().dim(0) != a->constant().dim(0)) {
    return false;
  }
  const ir::Value* ba = bias_of(first);
  const ir::Value* bb = bias_of(other);
  if (!ba != !bb) return false;
  return !bb || (bb->is_constant() && bb->constant().rank() == 1 &&
                 bb->constant().dtype() == ba->constant().dtype() &&
                 bb->constant().dim(0) == b->constant().dim(1));
}

// The tensors of `parts` side by side along their last dim (rows of `rows` elements each).
Tensor side_by_side(const std::vector<const Tensor*>& parts, int64_t rows) {
  int64_t cols = 0;
  for (const Tensor* t : parts) cols += t->numel() / rows;
  const size_t elem = dtype_size(parts.front()->dtype());
  Tensor out(parts.front()->dtype(), parts.front()->rank() == 1 ? std::vector<int64_t>{cols}
                                                                : std::vector<int64_t>{rows, cols});
  auto* dst = static_cast<char*>(out.raw_data());
  int64_t at = 0;
  for (const Tensor* t : parts) {
    const int64_t n = t->numel() / rows;
    const auto* src = static_cast<const char*>(t->raw_data());
    for (int64_t r = 0; r < rows; ++r) {
      std::memcpy(dst + (r * cols + at) * elem, src + r * n * elem, size_t(n) * elem);
    }
    at += n;
  }
  return out;
}

// At most kMaxMergedRows rows, all dims known: beyond, each GEMM fills the device alone.
constexpr int64_t kMaxMergedRows = 512;
bool few_rows(const ir::Value* x) {
  const std::optional<Shape>& s = x->type().shape;
  if (!s || s->rank() < 1) return false;
  int64_t rows = 1;
  for (size_t i = 0; i + 1 < s->rank(); ++i) {
    if (!(*s)[i].is_static()) return false;
    rows *= (*s)[i].value();
  }
  return rows <= kMaxMergedRows;
}

bool merge(Rewriter& rw, ir::Node& first) {
  if (!is_matmul(first) || first.outputs().size() != 1 || !weight_of(first) ||
      rw.touched(first.output(0))) {
    return false;
  }
  const ir::Value* a = bias_of(first);
  if (a && !(a->is_constant() && a->constant().rank() == 1 &&
             a->constant().dim(0) == weight_of(first)->constant().dim(1))) {
    return false;
  }
  ir::Value* x = first.input(0);
  if (rw.touched(x) || !few_rows(x)) return false;
  // Readers come in node order: `first` must be the earliest sibling, so the merged node can
  // take its place before every reader of the parts.
  std::vector<ir::Node*> siblings;
  for (ir::Node* r : rw.readers(x)) {
    if (is_sibling(rw, first, *r) &&
        std::find(siblings.begin(), siblings.end(), r) == siblings.end()) {
      siblings.push_back(r);
    }
  }
  if (siblings.size() < 2 || siblings.front() != &first) return false;

  const int64_t k = weight_of(first)->constant().dim(0);
  std::vector<const Tensor*> weights, biases;
  std::vector<int64_t> widths;
  int64_t total = 0;
  for (const ir::Node* s : siblings) {
    weights.push_back(&weight_of(*s)->constant());
    if (const ir::Value* b = bias_of(*s)) biases.push_back(&b->constant());
    widths.push_back(weight_of(*s)->constant().dim(1));
    total += widths.back();
  }
  std::vector<ir::Value*> inputs = {
      x, rw.new_constant(first.output(0)->name() + "_merged_weight", side_by_side(weights, k))};
  if (!biases.empty()) {
    inputs.push_back(
        rw.new_constant(first.output(0)->name() + "_merged_bias", side_by_side(biases, 1)));
  }
  // The merged result's shape is the first part's with the widths summed (unknown when the
  // part's is: shape inference fills it in later).
  TypeInfo merged_type = first.output(0)->type();
  if (merged_type.shape && merged_type.shape->rank() > 0) {
    (*merged_type.shape)[merged_type.shape->rank() - 1] = Dim(total);
  } else {
    merged_type.shape.reset();
  }
  ir::Value* merged = rw.new_value(first.output(0)->name() + "_merged", merged_type);
  ir::Node* mm = rw.insert_node(&first, first.op_type(), first.domain(), std::move(inputs),
                                {merged}, first.opset());
  for (const auto& [name, attr] : first.attributes()) mm->set_attribute(name, attr);

  // Split along the last axis; its sizes are an input from opset 13, an attribute before.
  const int opset = imported_opset(rw.graph(), "");
  std::vector<ir::Value*> split_inputs = {merged};
  if (opset >= 13) {
    split_inputs.push_back(
        rw.new_constant(first.output(0)->name() + "_split_sizes",
                        Tensor::from_vector<int64_t>({int64_t(widths.size())}, widths)));
  }
  std::vector<ir::Value*> parts;
  for (const ir::Node* s : siblings) {
    parts.push_back(rw.new_value(s->output(0)->name() + "_part", s->output(0)->type()));
  }
  ir::Node* split =
      rw.insert_node(&first, "Split", "", std::move(split_inputs), parts, std::max(opset, 1));
  split->set_attribute("axis", ir::Attribute(int64_t{-1}));
  if (opset < 13) split->set_attribute("split", ir::Attribute(widths));
  // A part that is a graph output takes its name (the Split's outputs are this graph's).
  for (size_t i = 0; i < siblings.size(); ++i) {
    rw.replace(siblings[i]->output(0), parts[i], {siblings[i]});
  }
  return true;
}

}  // namespace

bool MergeParallelMatMuls::apply(ir::Graph& root) const {
  return rewrite_graph(root, merge);
}

}  // namespace kiln::passes
