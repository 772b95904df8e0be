#include "ops/int8_weights.hpp"

namespace kiln::ops {
namespace {

// Calls emit(i, w[i] - zero) for every element while the differences stay in int8; false at the
// first one outside (or when the types or the zero point's count do not fit).
template <typename Emit>
bool each_difference(const Tensor& w, const Tensor* zero, int64_t axis, Emit&& emit) {
  const bool eight_bit = w.dtype() == DataType::UInt8 || w.dtype() == DataType::Int8;
  if (!eight_bit || axis < 0 || static_cast<size_t>(axis) >= w.rank()) return false;
  const int64_t channels = w.dim(static_cast<size_t>(axis));
  if (zero && (zero->dtype() != w.dtype() || zero->rank() > 1 ||
               (zero->numel() != 1 && zero->numel() != channels))) {
    return false;
  }
  int64_t inner = 1;
  for (size_t d = static_cast<size_t>(axis) + 1; d < w.rank(); ++d) inner *= w.dim(d);
  for (int64_t i = 0; i < w.numel(); ++i) {
    const int64_t z = !zero ? 0 : zero->int_at(zero->numel() == 1 ? 0 : (i / inner) % channels);
    const int64_t v = w.int_at(i) - z;
    if (v < -128 || v > 127) return false;
    emit(i, static_cast<int8_t>(v));
  }
  return true;
}

}  // namespace

std::optional<Tensor> int8_minus_zero_point(const Tensor& w, const Tensor* zero, int64_t axis) {
  Tensor out(DataType::Int8, w.dims());
  int8_t* p = out.data<int8_t>();
  if (!each_difference(w, zero, axis, [p](int64_t i, int8_t v) { p[i] = v; })) return std::nullopt;
  return out;
}

bool symmetric_int8(const Tensor& w, const Tensor* zero) {
  if (w.dtype() != DataType::Int8) return false;
  if (!zero) return true;
  for (int64_t i = 0; i < zero->numel(); ++i) {
    if (zero->int_at(i) != 0) return false;
  }
  return true;
}

}  // namespace kiln::ops
