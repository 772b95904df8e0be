#include "passes/qdq_patterns.hpp"

#include <cmath>

namespace kiln::passes {

bool is_8bit(DataType t) {
  return t == DataType::UInt8 || t == DataType::Int8;
}

bool float_scale(const ir::Value* v, int64_t channels) {
  if (!v || !v->is_constant() || v->constant().dtype() != DataType::Float32) return false;
  const Tensor& t = v->constant();
  if (t.rank() > 1 || (t.numel() != 1 && t.numel() != channels)) return false;
  for (int64_t i = 0; i < t.numel(); ++i) {
    const float s = t.data<float>()[i];
    if (!(s > 0) || !std::isfinite(s)) return false;
  }
  return true;
}

bool plain_qdq_attributes(const ir::Node& n) {
  for (const auto& [name, a] : n.attributes()) {
    if (name == "axis" || name == "saturate") continue;
    if (name == "block_size" && int_attr(n, "block_size", 0) == 0) continue;
    return false;
  }
  return true;
}

bool constant_zero_point(const ir::Value* z, DataType type, int64_t count) {
  return !z || (z->is_constant() && z->constant().dtype() == type && z->constant().rank() <= 1 &&
                z->constant().numel() == count);
}

std::optional<TensorQuant> per_tensor_input(const ir::Node* dq) {
  if (!dq || !plain_qdq_attributes(*dq) || dq->inputs().size() < 2) return std::nullopt;
  ir::Value* q = dq->input(0);
  ir::Value* zero = dq->inputs().size() > 2 ? dq->input(2) : nullptr;
  if (!q || !q->type().is_tensor() || !is_8bit(q->type().dtype)) return std::nullopt;
  if (!float_scale(dq->input(1), 1) || dq->input(1)->constant().numel() != 1) return std::nullopt;
  if (!constant_zero_point(zero, q->type().dtype, 1)) return std::nullopt;
  return TensorQuant{q, dq->input(1), zero};
}

ir::Node* requantizing_reader(const Rewriter& rw, ir::Value* y) {
  if (!rw.single_use(y)) return nullptr;
  ir::Node* q = rw.readers(y)[0];
  if (!is_op(q, "QuantizeLinear") || !plain_qdq_attributes(*q) || q->inputs().size() < 2 ||
      q->outputs().size() != 1 || !q->output(0)) {
    return nullptr;
  }
  if (!float_scale(q->input(1), 1) || q->input(1)->constant().numel() != 1) return nullptr;
  const ir::Value* zero = q->inputs().size() > 2 ? q->input(2) : nullptr;
  const DataType yt = zero ? zero->type().dtype : DataType::UInt8;
  if (!is_8bit(yt) || !constant_zero_point(zero, yt, 1)) return nullptr;
  if (q->output(0)->type().dtype != yt) return nullptr;
  return q;
}

}  // namespace kiln::passes
