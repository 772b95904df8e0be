#include "backends/gpu/runtime/pinned_memory.hpp"

#include <algorithm>
#include <cstring>

#include "backends/gpu/runtime/gpu_check.hpp"

namespace kiln::backends::gpu {

void PinnedRegistry::add(const void* p, size_t bytes) {
  std::lock_guard lock(mutex_);
  blocks_[reinterpret_cast<uintptr_t>(p)] = bytes;
}

void PinnedRegistry::remove(const void* p) {
  std::lock_guard lock(mutex_);
  blocks_.erase(reinterpret_cast<uintptr_t>(p));
}

bool PinnedRegistry::contains(const void* p, size_t bytes) const {
  auto begin = reinterpret_cast<uintptr_t>(p);
  std::lock_guard lock(mutex_);
  auto it = blocks_.upper_bound(begin);
  if (it == blocks_.begin()) return false;
  --it;
  return begin >= it->first && begin - it->first + bytes <= it->second;
}

DeviceBuffer allocate_pinned_buffer(int device, size_t bytes,
                                    const std::shared_ptr<PinnedRegistry>& registry) {
  KILN_GPU_CHECK(hipSetDevice(device));
  void* p = nullptr;
  // Portable: usable by every device's streams, not only the one current now.
  hipError_t status = hipHostMalloc(&p, std::max<size_t>(bytes, 1), hipHostMallocPortable);
  if (status != hipSuccess) {
    (void)hipGetLastError();
    fail(ErrorCode::Unavailable, "cannot allocate {} bytes of pinned host memory: {} ({})", bytes,
         hipGetErrorName(status), hipGetErrorString(status));
  }
  registry->add(p, bytes);
  return DeviceBuffer(p, bytes, [registry](void* q) {
    registry->remove(q);
    (void)hipHostFree(q);
  });
}

PinnedStaging::~PinnedStaging() {
  (void)hipSetDevice(device_);
  for (Chunk& c : chunks_) {
    if (c.done) {
      (void)hipEventSynchronize(c.done);
      (void)hipEventDestroy(c.done);
    }
    if (c.host) (void)hipHostFree(c.host);
  }
}

void PinnedStaging::ensure_chunks() {
  if (!chunks_.empty()) return;
  std::vector<Chunk> chunks(kChunks);
  try {
    for (Chunk& c : chunks) {
      KILN_GPU_CHECK(hipHostMalloc(&c.host, kChunkBytes, hipHostMallocPortable));
      KILN_GPU_CHECK(hipEventCreateWithFlags(&c.done, hipEventDisableTiming));
    }
  } catch (...) {
    for (Chunk& c : chunks) {
      if (c.done) (void)hipEventDestroy(c.done);
      if (c.host) (void)hipHostFree(c.host);
    }
    throw;
  }
  chunks_ = std::move(chunks);
}

void PinnedStaging::wait_chunk(Chunk& c) {
  if (c.pending) KILN_GPU_CHECK(hipEventSynchronize(c.done));
  c.pending = false;
}

void PinnedStaging::upload(void* device_dst, const void* host_src, size_t bytes,
                           hipStream_t stream) {
  std::lock_guard lock(mutex_);
  KILN_GPU_CHECK(hipSetDevice(device_));
  ensure_chunks();
  auto* dst = static_cast<char*>(device_dst);
  const auto* src = static_cast<const char*>(host_src);
  for (size_t done = 0; done < bytes;) {
    size_t n = std::min(kChunkBytes, bytes - done);
    Chunk& c = chunks_[next_];
    next_ = (next_ + 1) % chunks_.size();
    wait_chunk(c);
    std::memcpy(c.host, src + done, n);
    KILN_GPU_CHECK(hipMemcpyAsync(dst + done, c.host, n, hipMemcpyHostToDevice, stream));
    KILN_GPU_CHECK(hipEventRecord(c.done, stream));
    c.pending = true;
    done += n;
  }
}

void PinnedStaging::download(void* host_dst, const void* device_src, size_t bytes,
                             hipStream_t stream) {
  std::lock_guard lock(mutex_);
  KILN_GPU_CHECK(hipSetDevice(device_));
  ensure_chunks();
  auto* dst = static_cast<char*>(host_dst);
  const auto* src = static_cast<const char*>(device_src);
  // Keep every chunk in flight: issue transfers ahead, then drain them in order, refilling the
  // chunk just drained with the next transfer.
  struct InFlight {
    size_t chunk, offset, bytes;
  };
  std::vector<InFlight> queue;
  size_t issued = 0, head = 0;
  auto issue = [&]() {
    size_t n = std::min(kChunkBytes, bytes - issued);
    size_t k = next_;
    next_ = (next_ + 1) % chunks_.size();
    Chunk& c = chunks_[k];
    wait_chunk(c);
    KILN_GPU_CHECK(hipMemcpyAsync(c.host, src + issued, n, hipMemcpyDeviceToHost, stream));
    KILN_GPU_CHECK(hipEventRecord(c.done, stream));
    c.pending = true;
    queue.push_back({k, issued, n});
    issued += n;
  };
  while (issued < bytes && queue.size() < chunks_.size()) issue();
  while (head < queue.size()) {
    InFlight f = queue[head++];
    Chunk& c = chunks_[f.chunk];
    wait_chunk(c);
    std::memcpy(dst + f.offset, c.host, f.bytes);
    if (issued < bytes) issue();
  }
}

}  // namespace kiln::backends::gpu
