#pragma once
// Shared by the CPU kernels: the oneDNN engine and stream, plain-layout memory descriptors,
// fused activations as oneDNN post-ops, and the checks kernels run on declared node types.
#include <dnnl.hpp>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backends/backend.hpp"
#include "ops/fused_activation.hpp"

namespace kiln::backends::cpu {

dnnl::engine& engine();

// The CPU stream: oneDNN's CPU primitives finish before execute() returns, so queued work is
// done as soon as it is queued.
class CpuStream final : public Stream {
 public:
  CpuStream() : stream_(engine()) {}
  void enqueue(std::function<void()> fn) override { fn(); }
  void wait(const Event&) override {}
  void synchronize() override { stream_.wait(); }
  dnnl::stream& dnnl() { return stream_; }

 private:
  dnnl::stream stream_;
};

dnnl::stream& dnnl_stream(Stream& stream);

// oneDNN's data type for the float types its CPU kernels compute in here (float32, bfloat16).
dnnl::memory::data_type dnnl_type(DataType type);
// Row-major descriptor of `dims` (a scalar is one element).
dnnl::memory::desc plain_desc(const std::vector<int64_t>& dims,
                              dnnl::memory::data_type type = dnnl::memory::data_type::f32);
// Channel-blocked descriptor (nChw16c / nChw8c) of 4-D `dims`; see DeviceTensor::block.
dnnl::memory::desc blocked_desc(const std::vector<int64_t>& dims, int block,
                                dnnl::memory::data_type type = dnnl::memory::data_type::f32);
// The descriptor of `t` in its layout (plain or blocked) and element type.
dnnl::memory::desc tensor_desc(const DeviceTensor& t);
// Whether oneDNN runs bfloat16 convolutions and matrix products on this CPU's own bfloat16
// instructions (AVX512_BF16 or AMX), rather than emulating them: where `--bf16` engines run.
bool cpu_has_bf16();
// A description of `md`'s layout that is equal for two descriptors exactly when they lay out the
// same bytes the same way (data type, dims, padding, strides, inner blocks): how a kernel checks
// that weights packed at compile time fit the primitive it builds at open. "" for layouts it
// cannot describe (Winograd, RNN-packed), which are never stored; int8 weights with oneDNN's
// compensations (s8 source, source zero point) end in " extra FLAGS MASK ASYMMETRIC_MASK".
std::string layout_key(const dnnl::memory::desc& md);
// The memory descriptor a layout_key describes (its inverse); nullopt when `key` is not one. An
// engine may hold a weight only in the layout another CPU packed it in: this kernel re-packs from
// those bytes.
// `available` is the size of the bytes it describes: a layout reaching past them is refused.
std::optional<dnnl::memory::desc> desc_from_layout_key(const std::string& key, size_t available);
// The channel block of the CPU's blocked layout: 16 with AVX-512, else 8.
int cpu_channel_block();
// oneDNN memory of `md` in a buffer it keeps alive (the returned memory holds no ownership:
// keep `owner`). Large buffers (packed weights) are backed by transparent huge pages where the
// kernel allows them, so filling them at open faults 512x fewer pages.
dnnl::memory owned_memory(const dnnl::memory::desc& md, std::shared_ptr<void>& owner);
inline dnnl::memory wrap(const dnnl::memory::desc& md, const void* data) {
  return dnnl::memory(md, engine(), const_cast<void*>(data));
}

// A constant (a layer's weights) in the layout a primitive picked, and the buffer that keeps it.
struct PackedConstant {
  mutable dnnl::memory mem;  // null: not packed (oneDNN's execute takes non-const memories)
  std::shared_ptr<void> owner;
  explicit operator bool() const { return static_cast<bool>(mem); }
};

// `plain` reordered into `layout` once, in a buffer of its own (owned_memory).
PackedConstant pack_constant(const dnnl::memory& plain, const dnnl::memory::desc& layout);

// One packing per layout across a kernel's prepared shapes: the packing an entry of `cache` (a
// ShapeCache, each entry's packing given by `packed_of`) already made in `layout`, shared, or
// `plain` packed now. At most one copy per entry the cache holds, in practice one: oneDNN's
// layouts depend on the weights' dims, not on the row count.
template <typename Cache, typename PackedOf>
PackedConstant pack_once_per_layout(const Cache& cache, PackedOf packed_of,
                                    const dnnl::memory& plain, const dnnl::memory::desc& layout) {
  if (const auto* same = cache.find([&](const auto& entry) {
        const PackedConstant& p = packed_of(entry);
        return p && p.mem.get_desc() == layout;
      })) {
    return packed_of(*same);
  }
  return pack_constant(plain, layout);
}

// A kernel's packed weight (input slot `input`) as the engine stores it: its layout_key and
// bytes; none when layout_key cannot describe the layout (kiln compile's pack_weights).
// `plain_suffix`: how the packed elements map back to the node's constant when the kernel packed
// it shifted (Int8Weight::plain_suffix; engine/packed_layout.hpp).
std::vector<PackedWeight> weight_to_store(size_t input, const dnnl::memory& packed,
                                          std::string_view plain_suffix = {});
// The engine's packed weight mapped in `layout` when it was packed into exactly that layout
// (no copy); a null memory otherwise (another CPU's layout: the kernel packs again).
dnnl::memory stored_in_layout(const std::optional<PackedWeight>& stored,
                              const dnnl::memory::desc& layout, std::string_view plain_suffix = {});

// Appends `act` as eltwise post-ops (HardSigmoid takes two); false when oneDNN has no match.
bool append_activation(dnnl::post_ops& ops, const ops::FusedActivation& act);
// A fused activation applied in place after a kernel that cannot fuse it cheaply (oneDNN's
// sgemm-based convolution runs most eltwise post-ops element by element): Kiln's vector loops
// for the piecewise-linear ones, oneDNN's eltwise for the others. Not thread-safe (a kernel's).
class ActivationPass {
 public:
  explicit ActivationPass(const ops::FusedActivation& act) : act_(act) {}
  bool none() const { return act_.kind == ops::Activation::None; }
  void run(float* data, int64_t n, Stream& stream);
  // The same over bfloat16 storage, for SiLU and Gelu (Kiln's loops, widened a few hundred
  // elements at a time and rounded back): oneDNN 2.6's bfloat16 swish post-op cost its jit
  // convolutions more than the convolution itself on EfficientNet's wide layers.
  void run_bf16(uint16_t* data, int64_t n);

