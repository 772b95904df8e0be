#pragma once
// Helpers for data-movement kernels (Transpose, Slice, Pad, Gather, ...). These ops never look at
// element values, so copies go by element width and work for every dtype including string and
// bool with only a handful of template instantiations.
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "ops/kernel_context.hpp"
#include "ops/op_utils.hpp"

namespace kiln::ops {

namespace detail {
// Calls fn(TypeTag<W>) with W a type of the element's width (std::string for strings).
template <typename Fn>
decltype(auto) dispatch_width(DataType dtype, Fn&& fn) {
  if (dtype == DataType::String) return fn(TypeTag<std::string>{});
  switch (dtype_size(dtype)) {
    case 1:
      return fn(TypeTag<uint8_t>{});
    case 2:
      return fn(TypeTag<uint16_t>{});
    case 4:
      return fn(TypeTag<uint32_t>{});
    case 8:
      return fn(TypeTag<uint64_t>{});
    default:
      break;
  }
  fail(ErrorCode::Unsupported, "element type {} is not supported by data-movement ops",
       dtype_name(dtype));
}

// Advances a row-major multi-index over `dims`.
inline void next_index(std::vector<int64_t>& index, const std::vector<int64_t>& dims) {
  for (size_t ax = dims.size(); ax-- > 0;) {
    if (++index[ax] < dims[ax]) return;
    index[ax] = 0;
  }
}
}  // namespace detail

// Builds a tensor of `out_dims` where element at multi-index `idx` is src[map(idx)] (a flat
// index into src), or the `fill` scalar (zero / "" / false when null) when map returns -1.
// `map` must return an index in [-1, src.numel()); the caller validates its inputs first.
template <typename MapFn>
Tensor remap(const Tensor& src, std::vector<int64_t> out_dims, MapFn&& map,
             const Tensor* fill = nullptr) {
  Tensor out(src.dtype(), std::move(out_dims));
  const int64_t n = out.numel();
  if (n == 0) return out;
  detail::dispatch_width(src.dtype(), [&](auto tag) {
    using W = typename decltype(tag)::type;
    const W* ps = static_cast<const W*>(src.raw_data());
    W* po = static_cast<W*>(out.raw_data());
    W fill_value{};
    if (fill && fill->numel() > 0) fill_value = static_cast<const W*>(fill->raw_data())[0];
    std::vector<int64_t> index(out.rank(), 0);
    for (int64_t i = 0; i < n; ++i) {
      int64_t s = map(static_cast<const std::vector<int64_t>&>(index));
      po[i] = s < 0 ? fill_value : ps[s];
      detail::next_index(index, out.dims());
    }
  });
  return out;
}

// For every element of src at multi-index `idx`, writes it to dst[map(idx)] (flat), skipping -1.
template <typename MapFn>
void scatter_into(Tensor& dst, const Tensor& src, MapFn&& map) {
  const int64_t n = src.numel();
  if (n == 0) return;
  detail::dispatch_width(src.dtype(), [&](auto tag) {
    using W = typename decltype(tag)::type;
    const W* ps = static_cast<const W*>(src.raw_data());
    W* pd = static_cast<W*>(dst.raw_data());
    std::vector<int64_t> index(src.rank(), 0);
    for (int64_t i = 0; i < n; ++i) {
      int64_t d = map(static_cast<const std::vector<int64_t>&>(index));
      if (d >= 0) pd[d] = ps[i];
      detail::next_index(index, src.dims());
    }
  });
}

// Flat offset of a multi-index under row-major strides.
inline int64_t flat_offset(const std::vector<int64_t>& index, const std::vector<int64_t>& strides) {
  int64_t off = 0;
  for (size_t i = 0; i < index.size(); ++i) off += index[i] * strides[i];
  return off;
}

// Dim arithmetic that reports int64 overflow as nullopt (dims come from untrusted models).
inline std::optional<int64_t> mul_dims(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}
inline std::optional<int64_t> add_dims(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}

// Element count with overflow / negative checks that name the node.
int64_t checked_numel(const AttrReader& ctx, const std::vector<int64_t>& dims);

// Reads an index-like tensor (int32/int64) as int64 values; fails naming `what` otherwise.
std::vector<int64_t> index_values(const AttrReader& ctx, const Tensor& t, const char* what);

// Axes from a list, normalized into [0, rank) and checked for duplicates.
std::vector<int64_t> normalize_axes(const AttrReader& ctx, const std::vector<int64_t>& axes,
                                    int64_t rank);

// Shape inference must not reject a valid model: a branch of an If that is never taken may hold
// nodes whose shapes contradict each other (AffineGrid's function body splits a 4- or 5-element
// size in both branches). Shape errors found by inference therefore leave the outputs untyped
// and the kernel reports the problem if the node ever runs.
template <void (*Fn)(InferContext&)>
void lenient(InferContext& ctx) {
  try {
    Fn(ctx);
  } catch (const Error& e) {
    if (e.code() != ErrorCode::InvalidArgument) throw;
    for (size_t i = 0; i < ctx.output_count(); ++i) ctx.set_output_type(i, TypeInfo());
  }
}

// Shape-inference helpers.
// The tensor type of input i, or nullptr when unknown / not a tensor.
const TypeInfo* tensor_input(const InferContext& ctx, size_t i);
// Values of a constant int input (initializer), nullopt when not constant.
std::optional<std::vector<int64_t>> constant_ints(const InferContext& ctx, size_t i);
// Length of a 1-D input whose shape is known statically, nullopt otherwise.
std::optional<int64_t> static_length(const InferContext& ctx, size_t i);
// A shape of `rank` unknown dims.
Shape unknown_dims(size_t rank);

}  // namespace kiln::ops
