#pragma once
// Page-locked host memory: the registry of the blocks handed out (so that a copy can tell a
// pinned host pointer from a pageable one without asking the runtime, whose pointer-attribute
// structs differ between HIP and CUDA), and the staging buffers that pageable copies go through.
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "backends/backend.hpp"
#include "backends/gpu/vendor.hpp"

namespace kiln::backends::gpu {

class PinnedRegistry {
 public:
  void add(const void* p, size_t bytes);
  void remove(const void* p);
  // Whether [p, p + bytes) lies inside one registered block.
  bool contains(const void* p, size_t bytes) const;

 private:
  mutable std::mutex mutex_;
  std::map<uintptr_t, size_t> blocks_;
};

// Pinned memory of `bytes` on `device`, registered while it lives.
DeviceBuffer allocate_pinned_buffer(int device, size_t bytes,
                                    const std::shared_ptr<PinnedRegistry>& registry);

// Copies between pageable host memory and the device through a few pinned chunks, so that the
// transfer itself is DMA: the host copies chunk k into (or out of) pinned memory while the
// device moves chunk k+1. Shared by every stream of a backend; one copy at a time.
class PinnedStaging {
 public:
  static constexpr size_t kChunkBytes = size_t{4} << 20;
  static constexpr int kChunks = 4;

  explicit PinnedStaging(int device) : device_(device) {}
  ~PinnedStaging();
  PinnedStaging(const PinnedStaging&) = delete;
  PinnedStaging& operator=(const PinnedStaging&) = delete;

  // Returns once `host_src` has been read (earlier than the copy's completion on `stream`).
  void upload(void* device_dst, const void* host_src, size_t bytes, hipStream_t stream);
  // Returns once `host_dst` is written, so it waits for the work queued before it on `stream`.
  void download(void* host_dst, const void* device_src, size_t bytes, hipStream_t stream);

 private:
  struct Chunk {
    void* host = nullptr;
    hipEvent_t done = nullptr;  // recorded after the last transfer that used `host`
    bool pending = false;
  };
  void ensure_chunks();
  void wait_chunk(Chunk& c);

  int device_;
  std::mutex mutex_;
  std::vector<Chunk> chunks_;
  size_t next_ = 0;
};

}  // namespace kiln::backends::gpu
