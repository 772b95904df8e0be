#include "backends/gpu/bandwidth.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>

#include "core/error.hpp"

namespace kiln::backends {

std::vector<CopyBandwidth> measure_copy_bandwidth(GpuBackend& gpu, size_t bytes, int repeats) {
  KILN_CHECK_ARG(bytes > 0 && repeats > 0, "bandwidth: bytes and repeats must be positive");
  Stream& stream = gpu.copy_stream();
  DeviceBuffer device_a = gpu.allocate(bytes);
  DeviceBuffer device_b = gpu.allocate(bytes);
  DeviceBuffer pinned = gpu.allocate_pinned(bytes);
  std::unique_ptr<char[]> pageable(new char[bytes]);
  // Touch every page first, so the first timed copy does not pay for page faults.
  std::memset(pageable.get(), 1, bytes);
  std::memset(pinned.data(), 1, bytes);
  std::unique_ptr<Event> start = gpu.create_event();
  std::unique_ptr<Event> stop = gpu.create_event();

  struct Case {
    const char* kind;
    std::function<void()> copy;
    // Staged copies do host work (memcpy through the pinned chunks) that device events do not
    // see: they are timed by the host clock from the call to the stream's completion.
    bool host_timed = false;
  };
  std::vector<Case> cases = {
      {"host->device pinned",
       [&] { gpu.copy_to_device(device_a.data(), pinned.data(), bytes, stream); }},
      {"host->device pageable (staged)",
       [&] { gpu.copy_to_device(device_a.data(), pageable.get(), bytes, stream); }, true},
      {"device->host pinned",
       [&] { gpu.copy_to_host(pinned.data(), device_a.data(), bytes, stream); }},
      {"device->host pageable (staged)",
       [&] { gpu.copy_to_host(pageable.get(), device_a.data(), bytes, stream); }, true},
      {"device->device",
       [&] { gpu.copy_device_to_device(device_b.data(), device_a.data(), bytes, stream); }},
  };
  std::vector<CopyBandwidth> out;
  for (const Case& c : cases) {
    c.copy();
    stream.synchronize();
    std::vector<double> times;
    for (int i = 0; i < repeats; ++i) {
      if (c.host_timed) {
        auto t0 = std::chrono::steady_clock::now();
        c.copy();
        stream.synchronize();
        times.push_back(
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                .count());
        continue;
      }
      start->record(stream);
      c.copy();
      stop->record(stream);
      stop->synchronize();
      times.push_back(stop->elapsed_ms(*start));
    }
    std::sort(times.begin(), times.end());
    double median = times[times.size() / 2];
    out.push_back({c.kind, c.host_timed ? "host clock" : "device events", bytes, median,
                   static_cast<double>(bytes) / (median * 1e6)});
  }
  return out;
}

}  // namespace kiln::backends
