// LayerNormalization, RMSNormalization, BatchNormalization, InstanceNormalization,
// GroupNormalization, LpNormalization, MeanVarianceNormalization, LRN and Dropout (inference, and
// training mode when a seed makes it reproducible).
// Kernels read floats as double, compute statistics in double, and round once on output.
#include <algorithm>
#include <array>
#include <cmath>
#include <random>

#include "ops/infer_utils.hpp"
#include "ops/op_flops.hpp"
#include "ops/op_utils.hpp"
#include "ops/reduce_utils.hpp"
#include "ops/registry.hpp"

namespace kiln::ops {
namespace {

using namespace reduction;  // NOLINT: this family's own helpers

// `p` broadcast numpy-style to exactly `dims`, expanded to one value per element.
std::vector<double> broadcast_param(const KernelContext& ctx, const Tensor& p,
                                    const std::vector<int64_t>& dims, const char* name) {
  std::vector<double> v = float_values(p, ctx.node().op_type());
  ctx.check(p.rank() <= dims.size(), "{} {} does not broadcast to {}", name, p.describe(),
            dims_to_string(dims));
  std::vector<int64_t> out = broadcast_dims(ctx, {p.dims(), dims});
  ctx.check(out == dims, "{} {} does not broadcast to {}", name, p.describe(),
            dims_to_string(dims));
  std::vector<double> r(static_cast<size_t>(shape_numel(dims)));
  std::array<std::vector<int64_t>, 1> strides = {broadcast_strides(p.dims(), dims)};
  for_each_broadcast<1>(dims, strides, [&](int64_t i, const std::array<int64_t, 1>& off) {
    r[static_cast<size_t>(i)] = v[static_cast<size_t>(off[0])];
  });
  return r;
}

// A per-channel parameter: exactly `n` elements.
std::vector<double> channel_param(const KernelContext& ctx, size_t input, int64_t n,
                                  const char* name) {
  const Tensor& t = ctx.input(input);
  ctx.check(t.numel() == n, "{} must have {} elements, got {}", name, n, t.describe());
  return float_values(t, ctx.node().op_type());
}

// stash_type is an ONNX element type code naming the type of Mean/InvStdDev (float by default).
// Statistics are computed in double whatever it says.
DataType stash_dtype(const AttrReader& ctx) {
  const int64_t code = ctx.attr_int("stash_type", 1);
  ctx.check(code > 0 && code < 1000, "stash_type {} is not an element type", code);
  DataType t = dtype_from_onnx(static_cast<int32_t>(code), "stash_type");
  ctx.check(dtype_is_float(t), "stash_type must be a float type, got {}", dtype_name(t));
  return t;
}

void layer_norm(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const int64_t rank = static_cast<int64_t>(x.rank());
  ctx.check(rank >= 1, "input must have rank >= 1");
  const size_t axis = static_cast<size_t>(normalize_axis(ctx, ctx.attr_int("axis", -1), rank));
  const double eps = ctx.attr_float("epsilon", 1e-5f);
  const std::vector<double> xv = float_values(x, "LayerNormalization");
  const std::vector<double> scale = broadcast_param(ctx, ctx.input(1), x.dims(), "Scale");
  std::vector<double> bias;
  if (ctx.has_input(2)) bias = broadcast_param(ctx, ctx.input(2), x.dims(), "B");
  const int64_t outer = dims_product(x.dims(), 0, axis);
  const int64_t inner = dims_product(x.dims(), axis, x.rank());
  std::vector<double> y(xv.size()), mean(static_cast<size_t>(outer)),
      inv(static_cast<size_t>(outer));
  for (int64_t o = 0; o < outer; ++o) {
    const size_t base = static_cast<size_t>(o * inner);
    double s = 0;
    for (int64_t i = 0; i < inner; ++i) s += xv[base + i];
    const double m = s / static_cast<double>(inner);
    double var = 0;
    for (int64_t i = 0; i < inner; ++i) var += (xv[base + i] - m) * (xv[base + i] - m);
    var /= static_cast<double>(inner);
    const double r = 1.0 / std::sqrt(var + eps);
    mean[static_cast<size_t>(o)] = m;
    inv[static_cast<size_t>(o)] = r;
    for (int64_t i = 0; i < inner; ++i) {
      size_t k = base + static_cast<size_t>(i);
      y[k] = (xv[k] - m) * r * scale[k] + (bias.empty() ? 0.0 : bias[k]);
    }
  }
  ctx.set_output(0, float_tensor(x.dtype(), x.dims(), y, "LayerNormalization"));
  std::vector<int64_t> stat_dims = x.dims();
  for (size_t i = axis; i < stat_dims.size(); ++i) stat_dims[i] = 1;
  const DataType st = stash_dtype(ctx);
  if (ctx.wants_output(1))
    ctx.set_output(1, float_tensor(st, stat_dims, mean, "LayerNormalization"));
  if (ctx.wants_output(2))
    ctx.set_output(2, float_tensor(st, stat_dims, inv, "LayerNormalization"));
}

void infer_layer_norm(InferContext& ctx) {
  const TypeInfo* t = ctx.input_type(0);
  if (!t || !t->is_tensor()) return;
  ctx.set_output_type(0, *t);
  std::optional<Shape> stat;
  if (t->shape && t->shape->rank() >= 1) {
    const int64_t rank = static_cast<int64_t>(t->shape->rank());
    const size_t axis = static_cast<size_t>(normalize_axis(ctx, ctx.attr_int("axis", -1), rank));
    std::vector<Dim> dims = t->shape->dims();
    for (size_t i = axis; i < dims.size(); ++i) dims[i] = Dim(1);
    stat = Shape(std::move(dims));
  }
  const DataType st = stash_dtype(ctx);
  for (size_t i = 1; i < std::min<size_t>(ctx.output_count(), 3); ++i) {
    ctx.set_output_type(i, TypeInfo::tensor(st, stat));
  }
}

void rms_norm(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const int64_t rank = static_cast<int64_t>(x.rank());
  ctx.check(rank >= 1, "input must have rank >= 1");
  const size_t axis = static_cast<size_t>(normalize_axis(ctx, ctx.attr_int("axis", -1), rank));
  const double eps = ctx.attr_float("epsilon", 1e-5f);
  const std::vector<double> xv = float_values(x, "RMSNormalization");
  const std::vector<double> scale = broadcast_param(ctx, ctx.input(1), x.dims(), "scale");
  const int64_t outer = dims_product(x.dims(), 0, axis);
  const int64_t inner = dims_product(x.dims(), axis, x.rank());
  std::vector<double> y(xv.size());
  for (int64_t o = 0; o < outer; ++o) {
    const size_t base = static_cast<size_t>(o * inner);
    double s = 0;
    for (int64_t i = 0; i < inner; ++i) s += xv[base + i] * xv[base + i];
    const double r = 1.0 / std::sqrt(s / static_cast<double>(inner) + eps);
    for (int64_t i = 0; i < inner; ++i) y[base + i] = xv[base + i] * r * scale[base + i];
  }
  // The schema types Y as V (the scale's type), but ONNX shape inference and the reference both
  // give Y the type of X; models carry the latter in their value_info, so follow it.
  ctx.set_output(0, float_tensor(x.dtype(), x.dims(), y, "RMSNormalization"));
}

// ---- BatchNormalization -------------------------------------------------------------------
void batch_norm(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  ctx.check(x.rank() >= 2, "input must be [N, C, ...], got {}", x.describe());
  const int64_t n = x.dim(0), c = x.dim(1);
  const int64_t spatial = dims_product(x.dims(), 2, x.rank());
  const double eps = ctx.attr_float("epsilon", 1e-5f);
  const double momentum = ctx.attr_float("momentum", 0.9f);
  bool training = false;
  if (ctx.opset() >= 14) {
    training = ctx.attr_int("training_mode", 0) != 0;
  } else {
    // Before opset 14 asking for more than Y means training mode. Outputs 1 and 2 are the
    // updated running statistics as from 14 on; saved_mean/saved_var (3, 4) are left out because
    // runtimes disagree on what saved_var holds (variance or inverse std).
    training = ctx.wants_output(1) || ctx.wants_output(2);
    if (ctx.wants_output(3) || ctx.wants_output(4)) {
      ctx.unsupported("saved_mean/saved_var outputs of pre-opset-14 training mode");
    }
  }
  // Opset 7 spatial=0: every parameter holds one value per (C, D1, ...) position.
  const bool per_channel = ctx.opset() >= 9 || ctx.attr_int("spatial", 1) != 0;
  const int64_t pn = per_channel ? c : c * spatial;
  std::vector<double> scale = channel_param(ctx, 1, pn, "scale");
  std::vector<double> bias = channel_param(ctx, 2, pn, "B");
  std::vector<double> mean = channel_param(ctx, 3, pn, "mean");
  std::vector<double> var = channel_param(ctx, 4, pn, "var");
  const std::vector<double> xv = float_values(x, "BatchNormalization");
  std::vector<double> use_mean = mean, use_var = var;
  if (training) {
    ctx.check(per_channel, "training mode needs per-channel parameters");
    const double count = static_cast<double>(n * spatial);
    for (int64_t ch = 0; ch < c; ++ch) {
      double s = 0, sq = 0;
      for (int64_t b = 0; b < n; ++b) {
        for (int64_t i = 0; i < spatial; ++i)
          s += xv[static_cast<size_t>((b * c + ch) * spatial + i)];
      }
      const double m = s / count;
      for (int64_t b = 0; b < n; ++b) {
        for (int64_t i = 0; i < spatial; ++i) {
          double d = xv[static_cast<size_t>((b * c + ch) * spatial + i)] - m;
          sq += d * d;
        }
      }
      use_mean[static_cast<size_t>(ch)] = m;
      use_var[static_cast<size_t>(ch)] = sq / count;  // population variance, as the spec says
    }
  }
  std::vector<double> y(xv.size());
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t ch = 0; ch < c; ++ch) {
      for (int64_t i = 0; i < spatial; ++i) {
        const size_t k = static_cast<size_t>((b * c + ch) * spatial + i);
        const size_t p = static_cast<size_t>(per_channel ? ch : ch * spatial + i);
        y[k] = (xv[k] - use_mean[p]) / std::sqrt(use_var[p] + eps) * scale[p] + bias[p];
      }
    }
  }
  ctx.set_output(0, float_tensor(x.dtype(), x.dims(), y, "BatchNormalization"));
  if (!training) {
    ctx.check(!ctx.wants_output(1) && !ctx.wants_output(2),
              "running_mean/running_var outputs need training_mode=1");
    return;
  }
  std::vector<double> run_mean(static_cast<size_t>(c)), run_var(static_cast<size_t>(c));
  for (size_t ch = 0; ch < run_mean.size(); ++ch) {
    run_mean[ch] = mean[ch] * momentum + use_mean[ch] * (1 - momentum);
    run_var[ch] = var[ch] * momentum + use_var[ch] * (1 - momentum);
  }
  const DataType st = ctx.input(3).dtype();
  if (ctx.wants_output(1)) ctx.set_output(1, float_tensor(st, {c}, run_mean, "BatchNormalization"));
  if (ctx.wants_output(2)) ctx.set_output(2, float_tensor(st, {c}, run_var, "BatchNormalization"));
}

