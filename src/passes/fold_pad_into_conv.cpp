// Pad(x, zeros on the spatial dims only) -> Conv / ai.kiln FusedConv: the convolutions read x and
// pad themselves. TensorFlow-style exports ("same" padding of a strided convolution; the
// EfficientNet-Lite exporter writes one before each depthwise convolution) make such Pads. Exact:
// a convolution's own padding reads zeros, what the Pad wrote. Besides dropping a copy of the
// activation, the convolution then reads its producer's blocked layout directly instead of a
// row-major padded tensor: on the CPU, EfficientNet-Lite0's depthwise convolutions after a
// Pad took 0.6-3.6 ms each on oneDNN's plain-layout path (the whole model 50 ms, onnxruntime's
// 11: bench/results/2026-12-06d-cpu-pad-fold.md).
#include <algorithm>

#include "passes/pass.hpp"
#include "passes/passes.hpp"
#include "passes/pattern_utils.hpp"

namespace kiln::passes {
namespace {

bool is_conv(const ir::Node* n) {
  return is_op(n, "Conv") || is_kiln_op(n, "FusedConv");
}

bool fold(Rewriter& rw, ir::Node& pad) {
  if (!is_op(&pad, "Pad") || !pad.input(0) || !is_float_value(pad.input(0))) return false;
  ir::Value* padded = pad.output(0);
  if (!padded || rw.touched(padded) || rw.graph().is_output(padded) || rw.readers(padded).empty()) {
    return false;
  }
  const std::optional<std::vector<int64_t>> pads = zero_spatial_pads(pad);
  if (!pads) return false;
  // Every reader a convolution of explicit pads reading it as its data (not its weights).
  const std::vector<ir::Node*> convs = rw.readers(padded);  // a copy: the rewrite changes them
  for (const ir::Node* c : convs) {
    if (!is_conv(c) || c->input(0) != padded ||
        std::count(c->inputs().begin(), c->inputs().end(), padded) != 1 ||
        !has_explicit_pads(*c, pads->size() / 2 - 2)) {
      return false;
    }
  }
  for (ir::Node* c : convs) {
    add_spatial_pads(*c, *pads);
    c->set_input(0, pad.input(0));
    rw.touch(*c);
  }
  rw.touch(padded);
  rw.remove(&pad);
  return true;
}

}  // namespace

bool FoldPadIntoConv::apply(ir::Graph& root) const {
  return rewrite_graph(root, fold);
}

}  // namespace kiln::passes
