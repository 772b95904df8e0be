#pragma once
// The pieces of QuantizeLinear / DequantizeLinear patterns that the int8 fusions match
// (passes/fuse_quantized_ops, the 8-bit residual of passes/fuse_conv_residual): constant
// per-tensor parameters, the plain form of the two ops.
#include <optional>

#include "passes/pattern_utils.hpp"

namespace kiln::passes {

bool is_8bit(DataType t);

// A float32 constant of one element, or of `channels` elements (per channel), each positive and
// finite.
bool float_scale(const ir::Value* v, int64_t channels);

// Attributes of a QuantizeLinear / DequantizeLinear these fusions understand: per tensor or per
// axis (no blocks), no other output type, the default precision.
bool plain_qdq_attributes(const ir::Node& n);

// Absent (0), or a constant of `type` with `count` elements.
bool constant_zero_point(const ir::Value* z, DataType type, int64_t count);

// The quantized input of a per-tensor DequantizeLinear `dq` (uint8 or int8, constant scale
// and zero point) with its scale and zero point; nullopt when `dq` is something else.
struct TensorQuant {
  ir::Value* q = nullptr;
  ir::Value* scale = nullptr;
  ir::Value* zero = nullptr;  // may be null (0)
};
std::optional<TensorQuant> per_tensor_input(const ir::Node* dq);

// The QuantizeLinear that alone reads `y`, per tensor to uint8 or int8 with constant parameters.
ir::Node* requantizing_reader(const Rewriter& rw, ir::Value* y);

}  // namespace kiln::passes