void infer_batch_norm(InferContext& ctx) {
  const TypeInfo* t = ctx.input_type(0);
  if (!t || !t->is_tensor()) return;
  ctx.set_output_type(0, *t);
  const TypeInfo* m = ctx.input_type(3);
  if (!m || !m->is_tensor()) return;
  for (size_t i = 1; i < std::min<size_t>(ctx.output_count(), 3); ++i) {
    ctx.set_output_type(i, TypeInfo::tensor(m->dtype, m->shape));
  }
}

// Normalizes x[b, g-th group of channels, ...] blocks: `groups` blocks per sample, each
// `block` contiguous elements. scale/bias are indexed by channel (or group when per_group).
std::vector<double> group_normalize(const std::vector<double>& xv, int64_t n, int64_t c,
                                    int64_t groups, int64_t spatial, double eps,
                                    const std::vector<double>& scale,
                                    const std::vector<double>& bias, bool per_group) {
  std::vector<double> y(xv.size());
  if (groups == 0) return y;  // no channels
  const int64_t cpg = c / groups;
  const int64_t block = cpg * spatial;
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t g = 0; g < groups; ++g) {
      const size_t base = static_cast<size_t>((b * groups + g) * block);
      double s = 0;
      for (int64_t i = 0; i < block; ++i) s += xv[base + i];
      const double m = block ? s / static_cast<double>(block) : 0.0;
      double var = 0;
      for (int64_t i = 0; i < block; ++i) var += (xv[base + i] - m) * (xv[base + i] - m);
      var = block ? var / static_cast<double>(block) : 0.0;
      const double r = 1.0 / std::sqrt(var + eps);
      for (int64_t i = 0; i < block; ++i) {
        const size_t p = static_cast<size_t>(per_group ? g : g * cpg + i / spatial);
        y[base + i] = (xv[base + i] - m) * r * scale[p] + bias[p];
      }
    }
  }
  return y;
}

