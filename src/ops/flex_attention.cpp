// FlexAttention (ai.onnx.preview 1): scaled dot-product attention over rank-4 inputs with
// optional score_mod / prob_mod subgraphs applied before and after the softmax. Scores are
// computed in double; the subgraphs see them in the softmax precision (float unless the inputs
// are double or softmax_precision says otherwise), as the spec defines their element type.
#include <cmath>
#include <limits>

#include "ops/control_real_io.hpp"
#include "ops/op_utils.hpp"
#include "ops/registry.hpp"
#include "ops/scratch_guard.hpp"

namespace kiln::ops {
namespace {

using ctl::from_doubles;
using ctl::to_doubles;

DataType softmax_type(const AttrReader& ctx, DataType input) {
  if (ctx.has_attr("softmax_precision")) {
    const int64_t code = ctx.attr_int("softmax_precision");
    switch (code) {
      case 1:
        return DataType::Float32;
      case 10:
        return DataType::Float16;
      case 16:
        return DataType::BFloat16;
      case 11:
        return DataType::Float64;
      default:
        ctx.fail("softmax_precision {} is not float, float16, bfloat16 or double", code);
    }
  }
  return input == DataType::Float64 ? DataType::Float64 : DataType::Float32;
}

// Runs a modifier subgraph on `values` (shape `dims`) in `type`, returning its output in double.
std::vector<double> apply_mod(KernelContext& ctx, const char* name, DataType type,
                              const std::vector<int64_t>& dims, std::vector<double> values) {
  if (!ctx.has_attr(name)) return values;
  const ir::Graph& body = ctx.attr_graph(name);
  std::vector<RtValue> in;
  in.emplace_back(from_doubles(type, dims, values, "FlexAttention"));
  std::vector<RtValue> out = ctx.run_subgraph(body, in);
  ctx.check(out.size() == 1 && out[0].is_tensor(), "{} must produce exactly one tensor", name);
  const Tensor& t = out[0].tensor();
  ctx.check(t.dims() == dims, "{} must keep the shape {}, produced {}", name, dims_to_string(dims),
            t.describe());
  ctx.check(dtype_is_float(t.dtype()), "{} must produce a float tensor, produced {}", name,
            t.describe());
  // Round through the softmax precision, as the output is read back in that type.
  return to_doubles(from_doubles(type, dims, to_doubles(t), "FlexAttention"));
}

void flex_attention(KernelContext& ctx) {
  const Tensor& q = ctx.input(0);
  const Tensor& k = ctx.input(1);
  const Tensor& v = ctx.input(2);
  ctx.check(dtype_is_float(q.dtype()) && k.dtype() == q.dtype() && v.dtype() == q.dtype(),
            "Q, K and V must share one float element type, got {}, {}, {}", q.describe(),
            k.describe(), v.describe());
  ctx.check(q.rank() == 4 && k.rank() == 4 && v.rank() == 4,
            "Q, K and V must be rank 4, got {}, {}, {}", q.describe(), k.describe(), v.describe());
  const int64_t batch = q.dim(0), hq = q.dim(1), lq = q.dim(2), e = q.dim(3);
  const int64_t hkv = k.dim(1), skv = k.dim(2), ev = v.dim(3);
  ctx.check(k.dim(0) == batch && v.dim(0) == batch, "Q, K and V disagree on the batch size");
  ctx.check(v.dim(1) == hkv && v.dim(2) == skv,
            "K and V must share heads and sequence length, got {} and {}", k.describe(),
            v.describe());
  ctx.check(k.dim(3) == e, "Q and K must share the head size, got {} and {}", q.describe(),
            k.describe());
  ctx.check(hkv > 0 && hq % hkv == 0, "q heads ({}) must be a multiple of kv heads ({})", hq, hkv);
  const double scale = ctx.has_attr("scale") ? static_cast<double>(ctx.attr_float("scale"))
                                             : 1.0 / std::sqrt(static_cast<double>(e));
  const DataType st = softmax_type(ctx, q.dtype());
  const int64_t group = hq / hkv;
  const std::vector<double> qd = to_doubles(q), kd = to_doubles(k), vd = to_doubles(v);

  const std::vector<int64_t> sdims = {batch, hq, lq, skv};
  check_scratch(ctx, sdims);
  check_scratch(ctx, {batch, hq, lq, ev});
  std::vector<double> scores(static_cast<size_t>(batch * hq * lq * skv));
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < hq; ++h) {
      const int64_t kh = h / group;
      for (int64_t i = 0; i < lq; ++i)
        for (int64_t j = 0; j < skv; ++j) {
          double acc = 0;
          const double* qr = qd.data() + ((b * hq + h) * lq + i) * e;
          const double* kr = kd.data() + ((b * hkv + kh) * skv + j) * e;
          for (int64_t d = 0; d < e; ++d) acc += qr[d] * kr[d];
          scores[static_cast<size_t>(((b * hq + h) * lq + i) * skv + j)] = acc * scale;
        }
    }
  // Round to the softmax precision first: that is the type the computation is defined in.
  scores = to_doubles(from_doubles(st, sdims, scores, "FlexAttention"));
  scores = apply_mod(ctx, "score_mod", st, sdims, std::move(scores));

  for (int64_t r = 0; r < batch * hq * lq; ++r) {
    double* row = scores.data() + r * skv;
    double mx = -std::numeric_limits<double>::infinity();
    for (int64_t j = 0; j < skv; ++j) mx = std::max(mx, row[j]);
    double sum = 0;
    for (int64_t j = 0; j < skv; ++j) sum += (row[j] = std::exp(row[j] - mx));
    for (int64_t j = 0; j < skv; ++j) row[j] /= sum;
  }
  scores = apply_mod(ctx, "prob_mod", st, sdims, std::move(scores));

  std::vector<double> out(static_cast<size_t>(batch * hq * lq * ev), 0.0);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < hq; ++h) {
      const int64_t kh = h / group;
      for (int64_t i = 0; i < lq; ++i) {
        const double* p = scores.data() + ((b * hq + h) * lq + i) * skv;
        double* o = out.data() + ((b * hq + h) * lq + i) * ev;
        for (int64_t j = 0; j < skv; ++j) {
          const double* vr = vd.data() + ((b * hkv + kh) * skv + j) * ev;
          for (int64_t d = 0; d < ev; ++d) o[d] += p[j] * vr[d];
        }
      }
    }
  ctx.set_output(0, from_doubles(v.dtype(), {batch, hq, lq, ev}, out, "FlexAttention"));
}

void infer_flex_attention(InferContext& ctx) {
  const TypeInfo* q = ctx.input_type(0);
  const TypeInfo* v = ctx.input_type(2);
  if (!q || q->kind != TypeInfo::Kind::Tensor) return;
  std::optional<Shape> shape;
  if (q->shape && q->shape->rank() == 4 && v && v->shape && v->shape->rank() == 4)
    shape = Shape({(*q->shape)[0], (*q->shape)[1], (*q->shape)[2], (*v->shape)[3]});
  ctx.set_output_type(0, TypeInfo::tensor(q->dtype, shape));
}

KILN_REGISTER_OP({.domain = "ai.onnx.preview",
                  .op_type = "FlexAttention",
                  .kernel = flex_attention,
                  .infer = infer_flex_attention});

}  // namespace
}  // namespace kiln::ops
