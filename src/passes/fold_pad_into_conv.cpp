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

std::string string_attr(const ir::Node& n, const char* name, const std::string& fallback) {
  const ir::Attribute* a = n.attribute(name);
  return a && std::holds_alternative<std::string>(a->storage())
             ? std::get<std::string>(a->storage())
             : fallback;
}

// The Pad's pads ([begin of each dim, end of each dim]) when it pads with zeros, in constant
// mode, by constant non-negative amounts, on every dim (no axes input); nullopt otherwise.
std::optional<std::vector<int64_t>> zero_pads(const ir::Node& pad, size_t rank) {
  if (string_attr(pad, "mode", "constant") != "constant" || pad.outputs().size() != 1) {
    return std::nullopt;
  }
  std::vector<int64_t> pads;
  if (pad.opset() < 11) {
    std::optional<std::vector<int64_t>> attr = ints_attr(pad, "pads");
    if (!attr || float_attr(pad, "value", 0.f) != 0.f) return std::nullopt;
    pads = *attr;
  } else {
    // Inputs: data, pads, optional constant_value, optional axes (opset 18).
    if (pad.inputs().size() < 2 || pad.inputs().size() > 3 || !pad.input(1)) return std::nullopt;
    if (pad.inputs().size() == 3 && pad.input(2) && !is_scalar_constant(pad.input(2), 0.0)) {
      return std::nullopt;
    }
    const ir::Value* pv = pad.input(1);
    if (!pv->is_constant() || pv->constant().dtype() != DataType::Int64) return std::nullopt;
    pads = pv->constant().to_int64_vector();
  }
  if (pads.size() != 2 * rank ||
      std::any_of(pads.begin(), pads.end(), [](int64_t v) { return v < 0; })) {
    return std::nullopt;
  }
  return pads;
}

bool is_conv(const ir::Node* n) {
  return is_op(n, "Conv") || is_kiln_op(n, "FusedConv");
}

bool fold(Rewriter& rw, ir::Node& pad) {
  if (!is_op(&pad, "Pad") || !pad.input(0) || !is_float_value(pad.input(0))) return false;
  ir::Value* padded = pad.output(0);
  const std::optional<size_t> rank = rank_of(pad.input(0));
  if (!padded || !rank || *rank < 3 || *rank > 5 || rw.touched(padded) ||
      rw.graph().is_output(padded) || rw.readers(padded).empty()) {
    return false;
  }
  const std::optional<std::vector<int64_t>> pads = zero_pads(pad, *rank);
  const size_t r = *rank;
  // Nothing on the batch and channel dims.
  if (!pads || (*pads)[0] != 0 || (*pads)[1] != 0 || (*pads)[r] != 0 || (*pads)[r + 1] != 0) {
    return false;
  }
  // Every reader a convolution of explicit pads reading it as its data (not its weights).
  const std::vector<ir::Node*>& readers = rw.readers(padded);
  for (const ir::Node* c : readers) {
    if (!is_conv(c) || c->input(0) != padded ||
        std::count(c->inputs().begin(), c->inputs().end(), padded) != 1 ||
        string_attr(*c, "auto_pad", "NOTSET") != "NOTSET") {
      return false;
    }
    const std::optional<std::vector<int64_t>> cp = ints_attr(*c, "pads");
    if (cp && cp->size() != 2 * (r - 2)) return false;
  }
  const size_t nsp = r - 2;
  const std::vector<ir::Node*> convs = readers;  // copied: the rewrite changes the readers
  for (ir::Node* c : convs) {
    std::vector<int64_t> cp = ints_attr(*c, "pads").value_or(std::vector<int64_t>(2 * nsp, 0));
    for (size_t d = 0; d < nsp; ++d) {
      cp[d] += (*pads)[2 + d];
      cp[nsp + d] += (*pads)[r + 2 + d];
    }
    c->set_attribute("pads", ir::Attribute(cp));
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
