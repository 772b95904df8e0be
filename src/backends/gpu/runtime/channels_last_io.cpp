#include "backends/gpu/runtime/channels_last_io.hpp"

#include "backends/gpu/runtime/gpu_check.hpp"
#include "backends/gpu/runtime/strided_copy.hpp"
#include "backends/gpu/runtime/strided_shape.hpp"

namespace kiln::backends::gpu {

void* ChannelsLastIo::output(const DeviceTensor& y) {
  if (y.layout.kind == Layout::Kind::ChannelsLast) return y.data;
  reserve(y_, static_cast<size_t>(y.numel()) * dtype_size(dtype_));
  return y_.data();
}

void ChannelsLastIo::finish_output(const DeviceTensor& y, hipStream_t s) {
  if (y.layout.kind == Layout::Kind::ChannelsLast) return;
  // Channels-last scratch [N, H, W, C] to the row-major output [N, C, H, W].
  const int64_t n = y.dims[0], c = y.dims[1], h = y.dims[2], w = y.dims[3];
  transpose(y_.data(), y.data, {n, c, h, w}, {h * w * c, 1, w * c, c}, s);
}

const void* ChannelsLastIo::input_padded(const DeviceTensor& x, int64_t padded, hipStream_t s) {
  const int64_t n = x.dims[0], c = x.dims[1], h = x.dims[2], w = x.dims[3];
  KILN_CHECK(
      padded >= c && (x.layout.is_row_major() || x.layout.kind == Layout::Kind::ChannelsLast),
      ErrorCode::Internal, "{}: a {} operand padded to {} channels", kernel_, x.layout.to_string(),
      padded);
  const size_t bytes = static_cast<size_t>(n * h * w * padded) * dtype_size(dtype_);
  reserve(x_, bytes);
  // The padding channels are zeroed every run (a run may be replayed from a graph, and the
  // scratch is the kernel's own: a memset node is all it costs).
  KILN_GPU_CHECK(hipMemsetAsync(x_.data(), 0, bytes, s));
  const std::vector<int64_t> dims = {n, h, w, c};
  const std::vector<int64_t> src_strides = x.layout.kind == Layout::Kind::ChannelsLast
                                               ? std::vector<int64_t>{h * w * c, w * c, c, 1}
                                               : std::vector<int64_t>{c * h * w, w, 1, h * w};
  strided_copy(kernel_, dtype_, x.data, x.numel(), x_.data(), n * h * w * padded, dims, src_strides,
               {h * w * padded, w * padded, padded, 1}, s);
  return x_.data();
}

const void* ChannelsLastIo::channels_last(const DeviceTensor& t, DeviceBuffer& scratch,
                                          hipStream_t s) {
  if (t.layout.kind == Layout::Kind::ChannelsLast) return t.data;
  KILN_CHECK(t.layout.is_row_major(), ErrorCode::Internal, "{}: a {} operand", kernel_,
             t.layout.to_string());
  const int64_t n = t.dims[0], c = t.dims[1], h = t.dims[2], w = t.dims[3];
  reserve(scratch, static_cast<size_t>(t.numel()) * dtype_size(dtype_));
  // Row-major [N, C, H, W] walked as [N, H, W, C].
  transpose(t.data, scratch.data(), {n, h, w, c}, {c * h * w, w, 1, h * w}, s);
  return scratch.data();
}

void ChannelsLastIo::reserve(DeviceBuffer& buf, size_t bytes) {
  if (!buf || buf.size() < bytes) buf = backend_.allocate(bytes);
}

void ChannelsLastIo::transpose(const void* src, void* dst, const std::vector<int64_t>& dims,
                               const std::vector<int64_t>& src_strides, hipStream_t s) {
  const int64_t count = shape_numel(dims);
  strided_copy(kernel_, dtype_, src, count, dst, count, dims, src_strides, row_major_strides(dims),
               s);
}

}  // namespace kiln::backends::gpu
