#pragma once
// The CPU's data-movement kernels copy elements as unsigned integers of the element's size:
// with_element_bits(bytes, fn) calls fn(T{}) with that type. Every type they take is 1, 2, 4 or
// 8 bytes (strings are refused by their checks; low-precision types are stored one per byte);
// another size is an internal error.
#include <cstddef>
#include <cstdint>

#include "core/error.hpp"

namespace kiln::backends::cpu {

template <typename Fn>
void with_element_bits(size_t bytes, Fn&& fn) {
  switch (bytes) {
    case 1:
      return fn(uint8_t{});
    case 2:
      return fn(uint16_t{});
    case 4:
      return fn(uint32_t{});
    case 8:
      return fn(uint64_t{});
    default:
      fail(ErrorCode::Internal, "no {}-byte element type to copy", bytes);
  }
}

}  // namespace kiln::backends::cpu
