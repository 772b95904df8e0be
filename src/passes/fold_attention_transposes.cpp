// ScaledDotProductAttention with a Transpose swapping the sequence and heads axes on each of Q,
// K and V and on its output (the head split and merge around attention, as BERT-style exporters
// write them) becomes the op with bsnh = 1: the kernel reads [.., S, N, H] operands in place and
// writes its output the same way, so the four Transposes of each layer no longer run. A device
// pass (add_device_passes): the GPU's attention kernels and the CPU's (oneDNN matmuls on strided
// operands) read them in place.
#include "ops/fused_activation.hpp"
#include "passes/passes.hpp"
#include "passes/pattern_utils.hpp"

namespace kiln::passes {
namespace {

// The permutation swaps axes -3 and -2 and keeps the rest.
bool swaps_seq_heads(const ir::Node& transpose) {
  const std::optional<std::vector<int64_t>> perm = perm_of(transpose);
  if (!perm || perm->size() < 3) return false;
  const int64_t r = static_cast<int64_t>(perm->size());
  for (int64_t i = 0; i < r; ++i) {
    const int64_t want = i == r - 3 ? r - 2 : (i == r - 2 ? r - 3 : i);
    if ((*perm)[static_cast<size_t>(i)] != want) return false;
  }
  return true;
}

bool fold(Rewriter& rw, ir::Node& n) {
  if (!is_kiln_op(&n, "ScaledDotProductAttention") || int_attr(n, "bsnh", 0) != 0 ||
      n.inputs().size() < 3) {
    return false;
  }
  std::vector<ir::Node*> dead = {&n};
  std::vector<ir::Value*> inputs = n.inputs();
  for (size_t slot = 0; slot < 3; ++slot) {
    ir::Value* x = n.input(slot);
    ir::Node* t = x ? rw.producer(x, "Transpose") : nullptr;
    if (!t || !rw.single_use(x) || !swaps_seq_heads(*t)) return false;
    inputs[slot] = t->input(0);
    dead.push_back(t);
  }
  ir::Value* y = n.output(0);
  const std::vector<ir::Node*>& readers = rw.readers(y);
  if (readers.size() != 1 || rw.graph().is_output(y) || rw.touched(y)) return false;
  ir::Node* out_t = readers[0];
  if (!is_op(out_t, "Transpose") || out_t->input(0) != y || !swaps_seq_heads(*out_t)) return false;
  dead.push_back(out_t);

  ir::Value* z = out_t->output(0);
  ir::Value* out = rw.new_value(z->name() + "_bsnh", z->type());
  ir::Node* folded = rw.insert_node(out_t, "ScaledDotProductAttention", ops::kKilnDomain,
                                    std::move(inputs), {out}, n.opset());
  for (const auto& [name, value] : n.attributes()) folded->set_attribute(name, value);
  folded->set_attribute("bsnh", ir::Attribute(int64_t{1}));
  rw.replace(z, out, dead);
  return true;
}

}  // namespace

bool FoldAttentionTransposes::apply(ir::Graph& root) const {
  return rewrite_graph(root, fold);
}

}  // namespace kiln::passes
