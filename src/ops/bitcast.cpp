// BitCast (opset 26): reinterpret the little-endian bytes of each element as another type of the
// same width. Kiln stores elements in host order, which is little endian on every target we build.
#include <cstring>

#include "ops/op_utils.hpp"
#include "ops/registry.hpp"

namespace kiln::ops {
namespace {

// Sub-byte types are packed two or four to a byte, so a per-element reinterpretation needs their
// packing rules; they are refused until Kiln computes with them.
bool is_sub_byte(DataType t) {
  return t == DataType::UInt4 || t == DataType::Int4 || t == DataType::Float4E2M1 ||
         t == DataType::UInt2 || t == DataType::Int2;
}

DataType target_type(const AttrReader& ctx) {
  const int64_t to = ctx.attr_int("to");
  const DataType out = dtype_from_onnx(static_cast<int32_t>(to), "BitCast 'to'");
  if (out == DataType::String) ctx.fail("cannot BitCast to string");
  return out;
}

void bitcast(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const DataType out_type = target_type(ctx);
  if (x.dtype() == DataType::String) ctx.fail("cannot BitCast a string tensor");
  if (is_sub_byte(x.dtype()) || is_sub_byte(out_type))
    ctx.unsupported("BitCast of sub-byte types ({} to {}) is not supported", dtype_name(x.dtype()),
                    dtype_name(out_type));
  dtype_require_supported(x.dtype(), "BitCast input");
  dtype_require_supported(out_type, "BitCast output");
  const size_t width = dtype_size(x.dtype());
  ctx.check(width != 0 && width == dtype_size(out_type),
            "BitCast needs types of one width: {} is {} bytes, {} is {}", dtype_name(x.dtype()),
            width, dtype_name(out_type), dtype_size(out_type));
  Tensor out(out_type, x.dims());
  if (out_type == DataType::Bool && x.dtype() != DataType::Bool) {
    // A C++ bool may only hold 0 or 1; other byte patterns have no bool value.
    const auto* src = static_cast<const uint8_t*>(x.raw_data());
    bool* dst = out.data<bool>();
    for (int64_t i = 0; i < x.numel(); ++i) {
      if (src[i] > 1)
        ctx.unsupported("byte {} at element {} is not a valid bool (0 or 1)", src[i], i);
      dst[i] = src[i] != 0;
    }
  } else if (x.nbytes() > 0) {
    std::memcpy(out.raw_data(), x.raw_data(), x.nbytes());
  }
  ctx.set_output(0, std::move(out));
}

void infer_bitcast(InferContext& ctx) {
  const TypeInfo* x = ctx.input_type(0);
  if (!x || x->kind != TypeInfo::Kind::Tensor) return;
  ctx.set_output_type(0, TypeInfo::tensor(target_type(ctx), x->shape));
}

KILN_REGISTER_OP(
    {.op_type = "BitCast", .kernel = bitcast, .infer = infer_bitcast, .since_opset = 26});

}  // namespace
}  // namespace kiln::ops
