// Opset 27 stateful sequence ops: LinearAttention (linear / gated / delta / gated-delta
// recurrences with GQA) and CausalConvWithState (depthwise causal conv carrying its left context).
// Both compute in double and round once into the output element type.
#include <cmath>

#include "ops/control_real_io.hpp"
#include "ops/infer_utils.hpp"
#include "ops/op_utils.hpp"
#include "ops/registry.hpp"
#include "ops/scratch_guard.hpp"

namespace kiln::ops {
namespace {

using ctl::from_doubles;
using ctl::to_doubles;

void require_float(const AttrReader& ctx, DataType t, const char* what) {
  if (t != DataType::Float32 && t != DataType::Float16 && t != DataType::BFloat16)
    ctx.fail("{} must be float, float16 or bfloat16, got {}", what, dtype_name(t));
}

// ---- LinearAttention ----

void linear_attention(KernelContext& ctx) {
  const Tensor& q = ctx.input(0);
  const Tensor& k = ctx.input(1);
  const Tensor& v = ctx.input(2);
  const int64_t hq = ctx.attr_int("q_num_heads");
  const int64_t hkv = ctx.attr_int("kv_num_heads");
  const std::string rule = ctx.attr_string("update_rule", "gated_delta");
  ctx.check(hq > 0 && hkv > 0 && hq % hkv == 0,
            "q_num_heads ({}) must be a positive multiple of kv_num_heads ({})", hq, hkv);
  const bool gating = rule == "gated" || rule == "gated_delta";
  const bool delta = rule == "delta" || rule == "gated_delta";
  if (!gating && !delta && rule != "linear") ctx.fail("unknown update_rule '{}'", rule);
  require_float(ctx, q.dtype(), "query");
  ctx.check(k.dtype() == q.dtype() && v.dtype() == q.dtype(),
            "query, key and value must share one element type");
  ctx.check(q.rank() == 3 && k.rank() == 3 && v.rank() == 3,
            "query, key and value must be 3-D (B, T, H*D), got {}, {}, {}", q.describe(),
            k.describe(), v.describe());
  const int64_t batch = q.dim(0), seq = q.dim(1);
  ctx.check(k.dim(0) == batch && v.dim(0) == batch && k.dim(1) == seq && v.dim(1) == seq,
            "query, key and value disagree on batch/sequence: {}, {}, {}", q.describe(),
            k.describe(), v.describe());
  ctx.check(q.dim(2) % hq == 0, "query hidden size {} is not a multiple of {} heads", q.dim(2), hq);
  ctx.check(v.dim(2) % hkv == 0, "value hidden size {} is not a multiple of {} heads", v.dim(2),
            hkv);
  const int64_t dk = q.dim(2) / hq, dv = v.dim(2) / hkv;
  ctx.check(k.dim(2) == hkv * dk, "key hidden size {} must be kv_num_heads * d_k = {}", k.dim(2),
            hkv * dk);

  const bool has_decay = ctx.has_input(4), has_beta = ctx.has_input(5);
  if (gating != has_decay)
    ctx.fail("update_rule '{}' {} the decay input", rule, gating ? "requires" : "forbids");
  if (delta != has_beta)
    ctx.fail("update_rule '{}' {} the beta input", rule, delta ? "requires" : "forbids");

  std::vector<double> decay, beta;
  int64_t decay_width = 0, beta_width = 0;  // per-head (1) or per-key-dim (d_k) decay
  if (has_decay) {
    const Tensor& g = ctx.input(4);
    require_float(ctx, g.dtype(), "decay");
    ctx.check(g.rank() == 3 && g.dim(0) == batch && g.dim(1) == seq,
              "decay must be (B, T, H_kv) or (B, T, H_kv*d_k), got {}", g.describe());
    if (g.dim(2) == hkv) {
      decay_width = 1;
    } else if (g.dim(2) == hkv * dk) {
      decay_width = dk;
    } else {
      ctx.fail("decay last dim {} must be kv_num_heads ({}) or kv_num_heads*d_k ({})", g.dim(2),
               hkv, hkv * dk);
    }
    decay = to_doubles(g);
  }
  if (has_beta) {
    const Tensor& b = ctx.input(5);
    require_float(ctx, b.dtype(), "beta");
    ctx.check(
        b.rank() == 3 && b.dim(0) == batch && b.dim(1) == seq && (b.dim(2) == hkv || b.dim(2) == 1),
        "beta must be (B, T, H_kv) or (B, T, 1), got {}", b.describe());
    beta_width = b.dim(2);
    beta = to_doubles(b);
  }

  check_scratch(ctx, {batch, hkv, dk, dv});
  check_scratch(ctx, {batch, seq, hq, dv});
  const size_t state_size = static_cast<size_t>(batch * hkv * dk * dv);
  std::vector<double> state(state_size, 0.0);
  DataType state_type = q.dtype();
  if (ctx.has_input(3)) {
    const Tensor& p = ctx.input(3);
    require_float(ctx, p.dtype(), "past_state");
    ctx.check(p.dims() == std::vector<int64_t>{batch, hkv, dk, dv},
              "past_state must be [{}, {}, {}, {}], got {}", batch, hkv, dk, dv, p.describe());
    state = to_doubles(p);
    state_type = p.dtype();
  }
  const float scale_attr = ctx.attr_float("scale", 0.0f);
  const double scale = scale_attr == 0.0f ? 1.0 / std::sqrt(static_cast<double>(dk)) : scale_attr;

  const std::vector<double> qd = to_doubles(q), kd = to_doubles(k), vd = to_doubles(v);
  std::vector<double> out(static_cast<size_t>(batch * seq * hq * dv), 0.0);
  const int64_t group = hq / hkv;
  std::vector<double> vt(static_cast<size_t>(dv));
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < hkv; ++h) {
      double* s = state.data() + (b * hkv + h) * dk * dv;
      for (int64_t t = 0; t < seq; ++t) {
        const int64_t bt = b * seq + t;
        const double* kt = kd.data() + (bt * hkv + h) * dk;
        const double* vin = vd.data() + (bt * hkv + h) * dv;
        if (gating) {
          for (int64_t i = 0; i < dk; ++i) {
            const double g = decay[static_cast<size_t>((bt * hkv + h) * decay_width +
                                                       (decay_width == 1 ? 0 : i))];
            const double f = std::exp(g);
            for (int64_t j = 0; j < dv; ++j) s[i * dv + j] *= f;
          }
        }
        for (int64_t j = 0; j < dv; ++j) vt[static_cast<size_t>(j)] = vin[j];
        if (delta) {
          const double bv = beta[static_cast<size_t>(bt * beta_width + (beta_width == 1 ? 0 : h))];
          for (int64_t j = 0; j < dv; ++j) {
            double retrieved = 0;
            for (int64_t i = 0; i < dk; ++i) retrieved += s[i * dv + j] * kt[i];
            vt[static_cast<size_t>(j)] = bv * (vin[j] - retrieved);
          }
        }
        for (int64_t i = 0; i < dk; ++i)
          for (int64_t j = 0; j < dv; ++j) s[i * dv + j] += kt[i] * vt[static_cast<size_t>(j)];
        // Query heads h*group .. h*group+group-1 read this KV head's state.
        for (int64_t g = 0; g < group; ++g) {
          const int64_t qh = h * group + g;
          const double* qt = qd.data() + (bt * hq + qh) * dk;
          double* o = out.data() + (bt * hq + qh) * dv;
          for (int64_t j = 0; j < dv; ++j) {
            double acc = 0;
            for (int64_t i = 0; i < dk; ++i) acc += qt[i] * s[i * dv + j];
            o[j] = scale * acc;
          }
        }
      }
    }
  }
  ctx.set_output(0, from_doubles(q.dtype(), {batch, seq, hq * dv}, out, "LinearAttention"));
  if (ctx.wants_output(1))
    ctx.set_output(1, from_doubles(state_type, {batch, hkv, dk, dv}, state, "LinearAttention"));
}

