#pragma once
// A file Kiln reads model bytes or weights from, opened only when it is a regular file: a
// directory, device, fifo or socket is refused before a byte is read, because none of them has a
// size that bounds what reading it costs (a directory reports an absurd one, /dev/zero never
// ends, a fifo blocks the open). Reads are positioned and exact, so a caller reads only the bytes
// it needs, after checking them against size().
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kiln {

class RegularFile {
 public:
  // `what` names the file's role in errors, e.g. "model file" or "initializer 'w': external data".
  RegularFile(std::string path, std::string_view what);
  ~RegularFile();
  RegularFile(const RegularFile&) = delete;
  RegularFile& operator=(const RegularFile&) = delete;

  const std::string& path() const { return path_; }
  uint64_t size() const { return size_; }
  // Reads exactly `n` bytes at `offset` into `dest`; a file that ends first is an error.
  void read_at(uint64_t offset, void* dest, size_t n) const;
  // The whole file, refused before reading when it is larger than `max_bytes`.
  std::string read_all(uint64_t max_bytes) const;

 private:
  std::string path_;
  std::string what_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

}  // namespace kiln
