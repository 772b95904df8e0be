// Cast among float32, float16, bfloat16, int32, int64 and bool, one kernel per (from, to).
#include <type_traits>

#include "backends/gpu/kernels/cast.hpp"
#include "backends/gpu/kernels/device_common.hpp"

namespace kiln::backends::gpu::kernels {
namespace {

// bool is stored as one byte; any nonzero byte reads as true.
struct BoolByte {
  uint8_t v;
};

template <typename T>
inline constexpr bool is_float_v =
    std::is_same_v<T, float> || std::is_same_v<T, __half> || std::is_same_v<T, Bf16>;

template <typename To, typename From>
__device__ inline To convert(From v) {
  if constexpr (std::is_same_v<From, BoolByte>) {
    return convert<To>(static_cast<int32_t>(v.v != 0));
  } else if constexpr (is_float_v<From>) {
    const float f = to_float(v);
    if constexpr (std::is_same_v<To, BoolByte>) {
      return BoolByte{static_cast<uint8_t>(f != 0.f)};
    } else if constexpr (is_float_v<To>) {
      return from_float<To>(f);
    } else {
      return static_cast<To>(f);
    }
  } else {  // an integer
    if constexpr (std::is_same_v<To, BoolByte>) {
      return BoolByte{static_cast<uint8_t>(v != 0)};
    } else if constexpr (is_float_v<To>) {
      return from_float<To>(static_cast<float>(v));
    } else {
      return static_cast<To>(v);
    }
  }
}

template <typename From, typename To>
__global__ void cast_kernel(const From* src, To* dst, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) dst[i] = convert<To>(src[i]);
}

template <typename F>
hipError_t dispatch_cast_type(CastType t, F&& f) {
  switch (t) {
    case CastType::F32:
      return f.template operator()<float>();
    case CastType::F16:
      return f.template operator()<__half>();
    case CastType::BF16:
      return f.template operator()<Bf16>();
    case CastType::I32:
      return f.template operator()<int32_t>();
    case CastType::I64:
      return f.template operator()<int64_t>();
    case CastType::Bool:
      return f.template operator()<BoolByte>();
  }
  return hipErrorInvalidValue;
}

}  // namespace

hipError_t launch_cast(CastType from, CastType to, const void* src, void* dst, int64_t n,
                       hipStream_t stream) {
  if (n <= 0) return hipSuccess;
  return dispatch_cast_type(from, [&]<typename From>() {
    return dispatch_cast_type(to, [&]<typename To>() {
      auto* kernel = &cast_kernel<From, To>;
      hipLaunchKernelGGL(kernel, grid_for(n), dim3(kBlock), 0, stream,
                         static_cast<const From*>(src), static_cast<To*>(dst), n);
      return hipGetLastError();
    });
  });
}

}  // namespace kiln::backends::gpu::kernels
