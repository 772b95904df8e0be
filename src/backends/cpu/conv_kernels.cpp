// Convolution on the CPU: Conv and ai.kiln FusedConv through oneDNN.
//
// Two ways, by the layouts the executor chose (runtime/layout_plan.hpp):
// - row-major in and out: oneDNN on plain NCHW activations and plain OIHW weights, which it
//   reads in place (weights stay the engine file's mapped pages); the activation in one pass
//   over the output (oneDNN's sgemm-based convolution runs eltwise post-ops slowly); grouped
//   convolutions whose groups are not whole channel blocks always take this way;
// - a blocked input or output (2-D only): oneDNN's direct kernels on nChw16c / nChw8c, weights
//   in the layout oneDNN picks (packed by `kiln compile` and mapped from the engine, or packed
//   once from the plain constant), the activation as a post-op (its jit kernels apply it in
//   registers); a row-major side is reordered inside the kernel.
// Depthwise 2-D convolutions on row-major tensors get Kiln's own loop (oneDNN's fast depthwise
// kernels want blocked or channels-last layouts); blocked ones go to oneDNN.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "backends/cpu/cpu_backend.hpp"
#include "backends/cpu/onednn_common.hpp"
#include "backends/cpu/vector_math.hpp"
#include "backends/cpu/work_threads.hpp"
#include "backends/kernel_table.hpp"
#include "backends/shape_cache.hpp"
#include "core/log.hpp"
#include "ops/conv_utils.hpp"

namespace kiln::backends::cpu {
namespace {

using ops::window::WindowGeometry;

std::vector<int64_t> spatial(const std::vector<int64_t>& dims) {
  return std::vector<int64_t>(dims.begin() + 2, dims.end());
}

// Float32, or bfloat16 (a `--bf16` engine) on a CPU with bfloat16 instructions: X, W, B and Y
// all of that type, oneDNN accumulating in float32.
std::string check_conv(const ir::Node& node) {
  const std::optional<DataType> type = compute_type(node);
  if (!type) return check_f32_input(node, 0, 3, 5);
  if (std::string why = check_float_input(node, 0, *type, 3, 5); !why.empty()) return why;
  if (std::string why = check_float_input(node, 1, *type, 3, 5); !why.empty()) return why;
  if (std::string why = check_float_input(node, 2, *type, 1, 1, true); !why.empty()) return why;
  if (std::string why = check_float_outputs(node, *type); !why.empty()) return why;
  // FusedConv's residual Z (passes/fuse_conv_residual): added by oneDNN's sum post-op before
  // the activation, in the output's layout.
  if (node.inputs().size() > 4 || (node.inputs().size() == 4 && node.domain().empty())) {
    return "more than 3 inputs";
  }
  if (node.inputs().size() == 4) {
    if (std::string why = check_float_input(node, 3, *type, 3, 5); !why.empty()) return why;
    const Shape* z = node.input(3)->type().shape ? &*node.input(3)->type().shape : nullptr;
    const Shape* y = node.output(0)->type().shape ? &*node.output(0)->type().shape : nullptr;
    if (!z || !y || !(*z == *y)) return "the residual's shape is not the result's";
  }
  if (node.attribute("input_max")) return "FusedConv's input_max (a clipped input)";
  if (node.input(0)->type().shape->rank() != node.input(1)->type().shape->rank()) {
    return "X and W ranks differ";
  }
  ops::AttrReader attrs(node);
  if (attrs.attr_int("group", 1) < 1) return "group < 1";
  ops::FusedActivation act;
  try {
    act = node_activation(node);
  } catch (const Error& e) {
    return e.message();
  }
  dnnl::post_ops probe;
  if (!append_activation(probe, act)) return "activation has no oneDNN post-op";
  return "";
}

// Geometry of one input shape, validated like the reference kernel validates it.
struct ConvGeometry {
  WindowGeometry g;
  std::vector<int64_t> out_dims;
  int64_t group = 1;
};

ConvGeometry conv_geometry(const ir::Node& node, const DeviceTensor& x, const DeviceTensor& w) {
  ops::AttrReader attrs(node);
  ConvGeometry cg;
  cg.group = attrs.attr_int("group", 1);
  attrs.check(x.dims.size() >= 3 && w.dims.size() == x.dims.size(),
              "X {} and W {} must have the same rank >= 3", dims_to_string(x.dims),
              dims_to_string(w.dims));
  const int64_t c = x.dims[1], m = w.dims[0];
  attrs.check(c % cg.group == 0 && m % cg.group == 0 && w.dims[1] * cg.group == c,
              "W {} does not match {} input channels in {} groups", dims_to_string(w.dims), c,
              cg.group);
  std::vector<int64_t> kernel = spatial(w.dims);
  if (attrs.has_attr("kernel_shape")) {
    attrs.check(attrs.attr_ints("kernel_shape") == kernel, "kernel_shape does not match W {}",
                dims_to_string(w.dims));
  }
  cg.g = ops::window::forward_geometry(attrs, spatial(x.dims), kernel, false);
  cg.out_dims = {x.dims[0], m};
  cg.out_dims.insert(cg.out_dims.end(), cg.g.out.begin(), cg.g.out.end());
  check_output_fits(node, cg.out_dims);
  return cg;
}

void check_bias(const ir::Node& node, const DeviceTensor* b, int64_t m) {
  if (!b) return;
  KILN_CHECK_ARG(b->dims.size() == 1 && b->dims[0] == m,
                 "node {}: B must be a 1-D float tensor of {} elements, got {}", node.label(), m,
                 dims_to_string(b->dims));
}

class OnednnConv final : public Kernel {
 public:
  // The fused activation runs as a pass of its own over the output: oneDNN's sgemm-based
  // convolution applies eltwise post-ops more slowly than that pass (Relu included; measured on
  // ResNet-50 and MobileNetV2).
  explicit OnednnConv(const ir::Node& node)
      : node_(node),
        act_(node_activation(node)),
        after_(act_),
        type_(node.input(0)->type().dtype),
        dt_(dnnl_type(type_)),
        residual_(node.inputs().size() > 3 && node.input(3)) {}
  std::string_view name() const override { return "onednn.conv"; }

