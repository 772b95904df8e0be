#pragma once
// The backend interface: what the executor needs from a device to run a graph on it. A backend
// owns device memory, queues work on streams, times it with events, copies between host and
// device, says which nodes it can run, and builds one prepared kernel per node at session open
// (weights uploaded or packed there, never per run). The CPU backend is the first
// implementation; a GPU backend implements the same interface, so nothing here assumes that
// device memory is host-addressable: the executor only dereferences a device pointer through
// copy_to_host when device_kind() is not Cpu.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.hpp"
#include "ir/graph.hpp"

namespace kiln::backends {

enum class DeviceKind { Cpu, Gpu };
const char* device_kind_name(DeviceKind kind);

// A block of device memory, freed by its destructor (move-only).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(void* data, size_t size, std::function<void(void*)> release)
      : data_(data), size_(size), release_(std::move(release)) {}
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(DeviceBuffer&& other) noexcept { *this = std::move(other); }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return data_; }
  size_t size() const { return size_; }
  explicit operator bool() const { return data_ != nullptr; }
  void reset();

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
  std::function<void(void*)> release_;
};

class Stream;

// A point in a stream's work. record() marks it; synchronize() blocks the host until the work
// before it is done; Stream::wait() makes another stream's later work wait for it.
class Event {
 public:
  virtual ~Event() = default;
  virtual void record(Stream& stream) = 0;
  virtual void synchronize() = 0;
  // Milliseconds between `start` (recorded earlier) and this event; both must have completed.
  virtual double elapsed_ms(const Event& start) const = 0;
};

// Device work recorded once on a stream and replayed as one unit (a CUDA / HIP graph), so that
// a plan's many small kernels cost one launch. Replaying repeats the recorded kernels on the
// same memory: the executor replays only when every pointer and dim they saw is the same.
class CapturedWork {
 public:
  virtual ~CapturedWork() = default;
  virtual void replay(Stream& stream) = 0;
};

// An in-order queue of device work. Kernels and copies are issued on a stream and may run
// asynchronously; synchronize() waits for all of it.
class Stream {
 public:
  virtual ~Stream() = default;
  // Runs `fn` on the host once the work queued before it is done.
  virtual void enqueue(std::function<void()> fn) = 0;
  // Work queued after this call starts after `event` completes.
  virtual void wait(const Event& event) = 0;
  virtual void synchronize() = 0;
  // Whether work queued here can be recorded for replay (GPU streams).
  virtual bool can_capture() const { return false; }
  // Between begin_capture() and end_capture(), work queued on this stream is recorded, not run.
  // end_capture() returns the recording, or throws when something queued could not be recorded
  // (the stream is usable again either way).
  virtual void begin_capture();
  virtual std::unique_ptr<CapturedWork> end_capture();
};

// A dense tensor in a backend's memory: element type, dims, and a device pointer. An absent
// optional input has dtype Undefined and no data.
//
// How a tensor's elements lie in memory: row-major and contiguous (the default), or, for a 4-D
// tensor passed between kernels that agreed on it (Kernel::blocked_layouts, decided by the
// execution plan), one of the layouts a backend's kernels exchange instead:
// - channel-blocked with `block` = b channels per block (oneDNN's nChw16c / nChw8c, the CPU's):
//   memory order (N, ceil(C/b), H, W, b), channels past C padded;
// - channels-last (NHWC, the GPU's: cuDNN's tensor-core convolutions read and write it): memory
//   order (N, H, W, C), no padding.
// A tensor's dims stay its logical NCHW dims whatever its layout; its size in memory is the
// backend's to compute (Backend::storage_bytes).
struct Layout {
  enum class Kind : uint8_t { RowMajor, ChannelBlocked, ChannelsLast };
  Kind kind = Kind::RowMajor;
  int block = 0;  // ChannelBlocked: channels per block; 0 otherwise

  static constexpr Layout row_major() { return {}; }
  static constexpr Layout channel_blocked(int channels) { return {Kind::ChannelBlocked, channels}; }
  static constexpr Layout channels_last() { return {Kind::ChannelsLast, 0}; }
  bool is_row_major() const { return kind == Kind::RowMajor; }
  bool operator==(const Layout&) const = default;
  std::string to_string() const;  // "row-major", "channel-blocked 16", "channels-last"
};

// Elements a tensor of `dims` occupies in `layout` (numel when row-major, padded channels when
// blocked).
int64_t layout_numel(const std::vector<int64_t>& dims, Layout layout);

