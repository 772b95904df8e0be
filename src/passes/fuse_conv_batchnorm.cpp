#include "passes/batchnorm_folding.hpp"
#include "passes/passes.hpp"
#include "passes/pattern_utils.hpp"

namespace kiln::passes {
namespace {

// Folds BatchNormalization (inference form) into the Conv that feeds it, per output channel c:
//   W'[c] = W[c] * scale[c],  B'[c] = B[c] * scale[c] + shift[c].
bool fuse(Rewriter& rw, ir::Node& bn) {
  if (!is_op(&bn, "BatchNormalization")) return false;
  ir::Value* x = bn.input(0);
  ir::Node* conv = rw.producer(x, "Conv");
  if (!conv || !rw.single_use(x) || !x->type().is_tensor()) return false;
  const ir::Value* w = conv->input(1);
  const ir::Value* b = conv->input(2);
  const DataType type = x->type().dtype;
  if (!w || !w->is_constant() || w->constant().dtype() != type || w->constant().rank() < 3) {
    return false;
  }
  const Tensor& weights = w->constant();
  const int64_t m = weights.dim(0);
  if (b && (!b->is_constant() || b->constant().dtype() != type || b->constant().numel() != m)) {
    return false;
  }
  std::optional<BatchNormAffine> bn_map = inference_batchnorm(bn, type, m);
  if (!bn_map) return false;

  Tensor new_w(type, weights.dims());
  Tensor new_b(type, {m});
  const int64_t per_channel = weights.numel() / std::max<int64_t>(m, 1);
  for (int64_t c = 0; c < m; ++c) {
    const double s = bn_map->scale[static_cast<size_t>(c)];
    for (int64_t i = 0; i < per_channel; ++i) {
      const int64_t k = c * per_channel + i;
      set_element(new_w, k, element(weights, k) * s);
    }
    const double bias = b ? element(b->constant(), c) : 0.0;
    set_element(new_b, c, bias * s + bn_map->shift[static_cast<size_t>(c)]);
  }
  conv->set_input(1, rw.new_constant(w->name() + "_bn_folded", std::move(new_w)));
  conv->set_input(2, rw.new_constant(x->name() + "_bn_bias", std::move(new_b)));
  rw.touch(*conv);
  x->set_type(bn.output(0)->type());
  rw.replace(bn.output(0), x, {&bn});
  return true;
}

}  // namespace

bool FuseConvBatchNorm::apply(ir::Graph& root) const {
  return rewrite_graph(root, fuse);
}

}  // namespace kiln::passes