  BlockedLayouts blocked_layouts() const override {
    auto x = declared_dims(node_, 0), w = declared_dims(node_, 1);
    bool ok = x && x->size() == 4;
    const int64_t group = ops::AttrReader(node_).attr_int("group", 1);
    if (ok && group > 1) {
      // oneDNN's jit kernels for grouped convolutions on blocked layouts want whole blocks of
      // channels in each group (or one channel: depthwise); otherwise it has only its reference
      // kernel there (ShuffleNet's 1x1 convolutions in 4 groups of 34 channels: ~100 ms each),
      // where on row-major tensors its gemm convolution takes the groups in a few ms.
      const int64_t c = (*x)[1], m = w && !w->empty() ? (*w)[0] : -1, b = cpu_channel_block();
      const bool depthwise = c == group && m == group;
      ok = depthwise || (c > 0 && m > 0 && (c / group) % b == 0 && (m / group) % b == 0);
    }
    // The residual is read in the output's layout (it becomes the primitive's dst before the
    // sum post-op adds the convolution to it).
    return {.input0 = ok, .output0 = ok, .follows = residual_ ? 3 : -1};
  }

  // The executor calls this at open for every layout (row-major too). With static shapes the
  // primitive is built here, so the first run is not slower. A blocked one whose weights the
  // engine does not store packed (an ONNX model opened directly, another CPU's engine) is built
  // on the first run instead: packing into fresh memory costs ResNet-50 ~50-250 ms on the shared
  // VM, most of onnxruntime's session creation. KILN_CPU_PACK_AT_OPEN=1 does it at open.
  void set_layouts(Layout input0, Layout output0) override {
    in_block_ = input0.block;
    out_block_ = output0.block;
    cache_.clear();
    if (blocked() && !pack_at_open() && !stored_w_) return;
    prepare_declared();
  }

  // The packed weights of the declared shapes, for the engine (compile time).
  std::vector<PackedWeight> pack_weights() override {
    // bfloat16 weights are packed when the engine opens (the engine stores float32 layouts).
    if (!blocked() || type_ != DataType::Float32) return {};
    // Weights' layout does not depend on the batch: a dynamic one is packed for batch 1, and a
    // run of another batch finds the stored bytes fit its primitive.
    const Entry* e = prepare_declared(/*any_batch=*/true);
    if (!e || !e->packed_w) return {};
    return weight_to_store(1, e->packed_w);
  }

  void use_packed_weight(PackedWeight packed) override {
    if (packed.input == 1) stored_w_ = std::move(packed);
  }