void instance_norm(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  ctx.check(x.rank() >= 2, "input must be [N, C, ...], got {}", x.describe());
  const int64_t n = x.dim(0), c = x.dim(1);
  std::vector<double> scale = channel_param(ctx, 1, c, "scale");
  std::vector<double> bias = channel_param(ctx, 2, c, "B");
  std::vector<double> y = group_normalize(float_values(x, "InstanceNormalization"), n, c, c,
                                          dims_product(x.dims(), 2, x.rank()),
                                          ctx.attr_float("epsilon", 1e-5f), scale, bias, false);
  ctx.set_output(0, float_tensor(x.dtype(), x.dims(), y, "InstanceNormalization"));
}

void group_norm(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  ctx.check(x.rank() >= 2, "input must be [N, C, ...], got {}", x.describe());
  const int64_t n = x.dim(0), c = x.dim(1);
  const int64_t groups = ctx.attr_int("num_groups");
  ctx.check(groups > 0 && c % groups == 0, "num_groups {} must divide the {} channels", groups, c);
  // Opset 18 gave scale and bias one value per group; opset 21 made them per channel.
  const bool per_group = ctx.opset() < 21;
  const int64_t pn = per_group ? groups : c;
  std::vector<double> scale = channel_param(ctx, 1, pn, "scale");
  std::vector<double> bias = channel_param(ctx, 2, pn, "bias");
  std::vector<double> y = group_normalize(float_values(x, "GroupNormalization"), n, c, groups,
                                          dims_product(x.dims(), 2, x.rank()),
                                          ctx.attr_float("epsilon", 1e-5f), scale, bias, per_group);
  ctx.set_output(0, float_tensor(x.dtype(), x.dims(), y, "GroupNormalization"));
}

