#pragma once
// The channels-last operands of a kernel that reads and writes NHWC only (Kiln's own
// convolutions): an input, a residual or an output that the plan left row-major (a graph's
// edge) goes through scratch of the kernel's own, transposed on the kernel's stream.
#include <cstddef>
#include <vector>

#include "backends/backend.hpp"
#include "backends/gpu/runtime/gpu_backend_impl.hpp"
#include "backends/gpu/vendor.hpp"

namespace kiln::backends::gpu {

class ChannelsLastIo {
 public:
  ChannelsLastIo(GpuBackendImpl& backend, const char* kernel, DataType dtype)
      : backend_(backend), kernel_(kernel), dtype_(dtype) {}

  // `x` itself when channels-last, else its channels-last copy in the input scratch.
  const void* input(const DeviceTensor& x, hipStream_t s) { return channels_last(x, x_, s); }
  // `x` [N, C, H, W] (either layout) copied channels-last into the input scratch with its
  // channels padded with zeros to `padded` (a multiple of 16 bytes for the 16-byte staging).
  const void* input_padded(const DeviceTensor& x, int64_t padded, hipStream_t s);
  // The same for a residual (its own scratch).
  const void* residual(const DeviceTensor& z, hipStream_t s) { return channels_last(z, z_, s); }
  // Where the kernel writes `y` channels-last: y itself, or the output scratch, which
  // finish_output then transposes into y.
  void* output(const DeviceTensor& y);
  void finish_output(const DeviceTensor& y, hipStream_t s);

 private:
  const void* channels_last(const DeviceTensor& t, DeviceBuffer& scratch, hipStream_t s);
  void reserve(DeviceBuffer& buf, size_t bytes);
  // dst (row-major over `dims`) = src read through `src_strides`.
  void transpose(const void* src, void* dst, const std::vector<int64_t>& dims,
                 const std::vector<int64_t>& src_strides, hipStream_t s);

  GpuBackendImpl& backend_;
  const char* kernel_;
  DataType dtype_;
  DeviceBuffer x_, z_, y_;
};

}  // namespace kiln::backends::gpu
