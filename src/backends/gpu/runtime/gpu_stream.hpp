#pragma once
// Stream and Event of the GPU backend over the runtime's hipStream_t / hipEvent_t.
#include <exception>
#include <functional>
#include <mutex>

#include "backends/backend.hpp"
#include "backends/gpu/vendor.hpp"

namespace kiln::backends::gpu {

class GpuStream final : public Stream {
 public:
  explicit GpuStream(int device);
  ~GpuStream() override;
  GpuStream(const GpuStream&) = delete;
  GpuStream& operator=(const GpuStream&) = delete;

  void enqueue(std::function<void()> fn) override;
  void wait(const Event& event) override;
  // Also rethrows the first exception a function given to enqueue() threw.
  void synchronize() override;
  bool can_capture() const override { return true; }
  // A graph capture local to the calling thread: a call that cannot be recorded (a memory
  // allocation, a synchronization) fails instead of running, and end_capture() throws.
  void begin_capture() override;
  std::unique_ptr<CapturedWork> end_capture() override;

  hipStream_t handle() const { return stream_; }
  int device() const { return device_; }

 private:
  struct HostCall;
  static void run_host_call(void* data);

  int device_;
  hipStream_t stream_ = nullptr;
  std::mutex mutex_;
  std::exception_ptr host_error_;
};

class GpuEvent final : public Event {
 public:
  explicit GpuEvent(int device);
  ~GpuEvent() override;
  GpuEvent(const GpuEvent&) = delete;
  GpuEvent& operator=(const GpuEvent&) = delete;

  void record(Stream& stream) override;
  void synchronize() override;
  double elapsed_ms(const Event& start) const override;

  hipEvent_t handle() const { return event_; }

 private:
  int device_;
  hipEvent_t event_ = nullptr;
  bool recorded_ = false;
};

// The backend's stream behind a Stream&; InvalidArgument when it belongs to another backend.
GpuStream& gpu_stream(Stream& stream);
const GpuEvent& gpu_event(const Event& event);

}  // namespace kiln::backends::gpu