  void run(std::span<const DeviceTensor> in, KernelOutputs& out, Stream& stream) override {
    const DeviceTensor& x = in[0];
    const DeviceTensor& w = in[1];
    const DeviceTensor* b = in.size() > 2 && in[2].defined() ? &in[2] : nullptr;
    KILN_CHECK(x.layout.block == in_block_, ErrorCode::Internal,
               "node {}: input in layout block {}, prepared for {}", node_.label(), x.layout.block,
               in_block_);
    const Entry& e = prepared(x, w, b != nullptr);
    check_bias(node_, b, w.dims[0]);
    DeviceTensor y = out.allocate(0, type_, e.out_dims);
    KILN_CHECK(y.layout.block == out_block_, ErrorCode::Internal,
               "node {}: output in layout block {}, prepared for {}", node_.label(), y.layout.block,
               out_block_);
    if (y.numel() == 0) return;
    KILN_CHECK_ARG(x.numel() > 0, "node {}: empty input {} for a non-empty output", node_.label(),
                   dims_to_string(x.dims));
    const DeviceTensor* z = residual_ ? &in[3] : nullptr;
    if (z) {
      KILN_CHECK_ARG(z->dims == y.dims && z->dtype == y.dtype,
                     "node {}: the residual is {} {}, the result {} {}", node_.label(),
                     dtype_name(z->dtype), dims_to_string(z->dims), dtype_name(y.dtype),
                     dims_to_string(y.dims));
      KILN_CHECK(z->layout == y.layout, ErrorCode::Internal,
                 "node {}: the residual in layout {}, the result in {}", node_.label(),
                 z->layout.to_string(), y.layout.to_string());
    }
    ThreadLimit limit(e.threads);
    if (e.blocked_way) {
      run_blocked(e, x, w, b, z, y, stream);
      return;
    }
    // The sum post-op adds the convolution to what dst holds: the residual (in place when the
    // planner gave the result the residual's space).
    if (z && z->data != y.data) std::memcpy(y.data, z->data, y.nbytes());
    std::unordered_map<int, dnnl::memory> args = {
        {DNNL_ARG_SRC, wrap(e.pd.src_desc(), x.data)},
        {DNNL_ARG_WEIGHTS, wrap(e.pd.weights_desc(), w.data)},
        {DNNL_ARG_DST, wrap(e.pd.dst_desc(), y.data)}};
    if (b) args[DNNL_ARG_BIAS] = wrap(e.pd.bias_desc(), b->data);
    args[DNNL_ARG_SCRATCHPAD] = e.scratch;
    e.prim.execute(dnnl_stream(stream), args);
    if (type_ == DataType::Float32) after_.run(static_cast<float*>(y.data), y.numel(), stream);
  }

 private:
  struct Entry {
    std::vector<int64_t> x_dims, w_dims;
    bool bias = false;
    // oneDNN's direct kernels on the layouts it picks (blocked activations, or a row-major side
    // reordered here) rather than the plain way.
    bool blocked_way = false;
    std::vector<int64_t> out_dims;
    int threads = 1;  // threads_for_work of the convolution, held when creating and running it
    dnnl::convolution_forward::primitive_desc pd;
    dnnl::convolution_forward prim;
    // Blocked way only: weights packed at open (when constant), and the reorders of a
    // row-major input or output with their buffers.
    dnnl::memory::desc plain_w_md;
    const void* packed_from = nullptr;  // the constant weights `packed_w` was made from
    mutable dnnl::memory packed_w;      // oneDNN's execute takes non-const memories
    std::optional<dnnl::reorder> src_reorder, dst_reorder;
    mutable dnnl::memory src_buf, dst_buf, w_buf;
    std::shared_ptr<void> packed_owner;
    // The primitive's scratchpad, owned here (scratchpad_mode::user): oneDNN 2.6's library
    // scratchpad is per thread, and a convolution created or first run on one thread then run on
    // another crashes in it (a session run from two Python threads, run_async). The kernel's runs
    // are serialized by its executor, so one per entry is enough.
    mutable dnnl::memory scratch;
  };

  // An attribute whose scratchpad the kernel passes itself (see Entry::scratch).
  static dnnl::primitive_attr user_scratchpad(dnnl::primitive_attr attr = {}) {
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    return attr;
  }
  static void make_scratch(Entry& e) { e.scratch = dnnl::memory(e.pd.scratchpad_desc(), engine()); }

  bool blocked() const { return in_block_ > 0 || out_block_ > 0; }

  // The entry for the declared input shapes, when they are static (but for the batch, taken as
  // 1, with `any_batch`).
  const Entry* prepare_declared(bool any_batch = false) {
    auto x = declared_dims(node_, 0), w = declared_dims(node_, 1);
    if (any_batch && x && !x->empty() && (*x)[0] == -1) (*x)[0] = 1;
    if (!x || !w || std::count(x->begin(), x->end(), -1) != 0 ||
        std::count(w->begin(), w->end(), -1) != 0) {
      return nullptr;
    }
    DeviceTensor xt{type_, *x, nullptr,
                    in_block_ ? Layout::channel_blocked(in_block_) : Layout::row_major()};
    DeviceTensor wt{type_, *w, nullptr};
    return &prepared(xt, wt, node_.input(2) != nullptr);
  }
  static bool pack_at_open() {
    static const bool on = [] {
      const char* e = std::getenv("KILN_CPU_PACK_AT_OPEN");
      return e && std::string_view(e) == "1";
    }();
    return on;
  }