// A dense tensor in a backend's memory.
struct DeviceTensor {
  DataType dtype = DataType::Undefined;
  std::vector<int64_t> dims;
  void* data = nullptr;
  Layout layout;

  bool defined() const { return dtype != DataType::Undefined; }
  int64_t numel() const;
  // Elements in memory: numel() for row-major, the padded count when blocked.
  int64_t storage_numel() const;
  size_t nbytes() const;  // of storage_numel() elements
};

// Which blocked layouts a kernel accepts (see Layout). The executor keeps a value blocked
// only when its producer can write it so and every reader can read it so.
struct BlockedLayouts {
  bool input0 = false;   // input 0 may be blocked, independently of the output
  bool output0 = false;  // output 0 may be written blocked, independently of input 0
  // With input0: input 0 may come in whichever non-row-major layout its producer writes (a
  // reduction that reads each), not only this kernel's own.
  bool input0_any = false;
  // Element-wise style: every tensor input and output 0 share one layout (all blocked or none).
  bool uniform = false;
  // Broadcast style: input `follows` and output 0 share one layout; the other inputs are
  // row-major (a per-channel scale of a blocked tensor). -1: none.
  int follows = -1;
  // The layout this kernel's non-row-major tensors take: row-major (the default) means the
  // backend's activation_layout(). The CPU's int8 convolutions exchange channels-last tensors
  // (oneDNN's int8 kernels have no other fast layout) beside its float32 channel-blocked ones.
  Layout layout;
  // Uniform / broadcast style only: the kernel computes element by element over memory, so its
  // group may take any one layout its producer chose (QuantizeLinear per tensor). Only such
  // kernels and those that declare `layout` exchange 8-bit integer tensors non-row-major.
  bool any_layout = false;
};

// Where a kernel's outputs go. The executor hands out the output's planned arena slot (sized for
// the declared maximum shape) or, for a value of unbounded size, a fresh device buffer.
class KernelOutputs {
 public:
  virtual ~KernelOutputs() = default;
  virtual DeviceTensor allocate(size_t index, DataType dtype, std::vector<int64_t> dims) = 0;
};

// A constant input of a node in the layout its kernel computes with (oneDNN's blocked weights,
// say), made once at compile time and stored in the engine so that opening maps it.
struct PackedWeight {
  size_t input = 0;    // the node input it packs
  std::string format;  // the kernel's own description of the layout, compared at open
  Tensor data;         // UInt8, 1-D
};

// One node, prepared for one backend.
class Kernel {
 public:
  virtual ~Kernel() = default;
  // The kernel's table name ("onednn.conv"), as stored in engine files.
  virtual std::string_view name() const = 0;
  // Inputs in the node's slot order; constant inputs (weights) are passed too but a kernel may
  // use what it prepared from them instead. Work is queued on `stream`.
  virtual void run(std::span<const DeviceTensor> inputs, KernelOutputs& outputs,
                   Stream& stream) = 0;
  // Blocked layouts this kernel can read and write (none by default).
  virtual BlockedLayouts blocked_layouts() const { return {}; }
  // Called once by the execution plan after kernels are created, before any run, for every
  // kernel that has blocked layouts: the layouts chosen for input 0 and output 0. A kernel
  // prepares its primitives (and packs its weights) for them here.
  virtual void set_layouts(Layout input0, Layout output0) {
    (void)input0;
    (void)output0;
  }
  // Compile time, after set_layouts: this kernel's constant inputs in the layout it prepared
  // for them, to store in the engine (none by default).
  virtual std::vector<PackedWeight> pack_weights() { return {}; }
  // Opening an engine, before set_layouts: a packed weight stored for this node. The kernel uses
  // it when its format is what it would make now, else packs afresh from the plain constant (a
  // CPU with other vector units picks another layout).
  virtual void use_packed_weight(PackedWeight packed) { (void)packed; }
  // The choices this kernel timed on its device (a library's algorithm per input shape, say),
  // in its own text form, to store in the engine ("" when it times nothing). `kiln compile`
  // reads them after a tuning run on the device.
  virtual std::string tactics() const { return {}; }
  // Opening an engine: choices stored by tactics() on a device of the same arch with the same
  // libraries. The kernel uses them instead of timing again; text it does not understand (a
  // newer build's) is ignored and the kernel times afresh.
  virtual void use_tactics(std::string_view text) { (void)text; }
};

