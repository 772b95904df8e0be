#include "backends/cpu/onednn_common.hpp"

#include "backends/cpu/gelu_loop.hpp"
#include "backends/cpu/silu_loop.hpp"
#include "backends/cpu/work_threads.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <span>
#include <sstream>

#include <sys/mman.h>

#include <oneapi/dnnl/dnnl_debug.h>

#include "backends/cpu/vector_math.hpp"
#include "core/half_convert.hpp"
#include "core/log.hpp"
#include "core/tensor.hpp"

namespace kiln::backends::cpu {

using dnnl::algorithm;
using tag = dnnl::memory::format_tag;

dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

dnnl::stream& dnnl_stream(Stream& stream) {
  auto* s = dynamic_cast<CpuStream*>(&stream);
  KILN_CHECK(s, ErrorCode::Internal, "a cpu kernel was given another backend's stream");
  return s->dnnl();
}

dnnl::memory::data_type dnnl_type(DataType type) {
  switch (type) {
    case DataType::Float32:
      return dnnl::memory::data_type::f32;
    case DataType::BFloat16:
      return dnnl::memory::data_type::bf16;
    default:
      fail(ErrorCode::Internal, "no oneDNN CPU data type for {}", dtype_name(type));
  }
}

bool cpu_has_bf16() {
  static const bool has = [] {
    const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
    return isa == dnnl::cpu_isa::avx512_core_bf16 || isa == dnnl::cpu_isa::avx512_core_amx;
  }();
  return has;
}

dnnl::memory::desc plain_desc(const std::vector<int64_t>& dims, dnnl::memory::data_type type) {
  static const tag kTags[] = {tag::a,    tag::a,     tag::ab,    tag::abc,
                              tag::abcd, tag::abcde, tag::abcdef};
  KILN_CHECK(dims.size() <= 6, ErrorCode::Internal, "plain_desc: rank {} over 6", dims.size());
  dnnl::memory::dims d = dims.empty() ? dnnl::memory::dims{1} : dnnl::memory::dims(dims);
  return dnnl::memory::desc(d, type, kTags[dims.size()]);
}

dnnl::memory::desc blocked_desc(const std::vector<int64_t>& dims, int block,
                                dnnl::memory::data_type type) {
  KILN_CHECK(dims.size() == 4 && (block == 8 || block == 16), ErrorCode::Internal,
             "blocked_desc: dims {} with block {}", dims_to_string(dims), block);
  return dnnl::memory::desc(dnnl::memory::dims(dims), type,
                            block == 16 ? tag::nChw16c : tag::nChw8c);
}

dnnl::memory::desc tensor_desc(const DeviceTensor& t) {
  const dnnl::memory::data_type type = dnnl_type(t.dtype);
  return t.layout.is_row_major() ? plain_desc(t.dims, type)
                                 : blocked_desc(t.dims, t.layout.block, type);
}

dnnl::memory owned_memory(const dnnl::memory::desc& md, std::shared_ptr<void>& owner) {
  constexpr size_t kHuge = size_t{2} << 20;
  const size_t bytes = std::max<size_t>(md.get_size(), 1);
  const size_t align = bytes >= kHuge ? kHuge : 64;
  void* p = std::aligned_alloc(align, (bytes + align - 1) / align * align);
  KILN_CHECK(p, ErrorCode::Unavailable, "out of memory allocating {} bytes", bytes);
  if (align == kHuge) madvise(p, (bytes + align - 1) / align * align, MADV_HUGEPAGE);
  owner = std::shared_ptr<void>(p, [](void* q) { std::free(q); });
  return dnnl::memory(md, engine(), p);
}

PackedConstant pack_constant(const dnnl::memory& plain, const dnnl::memory::desc& layout) {
  PackedConstant p;
  p.mem = owned_memory(layout, p.owner);
  dnnl::stream s(engine());
  dnnl::memory src = plain;  // execute takes non-const memories; this one only shares the handle
  dnnl::reorder(src, p.mem).execute(s, src, p.mem);
  s.wait();
  return p;
}

namespace {

// The compensations oneDNN appends to int8 weights (per output channel, computed from the
// weights alone): for an s8 source, and for a source with a zero point.
constexpr uint64_t kStorableExtras = dnnl_memory_extra_flag_compensation_conv_s8s8 |
                                     dnnl_memory_extra_flag_compensation_conv_asymmetric_src;

}  // namespace

std::string layout_key(const dnnl::memory::desc& md) {
  const dnnl_memory_desc_t& d = md.data;
  if (d.format_kind != dnnl_blocked || (d.extra.flags & ~kStorableExtras) != 0) return "";
  // An int8 kernel's weights with their compensations after the blocked elements (oneDNN
  // writes them in the reorder): " extra FLAGS MASK ASYMMETRIC_MASK".
  std::string extra;
  if (d.extra.flags != dnnl_memory_extra_flag_none) {
    if (d.data_type != dnnl_s8) return "";
    extra = fmt::format(" extra {} {} {}", d.extra.flags, d.extra.compensation_mask,
                        d.extra.asymm_compensation_mask);
  }
  auto list = [&](const dnnl_dims_t& v, int n) {
    return fmt::format("{}",
                       fmt::join(std::span<const dnnl_dim_t>(v, static_cast<size_t>(n)), "x"));
  };
  const dnnl_blocking_desc_t& b = d.format_desc.blocking;
  std::string inner;
  for (int i = 0; i < b.inner_nblks; ++i) {
    inner += fmt::format("{}{}@{}", i ? "," : "", b.inner_blks[i], b.inner_idxs[i]);
  }
  return fmt::format(
      "onednn blocked {} dims {} padded {} offsets {} offset0 {} strides {} inner {}{}",
      dnnl_dt2str(d.data_type), list(d.dims, d.ndims), list(d.padded_dims, d.ndims),
      list(d.padded_offsets, d.ndims), d.offset0, list(b.strides, d.ndims),
      inner.empty() ? "none" : inner, extra);
}

std::vector<PackedWeight> weight_to_store(size_t input, const dnnl::memory& packed,
                                          std::string_view plain_suffix) {
  const dnnl::memory::desc md = packed.get_desc();
  std::string format = layout_key(md);
  if (format.empty()) return {};
  format += plain_suffix;
  Tensor bytes(DataType::UInt8, {static_cast<int64_t>(md.get_size())});
  std::memcpy(bytes.raw_data(), packed.get_data_handle(), md.get_size());
  return {{input, std::move(format), std::move(bytes)}};
}

dnnl::memory stored_in_layout(const std::optional<PackedWeight>& stored,
                              const dnnl::memory::desc& layout, std::string_view plain_suffix) {
  if (!stored || stored->format != layout_key(layout) + std::string(plain_suffix) ||
      stored->data.nbytes() != layout.get_size()) {
    return {};
  }
  return wrap(layout, stored->data.raw_data());
}

std::optional<dnnl::memory::desc> desc_from_layout_key(const std::string& key, size_t available) {
  // "onednn blocked f32 dims A padded B offsets C offset0 N strides S inner I" (layout_key);
  // f32 or s8 (an int8 kernel's weights).
  std::istringstream in(key);
  std::string w[19];
  size_t words = 0;
  for (std::string& x : w) {
    if (!(in >> x)) break;
    ++words;
  }
  std::string rest;
  if (in >> rest || (words != 15 && words != 19) || w[0] != "onednn" || w[1] != "blocked" ||
      (w[2] != "f32" && w[2] != "s8") || w[3] != "dims" || w[5] != "padded" || w[7] != "offsets" ||
      w[9] != "offset0" || w[11] != "strides" || w[13] != "inner" ||
      (words == 19 && (w[15] != "extra" || w[2] != "s8"))) {
    return std::nullopt;
  }
  const size_t element_bytes = w[2] == "s8" ? 1 : 4;
  auto list = [](const std::string& s, dnnl_dims_t& out) -> int {
    std::istringstream items(s);
    std::string item;
    int n = 0;
    while (std::getline(items, item, 'x')) {
      if (n == DNNL_MAX_NDIMS || item.empty()) return -1;
      out[n++] = std::stoll(item);
    }
    return n;
  };
  try {
    dnnl_memory_desc_t d{};
    d.data_type = element_bytes == 1 ? dnnl_s8 : dnnl_f32;
    d.format_kind = dnnl_blocked;
    d.ndims = list(w[4], d.dims);
    dnnl_blocking_desc_t& b = d.format_desc.blocking;
    if (d.ndims <= 0 || list(w[6], d.padded_dims) != d.ndims ||
        list(w[8], d.padded_offsets) != d.ndims || list(w[12], b.strides) != d.ndims) {
      return std::nullopt;
    }
    d.offset0 = std::stoll(w[10]);
    if (w[14] != "none") {
      std::istringstream blocks(w[14]);
      std::string blk;
      while (std::getline(blocks, blk, ',')) {
        const size_t at = blk.find('@');
        if (at == std::string::npos || b.inner_nblks == DNNL_MAX_NDIMS) return std::nullopt;
        b.inner_blks[b.inner_nblks] = std::stoll(blk.substr(0, at));
        b.inner_idxs[b.inner_nblks] = std::stoll(blk.substr(at + 1));
        if (b.inner_idxs[b.inner_nblks] < 0 || b.inner_idxs[b.inner_nblks] >= d.ndims)
          return std::nullopt;
        ++b.inner_nblks;
      }
    }
    // The last element's offset, from the description itself (an engine file is input: the
    // layout must not lead a reorder past the stored bytes).
    unsigned __int128 last = static_cast<unsigned __int128>(d.offset0), inner = 1;
    dnnl_dims_t blk;
    for (int i = 0; i < d.ndims; ++i) blk[i] = 1;
    for (int k = 0; k < b.inner_nblks; ++k) {
      if (b.inner_blks[k] < 1) return std::nullopt;
      blk[b.inner_idxs[k]] *= b.inner_blks[k];
      inner *= static_cast<unsigned __int128>(b.inner_blks[k]);
    }
    for (int i = 0; i < d.ndims; ++i) {
      if (d.dims[i] < 1 || d.padded_dims[i] < d.dims[i] || d.padded_offsets[i] < 0 ||
          d.padded_offsets[i] > d.padded_dims[i] - d.dims[i] || b.strides[i] < 0 ||
          d.padded_dims[i] % blk[i] != 0 || d.offset0 < 0)
        return std::nullopt;
      last += static_cast<unsigned __int128>(d.padded_dims[i] / blk[i] - 1) *
              static_cast<unsigned __int128>(b.strides[i]);
    }
    if ((last + inner) * element_bytes > available) return std::nullopt;
    if (words == 19) {
      const uint64_t flags = std::stoull(w[16]);
      if (flags == 0 || (flags & ~kStorableExtras) != 0) return std::nullopt;
      d.extra.flags = flags;
      d.extra.compensation_mask = std::stoi(w[17]);
      d.extra.asymm_compensation_mask = std::stoi(w[18]);
      d.extra.scale_adjust = 1.f;
    }
    dnnl::memory::desc md(d);
    if (md.get_size() > available) return std::nullopt;  // the compensations too
    if (layout_key(md) != key) return std::nullopt;      // only what layout_key itself writes
    return md;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

int cpu_channel_block() {
  static const int block = [] {
    const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
    switch (isa) {
      case dnnl::cpu_isa::avx512_core:
      case dnnl::cpu_isa::avx512_core_vnni:
      case dnnl::cpu_isa::avx512_core_bf16:
      case dnnl::cpu_isa::avx512_core_amx:
        return 16;
      default:
        return 8;
    }
  }();
  return block;
}

bool append_activation(dnnl::post_ops& ops, const ops::FusedActivation& act) {
  using ops::Activation;
  switch (act.kind) {
    case Activation::None:
      return true;
    case Activation::Relu:
      ops.append_eltwise(1.f, algorithm::eltwise_relu, 0.f, 0.f);
      return true;
    case Activation::LeakyRelu:
      ops.append_eltwise(1.f, algorithm::eltwise_relu, act.alpha, 0.f);
      return true;
    case Activation::Clip:
      ops.append_eltwise(1.f, algorithm::eltwise_clip_v2, act.alpha, act.beta);
      return true;
    case Activation::Sigmoid:
      ops.append_eltwise(1.f, algorithm::eltwise_logistic, 0.f, 0.f);
      return true;
    case Activation::Silu:
      ops.append_eltwise(1.f, algorithm::eltwise_swish, 1.f, 0.f);
      return true;
    case Activation::HardSwish:
      ops.append_eltwise(1.f, algorithm::eltwise_hardswish, 0.f, 0.f);
      return true;
    case Activation::HardSigmoid:
      // max(0, min(1, alpha x + beta)): oneDNN 2.6 has no hardsigmoid, so linear then clip.
      ops.append_eltwise(1.f, algorithm::eltwise_linear, act.alpha, act.beta);
      ops.append_eltwise(1.f, algorithm::eltwise_clip_v2, 0.f, 1.f);
      return true;
    case Activation::Tanh:
      ops.append_eltwise(1.f, algorithm::eltwise_tanh, 0.f, 0.f);
      return true;
    case Activation::Gelu:
      ops.append_eltwise(1.f, algorithm::eltwise_gelu_erf, 0.f, 0.f);
      return true;
    case Activation::GeluTanh:
      ops.append_eltwise(1.f, algorithm::eltwise_gelu_tanh, 0.f, 0.f);
      return true;
  }
  return false;
}

void ActivationPass::run(float* data, int64_t n, Stream& stream) {
  using ops::Activation;
  if (n == 0 || none()) return;
  if (is_piecewise_linear(act_.kind)) {
    {
      constexpr int64_t kChunk = 1 << 15;
      const int64_t chunks = (n + kChunk - 1) / kChunk;
      const ops::FusedActivation act = act_;
#pragma omp parallel for schedule(static) if (chunks > 1)
      for (int64_t c = 0; c < chunks; ++c) {
        apply_activation(act, data + c * kChunk, std::min(kChunk, n - c * kChunk));
      }
      return;
    }
  }
  if (act_.kind == Activation::Silu || act_.kind == Activation::Gelu) {
    // Kiln's vector loops (backends/cpu/silu_loop.hpp, gelu_loop.hpp: oneDNN's swish and
    // gelu_erf cost more than the pass's memory traffic).
    constexpr int64_t kChunk = 1 << 14;
    const int64_t chunks = (n + kChunk - 1) / kChunk;
    const int threads =
        threads_for_work(20.0 * static_cast<double>(n), 8.0 * static_cast<double>(n));
    void (*loop)(float*, int64_t) = act_.kind == Activation::Silu ? silu_in_place : gelu_in_place;
#pragma omp parallel for schedule(static) num_threads(threads) if (chunks > 1 && threads > 1)
    for (int64_t c = 0; c < chunks; ++c) {
      loop(data + c * kChunk, std::min(kChunk, n - c * kChunk));
    }
    return;
  }
  if (n != prim_n_) {
    threads_ = threads_for_work(10.0 * static_cast<double>(n), 8.0 * static_cast<double>(n));
    ThreadLimit limit(threads_);
    dnnl::post_ops ops;
    append_activation(ops, act_);
    KILN_CHECK(ops.len() == 1, ErrorCode::Internal, "activation {} is not one oneDNN eltwise",
               ops::FusedActivation::name(act_.kind));
    dnnl::algorithm alg;
    float scale, alpha, beta;
    ops.get_params_eltwise(0, scale, alg, alpha, beta);
    md_ = plain_desc({n});
    prim_ = dnnl::eltwise_forward(dnnl::eltwise_forward::primitive_desc(
        dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_inference, alg, md_, alpha, beta),
        engine()));
    prim_n_ = n;
  }
  ThreadLimit limit(threads_);
  prim_.execute(dnnl_stream(stream),
                {{DNNL_ARG_SRC, wrap(md_, data)}, {DNNL_ARG_DST, wrap(md_, data)}});
}

void ActivationPass::run_bf16(uint16_t* data, int64_t n) {
  using ops::Activation;
  if (n == 0 || none()) return;
  KILN_CHECK(act_.kind == Activation::Silu || act_.kind == Activation::Gelu, ErrorCode::Internal,
             "no bfloat16 pass for activation {}", ops::FusedActivation::name(act_.kind));
  constexpr int64_t kChunk = 1 << 14;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  const int threads = threads_for_work(20.0 * static_cast<double>(n), 4.0 * static_cast<double>(n));
  void (*loop)(float*, int64_t) = act_.kind == Activation::Silu ? silu_in_place : gelu_in_place;
#pragma omp parallel for schedule(static) num_threads(threads) if (chunks > 1 && threads > 1)
  for (int64_t c = 0; c < chunks; ++c) {
    constexpr int64_t kStep = 512;  // two KiB of floats: stays in L1 between the three passes
    float buf[kStep];
    const int64_t end = std::min(n, (c + 1) * kChunk);
    for (int64_t i = c * kChunk; i < end; i += kStep) {
      const auto m = static_cast<size_t>(std::min(kStep, end - i));
      bfloat16s_to_floats(data + i, buf, m);
      loop(buf, static_cast<int64_t>(m));
      floats_to_bfloat16s(buf, data + i, m);
    }
  }
}

ops::FusedActivation gelu_pass(const ops::FusedActivation& act, DataType type) {
  return type == DataType::Float32 && act.kind == ops::Activation::Gelu ? act
                                                                        : ops::FusedActivation{};
}

ops::FusedActivation node_activation(const ir::Node& node) {
  if (node.domain() != ops::kKilnDomain) return {};
  return ops::FusedActivation::from_node(ops::AttrReader(node));
}

std::string check_activation_post_ops(const ir::Node& node) {
  try {
    dnnl::post_ops probe;
    if (!append_activation(probe, node_activation(node))) return "activation has no post-op";
  } catch (const Error& e) {
    return e.message();
  }
  return "";
}

void note_implementation(const ir::Node& node, const char* impl) {
  if (std::string_view(impl).rfind("ref", 0) != 0) return;
  static std::mutex mutex;
  static std::set<std::string> seen;
  std::lock_guard<std::mutex> lock(mutex);
  if (seen.insert(node.op_type()).second) {
    log_info("node {}: oneDNN has only its slow reference implementation ({}) for this shape",
             node.label(), impl);
  }
}

namespace {
std::string_view float_name(DataType type) {
  return type == DataType::Float32 ? "float32" : dtype_name(type);
}
}  // namespace

int per_channel_full_operand(const ir::Node& node) {
  const ir::Value* a = node.input(0);
  const ir::Value* b = node.input(1);
  if (!a || !b || !a->type().shape || !b->type().shape) return -1;
  for (int full = 0; full < 2; ++full) {
    const Shape& f = *(full == 0 ? a : b)->type().shape;
    const Shape& o = *(full == 0 ? b : a)->type().shape;
    if (f.rank() != 4 || !known_dims(f) || o.rank() > 4 || !f[1].is_static()) continue;
    std::vector<Dim> od = o.dims();
    od.insert(od.begin(), 4 - od.size(), Dim(1));
    // A batch of its own (or one for all), the full operand's channels, one pixel.
    if ((od[0] == Dim(1) || od[0] == f[0]) && od[1] == f[1] && od[2] == Dim(1) && od[3] == Dim(1)) {
      return full;
    }
  }
  return -1;
}

std::string check_f32_input(const ir::Node& node, size_t i, size_t min_rank, size_t max_rank,
                            bool optional) {
  return check_float_input(node, i, DataType::Float32, min_rank, max_rank, optional);
}

std::string check_f32_outputs(const ir::Node& node) {
  return check_float_outputs(node, DataType::Float32);
}

std::optional<DataType> compute_type(const ir::Node& node) {
  const ir::Value* x = node.input(0);
  if (!x || !x->type().is_tensor()) return std::nullopt;
  const DataType t = x->type().dtype;
  if (t == DataType::Float32 || (t == DataType::BFloat16 && cpu_has_bf16())) return t;
  return std::nullopt;
}

std::string check_float_input(const ir::Node& node, size_t i, DataType type, size_t min_rank,
                              size_t max_rank, bool optional) {
  const ir::Value* v = node.input(i);
  if (!v) return optional ? "" : fmt::format("input {} is missing", i);
  const TypeInfo& t = v->type();
  if (!t.is_tensor() || t.dtype != type) {
    return fmt::format("input {} is not a {} tensor", i, float_name(type));
  }
  if (!t.shape) return fmt::format("input {} has unknown rank", i);
  if (t.shape->rank() < min_rank || t.shape->rank() > max_rank) {
    return fmt::format("input {} has rank {}, the kernel takes {}..{}", i, t.shape->rank(),
                       min_rank, max_rank);
  }
  return "";
}

std::string check_float_outputs(const ir::Node& node, DataType type) {
  for (size_t i = 0; i < node.outputs().size(); ++i) {
    const ir::Value* v = node.output(i);
    if (!v) continue;
    if (!v->type().is_tensor() || v->type().dtype != type) {
      return fmt::format("output {} is not a {} tensor", i, float_name(type));
    }
  }
  return "";
}

const Tensor* constant_input(const ir::Node& node, size_t i) {
  const ir::Value* v = node.input(i);
  if (!v) return nullptr;
  if (v->is_constant()) return &v->constant();
  const ir::Node* p = v->producer();
  if (p && p->op_type() == "Constant" && p->domain().empty()) {
    if (const ir::Attribute* a = p->attribute("value")) {
      if (const auto* t = std::get_if<Tensor>(&a->storage())) return t;
    }
  }
  return nullptr;
}

void check_output_fits(const ir::Node& node, const std::vector<int64_t>& dims) {
  size_t bytes = sizeof(float);
  bool fits = true;
  for (int64_t d : dims) {
    fits = fits && d >= 0 && !__builtin_mul_overflow(bytes, static_cast<size_t>(d), &bytes);
  }
  KILN_CHECK(fits && bytes <= Tensor::max_bytes(), ErrorCode::InvalidArgument,
             "node {}: an output of shape {} is over the tensor size limit of {} bytes",
             node.label(), dims_to_string(dims), Tensor::max_bytes());
}

bool known_dims(const Shape& s) {
  return std::all_of(s.dims().begin(), s.dims().end(),
                     [](const Dim& d) { return d.is_static() || d.is_symbolic(); });
}

std::optional<std::vector<int64_t>> declared_dims(const ir::Node& node, size_t i) {
  const ir::Value* v = node.input(i);
  if (!v || !v->type().shape) return std::nullopt;
  std::vector<int64_t> dims;
  size_t bytes = dtype_is_supported(v->type().dtype) ? dtype_size(v->type().dtype) : 1;
  bool fits = true;
  for (const Dim& d : v->type().shape->dims()) {
    dims.push_back(d.is_static() ? d.value() : -1);
    if (d.is_static() && d.value() > 0) {
      fits = fits && !__builtin_mul_overflow(bytes, static_cast<size_t>(d.value()), &bytes);
    }
  }
  // A declared shape no tensor could have (past Tensor::max_bytes) is reported as unknown, so no
  // kernel builds a primitive for it at open (oneDNN's size arithmetic overflows on such dims);
  // real inputs at run time exist, so they fit.
  if (!fits || bytes > Tensor::max_bytes()) std::fill(dims.begin(), dims.end(), -1);
  return dims;
}

}  // namespace kiln::backends::cpu