  void run_blocked(const Entry& e, const DeviceTensor& x, const DeviceTensor& w,
                   const DeviceTensor* b, const DeviceTensor* z, const DeviceTensor& y,
                   Stream& stream) {
    dnnl::stream& s = dnnl_stream(stream);
    dnnl::memory src = wrap(tensor_desc(x), x.data);
    if (e.src_reorder) {
      e.src_reorder->execute(s, src, e.src_buf);
      src = e.src_buf;
    }
    dnnl::memory weights = e.packed_w;
    if (w.data != e.packed_from || !e.packed_w) {
      // Weights that are not the constant packed at open: reorder them now.
      weights = e.w_buf;
      dnnl::memory plain_w = wrap(e.plain_w_md, w.data);
      dnnl::reorder(plain_w, weights).execute(s, plain_w, weights);
    }
    dnnl::memory dst = e.dst_reorder ? e.dst_buf : wrap(tensor_desc(y), y.data);
    if (z && e.dst_reorder) {
      dnnl::memory plain_z = wrap(tensor_desc(*z), z->data);
      dnnl::reorder(plain_z, dst).execute(s, plain_z, dst);
    } else if (z && z->data != y.data) {
      std::memcpy(y.data, z->data, tensor_desc(y).get_size());
    }
    std::unordered_map<int, dnnl::memory> args = {
        {DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_DST, dst}};
    if (b) args[DNNL_ARG_BIAS] = wrap(e.pd.bias_desc(), b->data);
    args[DNNL_ARG_SCRATCHPAD] = e.scratch;
    e.prim.execute(s, args);
    if (e.dst_reorder) {
      dnnl::memory plain_y = wrap(tensor_desc(y), y.data);
      e.dst_reorder->execute(s, e.dst_buf, plain_y);
    }
    if (silu_after()) {
      // Element by element over the storage (a blocked tensor's zero padding stays 0).
      const auto n = static_cast<int64_t>(tensor_desc(y).get_size() / dtype_size(type_));
      if (type_ == DataType::Float32) {
        after_.run(static_cast<float*>(y.data), n, stream);
      } else {
        after_.run_bf16(static_cast<uint16_t*>(y.data), n);
      }
    }
  }

  // SiLU runs as Kiln's vector pass after the blocked-way convolution, not as oneDNN's swish
  // post-op (2 cycles an element inside the jit convolutions: EfficientNet-B0's 112x112 16 -> 96
  // expansion 1160 us with it, 445 with Relu; in bfloat16 875 us with it).
  bool silu_after() const {
    return (type_ == DataType::Float32 || type_ == DataType::BFloat16) &&
           act_.kind == ops::Activation::Silu;
  }

  // A float32 3x3 convolution of stride 1 runs on oneDNN 2.6's Winograd kernels (F(2x2,3x3) or
  // F(4x4,3x3), avx512_core): 1.3-2.7x faster than the direct ones on ResNet-50's 3x3 layers at
  // batch 1 (64 channels at 56x56: 2101 -> 1030 us, 512 at 7x7: 1852 -> 1431), within 1.2e-6
  // relative L2 of them. Not with few channels (3 -> 64 at 224x224 was 2.3x slower), and not
  // when the engine stores weights packed for the direct kernel (an engine compiled before this
  // rule: its plain weights may be gone). KILN_CPU_WINOGRAD=0 keeps the direct kernels.
  bool winograd_fits(const std::vector<int64_t>& wd, const dnnl::memory::dims& strides,
                     const dnnl::memory::dims& dil) const {
    static const bool off = [] {
      const char* v = std::getenv("KILN_CPU_WINOGRAD");
      return v && std::string_view(v) == "0";
    }();
    if (off || type_ != DataType::Float32 || stored_w_ || wd.size() != 4) return false;
    if (wd[0] < 16 || wd[1] < 16 || wd[2] != 3 || wd[3] != 3) return false;
    return std::all_of(strides.begin(), strides.end(), [](auto v) { return v == 1; }) &&
           std::all_of(dil.begin(), dil.end(), [](auto v) { return v == 0; });
  }