void lp_norm(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const int64_t rank = static_cast<int64_t>(x.rank());
  ctx.check(rank >= 1, "input must have rank >= 1");
  const size_t axis = static_cast<size_t>(normalize_axis(ctx, ctx.attr_int("axis", -1), rank));
  const int64_t p = ctx.attr_int("p", 2);
  if (p != 1 && p != 2) ctx.fail("p must be 1 or 2, got {}", p);
  AxisSplit s = split_at_axis(x.dims(), axis);
  std::vector<double> xv = float_values(x, "LpNormalization");
  std::vector<double> y(xv.size());
  for (int64_t o = 0; o < s.outer; ++o) {
    for (int64_t in = 0; in < s.inner; ++in) {
      double norm = 0;
      for (int64_t k = 0; k < s.length; ++k) {
        double v = xv[static_cast<size_t>((o * s.length + k) * s.inner + in)];
        norm += p == 1 ? std::fabs(v) : v * v;
      }
      if (p == 2) norm = std::sqrt(norm);
      for (int64_t k = 0; k < s.length; ++k) {
        size_t i = static_cast<size_t>((o * s.length + k) * s.inner + in);
        y[i] = norm == 0 ? 0.0 : xv[i] / norm;  // a zero vector stays zero, like the reference
      }
    }
  }
  ctx.set_output(0, float_tensor(x.dtype(), x.dims(), y, "LpNormalization"));
}