// A static dim divided by n, or unknown.
Dim div_dim(const Dim& d, int64_t n) {
  if (d.is_static() && n > 0 && d.value() % n == 0) return Dim(d.value() / n);
  return Dim();
}

void infer_linear_attention(InferContext& ctx) {
  const TypeInfo* q = ctx.input_type(0);
  const TypeInfo* v = ctx.input_type(2);
  if (!q || q->kind != TypeInfo::Kind::Tensor) return;
  const int64_t hq = ctx.attr_int("q_num_heads", 0);
  const int64_t hkv = ctx.attr_int("kv_num_heads", 0);
  std::optional<Shape> out_shape, state_shape;
  if (q->shape && q->shape->rank() == 3 && v && v->shape && v->shape->rank() == 3 && hq > 0 &&
      hkv > 0) {
    const Dim dv = div_dim((*v->shape)[2], hkv);
    const Dim dk = div_dim((*q->shape)[2], hq);
    out_shape =
        Shape({(*q->shape)[0], (*q->shape)[1], dv.is_static() ? Dim(dv.value() * hq) : Dim()});
    state_shape = Shape({(*q->shape)[0], Dim(hkv), dk, dv});
  }
  ctx.set_output_type(0, TypeInfo::tensor(q->dtype, out_shape));
  if (ctx.output_count() > 1) {
    DataType st = q->dtype;
    if (ctx.has_input(3)) {
      const TypeInfo* p = ctx.input_type(3);
      if (!p || p->kind != TypeInfo::Kind::Tensor) return;
      st = p->dtype;
    }
    ctx.set_output_type(1, TypeInfo::tensor(st, state_shape));
  }
}