  // Convolutions wider than 1x1 with 64+ channels and small outputs run on oneDNN 2.6's brgemm
  // convolution, which takes only channels-last tensors: the kernel reorders its blocked input
  // and output around it. The direct kernels read weights less well where few pixels share
  // them. On Zen 5 at batch 1 (`kiln profile`, 1 thread, in the model):
  // - float32, strided, output 14x14 or less: ResNet-50's layer4.0 3x3 of stride 2 1817 -> 1250
  //   us, layer3.0's 1216 -> 1022; larger outputs lose the gain to the reorders (layer2.0's,
  //   56x56 in: 1085 -> 1142); stride 1 stays on Winograd (level with brgemm at 7x7, far ahead
  //   above);
  // - bfloat16 (no Winograd), output 7x7 or less: layer4's 3x3 718-760 -> 575-660 us; at 14x14
  //   no gain (522-544 -> 531-598).
  // KILN_CPU_NHWC_CONV=0 keeps the direct kernels.
  bool channels_last_fits(const std::vector<int64_t>& wd, const dnnl::memory::dims& strides,
                          const std::vector<int64_t>& out_dims) const {
    static const bool off = [] {
      const char* v = std::getenv("KILN_CPU_NHWC_CONV");
      return v && std::string_view(v) == "0";
    }();
    if (off || wd.size() != 4 || out_dims.size() != 4) return false;
    if ((wd[2] == 1 && wd[3] == 1) || wd[0] < 64 || wd[1] < 64) return false;
    const int64_t pixels = out_dims[2] * out_dims[3];
    if (type_ == DataType::BFloat16) return pixels <= 7 * 7;
    const bool strided = std::any_of(strides.begin(), strides.end(), [](auto v) { return v > 1; });
    return type_ == DataType::Float32 && strided && pixels <= 14 * 14;
  }

  // The primitive for the blocked way, weights packed from the constant when there is one.
  void prepare_blocked(Entry& e, const DeviceTensor& x, const dnnl::memory::desc& bias_md,
                       const dnnl::memory::dims& strides, const dnnl::memory::dims& dil,
                       const dnnl::memory::dims& pad_l, const dnnl::memory::dims& pad_r) {
    using tag = dnnl::memory::format_tag;
    auto any = [&](const std::vector<int64_t>& d) {
      return dnnl::memory::desc(dnnl::memory::dims(d), dt_, tag::any);
    };
    std::vector<int64_t> wd = e.plain_w_md.dims();
    dnnl::memory::desc src_md = in_block_ ? blocked_desc(x.dims, in_block_, dt_) : any(x.dims);
    dnnl::memory::desc dst_md =
        out_block_ ? blocked_desc(e.out_dims, out_block_, dt_) : any(e.out_dims);
    dnnl::post_ops ops;
    if (residual_) ops.append_sum(1.f);
    if (!silu_after()) append_activation(ops, act_);
    dnnl::primitive_attr attr = user_scratchpad();
    attr.set_post_ops(ops);
    dnnl::algorithm alg = dnnl::algorithm::convolution_direct;
    auto make = [&] {
      return dnnl::convolution_forward::primitive_desc(
          dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference, alg, src_md, any(wd),
                                          bias_md, dst_md, strides, dil, pad_l, pad_r),
          attr, engine());
    };
    bool made = false;
    if (channels_last_fits(wd, strides, e.out_dims)) {
      const dnnl::memory::desc blocked_src = src_md, blocked_dst = dst_md;
      src_md = dnnl::memory::desc(dnnl::memory::dims(x.dims), dt_, tag::nhwc);
      dst_md = dnnl::memory::desc(dnnl::memory::dims(e.out_dims), dt_, tag::nhwc);
      e.pd = make();
      made = std::string_view(e.pd.impl_info_str()).rfind("brg", 0) == 0;
      if (!made) {
        // No brgemm convolution on this CPU (it wants AVX-512): the blocked direct one.
        src_md = blocked_src;
        dst_md = blocked_dst;
      }
    } else if (winograd_fits(wd, strides, dil)) {
      try {
        alg = dnnl::algorithm::convolution_winograd;
        e.pd = make();
        made = true;
      } catch (const dnnl::error&) {
        alg = dnnl::algorithm::convolution_direct;  // not for these layouts or post-ops
      }
    }
    if (!made) e.pd = make();
    if (std::string_view(e.pd.impl_info_str()).rfind("ref", 0) == 0) {
      // Left free, the row-major side can lead oneDNN to its reference kernel (a depthwise
      // convolution writing `any` picks channels-last there): blocked on both sides instead,
      // with the reorder in this kernel.
      int b = std::max(in_block_, out_block_);
      if (b == 0) b = cpu_channel_block();  // a bfloat16 one with row-major sides
      src_md = blocked_desc(x.dims, b, dt_);
      dst_md = blocked_desc(e.out_dims, b, dt_);
      e.pd = make();
    }
    e.prim = dnnl::convolution_forward(e.pd);
    make_scratch(e);
    note_implementation(node_, e.pd.impl_info_str());
    const dnnl::memory::desc x_md = tensor_desc(x);
    if (e.pd.src_desc() != x_md) {
      e.src_buf = dnnl::memory(e.pd.src_desc(), engine());
      e.src_reorder = dnnl::reorder(dnnl::memory(x_md, engine(), nullptr), e.src_buf);
    }
    const dnnl::memory::desc y_md =
        out_block_ ? blocked_desc(e.out_dims, out_block_, dt_) : plain_desc(e.out_dims, dt_);
    if (e.pd.dst_desc() != y_md) {
      e.dst_buf = dnnl::memory(e.pd.dst_desc(), engine());
      e.dst_reorder = dnnl::reorder(e.dst_buf, dnnl::memory(y_md, engine(), nullptr));
    }
    const Tensor* wc = constant_input(node_, 1);
    if (!wc || wc->dims() != e.w_dims || wc->dtype() != type_) {
      e.w_buf = dnnl::memory(e.pd.weights_desc(), engine());
    } else if (dnnl::memory mapped = stored_in_layout(stored_w_, e.pd.weights_desc())) {
      // Packed at compile time into exactly this layout: the engine's mapped bytes, no copy.
      e.packed_w = mapped;
      e.packed_from = wc->raw_data();
    } else {
      const dnnl::memory::desc wmd = e.pd.weights_desc();
      if (stored_w_) {
        log_info(
            "node {}: the engine's packed weights ({}) do not fit this CPU's kernel ({}): "
            "packing them again",
            node_.label(), stored_w_->format, layout_key(wmd));
      }
      // Packed once here: every run then reads the packed copy. From the engine's packed bytes
      // when it has them: an engine may store a weight only packed (its plain constant is then
      // filled only if something else reads it).
      e.packed_w = owned_memory(e.pd.weights_desc(), e.packed_owner);
      dnnl::memory src_w = wrap(e.plain_w_md, wc->raw_data());
      if (std::optional<dnnl::memory::desc> stored =
              stored_w_ ? desc_from_layout_key(stored_w_->format, stored_w_->data.nbytes())
                        : std::nullopt;
          stored && stored->dims() == wmd.dims()) {
        src_w = wrap(*stored, stored_w_->data.raw_data());
      }
      dnnl::stream s(engine());
      dnnl::reorder(src_w, e.packed_w).execute(s, src_w, e.packed_w);
      s.wait();
      e.packed_from = wc->raw_data();
    }
  }

