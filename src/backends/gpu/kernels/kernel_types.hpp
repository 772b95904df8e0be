#pragma once
// Plain types shared by the kernel launchers (kernels/*.hpp) and their device code: the float
// element types and the shape of a strided walk. No device code, no Kiln headers: the runtime
// side (g++ on NVIDIA) and nvcc/hipcc both include it.
#include <cstdint>

namespace kiln::backends::gpu::kernels {

// The float element types kernels compute on (fp16 and bf16 in fp32, rounded once).
enum class FloatType { F32, F16, BF16 };

// Most dims a strided walk (broadcast, transpose, slice, concat, expand) takes: ONNX models
// stay far below it, and a fixed size lets the shape travel by value as a kernel argument.
inline constexpr int kMaxDims = 8;
inline constexpr int kMaxOperands = 4;

// A row-major walk over `dims` (rank 0 is one element) with, for each of up to four operands,
// the element stride of each dim (0 where the operand is broadcast along it). What each
// operand is (inputs of a broadcast op; source and destination of a copy) is the launcher's.
struct StridedShape {
  int rank = 0;
  int64_t dims[kMaxDims] = {};
  int64_t strides[kMaxOperands][kMaxDims] = {};
};

}  // namespace kiln::backends::gpu::kernels
