// ai.kiln ops written by the transformer fusions (passes/fuse_layer_norm, fuse_gelu,
// fuse_skip_layer_norm, fuse_attention):
//   LayerNormalization, Gelu   the ai.onnx ops (opset 17 / 20) under Kiln's domain, for models that
//                              import an older ai.onnx opset; same inputs, outputs, attributes.
//   SkipLayerNormalization     (input, skip, gamma, beta?, bias?) -> (output, mean?, inv_std_var?,
//                              input_skip_bias_sum?), attribute epsilon: LayerNormalization over
//                              the last dim of input + skip (+ bias), like ONNX Runtime's op.
//   ScaledDotProductAttention  (Q [..., Sq, D], K [..., Sk, D], V [..., Sk, Dv], mask?) ->
//                              softmax(Q K^T * scale + mask) V, batch dims broadcast numpy-style,
//                              the additive mask broadcast to [..., Sq, Sk]; attribute scale
//                              (default 1 / sqrt(D)); zero_nan_probs (default 0): probabilities
//                              that come out NaN count as 0, as torch's exported
//                              Where(IsNaN(P), 0, P) makes them (a row masked everywhere gives
//                              0, not NaN); bsnh (default 0): Q, K, V and the output hold the
//                              sequence before the heads, [..., S, N, H] (onnxruntime's BSNH,
//                              as the projections leave them), read and written as their
//                              [..., N, S, H] transposes, so no Transpose runs on either side.
#include <array>
#include <cmath>
#include <limits>
#include <optional>

#include "ops/control_real_io.hpp"
#include "ops/elementwise_utils.hpp"
#include "ops/infer_utils.hpp"
#include "ops/movement_utils.hpp"
#include "ops/op_utils.hpp"
#include "ops/registry.hpp"
#include "ops/wrapped_kernel.hpp"

