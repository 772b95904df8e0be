#pragma once
// The plain form of a packed weight, recovered from the packed bytes alone. An engine stores a
// weight that only packing kernels read once, in their layout (format 3); another CPU, another
// kernel, the reference interpreter or a GPU still needs it row-major, so the layout a packed
// weight's `format` names must be one any reader can decode without the library that made it.
// The form decoded here is oneDNN's blocked description of float32 or int8 (s8) weights, as the
// CPU backend writes it:
//
//   onednn blocked f32 dims 64x64x3x3 padded 64x64x3x3 offsets 0x0x0x0 offset0 0
//     strides 576x9x3x1 inner 16@1,16@0      ("inner none": no inner blocks)
//
// int8 weights may end in " extra FLAGS MASK ASYMMETRIC_MASK" (oneDNN's compensations, stored
// after the elements), then in " plain u8|s8 shift EVERY V[,V...]" when the kernel packed the
// constant minus its zero points (an int8 kernel's w - z, or w - 128 for uint8 weights over
// 0..255): row-major element i of the plain form is the packed one plus V[(i / EVERY) % count]
// (one value, or one per output channel), in the plain type. Element (i0, ..., in) lies at offset0
// + sum_d (i_d / B_d) * strides_d + the position inside its inner blocks (taken innermost first,
// each block b@d consuming i_d % b), in elements.
#include <cstdint>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "core/tensor.hpp"

namespace kiln::engine {

struct BlockedLayout {
  DataType dtype = DataType::Undefined;
  std::vector<int64_t> dims, padded, offsets, strides;
  int64_t offset0 = 0;
  std::vector<std::pair<int64_t, int>> inner;  // (block size, dim), outermost first
  // The plain form's type and what it adds to each packed element (" plain ... shift ...");
  // Undefined and empty: the plain form is the packed elements themselves.
  DataType plain = DataType::Undefined;
  int64_t shift_every = 1;     // consecutive row-major elements that share one shift value
  std::vector<int64_t> shift;  // empty: no shift

  DataType plain_type() const { return plain == DataType::Undefined ? dtype : plain; }
};

// The layout `format` names; nullopt when it is not a form decoded here (an element type other
// than f32 or s8, another library's description) or does not parse.
std::optional<BlockedLayout> parse_blocked_layout(std::string_view format);

// The row-major tensor of `layout`'s dims read from `packed` (UInt8 bytes) into `out`, which holds
// exactly that many elements. InvalidArgument when an element would lie outside `packed`.
void unpack_blocked(const BlockedLayout& layout, const Tensor& packed, void* out, size_t out_bytes);

// The plain form of `layout` (plain_type(), its shift added back) read from `packed` into `out`,
// which holds exactly the dims' elements of that type. InvalidArgument as unpack_blocked, or when
// a shifted element leaves the plain type.
void unpack_plain(const BlockedLayout& layout, const Tensor& packed, void* out, size_t out_bytes);

// True when `format` decodes into a tensor of `plain`'s type and element count and the bytes of
// `packed` decode to exactly `plain`'s bytes: the writer drops a plain copy only then.
bool unpacks_to(std::string_view format, const Tensor& packed, const Tensor& plain);

}  // namespace kiln::engine
