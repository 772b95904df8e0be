#pragma once
// Internal to src/engine: the fixed header at the start of every engine file. All fields are
// little-endian; the checksum covers every byte after the header.
#include <cstdint>

#include "engine/engine_file.hpp"

namespace kiln::engine::detail {

struct Header {
  char magic[8];
  uint32_t format_version;
  uint32_t header_size;  // kHeaderSize; lets a reader skip a longer header of a later format
  uint64_t flatbuffer_offset;
  uint64_t flatbuffer_size;
  uint64_t weights_offset;  // a multiple of kWeightAlignment
  uint64_t weights_size;    // the file ends at weights_offset + weights_size
  uint64_t checksum;        // hash_bytes() of bytes [kHeaderSize, file size)
  uint64_t reserved;        // 0
};
static_assert(sizeof(Header) == kHeaderSize);

inline uint64_t align_up(uint64_t n, uint64_t alignment) {
  return (n + alignment - 1) / alignment * alignment;
}

}  // namespace kiln::engine::detail
