// ai.onnx.preview.training optimizers: Adagrad, Adam and Momentum (standard and Nesterov).
// Inputs are R (learning rate), T (step count), then n tensors to optimize followed by their
// gradients and accumulators; outputs are the n updated tensors followed by the updated
// accumulators. Arithmetic is in double, rounded once into each tensor's type.
#include <cmath>

#include "ops/control_real_io.hpp"
#include "ops/op_utils.hpp"
#include "ops/registry.hpp"

namespace kiln::ops {
namespace {

constexpr const char* kTraining = "ai.onnx.preview.training";

struct OptimizerIo {
  double rate = 0;
  int64_t step = 0;
  size_t n = 0;  // number of tensors optimized
};

// `groups` is the number of per-tensor inputs (X, G, and the accumulators).
OptimizerIo read_common(const KernelContext& ctx, size_t groups) {
  const size_t count = ctx.input_count();
  ctx.check(count >= 2 + groups && (count - 2) % groups == 0,
            "expects R, T and {} groups of inputs, got {} inputs", groups, count);
  OptimizerIo io;
  io.n = (count - 2) / groups;
  ctx.check(ctx.output_count() <= io.n * (groups - 1), "has {} outputs, at most {} are defined",
            ctx.output_count(), io.n * (groups - 1));
  const Tensor& r = ctx.input(0);
  const Tensor& t = ctx.input(1);
  ctx.check(r.numel() == 1 && (r.dtype() == DataType::Float32 || r.dtype() == DataType::Float64),
            "R must be a float or double scalar, got {}", r.describe());
  ctx.check(t.numel() == 1 && t.dtype() == DataType::Int64, "T must be an int64 scalar, got {}",
            t.describe());
  io.rate = r.double_at(0);
  io.step = t.int_at(0);
  for (size_t k = 2; k < count; ++k) {
    const Tensor& v = ctx.input(k);
    ctx.check(v.dtype() == DataType::Float32 || v.dtype() == DataType::Float64,
              "input {} must be float or double, got {}", k, v.describe());
    const Tensor& x = ctx.input(2 + (k - 2) % io.n);
    ctx.check(v.dims() == x.dims(), "input {} has shape {}, its tensor has {}", k,
              dims_to_string(v.dims()), dims_to_string(x.dims()));
  }
  return io;
}

void set_result(KernelContext& ctx, size_t out, const Tensor& like, const std::vector<double>& v) {
  if (ctx.wants_output(out))
    ctx.set_output(out, ctl::from_doubles(like.dtype(), like.dims(), v, "optimizer"));
}

void adagrad(KernelContext& ctx) {
  const OptimizerIo io = read_common(ctx, 3);
  const double decay = ctx.attr_float("decay_factor", 0.0f);
  const double eps = ctx.attr_float("epsilon", 1e-6f);
  const double norm = ctx.attr_float("norm_coefficient", 0.0f);
  const double r = io.rate / (1.0 + static_cast<double>(io.step) * decay);
  for (size_t i = 0; i < io.n; ++i) {
    const Tensor& xt = ctx.input(2 + i);
    const Tensor& ht = ctx.input(2 + 2 * io.n + i);
    std::vector<double> x = ctl::to_doubles(xt), g = ctl::to_doubles(ctx.input(2 + io.n + i)),
                        h = ctl::to_doubles(ht);
    for (size_t j = 0; j < x.size(); ++j) {
      const double gr = norm * x[j] + g[j];
      h[j] += gr * gr;
      x[j] -= r * gr / (std::sqrt(h[j]) + eps);
    }
    set_result(ctx, i, xt, x);
    set_result(ctx, io.n + i, ht, h);
  }
}

void adam(KernelContext& ctx) {
  const OptimizerIo io = read_common(ctx, 4);
  const double alpha = ctx.attr_float("alpha", 0.9f);
  const double beta = ctx.attr_float("beta", 0.999f);
  const double eps = ctx.attr_float("epsilon", 1e-6f);
  const double norm = ctx.attr_float("norm_coefficient", 0.0f);
  const double norm_post = ctx.attr_float("norm_coefficient_post", 0.0f);
  // Bias correction applies once steps have been taken.
  const double t = static_cast<double>(io.step);
  const double r = io.step > 0
                       ? io.rate * std::sqrt(1.0 - std::pow(beta, t)) / (1.0 - std::pow(alpha, t))
                       : io.rate;
  for (size_t i = 0; i < io.n; ++i) {
    const Tensor& xt = ctx.input(2 + i);
    const Tensor& vt = ctx.input(2 + 2 * io.n + i);
    const Tensor& ht = ctx.input(2 + 3 * io.n + i);
    std::vector<double> x = ctl::to_doubles(xt), g = ctl::to_doubles(ctx.input(2 + io.n + i)),
                        v = ctl::to_doubles(vt), h = ctl::to_doubles(ht);
    for (size_t j = 0; j < x.size(); ++j) {
      const double gr = norm * x[j] + g[j];
      v[j] = alpha * v[j] + (1.0 - alpha) * gr;
      h[j] = beta * h[j] + (1.0 - beta) * gr * gr;
      x[j] = (1.0 - norm_post) * (x[j] - r * v[j] / (std::sqrt(h[j]) + eps));
    }
    set_result(ctx, i, xt, x);
    set_result(ctx, io.n + i, vt, v);
    set_result(ctx, 2 * io.n + i, ht, h);
  }
}

void momentum(KernelContext& ctx) {
  const OptimizerIo io = read_common(ctx, 3);
  const double alpha = ctx.attr_float("alpha");
  const double beta = ctx.attr_float("beta");
  const double norm = ctx.attr_float("norm_coefficient");
  const std::string mode = ctx.attr_string("mode");
  const bool nesterov = mode == "nesterov";
  if (!nesterov && mode != "standard") ctx.fail("unknown mode '{}' (standard or nesterov)", mode);
  // The gradient's coefficient is 1 on the first step.
  const double b = io.step > 0 ? beta : 1.0;
  for (size_t i = 0; i < io.n; ++i) {
    const Tensor& xt = ctx.input(2 + i);
    const Tensor& vt = ctx.input(2 + 2 * io.n + i);
    std::vector<double> x = ctl::to_doubles(xt), g = ctl::to_doubles(ctx.input(2 + io.n + i)),
                        v = ctl::to_doubles(vt);
    for (size_t j = 0; j < x.size(); ++j) {
      const double gr = norm * x[j] + g[j];
      v[j] = alpha * v[j] + b * gr;
      x[j] -= io.rate * (nesterov ? gr + alpha * v[j] : v[j]);
    }
    set_result(ctx, i, xt, x);
    set_result(ctx, io.n + i, vt, v);
  }
}

// Each output has the type of the input it updates: outputs skip R, T and the gradients.
template <size_t Groups>
void infer_optimizer(InferContext& ctx) {
  const size_t count = ctx.input_count();
  if (count < 2 + Groups || (count - 2) % Groups != 0) return;
  const size_t n = (count - 2) / Groups;
  for (size_t o = 0; o < ctx.output_count(); ++o) {
    const size_t group = o / n;  // 0: X, then accumulators (input groups 2..)
    const size_t in = 2 + (group == 0 ? 0 : (group + 1) * n) + o % n;
    const TypeInfo* t = in < count ? ctx.input_type(in) : nullptr;
    if (t && t->kind == TypeInfo::Kind::Tensor) ctx.set_output_type(o, *t);
  }
}

KILN_REGISTER_OP(
    {.domain = kTraining, .op_type = "Adagrad", .kernel = adagrad, .infer = infer_optimizer<3>});
KILN_REGISTER_OP(
    {.domain = kTraining, .op_type = "Adam", .kernel = adam, .infer = infer_optimizer<4>});
KILN_REGISTER_OP(
    {.domain = kTraining, .op_type = "Momentum", .kernel = momentum, .infer = infer_optimizer<3>});

}  // namespace
}  // namespace kiln::ops