void mvn(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const int64_t rank = static_cast<int64_t>(x.rank());
  ctx.check(rank >= 1, "input must have rank >= 1");
  std::vector<bool> reduced(x.rank(), false);
  for (int64_t a : ctx.attr_ints("axes", {0, 2, 3})) {
    int64_t n = normalize_axis(ctx, a, rank);
    ctx.check(!reduced[static_cast<size_t>(n)], "axis {} is listed twice", a);
    reduced[static_cast<size_t>(n)] = true;
  }
  std::vector<double> xv = float_values(x, "MeanVarianceNormalization");
  int64_t slots = 1, count = 1;
  for (size_t i = 0; i < x.rank(); ++i) (reduced[i] ? count : slots) *= x.dim(i);
  std::vector<double> mean(static_cast<size_t>(slots), 0.0), var(static_cast<size_t>(slots), 0.0);
  for_each_reduced(x.dims(), reduced, [&](int64_t i, int64_t o) {
    mean[static_cast<size_t>(o)] += xv[static_cast<size_t>(i)];
  });
  for (double& m : mean) m /= static_cast<double>(count);
  for_each_reduced(x.dims(), reduced, [&](int64_t i, int64_t o) {
    double d = xv[static_cast<size_t>(i)] - mean[static_cast<size_t>(o)];
    var[static_cast<size_t>(o)] += d * d;
  });
  std::vector<double> y(xv.size());
  for_each_reduced(x.dims(), reduced, [&](int64_t i, int64_t o) {
    double sd = std::sqrt(var[static_cast<size_t>(o)] / static_cast<double>(count));
    y[static_cast<size_t>(i)] =
        (xv[static_cast<size_t>(i)] - mean[static_cast<size_t>(o)]) / (sd + 1e-9);
  });
  ctx.set_output(0, float_tensor(x.dtype(), x.dims(), y, "MeanVarianceNormalization"));
}

void lrn(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  ctx.check(x.rank() >= 2, "input must be [N, C, ...], got {}", x.describe());
  const int64_t size = ctx.attr_int("size");
  ctx.check(size > 0, "size must be positive, got {}", size);
  const double alpha = ctx.attr_float("alpha", 1e-4f), beta = ctx.attr_float("beta", 0.75f);
  const double bias = ctx.attr_float("bias", 1.0f);
  const int64_t n = x.dim(0), c = x.dim(1), spatial = dims_product(x.dims(), 2, x.rank());
  const int64_t before = (size - 1) / 2, after = size / 2;  // floor and ceil of (size-1)/2
  std::vector<double> xv = float_values(x, "LRN");
  std::vector<double> y(xv.size());
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t ch = 0; ch < c; ++ch) {
      for (int64_t i = 0; i < spatial; ++i) {
        double sq = 0;
        for (int64_t j = std::max<int64_t>(0, ch - before); j <= std::min(c - 1, ch + after); ++j) {
          double v = xv[static_cast<size_t>((b * c + j) * spatial + i)];
          sq += v * v;
        }
        size_t k = static_cast<size_t>((b * c + ch) * spatial + i);
        y[k] = xv[k] / std::pow(bias + alpha / static_cast<double>(size) * sq, beta);
      }
    }
  }
  ctx.set_output(0, float_tensor(x.dtype(), x.dims(), y, "LRN"));
}

// Draws the keep mask from MT19937 seeded with `seed` and 53-bit uniform doubles, the
// generator numpy's RandomState(seed).uniform uses, so seeded results match the ONNX reference.
void random_dropout(KernelContext& ctx, const Tensor& x, double ratio, int64_t seed) {
  ctx.check(seed >= 0 && seed <= 0xffffffffLL, "seed {} must fit in 32 unsigned bits", seed);
  std::mt19937 gen(static_cast<uint32_t>(seed));
  const std::vector<double> xv = float_values(x, "Dropout");
  std::vector<double> y(xv.size());
  Tensor mask(DataType::Bool, x.dims());
  bool* pm = mask.data<bool>();
  const double scale = 1.0 / (1.0 - ratio);
  for (size_t i = 0; i < xv.size(); ++i) {
    const uint32_t a = gen() >> 5, b = gen() >> 6;
    const double u = (a * 67108864.0 + b) / 9007199254740992.0;
    pm[i] = u >= ratio;
    y[i] = pm[i] ? xv[i] * scale : 0.0;
  }
  ctx.set_output(0, float_tensor(x.dtype(), x.dims(), y, "Dropout"));
  if (ctx.wants_output(1)) ctx.set_output(1, mask);
}