 private:
  ops::FusedActivation act_;
  dnnl::eltwise_forward prim_;
  int64_t prim_n_ = -1;
  int threads_ = 1;  // threads_for_work of prim_n_ elements, held around prim_
  dnnl::memory::desc md_;
};

// `act` when a float32 product applies it as Kiln's Gelu loop after the product (gelu_loop.hpp:
// faster than oneDNN's gelu_erf post-op), else none (it stays a post-op).
ops::FusedActivation gelu_pass(const ops::FusedActivation& act, DataType type);

// The fused activation of an ai.kiln node; None for plain ONNX ops. Throws for a malformed one.
ops::FusedActivation node_activation(const ir::Node& node);

// Empty when the node's fused activation (none for plain ONNX ops) becomes oneDNN post-ops,
// else why not (a malformed activation's message too).
std::string check_activation_post_ops(const ir::Node& node);

// Logs (info level, once per op type) when oneDNN picked its slow reference implementation.
void note_implementation(const ir::Node& node, const char* impl);

// Which input of a binary node is a 4-D tensor that the other scales channel by channel
// ([N or 1, C, 1, 1] against [N, C, H, W], the other's rank up to 4: a squeeze-and-excitation
// Mul), by their declared shapes; -1 if neither.
int per_channel_full_operand(const ir::Node& node);

// Declared type checks on a node, for KernelDef::check: "" when fine, else the reason.
// Input `i` (must be present unless `optional`) is a float32 tensor of known rank in
// [min_rank, max_rank].
std::string check_f32_input(const ir::Node& node, size_t i, size_t min_rank, size_t max_rank,
                            bool optional = false);
// Every output is a float32 tensor.
std::string check_f32_outputs(const ir::Node& node);
// The same for the element type `type`.
std::string check_float_input(const ir::Node& node, size_t i, DataType type, size_t min_rank,
                              size_t max_rank, bool optional = false);
std::string check_float_outputs(const ir::Node& node, DataType type);
// The float type a convolution or matrix product computes in: input 0's when it is float32, or
// bfloat16 on a CPU with bfloat16 instructions; nullopt otherwise.
std::optional<DataType> compute_type(const ir::Node& node);
// The constant data of input i, when it is an initializer or the output of a Constant node
// (its `value` attribute).
const Tensor* constant_input(const ir::Node& node, size_t i);
// Every dim a number or a named symbol: two such shapes that compare equal are equal at run
// time (an unnamed dynamic dim could be anything).
bool known_dims(const Shape& s);
// Declared dims of input i (-1 for non-static), empty optional when the rank is unknown.
std::optional<std::vector<int64_t>> declared_dims(const ir::Node& node, size_t i);
// Throws InvalidArgument naming the node when a float32 tensor of `dims` would pass
// Tensor::max_bytes (or overflow): checked before a primitive is built, because oneDNN's own size
// arithmetic overflows on such shapes instead of failing cleanly.
void check_output_fits(const ir::Node& node, const std::vector<int64_t>& dims);

}  // namespace kiln::backends::cpu
