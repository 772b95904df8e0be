// Static INT8 QDQ patterns (what `kiln quantize` and onnxruntime's quantize_static write) into
// the int8 nodes the CPU computes with oneDNN's int8 convolution and matmul:
//
//   DequantizeLinear(x_q, per tensor) -> Conv / FusedConv / MatMul / FusedMatMul / Gemm /
//     FusedGemm (weight = DequantizeLinear(8-bit constant, per tensor or per output channel,
//     its zero points folded in when w - zero point fits int8, else kept); bias a float32
//     constant; the
//     activation fused already or none)
//     [-> QuantizeLinear(per tensor, uint8 or int8)]
//
// becomes ai.kiln FusedQLinearConv / FusedQLinearMatMul (ops/qlinear_fused.cpp) reading x_q and
// the int8 weight directly; with the QuantizeLinear it writes the quantized tensor itself, so
// consecutive int8 nodes pass uint8 between them where the graph has a Q -> DQ pair (the next
// node's DequantizeLinear reads what this one writes). Without it, the output stays float32.
// Gemm's alpha joins the weight's scale, beta * C the bias, transB is undone on the weight.
// A zero Pad of the spatial dims before the QuantizeLinear joins the convolutions' padding; a
// MaxPool or Concat before it moves after it (exact), so the convolutions before them quantize
// too.
// Anything else (per-axis activations, float16 scales, a computed bias) stays as it is: the
// reference path runs it. The pass runs before the weights' DequantizeLinear would be folded to
// float (FoldConstants keeps them for it, keep_int8_weights) and folds the ones it leaves.
#include <algorithm>
#include <cmath>

#include "ops/fused_activation.hpp"
#include "ops/int8_weights.hpp"
#include "passes/passes.hpp"
#include "passes/pattern_utils.hpp"
#include "passes/qdq_patterns.hpp"