void dropout(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  dispatch_dtype<DTypeSet::Float>(x.dtype(), "Dropout", [](auto) { return 0; });
  if (ctx.opset() >= 12) {
    if (ctx.has_input(2)) {
      ctx.check(ctx.input(2).dtype() == DataType::Bool && ctx.input(2).numel() == 1,
                "training_mode must be a bool scalar, got {}", ctx.input(2).describe());
    }
    const bool training = ctx.has_input(2) && ctx.input(2).int_at(0) != 0;
    double ratio = 0.5;
    if (ctx.has_input(1)) {
      ctx.check(ctx.input(1).numel() == 1, "ratio must be a scalar, got {}",
                ctx.input(1).describe());
      ratio = ctx.input(1).double_at(0);
    }
    if (training && ratio != 0) {
      // Outside training the ratio is ignored, so only a ratio that would be used is checked.
      ctx.check(ratio > 0 && ratio < 1, "ratio must be in [0, 1), got {}", ratio);
      // Without a seed any random mask is right, but there is no reproducible answer to give.
      if (!ctx.has_attr("seed")) ctx.unsupported("training-mode Dropout without a seed (random)");
      random_dropout(ctx, x, ratio, ctx.attr_int("seed"));
      return;
    }
  }
  ctx.set_output(0, x);
  if (!ctx.wants_output(1)) return;
  if (ctx.opset() >= 10) {
    Tensor mask(DataType::Bool, x.dims());
    std::fill_n(mask.data<bool>(), mask.numel(), true);
    ctx.set_output(1, mask);
  } else {
    std::vector<double> ones(static_cast<size_t>(x.numel()), 1.0);
    ctx.set_output(1, float_tensor(x.dtype(), x.dims(), ones, "Dropout"));
  }
}

void infer_dropout(InferContext& ctx) {
  const TypeInfo* t = ctx.input_type(0);
  if (!t || !t->is_tensor()) return;
  ctx.set_output_type(0, *t);
  if (ctx.output_count() > 1) {
    ctx.set_output_type(1,
                        TypeInfo::tensor(ctx.opset() >= 10 ? DataType::Bool : t->dtype, t->shape));
  }
}

KILN_REGISTER_OP({.op_type = "LayerNormalization",
                  .kernel = layer_norm,
                  .infer = infer_layer_norm,
                  .traits = {.fp16 = {.safe = true, .outputs = slots({0})}}});
KILN_REGISTER_OP({.op_type = "RMSNormalization",
                  .kernel = rms_norm,
                  .infer = infer_same_as_input0});
KILN_REGISTER_OP({.op_type = "BatchNormalization",
                  .kernel = batch_norm,
                  .infer = infer_batch_norm,
                  .traits = {.fp16 = {.safe = true, .outputs = slots({0})}}});
KILN_REGISTER_OP({.op_type = "InstanceNormalization",
                  .kernel = instance_norm,
                  .infer = infer_same_as_input0,
                  .traits = {.fp16 = {.safe = true}}});
KILN_REGISTER_OP({.op_type = "GroupNormalization",
                  .kernel = group_norm,
                  .infer = infer_same_as_input0});
KILN_REGISTER_OP({.op_type = "LpNormalization", .kernel = lp_norm, .infer = infer_same_as_input0});
KILN_REGISTER_OP({.op_type = "MeanVarianceNormalization",
                  .kernel = mvn,
                  .infer = infer_same_as_input0});
KILN_REGISTER_OP({.op_type = "LRN", .kernel = lrn, .infer = infer_same_as_input0});
KILN_REGISTER_OP({.op_type = "Dropout",
                  .kernel = dropout,
                  .infer = infer_dropout,
                  .traits = {.flops = flops_zero}});

}  // namespace
}  // namespace kiln::ops
