#include "backends/gpu/runtime/gpu_stream.hpp"

#include <memory>
#include <utility>

#include "backends/gpu/runtime/gpu_check.hpp"

namespace kiln::backends::gpu {

namespace {

// An instantiated graph, launched on the stream it is replayed on.
class GpuCapturedWork final : public CapturedWork {
 public:
  GpuCapturedWork(int device, hipGraph_t graph, hipGraphExec_t exec)
      : device_(device), graph_(graph), exec_(exec) {}
  ~GpuCapturedWork() override {
    (void)hipSetDevice(device_);
    (void)hipGraphExecDestroy(exec_);
    (void)hipGraphDestroy(graph_);
  }
  GpuCapturedWork(const GpuCapturedWork&) = delete;
  GpuCapturedWork& operator=(const GpuCapturedWork&) = delete;

  void replay(Stream& stream) override {
    KILN_GPU_CHECK(hipSetDevice(device_));
    KILN_GPU_CHECK(hipGraphLaunch(exec_, gpu_stream(stream).handle()));
  }

 private:
  int device_;
  hipGraph_t graph_;
  hipGraphExec_t exec_;
};

}  // namespace

struct GpuStream::HostCall {
  GpuStream* stream;
  std::function<void()> fn;
};

GpuStream::GpuStream(int device) : device_(device) {
  KILN_GPU_CHECK(hipSetDevice(device_));
  // Non-blocking: work here never waits for the legacy default stream that other libraries in
  // the process may use.
  KILN_GPU_CHECK(hipStreamCreateWithFlags(&stream_, hipStreamNonBlocking));
}

GpuStream::~GpuStream() {
  if (!stream_) return;
  (void)hipSetDevice(device_);
  // Host calls still queued point at this object: let them finish first.
  (void)hipStreamSynchronize(stream_);
  (void)hipStreamDestroy(stream_);
}

void GpuStream::run_host_call(void* data) {
  std::unique_ptr<HostCall> call(static_cast<HostCall*>(data));
  // The runtime's callback thread must not unwind: keep the first error for synchronize().
  try {
    call->fn();
  } catch (...) {
    std::lock_guard lock(call->stream->mutex_);
    if (!call->stream->host_error_) call->stream->host_error_ = std::current_exception();
  }
}

void GpuStream::enqueue(std::function<void()> fn) {
  KILN_GPU_CHECK(hipSetDevice(device_));
  auto call = std::make_unique<HostCall>(HostCall{this, std::move(fn)});
#if defined(__HIP__)
  // HIP 5.2 declares hipLaunchHostFunc but its runtime lacks it; the older stream callback
  // orders the same way (later work on the stream waits for it).
  auto callback = [](hipStream_t, hipError_t, void* data) { run_host_call(data); };
  KILN_GPU_CHECK(hipStreamAddCallback(stream_, callback, call.get(), 0));
#else
  KILN_GPU_CHECK(hipLaunchHostFunc(stream_, &GpuStream::run_host_call, call.get()));
#endif
  call.release();  // owned by run_host_call now
}

void GpuStream::begin_capture() {
  KILN_GPU_CHECK(hipSetDevice(device_));
  KILN_GPU_CHECK(hipStreamBeginCapture(stream_, hipStreamCaptureModeThreadLocal));
}

std::unique_ptr<CapturedWork> GpuStream::end_capture() {
  KILN_GPU_CHECK(hipSetDevice(device_));
  hipGraph_t graph = nullptr;
  // Ends the capture whatever happened inside it (a call that failed invalidates it), so the
  // stream runs work again.
  hipError_t status = hipStreamEndCapture(stream_, &graph);
  if (status != hipSuccess) {
    if (graph) (void)hipGraphDestroy(graph);
    runtime_fail(status, "hipStreamEndCapture");
  }
  hipGraphExec_t exec = nullptr;
  status = hipGraphInstantiate(&exec, graph, nullptr, nullptr, 0);
  if (status != hipSuccess) {
    (void)hipGraphDestroy(graph);
    runtime_fail(status, "hipGraphInstantiate");
  }
  return std::make_unique<GpuCapturedWork>(device_, graph, exec);
}

void GpuStream::wait(const Event& event) {
  KILN_GPU_CHECK(hipSetDevice(device_));
  KILN_GPU_CHECK(hipStreamWaitEvent(stream_, gpu_event(event).handle(), 0));
}

void GpuStream::synchronize() {
  KILN_GPU_CHECK(hipSetDevice(device_));
  KILN_GPU_CHECK(hipStreamSynchronize(stream_));
  std::exception_ptr error;
  {
    std::lock_guard lock(mutex_);
    error = std::exchange(host_error_, nullptr);
  }
  if (error) std::rethrow_exception(error);
}

GpuEvent::GpuEvent(int device) : device_(device) {
  KILN_GPU_CHECK(hipSetDevice(device_));
  KILN_GPU_CHECK(hipEventCreateWithFlags(&event_, hipEventDefault));
}

GpuEvent::~GpuEvent() {
  if (!event_) return;
  (void)hipSetDevice(device_);
  (void)hipEventDestroy(event_);
}

void GpuEvent::record(Stream& stream) {
  GpuStream& s = gpu_stream(stream);
  KILN_CHECK_ARG(s.device() == device_, "event of GPU {} recorded on a stream of GPU {}", device_,
                 s.device());
  KILN_GPU_CHECK(hipSetDevice(device_));
  KILN_GPU_CHECK(hipEventRecord(event_, s.handle()));
  recorded_ = true;
}

void GpuEvent::synchronize() {
  KILN_CHECK_ARG(recorded_, "GPU event synchronized before it was recorded");
  KILN_GPU_CHECK(hipEventSynchronize(event_));
}

double GpuEvent::elapsed_ms(const Event& start) const {
  const GpuEvent& s = gpu_event(start);
  KILN_CHECK_ARG(recorded_ && s.recorded_, "elapsed_ms between GPU events not both recorded");
  float ms = 0;
  hipError_t status = hipEventElapsedTime(&ms, s.event_, event_);
  if (status == hipErrorNotReady) {
    (void)hipGetLastError();
    fail(ErrorCode::InvalidArgument, "elapsed_ms between GPU events that have not completed");
  }
  KILN_GPU_CHECK(status);
  return ms;
}

GpuStream& gpu_stream(Stream& stream) {
  auto* s = dynamic_cast<GpuStream*>(&stream);
  KILN_CHECK_ARG(s, "a stream of another backend was given to the GPU backend");
  return *s;
}

const GpuEvent& gpu_event(const Event& event) {
  auto* e = dynamic_cast<const GpuEvent*>(&event);
  KILN_CHECK_ARG(e, "an event of another backend was given to the GPU backend");
  return *e;
}

}  // namespace kiln::backends::gpu