  const Entry& prepared(const DeviceTensor& x, const DeviceTensor& w, bool bias) {
    if (const Entry* hit = cache_.find([&](const Entry& e) {
          return e.x_dims == x.dims && e.w_dims == w.dims && e.bias == bias;
        })) {
      return *hit;
    }
    ConvGeometry cg = conv_geometry(node_, x, w);
    Entry e;
    e.x_dims = x.dims;
    e.w_dims = w.dims;
    e.bias = bias;
    e.out_dims = cg.out_dims;
    if (shape_numel(cg.out_dims) > 0 && shape_numel(x.dims) > 0) {
      const size_t nsp = cg.g.nsp;
      dnnl::memory::dims strides, dil, pad_l, pad_r;
      for (size_t d = 0; d < nsp; ++d) {
        strides.push_back(cg.g.strides[d]);
        dil.push_back(cg.g.dilations[d] - 1);  // oneDNN counts the gaps, ONNX the step
        pad_l.push_back(cg.g.pad_begin(d));
        pad_r.push_back(cg.g.pad_end(d));
      }
      // Grouped weights are the same bytes viewed as (G, M/G, C/G, k...).
      std::vector<int64_t> wd = w.dims;
      if (cg.group > 1) {
        wd[0] /= cg.group;
        wd.insert(wd.begin(), cg.group);
      }
      dnnl::memory::desc bias_md = bias ? plain_desc({w.dims[0]}, dt_) : dnnl::memory::desc();
      e.plain_w_md = plain_desc(wd, dt_);
      // Each output element sums (C / group) x kernel products: W's elements per output channel.
      const double outputs = static_cast<double>(shape_numel(cg.out_dims));
      const double w_numel = static_cast<double>(shape_numel(w.dims));
      e.threads = threads_for_work(
          2.0 * outputs * w_numel / static_cast<double>(std::max<int64_t>(w.dims[0], 1)),
          4.0 * (static_cast<double>(shape_numel(x.dims)) + w_numel + outputs));
      ThreadLimit limit(e.threads);
      try {
        // bfloat16 2-D convolutions take the direct kernels whatever the layouts: on plain
        // NCHW, oneDNN has only its gemm convolution for them (1.5x slower on ResNet-50's 3x3
        // layers, measured).
        if (blocked() || (type_ != DataType::Float32 && nsp == 2)) {
          KILN_CHECK(nsp == 2, ErrorCode::Internal, "node {}: a blocked layout for a {}-D conv",
                     node_.label(), nsp);
          e.blocked_way = true;
          prepare_blocked(e, x, bias_md, strides, dil, pad_l, pad_r);
          return cache_.add(std::move(e));
        }
        // Float32: the activation is a pass of its own (see after_); others fuse it.
        dnnl::primitive_attr attr = user_scratchpad();
        dnnl::post_ops ops;
        if (residual_) ops.append_sum(1.f);
        if (type_ != DataType::Float32) append_activation(ops, act_);
        attr.set_post_ops(ops);
        e.pd = dnnl::convolution_forward::primitive_desc(
            dnnl::convolution_forward::desc(
                dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                plain_desc(x.dims, dt_), plain_desc(wd, dt_), bias_md, plain_desc(cg.out_dims, dt_),
                strides, dil, pad_l, pad_r),
            attr, engine());
        e.prim = dnnl::convolution_forward(e.pd);
        make_scratch(e);
        note_implementation(node_, e.pd.impl_info_str());
      } catch (const dnnl::error& err) {
        fail(ErrorCode::Unsupported, "node {}: oneDNN has no convolution for X {} W {}: {}",
             node_.label(), dims_to_string(x.dims), dims_to_string(w.dims), err.what());
      }
    }
    return cache_.add(std::move(e));
  }