namespace kiln::ops {
namespace {

constexpr int kLayerNormOpset = 17;
constexpr int kGeluOpset = 20;

std::vector<const RtValue*> inputs_of(const KernelContext& ctx) {
  std::vector<const RtValue*> in;
  for (size_t i = 0; i < ctx.input_count(); ++i) {
    in.push_back(ctx.has_input(i) ? &ctx.input_value(i) : nullptr);
  }
  return in;
}

void set_outputs(KernelContext& ctx, std::vector<RtValue> outputs) {
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (ctx.wants_output(i) && !outputs[i].is_none()) ctx.set_output(i, std::move(outputs[i]));
  }
}

void layer_norm(KernelContext& ctx) {
  set_outputs(ctx, run_wrapped_kernel(ctx, "LayerNormalization", kLayerNormOpset, inputs_of(ctx)));
}
void infer_layer_norm(InferContext& ctx) {
  infer_wrapped(ctx, "LayerNormalization", kLayerNormOpset);
}

void gelu(KernelContext& ctx) {
  set_outputs(ctx, run_wrapped_kernel(ctx, "Gelu", kGeluOpset, inputs_of(ctx)));
}
void infer_gelu(InferContext& ctx) {
  infer_wrapped(ctx, "Gelu", kGeluOpset);
}

// a + b rounded to a's element type, b broadcast to a's dims (as the Add nodes it replaces).
Tensor add_rounded(const KernelContext& ctx, const Tensor& a, const Tensor& b, const char* what) {
  ctx.check(a.dtype() == b.dtype(), "{} has type {}, input has {}", what, dtype_name(b.dtype()),
            dtype_name(a.dtype()));
  ctx.check(broadcast_dims(ctx, {a.dims(), b.dims()}) == a.dims(),
            "{} {} does not broadcast to the input {}", what, b.describe(), a.describe());
  return dispatch_dtype<DTypeSet::Float>(a.dtype(), "SkipLayerNormalization", [&](auto tag) {
    using T = typename decltype(tag)::type;
    return broadcast_binary<T, T, T>(
        ctx, a, b, [](T x, T y) { return from_double<T>(to_double(x) + to_double(y)); });
  });
}

void skip_layer_norm(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  ctx.check(x.rank() >= 1, "input must have rank >= 1");
  Tensor sum = add_rounded(ctx, x, ctx.input(1), "skip");
  if (ctx.has_input(4)) sum = add_rounded(ctx, sum, ctx.input(4), "bias");
  const RtValue sum_value(sum);
  std::vector<const RtValue*> ln_inputs = {&sum_value, &ctx.input_value(2),
                                           ctx.has_input(3) ? &ctx.input_value(3) : nullptr};
  // The wrapped LayerNormalization (axis -1) fills outputs 0-2, which line up with ours.
  std::vector<RtValue> out =
      run_wrapped_kernel(ctx, "LayerNormalization", kLayerNormOpset, ln_inputs);
  if (out.size() > 3) out[3] = sum_value;
  set_outputs(ctx, std::move(out));
}

void infer_skip_layer_norm(InferContext& ctx) {
  infer_wrapped(ctx, "LayerNormalization", kLayerNormOpset);
  const TypeInfo* x = ctx.input_type(0);
  if (x && ctx.output_count() > 3) ctx.set_output_type(3, *x);
}

// Dims of `t` with at least `rank` entries (leading 1s added).
std::vector<int64_t> padded_dims(const Tensor& t, size_t rank) {
  std::vector<int64_t> d = t.dims();
  while (d.size() < rank) d.insert(d.begin(), 1);
  return d;
}

// `t` with axes -3 and -2 swapped (bsnh's [.., S, N, H] <-> [.., N, S, H]).
Tensor swap_seq_heads(const Tensor& t) {
  std::vector<int64_t> dims = t.dims();
  const size_t r = dims.size();
  std::swap(dims[r - 3], dims[r - 2]);
  std::vector<int64_t> strides = row_major_strides(t.dims());
  std::swap(strides[r - 3], strides[r - 2]);
  return remap(t, std::move(dims),
               [&](const std::vector<int64_t>& index) { return flat_offset(index, strides); });
}

void attention(KernelContext& ctx) {
  const Tensor& q_in = ctx.input(0);
  const Tensor& k_in = ctx.input(1);
  const Tensor& v_in = ctx.input(2);
  const bool bsnh = ctx.attr_int("bsnh", 0) != 0;
  const size_t min_rank = bsnh ? 3 : 2;
  ctx.check(q_in.rank() >= min_rank && k_in.rank() >= min_rank && v_in.rank() >= min_rank,
            "Q, K and V must have rank >= {}{}, got {}, {} and {}", min_rank,
            bsnh ? " with bsnh" : "", q_in.describe(), k_in.describe(), v_in.describe());
  ctx.check(k_in.dtype() == q_in.dtype() && v_in.dtype() == q_in.dtype(),
            "Q, K and V types differ");
  // Computed over [.., N, S, H] operands; bsnh ones are swapped into that form first.
  std::optional<Tensor> swapped[3];
  auto laid = [&](size_t i) -> const Tensor& {
    if (!bsnh) return ctx.input(i);
    swapped[i] = swap_seq_heads(ctx.input(i));
    return *swapped[i];
  };
  const Tensor &q = laid(0), &k = laid(1), &v = laid(2);
  const int64_t sq = q.dim(q.rank() - 2), d = q.dim(q.rank() - 1);
  const int64_t sk = k.dim(k.rank() - 2), dv = v.dim(v.rank() - 1);
  ctx.check(k.dim(k.rank() - 1) == d, "K {} must end in the head size {} of Q {}", k_in.describe(),
            d, q_in.describe());
  ctx.check(v.dim(v.rank() - 2) == sk, "V {} must have the {} keys of K {}", v_in.describe(), sk,
            k_in.describe());
  const double scale =
      ctx.attr_float("scale", d > 0 ? static_cast<float>(1.0 / std::sqrt(double(d))) : 1.0f);
  const bool zero_nan = ctx.attr_int("zero_nan_probs", 0) != 0;
  auto batch_of = [](const std::vector<int64_t>& dims) {
    return std::vector<int64_t>(dims.begin(), dims.end() - 2);
  };
  std::vector<int64_t> mask_dims;
  int64_t msq = 1, msk = 1;
  const bool has_mask = ctx.has_input(3);
  if (has_mask) {
    const Tensor& m = ctx.input(3);
    ctx.check(m.dtype() == q_in.dtype(), "mask has type {}, Q has {}", dtype_name(m.dtype()),
              dtype_name(q_in.dtype()));
    mask_dims = padded_dims(m, 2);
    msq = mask_dims[mask_dims.size() - 2];
    msk = mask_dims.back();
    ctx.check((msq == 1 || msq == sq) && (msk == 1 || msk == sk),
              "mask {} does not broadcast to [{}, {}]", m.describe(), sq, sk);
  }
  std::vector<std::vector<int64_t>> batches = {batch_of(q.dims()), batch_of(k.dims()),
                                               batch_of(v.dims())};
  if (has_mask) batches.push_back(batch_of(mask_dims));
  const std::vector<int64_t> batch = broadcast_dims(ctx, batches);
  std::array<std::vector<int64_t>, 4> strides;
  for (size_t i = 0; i < batches.size(); ++i) strides[i] = broadcast_strides(batches[i], batch);
  if (!has_mask) strides[3].assign(batch.size(), 0);
  std::vector<int64_t> out_dims = batch;
  out_dims.push_back(sq);
  out_dims.push_back(dv);
  const std::vector<double> qv = ctl::to_doubles(q), kv = ctl::to_doubles(k),
                            vv = ctl::to_doubles(v);
  const std::vector<double> mv = has_mask ? ctl::to_doubles(ctx.input(3)) : std::vector<double>();
  std::vector<double> out(static_cast<size_t>(shape_numel(out_dims)));
  std::vector<double> p(static_cast<size_t>(sk));
  for_each_broadcast<4>(batch, strides, [&](int64_t b, const std::array<int64_t, 4>& off) {
    const double* qm = qv.data() + off[0] * sq * d;
    const double* km = kv.data() + off[1] * sk * d;
    const double* vm = vv.data() + off[2] * sk * dv;
    const double* mm = has_mask ? mv.data() + off[3] * msq * msk : nullptr;
    double* om = out.data() + b * sq * dv;
    for (int64_t i = 0; i < sq; ++i) {
      double top = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < sk; ++j) {
        double s = 0;
        for (int64_t e = 0; e < d; ++e) s += qm[i * d + e] * km[j * d + e];
        s *= scale;
        if (mm) s += mm[(msq == 1 ? 0 : i) * msk + (msk == 1 ? 0 : j)];
        p[static_cast<size_t>(j)] = s;
        top = std::max(top, s);
      }
      double total = 0;
      for (double& s : p) total += (s = std::exp(s - top));
      // zero_nan_probs: each probability on its own, NaN ones 0 (over no keys, a sum of none).
      if (zero_nan) {
        for (double& s : p) s = std::isnan(s / total) ? 0 : s / total;
        total = 1;
      }
      for (int64_t e = 0; e < dv; ++e) {
        double acc = 0;
        for (int64_t j = 0; j < sk; ++j) acc += p[static_cast<size_t>(j)] * vm[j * dv + e];
        om[i * dv + e] = acc / total;
      }
    }
  });
  Tensor y = ctl::from_doubles(q_in.dtype(), out_dims, out, "ScaledDotProductAttention");
  ctx.set_output(0, bsnh ? swap_seq_heads(y) : std::move(y));
}