// ---- CausalConvWithState ----

void causal_conv_with_state(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& w = ctx.input(1);
  const std::string act = ctx.attr_string("activation", "none");
  const bool silu = act == "silu" || act == "swish";
  if (!silu && act != "none") ctx.fail("unknown activation '{}'", act);
  require_float(ctx, x.dtype(), "input");
  ctx.check(w.dtype() == x.dtype(), "weight must have the input's element type");
  ctx.check(x.rank() == 3, "input must be 3-D (B, C, L), got {}", x.describe());
  const int64_t batch = x.dim(0), chans = x.dim(1), len = x.dim(2);
  ctx.check(w.rank() == 3 && w.dim(0) == chans && w.dim(1) == 1 && w.dim(2) >= 1,
            "weight must be [{}, 1, k] with k >= 1, got {}", chans, w.describe());
  const int64_t kw = w.dim(2), ctxlen = kw - 1;
  std::vector<double> bias(static_cast<size_t>(chans), 0.0);
  if (ctx.has_input(2)) {
    const Tensor& b = ctx.input(2);
    ctx.check(b.dtype() == x.dtype(), "bias must have the input's element type");
    ctx.check(b.rank() == 1 && b.dim(0) == chans, "bias must be [{}], got {}", chans, b.describe());
    bias = to_doubles(b);
  }
  check_scratch(ctx, {batch, chans, ctxlen});
  std::vector<double> past(static_cast<size_t>(batch * chans * ctxlen), 0.0);
  if (ctx.has_input(3)) {
    const Tensor& p = ctx.input(3);
    ctx.check(p.dtype() == x.dtype(), "past_state must have the input's element type");
    ctx.check(p.dims() == std::vector<int64_t>{batch, chans, ctxlen},
              "past_state must be [{}, {}, {}], got {}", batch, chans, ctxlen, p.describe());
    past = to_doubles(p);
  }
  const std::vector<double> xd = to_doubles(x), wd = to_doubles(w);
  const int64_t plen = ctxlen + len;
  std::vector<double> out(static_cast<size_t>(batch * chans * len));
  std::vector<double> present(static_cast<size_t>(batch * chans * ctxlen));
  std::vector<double> padded(static_cast<size_t>(plen));
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t c = 0; c < chans; ++c) {
      const int64_t row = b * chans + c;
      for (int64_t i = 0; i < ctxlen; ++i)
        padded[static_cast<size_t>(i)] = past[static_cast<size_t>(row * ctxlen + i)];
      for (int64_t i = 0; i < len; ++i)
        padded[static_cast<size_t>(ctxlen + i)] = xd[static_cast<size_t>(row * len + i)];
      for (int64_t t = 0; t < len; ++t) {
        double acc = bias[static_cast<size_t>(c)];
        for (int64_t j = 0; j < kw; ++j)
          acc += wd[static_cast<size_t>(c * kw + j)] * padded[static_cast<size_t>(t + j)];
        if (silu) acc = acc / (1.0 + std::exp(-acc));
        out[static_cast<size_t>(row * len + t)] = acc;
      }
      for (int64_t i = 0; i < ctxlen; ++i)
        present[static_cast<size_t>(row * ctxlen + i)] = padded[static_cast<size_t>(len + i)];
    }
  }
  ctx.set_output(0, from_doubles(x.dtype(), x.dims(), out, "CausalConvWithState"));
  if (ctx.wants_output(1))
    ctx.set_output(1,
                   from_doubles(x.dtype(), {batch, chans, ctxlen}, present, "CausalConvWithState"));
}

void infer_causal_conv(InferContext& ctx) {
  infer_same_as_input0(ctx);
  if (ctx.output_count() < 2) return;
  const TypeInfo* x = ctx.input_type(0);
  const TypeInfo* w = ctx.input_type(1);
  if (!x || x->kind != TypeInfo::Kind::Tensor) return;
  std::optional<Shape> shape;
  if (x->shape && x->shape->rank() == 3 && w && w->shape && w->shape->rank() == 3) {
    const Dim& k = (*w->shape)[2];
    shape = Shape({(*x->shape)[0], (*x->shape)[1], k.is_static() ? Dim(k.value() - 1) : Dim()});
  }
  ctx.set_output_type(1, TypeInfo::tensor(x->dtype, shape));
}

KILN_REGISTER_OP({.op_type = "LinearAttention",
                  .kernel = linear_attention,
                  .infer = infer_linear_attention,
                  .since_opset = 27});
KILN_REGISTER_OP({.op_type = "CausalConvWithState",
                  .kernel = causal_conv_with_state,
                  .infer = infer_causal_conv,
                  .since_opset = 27});

}  // namespace
}  // namespace kiln::ops