namespace kiln::passes {
namespace {

enum class Kind { Conv, MatMul, Gemm };

// The 8-bit constant weight of `dq` (per tensor, or per channel along `axis` of its dims) as
// the symmetric int8 weight oneDNN's int8 kernels take where it can be: an int8 weight with zero
// points 0 as it is; a uint8 weight, or one with other zero points (onnxruntime's quantizer
// writes both), as the int8 constant w - zero_point when every such difference fits int8 (uint8
// weights with zero point 128, say). The dequantized values are the same either way:
// (w - z) * scale. Otherwise (uint8 weights over 0..255) the weight keeps its zero points, which
// the int8 kernels correct after a widened product (backends/cpu/qlinear_epilogue.hpp).
struct WeightQuant {
  const Tensor* q = nullptr;  // the original constant
  ir::Value* q_value = nullptr;
  ir::Value* scale = nullptr;
  std::optional<Tensor> shifted;  // w - zero point in int8, when q is not that already
  ir::Value* zero = nullptr;      // the zero points the fused node keeps (no `shifted`)
};

std::optional<WeightQuant> int8_weight(const ir::Node* dq, int64_t axis) {
  if (!dq || !plain_qdq_attributes(*dq) || dq->inputs().size() < 2) return std::nullopt;
  ir::Value* w = dq->input(0);
  if (!w || !w->is_constant()) return std::nullopt;
  const Tensor& wt = w->constant();
  if (wt.dtype() != DataType::Int8 && wt.dtype() != DataType::UInt8) return std::nullopt;
  const int64_t rank = static_cast<int64_t>(wt.rank());
  if (axis < 0 || axis >= rank) return std::nullopt;
  const int64_t channels = wt.dim(static_cast<size_t>(axis));
  if (!float_scale(dq->input(1), channels)) return std::nullopt;
  if (dq->input(1)->constant().numel() != 1) {
    int64_t dq_axis = int_attr(*dq, "axis", 1);
    if (dq_axis < 0) dq_axis += rank;
    if (dq_axis != axis) return std::nullopt;
  }
  const ir::Value* zero = dq->inputs().size() > 2 ? dq->input(2) : nullptr;
  if (!constant_zero_point(zero, wt.dtype(), dq->input(1)->constant().numel())) {
    return std::nullopt;
  }
  WeightQuant out{&wt, w, dq->input(1), std::nullopt, nullptr};
  const Tensor* z = zero ? &zero->constant() : nullptr;
  if (!ops::symmetric_int8(wt, z)) {
    out.shifted = ops::int8_minus_zero_point(wt, z, axis);
    if (!out.shifted) out.zero = dq->input(2);
  }
  return out;
}

// A float32 vector of `n` (or a row [1, n], or one value broadcast) times `factor`, as the
// fused node's bias; nullopt for anything else (a full [M, N] C).
std::optional<Tensor> bias_vector(const ir::Value* c, int64_t n, double factor) {
  if (!c) return std::nullopt;
  if (!c->is_constant() || c->constant().dtype() != DataType::Float32) return std::nullopt;
  const Tensor& t = c->constant();
  const bool row = t.numel() == n && (t.rank() == 1 || (t.rank() == 2 && t.dim(0) == 1));
  if (!row && t.numel() != 1) return std::nullopt;
  Tensor b(DataType::Float32, {n});
  for (int64_t j = 0; j < n; ++j) {
    b.data<float>()[j] = static_cast<float>(factor * t.data<float>()[row ? j : 0]);
  }
  return b;
}

// An 8-bit [r, c] constant as [c, r].
Tensor transposed(const Tensor& w) {
  const int64_t r = w.dim(0), c = w.dim(1);
  Tensor t(w.dtype(), {c, r});
  const auto* src = static_cast<const uint8_t*>(w.raw_data());
  auto* dst = static_cast<uint8_t*>(t.raw_data());
  for (int64_t i = 0; i < r; ++i) {
    for (int64_t j = 0; j < c; ++j) dst[j * r + i] = src[i * c + j];
  }
  return t;
}

// The DequantizeLinear (scale and zero point the values given) that alone reads `quantized`
// for the Add ending a residual block with a dequantized skip, itself read by that Add alone:
// onnxruntime's QDQ and QOperator files dequantize a convolution's quantized result again
// there (Q -> DQ -> Add(DQ(skip)), QLinearConv -> DQ -> Add). nullptr for anything else.
ir::Node* dequantized_for_residual_add(const Rewriter& rw, ir::Value* quantized,
                                       const ir::Value* scale, const ir::Value* zero) {
  if (!rw.single_use(quantized)) return nullptr;
  ir::Node* dq = rw.readers(quantized)[0];
  const std::optional<TensorQuant> back = per_tensor_input(dq);
  if (!back || back->q != quantized || back->scale != scale || back->zero != zero ||
      !rw.single_use(dq->output(0))) {
    return nullptr;
  }
  ir::Node* add = rw.readers(dq->output(0))[0];
  if (!is_op(add, "Add") || add->inputs().size() != 2) return nullptr;
  const ir::Value* skip = add->input(0) == dq->output(0) ? add->input(1) : add->input(0);
  return per_tensor_input(rw.producer(skip, "DequantizeLinear")) ? dq : nullptr;
}

std::optional<Kind> kind_of(const ir::Node& n) {
  if (is_op(&n, "Conv") || (is_kiln_op(&n, "FusedConv") && n.inputs().size() <= 3)) {
    return Kind::Conv;
  }
  if (is_op(&n, "MatMul") || is_kiln_op(&n, "FusedMatMul")) return Kind::MatMul;
  if (is_op(&n, "Gemm") || is_kiln_op(&n, "FusedGemm")) return Kind::Gemm;
  return std::nullopt;
}

// Pad(x, zeros on the spatial dims) -> QuantizeLinear -> DequantizeLinear -> convolutions (the
// "same" padding TensorFlow-style exports write before a strided depthwise convolution): the
// QuantizeLinear reads x and the convolutions pad themselves. Exact: a padded 0 quantizes to
// the zero point, which dequantizes to 0, what a convolution's own padding reads (the int8
// kernels pad with the zero point).
bool fold_pad(Rewriter& rw, ir::Node& pad) {
  ir::Value* padded = pad.output(0);
  const std::optional<std::vector<int64_t>> pads = zero_spatial_pads(pad);
  if (!pads || !rw.single_use(padded)) return false;
  const size_t r = pads->size() / 2;
  ir::Node* q = rw.readers(padded)[0];
  if (!is_op(q, "QuantizeLinear") || !plain_qdq_attributes(*q) || q->outputs().size() != 1 ||
      !float_scale(q->input(1), 1) || q->input(1)->constant().numel() != 1 ||
      rw.touched(q->output(0)) || rw.graph().is_output(q->output(0))) {
    return false;
  }
  // Every reader of the quantized tensor a per-tensor DequantizeLinear read only by
  // convolutions of explicit padding.
  std::vector<ir::Node*> dqs, convs;
  for (ir::Node* dq : rw.readers(q->output(0))) {
    if (!is_op(dq, "DequantizeLinear") || !per_tensor_input(dq) || dq->input(0) != q->output(0) ||
        rw.touched(dq->output(0)) || rw.graph().is_output(dq->output(0)) ||
        rw.readers(dq->output(0)).empty()) {
      return false;
    }
    for (ir::Node* c : rw.readers(dq->output(0))) {
      if (!kind_of(*c) || *kind_of(*c) != Kind::Conv || c->input(0) != dq->output(0) ||
          c->input(1) == dq->output(0) || !has_explicit_pads(*c, r - 2)) {
        return false;
      }
      convs.push_back(c);
    }
    dqs.push_back(dq);
  }
  for (ir::Node* c : convs) {
    add_spatial_pads(*c, *pads);
    rw.touch(*c);
  }
  const Shape unpadded = *pad.input(0)->type().shape;
  q->set_input(0, pad.input(0));
  q->output(0)->set_type(TypeInfo::tensor(q->output(0)->type().dtype, unpadded));
  rw.touch(*q);
  for (ir::Node* dq : dqs) {
    dq->output(0)->set_type(TypeInfo::tensor(dq->output(0)->type().dtype, unpadded));
    rw.touch(*dq);
  }
  rw.remove(&pad);
  return true;
}

// op(x1, ..., xn) -> QuantizeLinear becomes op(QuantizeLinear(x1), ..., QuantizeLinear(xn)),
// each with the QuantizeLinear's scale, zero point and attributes, for an op that quantizing
// commutes with (below). The convolutions before it then write the quantized tensor themselves
// and the op moves a quarter of the bytes. False when the op's output has no such reader or an
// input is not a float32 tensor of known rank.
bool move_quantize_before(Rewriter& rw, ir::Node& op) {
  for (const ir::Value* x : op.inputs()) {
    if (!x || !x->type().is_tensor() || x->type().dtype != DataType::Float32 || !x->type().shape) {
      return false;
    }
  }
  ir::Node* q = requantizing_reader(rw, op.output(0));
  if (!q || q->input(0) != op.output(0) || rw.touched(q->output(0))) return false;
  ir::Value* quantized = q->output(0);
  std::vector<ir::Value*> parts;
  for (ir::Value* x : op.inputs()) {
    std::vector<ir::Value*> q_inputs(q->inputs().begin(), q->inputs().end());
    q_inputs[0] = x;
    ir::Value* xq = rw.new_value(x->name() + "_quantized",
                                 TypeInfo::tensor(quantized->type().dtype, *x->type().shape));
    ir::Node* new_q =
        rw.insert_node(&op, "QuantizeLinear", "", std::move(q_inputs), {xq}, q->opset());
    for (const auto& [name, a] : q->attributes()) new_q->set_attribute(name, a);
    parts.push_back(xq);
  }
  ir::Value* moved = rw.new_value(quantized->name() + "_" + op.op_type(), quantized->type());
  ir::Node* new_op = rw.insert_node(q, op.op_type(), "", std::move(parts), {moved}, op.opset());
  for (const auto& [name, a] : op.attributes()) new_op->set_attribute(name, a);
  rw.replace(quantized, moved, {q, &op});
  return true;
}

// MaxPool: exact, since quantizing (scaling by a positive factor, rounding, shifting,
// saturating) never reverses an order, so the maximum of the quantized values is the quantized
// maximum (a static INT8 network's stem; MaxPool takes 8-bit inputs from opset 12).
bool quantize_before_max_pool(Rewriter& rw, ir::Node& pool) {
  return is_op(&pool, "MaxPool") && pool.opset() >= 12 && pool.inputs().size() == 1 &&
         pool.outputs().size() == 1 && pool.output(0) && move_quantize_before(rw, pool);
}

// Concat: exact, since quantizing works element by element and Concat only moves elements (an
// Inception or DenseNet block's branches).
bool quantize_before_concat(Rewriter& rw, ir::Node& concat) {
  return is_op(&concat, "Concat") && concat.outputs().size() == 1 && concat.output(0) &&
         !concat.inputs().empty() && move_quantize_before(rw, concat);
}

bool fuse(Rewriter& rw, ir::Node& n) {
  const std::optional<Kind> kind = kind_of(n);
  if (!kind || n.outputs().size() != 1 || n.inputs().size() < 2) return false;
  ir::Value* y = n.output(0);
  if (!y || y->type().dtype != DataType::Float32) return false;
  const std::optional<TensorQuant> x =
      per_tensor_input(rw.producer(n.input(0), "DequantizeLinear"));
  if (!x) return false;
  const ir::Node* dqw = rw.producer(n.input(1), "DequantizeLinear");
  const ir::Value* wv = dqw ? dqw->input(0) : nullptr;
  if (!wv || !wv->is_constant()) return false;
  const int64_t w_rank = static_cast<int64_t>(wv->constant().rank());
  const bool trans_b = *kind == Kind::Gemm && int_attr(n, "transB", 0) != 0;
  // The weight's output-channel axis.
  int64_t axis = 0;
  if (*kind == Kind::MatMul) axis = 1;
  if (*kind == Kind::Gemm) axis = trans_b ? 0 : 1;
  if (*kind != Kind::Conv && (w_rank != 2 || rank_of(n.input(0)).value_or(0) < 2)) return false;
  std::optional<WeightQuant> w = int8_weight(dqw, axis);
  if (!w) return false;
  const int64_t m = w->q->dim(static_cast<size_t>(axis));

  // The bias in real units, and for Gemm the weight's scale times alpha.
  ir::Value* bias = n.inputs().size() > 2 ? n.input(2) : nullptr;
  ir::Value* w_scale = w->scale;
  ir::Value* w_q = w->q_value;
  if (*kind == Kind::Gemm) {
    const float alpha = float_attr(n, "alpha", 1.f), beta = float_attr(n, "beta", 1.f);
    if (int_attr(n, "transA", 0) != 0 || !(alpha > 0) || !std::isfinite(alpha)) return false;
    if (bias && beta != 0.f) {
      std::optional<Tensor> b = bias_vector(bias, m, beta);
      if (!b) return false;
      bias = rw.new_constant(y->name() + "_bias", std::move(*b));
    } else {
      bias = nullptr;
    }
    if (alpha != 1.f) {
      Tensor s = w->scale->constant();
      for (int64_t i = 0; i < s.numel(); ++i) s.data<float>()[i] *= alpha;
      w_scale = rw.new_constant(w->scale->name() + "_alpha", std::move(s));
    }
    if (trans_b) {
      w_q = rw.new_constant(w_q->name() + "_kn", transposed(w->shifted ? *w->shifted : *w->q));
      w->shifted.reset();
    }
  } else if (bias) {
    // Conv's B and FusedMatMul's bias: a float32 constant of M.
    if (!bias->is_constant() || bias->constant().dtype() != DataType::Float32 ||
        bias->constant().rank() != 1 || bias->constant().numel() != m) {
      return false;
    }
  }

  // A weight with zero points in its symmetric int8 form (int8_weight).
  if (w->shifted) w_q = rw.new_constant(w_q->name() + "_int8", std::move(*w->shifted));
  ir::Node* q = requantizing_reader(rw, y);
  // The residual block's round trip goes: the node writes float32, and fuse_conv_residual joins
  // the Add (and the block's QuantizeLinear) to it. Not exact: the sum reads the product
  // unrounded, one rounding fewer than the file asks (as OpenVINO's low-precision
  // transformations do); the difference stays within a step of the dropped quantization.
  ir::Node* round_trip =
      *kind == Kind::Conv && q
          ? dequantized_for_residual_add(rw, q->output(0), q->input(1),
                                         q->inputs().size() > 2 ? q->input(2) : nullptr)
          : nullptr;
  std::vector<ir::Node*> dead = {&n};
  if (round_trip) {
    dead.insert(dead.begin(), {round_trip, q});
    q = nullptr;
  } else if (q) {
    dead.insert(dead.begin(), q);
  }
  std::vector<ir::Value*> inputs = {x->q,
                                    x->scale,
                                    x->zero,
                                    w_q,
                                    w_scale,
                                    w->zero,
                                    q ? q->input(1) : nullptr,
                                    q && q->inputs().size() > 2 ? q->input(2) : nullptr,
                                    bias};
  while (!inputs.empty() && !inputs.back()) inputs.pop_back();
  ir::Value* result = round_trip ? round_trip->output(0) : (q ? q->output(0) : y);
  const int opset = import_kiln_domain(rw.graph());
  ir::Value* out = rw.new_value(result->name() + "_int8", result->type());
  ir::Node* fused =
      rw.insert_node(&n, *kind == Kind::Conv ? "FusedQLinearConv" : "FusedQLinearMatMul",
                     ops::kKilnDomain, std::move(inputs), {out}, opset);
  for (const auto& [name, a] : n.attributes()) {
    // Gemm's attributes are in the operands now.
    if (*kind == Kind::Gemm && name != "activation" && name != "activation_params") continue;
    fused->set_attribute(name, a);
  }
  rw.replace(result, out, dead);
  return true;
}

// QuantizeLinear(DequantizeLinear(q)) with the same scale and zero point is q itself (q is on the
// grid: (q - z) * s / s rounds back to q - z): onnxruntime's files have such a pair where a
// MaxPool keeps its input's parameters and its QuantizeLinear moved before it.
bool requantize_round_trip(Rewriter& rw, ir::Node& n) {
  if (!is_op(&n, "QuantizeLinear") || !plain_qdq_attributes(n) || n.inputs().size() < 2 ||
      n.outputs().size() != 1 || !n.output(0)) {
    return false;
  }
  const std::optional<TensorQuant> dq =
      per_tensor_input(rw.producer(n.input(0), "DequantizeLinear"));
  if (!dq || dq->q->type().dtype != n.output(0)->type().dtype || !float_scale(n.input(1), 1) ||
      n.input(1)->constant().numel() != 1 ||
      n.input(1)->constant().data<float>()[0] != dq->scale->constant().data<float>()[0]) {
    return false;
  }
  const ir::Value* zero = n.inputs().size() > 2 ? n.input(2) : nullptr;
  const int64_t z = zero && zero->is_constant() ? zero->constant().int_at(0) : 0;
  const int64_t dq_z = dq->zero ? dq->zero->constant().int_at(0) : 0;
  if ((zero && !zero->is_constant()) || z != dq_z) return false;
  rw.replace(n.output(0), dq->q, {&n});
  return true;
}

// ONNX QLinearConv (onnxruntime's QOperator format) whose result is only dequantized again for
// a residual Add with a dequantized skip: a FusedQLinearConv with a float32 result (QLinearConv's
// slots, y_scale and y_zero_point left out, its int32 bias as it is), which fuse_conv_residual
// then joins to the Add; the same rounding dropped as in fuse's round trip.
bool qlinear_conv_before_residual(Rewriter& rw, ir::Node& n) {
  if (!is_op(&n, "QLinearConv") || n.inputs().size() < 8 || n.outputs().size() != 1 ||
      !n.output(0)) {
    return false;
  }
  ir::Node* dq = dequantized_for_residual_add(rw, n.output(0), n.input(6), n.input(7));
  if (!dq) return false;
  std::vector<ir::Value*> inputs(n.inputs().begin(), n.inputs().begin() + 6);
  inputs.insert(inputs.end(), {nullptr, nullptr});
  if (n.inputs().size() > 8 && n.input(8)) inputs.push_back(n.input(8));
  while (!inputs.empty() && !inputs.back()) inputs.pop_back();
  ir::Value* result = dq->output(0);
  ir::Value* out = rw.new_value(result->name() + "_int8", result->type());
  ir::Node* fused = rw.insert_node(&n, "FusedQLinearConv", ops::kKilnDomain, std::move(inputs),
                                   {out}, import_kiln_domain(rw.graph()));
  for (const auto& [name, a] : n.attributes()) fused->set_attribute(name, a);
  rw.replace(result, out, {dq, &n});
  return true;
}

}  // namespace

bool FuseQuantizedOps::apply(ir::Graph& root) const {
  // The Pads, MaxPools and Concats first, so that the convolutions before them see their
  // QuantizeLinear.
  const bool pads = rewrite_graph(root, [](Rewriter& rw, ir::Node& n) {
    return (is_op(&n, "Pad") && n.outputs().size() == 1 && fold_pad(rw, n)) ||
           quantize_before_max_pool(rw, n) || quantize_before_concat(rw, n);
  });
  const bool fused = rewrite_graph(root, [](Rewriter& rw, ir::Node& n) {
    return requantize_round_trip(rw, n) || fuse(rw, n) || qlinear_conv_before_residual(rw, n);
  });
  // The weights' DequantizeLinear nodes whose readers did not fuse: folded to float32 now, as
  // FoldConstants would have done without keep_int8_weights.
  const bool folded = FoldConstants{}.apply(root);
  return pads || fused || folded;
}

}  // namespace kiln::passes