// Whether a backend can run a node, and with which kernel; otherwise why not.
struct Support {
  std::string kernel;  // set when supported
  std::string reason;  // set when not
  bool ok() const { return !kernel.empty(); }
  static Support yes(std::string kernel) { return {std::move(kernel), {}}; }
  static Support no(std::string reason) { return {{}, std::move(reason)}; }
};

// Which of several kernels for one op a backend's supports() picks (KernelDef::library tells
// Kiln's own kernels from those that call a vendor library).
enum class KernelPreference {
  Default,  // the kernel table's order (priority): vendor libraries first where they serve
  Own,      // Kiln's own kernels before any vendor library's
  OwnOnly,  // Kiln's own kernels only: an op without one falls back to the CPU
};

class Backend {
 public:
  virtual ~Backend() = default;
  // "cpu", "hip:gfx90a", ...: the name stored in engine files' kernel choices.
  virtual std::string_view name() const = 0;
  virtual DeviceKind device_kind() const = 0;

  // Device memory of at least `bytes`, aligned for any kernel of this backend.
  virtual DeviceBuffer allocate(size_t bytes) = 0;
  virtual std::unique_ptr<Stream> create_stream() = 0;
  virtual std::unique_ptr<Event> create_event() = 0;
  // Copies queued on `stream`; host memory must stay valid until the stream is synchronized.
  virtual void copy_to_device(void* device_dst, const void* host_src, size_t bytes,
                              Stream& stream) = 0;
  virtual void copy_to_host(void* host_dst, const void* device_src, size_t bytes,
                            Stream& stream) = 0;
  // Host memory (host-addressable: data() is a host pointer) that this backend copies to and
  // from fastest: page-locked on a GPU, so copies are DMA transfers instead of going through
  // staging; plain memory on the CPU. The executor takes results copied off a device into it.
  virtual DeviceBuffer allocate_host(size_t bytes);

  // The best kernel of this backend for `node`, or why there is none. Decided from the node's
  // attributes and declared input/output types only.
  virtual Support supports(const ir::Node& node) const = 0;
  // Builds kernel `kernel_name` (as supports() named it) for `node`. Throws Unsupported when
  // the kernel does not exist or cannot run this node.
  virtual std::unique_ptr<Kernel> create_kernel(const ir::Node& node,
                                                std::string_view kernel_name) = 0;
  // Input slots whose memory kernel `kernel_name` may overwrite with output 0 (reading each
  // element before writing the output element at the same index), best first; empty: it never
  // writes over an input, and the memory planner never gives it an input's space. By default,
  // what this backend's entry in the kernel table declares (KernelDef::in_place_inputs).
  virtual std::vector<size_t> in_place_inputs(const ir::Node& node,
                                              std::string_view kernel_name) const;
  // Called by the executor before each run and before kernels are created, from the thread that
  // runs: the number of intra-op threads to use (0: one per core).
  virtual void set_threads(int threads) { (void)threads; }
  // The preference supports() applies from now on (set it before placing graphs: kernels
  // already created keep theirs). The GPU backend starts from KILN_GPU_OWN_KERNELS; backends
  // without vendor libraries ignore it.
  virtual void set_kernel_preference(KernelPreference preference) { (void)preference; }
  virtual KernelPreference kernel_preference() const { return KernelPreference::Default; }
  // The layout this backend's kernels exchange besides row-major (see Layout); row-major: they
  // never exchange another.
  virtual Layout activation_layout() const { return {}; }
  // Why the backend cannot compute in `type` at its speed (an engine of that precision, such as
  // `--bf16`, is refused for it); empty when it can.
  virtual std::string cannot_compute(DataType type) const {
    (void)type;
    return {};
  }
  // What the choices of this backend's kernels depend on besides the arch: the vendor libraries
  // with their versions ("cudnn 9.14.0"). Stamped into engines planned for it; an engine whose
  // tactics were timed with other versions times them again (with a warning).
  virtual std::vector<std::string> library_versions() const { return {}; }
  // Bytes a tensor of `dims` and `dtype` takes in `layout` in this backend's memory (the arena
  // plan and each output's allocation ask this). By default layout_numel elements.
  virtual size_t storage_bytes(DataType dtype, const std::vector<int64_t>& dims,
                               Layout layout) const;
};

}  // namespace kiln::backends
