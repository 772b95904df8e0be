// The engine file's checksum and the source-model hash. Four independent lanes over 32-byte
// blocks keep the multiplier busy (one lane is bound by its multiply latency); each round is a
// bijection of the input word, so no two words collide within a lane.
#include <bit>
#include <cstring>

#include "engine/engine_file.hpp"

namespace kiln::engine {
namespace {

static_assert(std::endian::native == std::endian::little,
              "the engine format is little-endian; a big-endian port must byte-swap words");

constexpr uint64_t kMulA = 0x9fb21c651e98df25ull;
constexpr uint64_t kMulB = 0xff51afd7ed558ccdull;
constexpr uint64_t kMulC = 0xc4ceb9fe1a85ec53ull;

inline uint64_t load_word(const unsigned char* p) {
  uint64_t w;
  std::memcpy(&w, p, sizeof w);
  return w;
}

inline uint64_t round(uint64_t lane, uint64_t word) {
  lane ^= word * kMulA;
  lane = std::rotl(lane, 29);
  return lane * kMulB;
}

inline uint64_t avalanche(uint64_t h) {
  h ^= h >> 33;
  h *= kMulB;
  h ^= h >> 29;
  h *= kMulC;
  h ^= h >> 32;
  return h;
}

}  // namespace

void Hasher::consume_block(const unsigned char* block) {
  lanes_[0] = round(lanes_[0], load_word(block));
  lanes_[1] = round(lanes_[1], load_word(block + 8));
  lanes_[2] = round(lanes_[2], load_word(block + 16));
  lanes_[3] = round(lanes_[3], load_word(block + 24));
}

void Hasher::update(const void* data, size_t size) {
  const auto* p = static_cast<const unsigned char*>(data);
  total_ += size;
  if (pending_size_) {
    size_t take = std::min(size, sizeof pending_ - pending_size_);
    std::memcpy(pending_ + pending_size_, p, take);
    pending_size_ += take;
    p += take;
    size -= take;
    if (pending_size_ < sizeof pending_) return;
    consume_block(pending_);
    pending_size_ = 0;
  }
  for (; size >= sizeof pending_; p += sizeof pending_, size -= sizeof pending_) consume_block(p);
  std::memcpy(pending_, p, size);
  pending_size_ = size;
}

uint64_t Hasher::finish() const {
  uint64_t h = std::rotl(lanes_[0], 1) + std::rotl(lanes_[1], 7) + std::rotl(lanes_[2], 12) +
               std::rotl(lanes_[3], 18);
  for (uint64_t lane : lanes_) h = (h ^ avalanche(lane)) * kMulA;
  // The tail: whole words, then the last bytes zero-padded; the length below tells a short
  // input from one ending in zero bytes.
  unsigned char tail[sizeof pending_ + 8] = {};
  std::memcpy(tail, pending_, pending_size_);
  for (size_t i = 0; i < pending_size_; i += 8) h = round(h, load_word(tail + i)) + kMulC;
  return avalanche(h ^ total_);
}

uint64_t hash_bytes(const void* data, size_t size) {
  Hasher h;
  h.update(data, size);
  return h.finish();
}

}  // namespace kiln::engine
