#include "passes/batchnorm_folding.hpp"
#include "passes/passes.hpp"
#include "passes/pattern_utils.hpp"

namespace kiln::passes {
namespace {

// Y = alpha * A' B' + beta * C is [M, N]; a BatchNormalization over its N channels makes
//   Y'[i][j] = scale[j] * Y[i][j] + shift[j]
//            = alpha * A' (B' diag(scale))[i][j] + (scale[j] * beta * C[i][j] + shift[j]),
// so column j of B' is scaled and the new C (beta 1) is [N], or [M, N] when C varies by row.
bool fuse(Rewriter& rw, ir::Node& bn) {
  if (!is_op(&bn, "BatchNormalization")) return false;
  ir::Value* y = bn.input(0);
  ir::Node* gemm = rw.producer(y, "Gemm");
  if (!gemm || !rw.single_use(y) || rank_of(y) != 2u) return false;
  const DataType type = y->type().dtype;
  const ir::Value* b = gemm->input(1);
  const ir::Value* c = gemm->input(2);
  if (!b || !b->is_constant() || b->constant().dtype() != type || b->constant().rank() != 2) {
    return false;
  }
  if (c && (!c->is_constant() || c->constant().dtype() != type || c->constant().rank() > 2)) {
    return false;
  }
  const bool trans_b = int_attr(*gemm, "transB", 0) != 0;
  const Tensor& bt = b->constant();
  const int64_t k = trans_b ? bt.dim(1) : bt.dim(0);
  const int64_t n = trans_b ? bt.dim(0) : bt.dim(1);
  std::optional<BatchNormAffine> bn_map = inference_batchnorm(bn, type, n);
  if (!bn_map) return false;
  // C's dims as [rows, cols] with rows in {1, M} and cols in {1, N}.
  int64_t c_rows = 1, c_cols = 1;
  if (c) {
    const std::vector<int64_t>& d = c->constant().dims();
    if (d.size() == 2) c_rows = d[0];
    if (!d.empty()) c_cols = d.back();
    if (c_cols != 1 && c_cols != n) return false;
  }
  const double beta = float_attr(*gemm, "beta", 1.0f);

  Tensor new_b(type, bt.dims());
  for (int64_t p = 0; p < k; ++p) {
    for (int64_t j = 0; j < n; ++j) {
      const int64_t at = trans_b ? j * k + p : p * n + j;
      set_element(new_b, at, element(bt, at) * bn_map->scale[static_cast<size_t>(j)]);
    }
  }
  Tensor new_c = c_rows == 1 ? Tensor(type, {n}) : Tensor(type, {c_rows, n});
  for (int64_t r = 0; r < c_rows; ++r) {
    for (int64_t j = 0; j < n; ++j) {
      const double cv = c ? beta * element(c->constant(), r * c_cols + (c_cols == 1 ? 0 : j)) : 0.0;
      set_element(
          new_c, r * n + j,
          bn_map->scale[static_cast<size_t>(j)] * cv + bn_map->shift[static_cast<size_t>(j)]);
    }
  }
  gemm->set_input(1, rw.new_constant(b->name() + "_bn_folded", std::move(new_b)));
  gemm->set_input(2, rw.new_constant(y->name() + "_bn_bias", std::move(new_c)));
  gemm->set_attribute("beta", ir::Attribute(1.0f));
  rw.touch(*gemm);
  y->set_type(bn.output(0)->type());
  rw.replace(bn.output(0), y, {&bn});
  return true;
}

}  // namespace

bool FuseGemmBatchNorm::apply(ir::Graph& root) const {
  return rewrite_graph(root, fuse);
}

}  // namespace kiln::passes