  const ir::Node& node_;
  ops::FusedActivation act_;
  ActivationPass after_;
  DataType type_;               // float32 or bfloat16 (check_conv)
  dnnl::memory::data_type dt_;  // the same for oneDNN
  bool residual_;               // FusedConv's Z (input 3): y = act(conv + B + Z)
  int in_block_ = 0, out_block_ = 0;
  ShapeCache<Entry> cache_;               // an entry per input shape seen (bounded)
  std::optional<PackedWeight> stored_w_;  // the engine's packed W, when it stores one
};

// Depthwise: group == C == M, 2-D. W is (C, 1, kh, kw).
std::string check_depthwise(const ir::Node& node) {
  if (std::string why = check_conv(node); !why.empty()) return why;
  if (node.inputs().size() > 3) return "a residual input (onednn.conv adds it)";
  // Kiln's own loop is float32 (bfloat16 ones go to oneDNN).
  if (node.input(0)->type().dtype != DataType::Float32) return "not float32";
  auto x = declared_dims(node, 0), w = declared_dims(node, 1);
  if (x->size() != 4) return "not a 2-D convolution";
  int64_t group = ops::AttrReader(node).attr_int("group", 1);
  if ((*x)[1] < 0 || (*w)[0] < 0 || (*w)[1] < 0) return "channel counts are not static";
  if (group == 1 || group != (*x)[1] || (*w)[0] != group || (*w)[1] != 1) return "not depthwise";
  return "";
}

class DepthwiseConv final : public Kernel {
 public:
  explicit DepthwiseConv(const ir::Node& node)
      : node_(node), act_(node_activation(node)), after_(act_) {}
  std::string_view name() const override { return "cpu.depthwise_conv"; }

  BlockedLayouts blocked_layouts() const override { return {.input0 = true, .output0 = true}; }
  // Blocked tensors go to oneDNN's depthwise kernels (the loop below reads row-major planes).
  void set_layouts(Layout input0, Layout output0) override {
    if (input0.is_row_major() && output0.is_row_major()) return;
    blocked_ = std::make_unique<OnednnConv>(node_);
    if (stored_w_) blocked_->use_packed_weight(std::move(*stored_w_));
    stored_w_.reset();
    blocked_->set_layouts(input0, output0);
  }
  std::vector<PackedWeight> pack_weights() override {
    return blocked_ ? blocked_->pack_weights() : std::vector<PackedWeight>{};
  }
  void use_packed_weight(PackedWeight packed) override { stored_w_ = std::move(packed); }

