#pragma once
// Small helpers shared by reference kernels: axis normalization, numpy broadcasting, strides,
// and element-wise loops over broadcast inputs.
#include <array>
#include <cmath>
#include <cstdint>
#include <vector>

#include "ops/kernel_context.hpp"

namespace kiln::ops {

// Maps a possibly negative axis into [0, rank); InvalidArgument naming the node otherwise.
int64_t normalize_axis(const AttrReader& ctx, int64_t axis, int64_t rank);
// Row-major element strides of `dims`.
std::vector<int64_t> row_major_strides(const std::vector<int64_t>& dims);
// Numpy broadcast of any number of shapes; InvalidArgument naming the node when incompatible.
std::vector<int64_t> broadcast_dims(const AttrReader& ctx,
                                    const std::vector<std::vector<int64_t>>& shapes);
// Strides of `in_dims` viewed as `out_dims` under broadcasting (0 on broadcast axes).
std::vector<int64_t> broadcast_strides(const std::vector<int64_t>& in_dims,
                                       const std::vector<int64_t>& out_dims);

// Calls fn(out_index, offsets) for every element of `out_dims`, where offsets[k] is the
// element offset into input k (given by its broadcast strides).
template <size_t N, typename Fn>
void for_each_broadcast(const std::vector<int64_t>& out_dims,
                        const std::array<std::vector<int64_t>, N>& strides, Fn&& fn) {
  const size_t rank = out_dims.size();
  int64_t total = 1;
  for (int64_t d : out_dims) total *= d;
  if (total == 0) return;
  std::vector<int64_t> index(rank, 0);
  std::array<int64_t, N> offsets{};
  for (int64_t i = 0; i < total; ++i) {
    fn(i, offsets);
    for (size_t ax = rank; ax-- > 0;) {
      if (++index[ax] < out_dims[ax]) {
        for (size_t k = 0; k < N; ++k) offsets[k] += strides[k][ax];
        break;
      }
      for (size_t k = 0; k < N; ++k) offsets[k] -= strides[k][ax] * (out_dims[ax] - 1);
      index[ax] = 0;
    }
  }
}

// out[i] = fn(a[i'], b[i'']) under numpy broadcasting; Out is the C++ output element type.
template <typename Out, typename A, typename B, typename Fn>
Tensor broadcast_binary(const AttrReader& ctx, const Tensor& a, const Tensor& b, Fn&& fn) {
  std::vector<int64_t> out_dims = broadcast_dims(ctx, {a.dims(), b.dims()});
  Tensor out(dtype_of<Out>, out_dims);
  const A* pa = a.data<A>();
  const B* pb = b.data<B>();
  Out* po = out.data<Out>();
  if (a.dims() == b.dims()) {
    for (int64_t i = 0; i < out.numel(); ++i) po[i] = fn(pa[i], pb[i]);
    return out;
  }
  std::array<std::vector<int64_t>, 2> strides = {broadcast_strides(a.dims(), out_dims),
                                                 broadcast_strides(b.dims(), out_dims)};
  for_each_broadcast<2>(out_dims, strides, [&](int64_t i, const std::array<int64_t, 2>& off) {
    po[i] = fn(pa[off[0]], pb[off[1]]);
  });
  return out;
}

// out[i] = fn(x[i]) with the same dims.
template <typename Out, typename In, typename Fn>
Tensor map_unary(const Tensor& x, Fn&& fn) {
  Tensor out(dtype_of<Out>, x.dims());
  const In* px = x.data<In>();
  Out* po = out.data<Out>();
  for (int64_t i = 0; i < x.numel(); ++i) po[i] = fn(px[i]);
  return out;
}

// Same-type element conversion used by Cast-like code paths: floats go through float/double,
// half types round once.
template <typename To, typename From>
To convert_element(const From& v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (std::is_same_v<From, Float16> || std::is_same_v<From, BFloat16>) {
    return convert_element<To>(static_cast<float>(v));
  } else if constexpr (std::is_same_v<To, Float16> || std::is_same_v<To, BFloat16>) {
    return To(static_cast<float>(v));
  } else if constexpr (std::is_same_v<To, bool>) {
    return v != From(0);
  } else {
    return static_cast<To>(v);
  }
}

// Reads an optional int64 input tensor (axes, shape, ...) as a vector; empty when absent.
std::vector<int64_t> optional_int_input(const KernelContext& ctx, size_t i);

}  // namespace kiln::ops