void infer_attention(InferContext& ctx) {
  const TypeInfo* q = ctx.input_type(0);
  if (!q || !q->is_tensor()) return;
  const bool bsnh = ctx.attr_int("bsnh", 0) != 0;
  std::optional<Shape> batch;
  Dim sq, dv;
  for (size_t i = 0; i < 3; ++i) {
    const TypeInfo* t = ctx.input_type(i);
    if (!t || !t->is_tensor() || !t->shape || t->shape->rank() < (bsnh ? 3u : 2u)) {
      ctx.set_output_type(0, TypeInfo::tensor(q->dtype));
      return;
    }
    std::vector<Dim> dims = t->shape->dims();
    if (bsnh) std::swap(dims[dims.size() - 3], dims[dims.size() - 2]);
    Shape b(std::vector<Dim>(dims.begin(), dims.end() - 2));
    batch = i == 0 ? std::optional<Shape>(b) : broadcast_shapes(ctx, batch, b);
    if (i == 0) sq = dims[dims.size() - 2];
    if (i == 2) dv = dims.back();
  }
  if (!batch) {
    ctx.set_output_type(0, TypeInfo::tensor(q->dtype));
    return;
  }
  std::vector<Dim> dims = batch->dims();
  dims.push_back(sq);
  dims.push_back(dv);
  if (bsnh) std::swap(dims[dims.size() - 3], dims[dims.size() - 2]);
  ctx.set_output_type(0, TypeInfo::tensor(q->dtype, Shape(std::move(dims))));
}

KILN_REGISTER_OP({.domain = kKilnDomain,
                  .op_type = "LayerNormalization",
                  .kernel = layer_norm,
                  .infer = infer_layer_norm,
                  .traits = {.fp16 = {.safe = true, .outputs = slots({0})}}});
KILN_REGISTER_OP({.domain = kKilnDomain,
                  .op_type = "Gelu",
                  .kernel = gelu,
                  .infer = infer_gelu,
                  .traits = {.pointwise = Pointwise::Unary, .fp16 = {.safe = true}}});
KILN_REGISTER_OP({.domain = kKilnDomain,
                  .op_type = "SkipLayerNormalization",
                  .kernel = skip_layer_norm,
                  .infer = infer_skip_layer_norm,
                  .traits = {.fp16 = {.safe = true, .outputs = slots({0, 3})}}});
KILN_REGISTER_OP({.domain = kKilnDomain,
                  .op_type = "ScaledDotProductAttention",
                  .kernel = attention,
                  .infer = infer_attention,
                  .traits = {.fp16 = {.safe = true}}});

}  // namespace
}  // namespace kiln::ops