  void run(std::span<const DeviceTensor> in, KernelOutputs& out, Stream& stream) override {
    if (blocked_) {
      blocked_->run(in, out, stream);
      return;
    }
    const DeviceTensor& x = in[0];
    const DeviceTensor& w = in[1];
    const DeviceTensor* b = in.size() > 2 && in[2].defined() ? &in[2] : nullptr;
    if (!geo_ || geo_->x_dims != x.dims || geo_->w_dims != w.dims) {
      geo_ = Geo{x.dims, w.dims, conv_geometry(node_, x, w)};
    }
    const ConvGeometry& cg = geo_->cg;
    KILN_CHECK_ARG(cg.group == x.dims[1] && w.dims[1] == 1 && w.dims[0] == cg.group,
                   "node {}: W {} is not depthwise for X {}", node_.label(), dims_to_string(w.dims),
                   dims_to_string(x.dims));
    check_bias(node_, b, w.dims[0]);
    DeviceTensor y = out.allocate(0, DataType::Float32, cg.out_dims);
    if (y.numel() == 0) return;
    DepthwiseArgs a;
    a.h = x.dims[2];
    a.w = x.dims[3];
    a.oh = cg.out_dims[2];
    a.ow = cg.out_dims[3];
    a.kh = w.dims[2];
    a.kw = w.dims[3];
    a.sh = cg.g.strides[0];
    a.sw = cg.g.strides[1];
    a.dh = cg.g.dilations[0];
    a.dw = cg.g.dilations[1];
    a.pt = cg.g.pad_begin(0);
    a.pl = cg.g.pad_begin(1);
    const int64_t planes = x.dims[0] * x.dims[1], channels = x.dims[1];
    const auto* px = static_cast<const float*>(x.data);
    const auto* pw = static_cast<const float*>(w.data);
    const auto* pb = b ? static_cast<const float*>(b->data) : nullptr;
    auto* py = static_cast<float*>(y.data);
    const ops::FusedActivation act = act_;
    // Piecewise-linear activations while the plane is in cache; the others in one oneDNN pass.
    const bool piecewise = is_piecewise_linear(act.kind);
    const size_t scratch_floats = depthwise_scratch_floats(a);
    const int threads =
        threads_for_work(2.0 * static_cast<double>(y.numel() * a.kh * a.kw),
                         4.0 * static_cast<double>(x.numel() + y.numel() + w.numel()));
#pragma omp parallel num_threads(threads) if (threads > 1)
    {
      std::vector<float> scratch(scratch_floats);
#pragma omp for schedule(static)
      for (int64_t p = 0; p < planes; ++p) {
        const int64_t c = p % channels;
        depthwise_plane(a, px + p * a.h * a.w, pw + c * a.kh * a.kw, pb ? pb[c] : 0.f,
                        py + p * a.oh * a.ow, scratch.data());
        if (piecewise) apply_activation(act, py + p * a.oh * a.ow, a.oh * a.ow);
      }
    }
    if (!piecewise) after_.run(py, y.numel(), stream);
  }

 private:
  struct Geo {
    std::vector<int64_t> x_dims, w_dims;
    ConvGeometry cg;
  };
  const ir::Node& node_;
  ops::FusedActivation act_;
  ActivationPass after_;
  std::optional<Geo> geo_;
  std::unique_ptr<OnednnConv> blocked_;
  std::optional<PackedWeight> stored_w_;  // handed to blocked_ when there is one
};

std::unique_ptr<Kernel> create_conv(const ir::Node& node) {
  return std::make_unique<OnednnConv>(node);
}
std::unique_ptr<Kernel> create_depthwise(const ir::Node& node) {
  return std::make_unique<DepthwiseConv>(node);
}

}  // namespace

KILN_REGISTER_KERNEL({.backend = "cpu",
                      .op_type = "Conv",
                      .name = "cpu.depthwise_conv",
                      .priority = 1,
                      .check = check_depthwise,
                      .create = create_depthwise});
KILN_REGISTER_KERNEL({.backend = "cpu",
                      .op_type = "Conv",
                      .name = "onednn.conv",
                      .check = check_conv,
                      .create = create_conv});
KILN_REGISTER_KERNEL({.backend = "cpu",
                      .domain = "ai.kiln",
                      .op_type = "FusedConv",
                      .name = "cpu.depthwise_conv",
                      .priority = 1,
                      .check = check_depthwise,
                      .create = create_depthwise});
// The result may take the residual's space (the sum post-op reads each element of dst before
// it writes it).
KILN_REGISTER_KERNEL({.backend = "cpu",
                      .domain = "ai.kiln",
                      .op_type = "FusedConv",
                      .name = "onednn.conv",
                      .in_place_inputs = {3},
                      .check = check_conv,
                      .create = create_conv});

}  // namespace kiln::backends::cpu
