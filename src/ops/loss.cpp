// NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss: per-element losses picked by class
// labels, optional class weights, ignore_index, and none/sum/mean reduction (mean divides by the
// total weight of the elements that were not ignored).
#include <cmath>
#include <limits>
#include <optional>

#include "ops/infer_utils.hpp"
#include "ops/op_utils.hpp"
#include "ops/reduce_utils.hpp"
#include "ops/registry.hpp"

namespace kiln::ops {
namespace {

using namespace reduction;  // NOLINT: this family's own helpers

enum class Reduction { None, Sum, Mean };

Reduction reduction_of(const AttrReader& ctx) {
  std::string r = ctx.attr_string("reduction", "mean");
  if (r == "none") return Reduction::None;
  if (r == "sum") return Reduction::Sum;
  if (r == "mean") return Reduction::Mean;
  ctx.fail("reduction must be none, sum or mean, got '{}'", r);
}

// log_prob is [N, C, D] flattened (D = product of the trailing dims); returns the loss tensor.
Tensor pick_loss(const KernelContext& ctx, const std::vector<double>& log_prob, DataType dtype,
                 int64_t n, int64_t c, int64_t d, const Tensor& target, size_t weight_input) {
  ctx.check(target.dtype() == DataType::Int32 || target.dtype() == DataType::Int64,
            "target must be int32 or int64, got {}", dtype_name(target.dtype()));
  ctx.check(target.numel() == n * d, "target {} does not match the input's [N, d1, ...]",
            target.describe());
  std::vector<double> weight;
  if (ctx.has_input(weight_input)) {
    const Tensor& w = ctx.input(weight_input);
    ctx.check(w.rank() == 1 && w.dim(0) == c, "weight must be [{}], got {}", c, w.describe());
    weight = float_values(w, ctx.node().op_type());
  }
  std::optional<int64_t> ignore;
  if (ctx.has_attr("ignore_index")) ignore = ctx.attr_int("ignore_index");
  std::vector<double> loss(static_cast<size_t>(n * d), 0.0);
  double total = 0, total_weight = 0;
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t i = 0; i < d; ++i) {
      const int64_t t = target.int_at(b * d + i);
      if (ignore && t == *ignore) continue;
      ctx.check(t >= 0 && t < c, "target {} is out of range for {} classes", t, c);
      const double w = weight.empty() ? 1.0 : weight[static_cast<size_t>(t)];
      const double l = -log_prob[static_cast<size_t>((b * c + t) * d + i)] * w;
      loss[static_cast<size_t>(b * d + i)] = l;
      total += l;
      total_weight += w;
    }
  }
  switch (reduction_of(ctx)) {
    case Reduction::None:
      return float_tensor(dtype, target.dims(), loss, ctx.node().op_type());
    case Reduction::Sum:
      return float_tensor(dtype, {}, {total}, ctx.node().op_type());
    case Reduction::Mean:
      break;
  }
  // All elements ignored gives 0/0 = NaN, which is what the reference computes too.
  return float_tensor(dtype, {}, {total / total_weight}, ctx.node().op_type());
}

void check_scores(const KernelContext& ctx, const Tensor& x, const Tensor& target) {
  ctx.check(x.rank() >= 2, "input must be [N, C, d1, ...], got {}", x.describe());
  ctx.check(target.rank() + 1 == x.rank() && target.dim(0) == x.dim(0),
            "target {} does not match input {}", target.describe(), x.describe());
  for (size_t i = 1; i < target.rank(); ++i) {
    ctx.check(target.dim(i) == x.dim(i + 1), "target {} does not match input {}", target.describe(),
              x.describe());
  }
}

void nll_loss(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& target = ctx.input(1);
  check_scores(ctx, x, target);
  const int64_t n = x.dim(0), c = x.dim(1), d = dims_product(x.dims(), 2, x.rank());
  ctx.set_output(0, pick_loss(ctx, float_values(x, "NegativeLogLikelihoodLoss"), x.dtype(), n, c, d,
                              target, 2));
}

void softmax_cross_entropy(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& target = ctx.input(1);
  check_scores(ctx, x, target);
  const int64_t n = x.dim(0), c = x.dim(1), d = dims_product(x.dims(), 2, x.rank());
  std::vector<double> lp = float_values(x, "SoftmaxCrossEntropyLoss");
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t i = 0; i < d; ++i) {
      double mx = -std::numeric_limits<double>::infinity();
      for (int64_t k = 0; k < c; ++k)
        mx = std::max(mx, lp[static_cast<size_t>((b * c + k) * d + i)]);
      double sum = 0;
      for (int64_t k = 0; k < c; ++k)
        sum += std::exp(lp[static_cast<size_t>((b * c + k) * d + i)] - mx);
      const double lse = mx + std::log(sum);
      for (int64_t k = 0; k < c; ++k) lp[static_cast<size_t>((b * c + k) * d + i)] -= lse;
    }
  }
  ctx.set_output(0, pick_loss(ctx, lp, x.dtype(), n, c, d, target, 2));
  if (ctx.wants_output(1)) {
    ctx.set_output(1, float_tensor(x.dtype(), x.dims(), lp, "SoftmaxCrossEntropyLoss"));
  }
}

void infer_loss(InferContext& ctx) {
  const TypeInfo* x = ctx.input_type(0);
  const TypeInfo* t = ctx.input_type(1);
  if (!x || !x->is_tensor()) return;
  std::optional<Shape> shape;
  if (reduction_of(ctx) != Reduction::None) {
    shape = Shape();
  } else if (t && t->is_tensor()) {
    shape = t->shape;
  }
  ctx.set_output_type(0, TypeInfo::tensor(x->dtype, shape));
  if (ctx.output_count() > 1) ctx.set_output_type(1, *x);
}

KILN_REGISTER_OP({.op_type = "NegativeLogLikelihoodLoss", .kernel = nll_loss, .infer = infer_loss});
KILN_REGISTER_OP({.op_type = "SoftmaxCrossEntropyLoss",
                  .kernel = softmax_cross_entropy,
                  .infer = infer_loss});

}  // namespace
}  // namespace kiln::ops
