// Matrix products on the CPU through oneDNN's matmul: MatMul (batched, numpy batch broadcast,
// 1-D operands), Gemm (transposes as strides, alpha as an output scale, beta * C as a broadcast
// binary post-op) and their ai.kiln fused forms (bias and activation as post-ops). A constant
// 2-D B is packed once into the layout the primitive picks (pack_constant_b); other operands are
// read in place. Float32, or bfloat16 (`--bf16` engines) on a CPU with
// bfloat16 instructions: every operand of that type, oneDNN accumulating in float32.
#include <algorithm>
#include <cstdlib>
#include <string_view>

#include "core/half_convert.hpp"

#include "backends/cpu/onednn_common.hpp"
#include "backends/cpu/vector_math.hpp"
#include "backends/cpu/work_threads.hpp"
#include "backends/kernel_table.hpp"
#include "backends/shape_cache.hpp"

namespace kiln::backends::cpu {
namespace {

using dnnl::memory;

// An output computed without a product (an empty reduction): float32 values written in the
// output's type.
void write_floats(const std::vector<float>& v, const DeviceTensor& y) {
  if (y.dtype == DataType::BFloat16) {
    floats_to_bfloat16s(v.data(), static_cast<uint16_t*>(y.data), v.size());
  } else {
    std::copy(v.begin(), v.end(), static_cast<float*>(y.data));
  }
}

float float_at(const void* data, DataType type, int64_t i) {
  return type == DataType::BFloat16 ? bfloat16_bits_to_float(static_cast<const uint16_t*>(data)[i])
                                    : static_cast<const float*>(data)[i];
}

// Whether constant B operands are packed (pack_constant_b): on unless KILN_CPU_PACK_WEIGHTS=0,
// which reads them in place as before, to measure the difference in one build.
bool pack_constant_weights() {
  static const bool on = [] {
    const char* v = std::getenv("KILN_CPU_PACK_WEIGHTS");
    return !(v && std::string_view(v) == "0");
  }();
  return on;
}

// A constant B (a layer's weights) in the layout the primitive of `e` picked (format_tag::any),
// packed once per layout (pack_once_per_layout). Read in place instead, brgemm copied all of B
// into its blocks at every run (MobileNetV2's classifier, 1 x 1280 x 1000: 185 us at 1 thread
// against onnxruntime's 75). Nothing is packed where the primitive reads B's own layout.
template <typename Cache, typename Entry>
void pack_constant_b(const Cache& cache, Entry& e, const memory::desc& plain_b_md,
                     const void* b_data) {
  if (e.pd.weights_desc() == plain_b_md) return;
  e.packed_b = pack_once_per_layout(
      cache, [](const Entry& other) -> const PackedConstant& { return other.packed_b; },
      wrap(plain_b_md, b_data), e.pd.weights_desc());
}

// ---- MatMul / FusedMatMul ----

std::string check_matmul(const ir::Node& node) {
  const std::optional<DataType> type = compute_type(node);
  if (!type) return check_f32_input(node, 0, 1, 6);
  if (std::string why = check_float_input(node, 0, *type, 1, 6); !why.empty()) return why;
  if (std::string why = check_float_input(node, 1, *type, 1, 6); !why.empty()) return why;
  if (std::string why = check_float_outputs(node, *type); !why.empty()) return why;
  if (node.domain() == ops::kKilnDomain) {
    if (std::string why = check_float_input(node, 2, *type, 1, 1, true); !why.empty()) return why;
    if (node.inputs().size() > 3) return "more than 3 inputs";
  } else if (node.inputs().size() != 2) {
    return "MatMul takes 2 inputs";
  }
  return check_activation_post_ops(node);
}

class OnednnMatMul final : public Kernel {
 public:
  explicit OnednnMatMul(const ir::Node& node)
      : node_(node),
        act_(node_activation(node)),
        type_(node.input(0)->type().dtype),
        dt_(dnnl_type(type_)),
        constant_b_(constant_input(node, 1)),
        after_(gelu_pass(act_, type_)) {
    auto a = declared_dims(node, 0), b = declared_dims(node, 1);
    if (a && b && std::count(a->begin(), a->end(), -1) == 0 &&
        std::count(b->begin(), b->end(), -1) == 0) {
      prepared(*a, *b, node.input(2) != nullptr);
    }
  }
  std::string_view name() const override { return "onednn.matmul"; }

  void run(std::span<const DeviceTensor> in, KernelOutputs& out, Stream& stream) override {
    const DeviceTensor& a = in[0];
    const DeviceTensor& b = in[1];
    const DeviceTensor* bias = in.size() > 2 && in[2].defined() ? &in[2] : nullptr;
    const Entry& e = prepared(a.dims, b.dims, bias != nullptr);
    if (bias) {
      KILN_CHECK_ARG(bias->dims.size() == 1 && bias->dims[0] == e.n,
                     "node {}: bias must have {} elements (the last dim of the product), got {}",
                     node_.label(), e.n, dims_to_string(bias->dims));
    }
    DeviceTensor y = out.allocate(0, type_, e.out_dims);
    if (y.numel() == 0) return;
    if (e.k == 0) {  // an empty sum: the bias (or zero), activated
      std::vector<float> v(static_cast<size_t>(y.numel()));
      for (int64_t i = 0; i < y.numel(); ++i) {
        v[i] = bias ? float_at(bias->data, type_, i % e.n) : 0.f;
      }
      apply_activation(act_, v.data(), y.numel());
      write_floats(v, y);
      return;
    }
    std::unordered_map<int, memory> args = {
        {DNNL_ARG_SRC, wrap(e.pd.src_desc(), a.data)},
        {DNNL_ARG_WEIGHTS, e.packed_b ? e.packed_b.mem : wrap(e.pd.weights_desc(), b.data)},
        {DNNL_ARG_DST, wrap(e.pd.dst_desc(), y.data)}};
    if (bias) args[DNNL_ARG_BIAS] = wrap(e.pd.bias_desc(), bias->data);
    args[DNNL_ARG_SCRATCHPAD] = e.scratch;
    {
      ThreadLimit limit(e.threads);
      e.prim.execute(dnnl_stream(stream), args);
    }
    after_.run(static_cast<float*>(y.data), y.numel(), stream);
  }

 private:
  struct Entry {
    std::vector<int64_t> a_dims, b_dims;
    bool bias = false;
    int threads = 1;  // threads_for_work of the product, held when creating and running it
    std::vector<int64_t> out_dims;
    int64_t k = 0, n = 0;
    dnnl::matmul::primitive_desc pd;
    dnnl::matmul prim;
    // Owned scratchpad (scratchpad_mode::user): oneDNN 2.6's per-thread library scratchpad
    // breaks a primitive run on another thread than the one it first ran on.
    mutable memory scratch;
    // A constant 2-D B in the layout the primitive picked (pack_constant_b; null: in place).
    PackedConstant packed_b;
  };

  const Entry& prepared(const std::vector<int64_t>& a_in, const std::vector<int64_t>& b_in,
                        bool bias) {
    if (const Entry* hit = cache_.find([&](const Entry& e) {
          return e.a_dims == a_in && e.b_dims == b_in && e.bias == bias;
        })) {
      return *hit;
    }
    Entry e;
    e.a_dims = a_in;
    e.b_dims = b_in;
    e.bias = bias;
    // numpy matmul: a 1-D A is a row (its dim dropped after), a 1-D B a column.
    std::vector<int64_t> a = a_in, b = b_in;
    if (a.size() == 1) a.insert(a.begin(), 1);
    if (b.size() == 1) b.push_back(1);
    const size_t rank = std::max(a.size(), b.size());
    a.insert(a.begin(), rank - a.size(), 1);
    b.insert(b.begin(), rank - b.size(), 1);
    KILN_CHECK_ARG(a[rank - 1] == b[rank - 2], "node {}: MatMul of {} and {}: inner dims differ",
                   node_.label(), dims_to_string(a_in), dims_to_string(b_in));
    std::vector<int64_t> c(rank);
    for (size_t i = 0; i + 2 < rank; ++i) {
      KILN_CHECK_ARG(a[i] == b[i] || a[i] == 1 || b[i] == 1,
                     "node {}: MatMul batch dims of {} and {} do not broadcast", node_.label(),
                     dims_to_string(a_in), dims_to_string(b_in));
      c[i] = a[i] == 1 ? b[i] : a[i];
    }
    c[rank - 2] = a[rank - 2];
    c[rank - 1] = b[rank - 1];
    e.k = a[rank - 1];
    e.n = c[rank - 1];
    e.out_dims.assign(c.begin(), c.end() - 2);
    if (a_in.size() != 1) e.out_dims.push_back(c[rank - 2]);
    if (b_in.size() != 1) e.out_dims.push_back(c[rank - 1]);
    check_output_fits(node_, e.out_dims);
    if (shape_numel(c) > 0 && e.k > 0) {
      KILN_CHECK(rank <= 6, ErrorCode::Unsupported, "node {}: MatMul of rank {} over 6",
                 node_.label(), rank);
      if (b_in.size() == 2 && a_in.size() > 2) {
        // Every row of a batched A times one matrix: a single product over all of A's rows.
        // (oneDNN would otherwise run one product per batch index: ViT's [tokens, 1, E]
        // activations made that a vector product per token, 3x slower.)
        const int64_t rows = shape_numel(a) / e.k;
        a = {rows, e.k};
        b = b_in;
        c = {rows, e.n};
      }
      dnnl::post_ops post;
      if (after_.none()) append_activation(post, act_);
      dnnl::primitive_attr attr;
      attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
      attr.set_post_ops(post);
      std::vector<int64_t> bias_dims(c.size(), 1);
      bias_dims.back() = e.n;
      const double outputs = static_cast<double>(shape_numel(c));
      e.threads = threads_for_work(
          2.0 * outputs * static_cast<double>(e.k),
          4.0 * static_cast<double>(shape_numel(a) + shape_numel(b)) + 4.0 * outputs);
      ThreadLimit limit(e.threads);
      // A constant 2-D B (a layer's weights) in whatever layout the primitive reads fastest.
      const bool pack =
          constant_b_ && b.size() == 2 && constant_b_->dims() == b && pack_constant_weights();
      try {
        e.pd = dnnl::matmul::primitive_desc(
            dnnl::matmul::desc(
                plain_desc(a, dt_),
                pack ? memory::desc(b, dt_, memory::format_tag::any) : plain_desc(b, dt_),
                bias ? plain_desc(bias_dims, dt_) : memory::desc(), plain_desc(c, dt_)),
            attr, engine());
        e.prim = dnnl::matmul(e.pd);
        e.scratch = memory(e.pd.scratchpad_desc(), engine());
        note_implementation(node_, e.pd.impl_info_str());
        if (pack) pack_constant_b(cache_, e, plain_desc(b, dt_), constant_b_->raw_data());
      } catch (const dnnl::error& err) {
        fail(ErrorCode::Unsupported, "node {}: oneDNN has no matmul for {} x {}: {}", node_.label(),
             dims_to_string(a_in), dims_to_string(b_in), err.what());
      }
    }
    return cache_.add(std::move(e));
  }

  const ir::Node& node_;
  ops::FusedActivation act_;
  DataType type_;               // float32 or bfloat16 (check_matmul)
  dnnl::memory::data_type dt_;  // the same for oneDNN
  const Tensor* constant_b_;    // B when it is a constant (packed once per layout)
  ActivationPass after_;        // act_ when Kiln's loop applies it (gelu_pass), else none
  ShapeCache<Entry> cache_;
};

// ---- Gemm / FusedGemm ----

std::string check_gemm(const ir::Node& node) {
  const std::optional<DataType> type = compute_type(node);
  if (!type) return check_f32_input(node, 0, 2, 2);
  if (std::string why = check_float_input(node, 0, *type, 2, 2); !why.empty()) return why;
  if (std::string why = check_float_input(node, 1, *type, 2, 2); !why.empty()) return why;
  if (std::string why = check_float_input(node, 2, *type, 0, 2, true); !why.empty()) return why;
  if (std::string why = check_float_outputs(node, *type); !why.empty()) return why;
  if (node.inputs().size() > 3) return "more than 3 inputs";
  ops::AttrReader attrs(node);
  const float beta = attrs.attr_float("beta", 1.f);
  if (node.input(2) && beta != 1.f && !constant_input(node, 2)) {
    return "beta != 1 with a C that is not constant";
  }
  // beta is folded into a float32 copy of C; a bfloat16 C is taken as it is.
  if (node.input(2) && beta != 1.f && beta != 0.f && *type != DataType::Float32) {
    return "beta other than 0 or 1 with a bfloat16 C";
  }
  return check_activation_post_ops(node);
}

class OnednnGemm final : public Kernel {
 public:
  explicit OnednnGemm(const ir::Node& node)
      : node_(node),
        act_(node_activation(node)),
        type_(node.input(0)->type().dtype),
        dt_(dnnl_type(type_)),
        after_(gelu_pass(act_, type_)) {
    ops::AttrReader attrs(node);
    alpha_ = attrs.attr_float("alpha", 1.f);
    beta_ = attrs.attr_float("beta", 1.f);
    trans_a_ = attrs.attr_int("transA", 0) != 0;
    trans_b_ = attrs.attr_int("transB", 0) != 0;
    constant_b_ = constant_input(node, 1);
    if (const Tensor* c = constant_input(node, 2); c && beta_ != 1.f && beta_ != 0.f) {
      // beta folded into a private copy of the constant C once, not per run.
      KILN_CHECK_ARG(c->dtype() == DataType::Float32, "node {}: C must be float32", node.label());
      scaled_c_.assign(c->data<float>(), c->data<float>() + c->numel());
      for (float& v : scaled_c_) v *= beta_;
    }
    auto a = declared_dims(node, 0), b = declared_dims(node, 1), c = declared_dims(node, 2);
    bool static_ab = a && b && std::count(a->begin(), a->end(), -1) == 0 &&
                     std::count(b->begin(), b->end(), -1) == 0;
    bool static_c = !node.input(2) || (c && std::count(c->begin(), c->end(), -1) == 0);
    if (static_ab && static_c) prepared(*a, *b, node.input(2) ? &*c : nullptr);
  }
  std::string_view name() const override { return "onednn.gemm"; }

  void run(std::span<const DeviceTensor> in, KernelOutputs& out, Stream& stream) override {
    const DeviceTensor& a = in[0];
    const DeviceTensor& b = in[1];
    const DeviceTensor* c = in.size() > 2 && in[2].defined() ? &in[2] : nullptr;
    // beta == 0 drops C entirely, as 0 * C would for finite values.
    if (beta_ == 0.f) c = nullptr;
    const Entry& e = prepared(a.dims, b.dims, c ? &c->dims : nullptr);
    DeviceTensor y = out.allocate(0, type_, {e.m, e.n});
    if (y.numel() == 0) return;
    const void* c_data = c ? (scaled_c_.empty() ? c->data : scaled_c_.data()) : nullptr;
    if (e.k == 0) {
      std::vector<float> v(static_cast<size_t>(y.numel()));
      const DataType c_type = scaled_c_.empty() ? type_ : DataType::Float32;
      for (int64_t i = 0; i < e.m; ++i) {
        for (int64_t j = 0; j < e.n; ++j) {
          const int64_t at = (e.c_dims[0] == 1 ? 0 : i) * e.c_dims[1] + (e.c_dims[1] == 1 ? 0 : j);
          v[i * e.n + j] = c_data ? float_at(c_data, c_type, at) : 0.f;
        }
      }
      apply_activation(act_, v.data(), y.numel());
      write_floats(v, y);
      return;
    }
    std::unordered_map<int, memory> args = {
        {DNNL_ARG_SRC, wrap(e.pd.src_desc(), a.data)},
        {DNNL_ARG_WEIGHTS, e.packed_b ? e.packed_b.mem : wrap(e.pd.weights_desc(), b.data)},
        {DNNL_ARG_DST, wrap(e.pd.dst_desc(), y.data)}};
    if (c) {
      memory::desc c_md = plain_desc(e.c_dims, scaled_c_.empty() ? dt_ : memory::data_type::f32);
      args[e.c_as_bias ? DNNL_ARG_BIAS : (DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1)] =
          wrap(c_md, c_data);
    }
    args[DNNL_ARG_SCRATCHPAD] = e.scratch;
    {
      ThreadLimit limit(e.threads);
      e.prim.execute(dnnl_stream(stream), args);
    }
    after_.run(static_cast<float*>(y.data), y.numel(), stream);
  }

 private:
  struct Entry {
    std::vector<int64_t> a_dims, b_dims;
    std::optional<std::vector<int64_t>> c_in;
    int threads = 1;  // threads_for_work of the product, held when creating and running it
    int64_t m = 0, k = 0, n = 0;
    std::vector<int64_t> c_dims;  // C as a broadcastable (rows, cols)
    bool c_as_bias = false;
    dnnl::matmul::primitive_desc pd;
    dnnl::matmul prim;
    // Owned scratchpad (scratchpad_mode::user): oneDNN 2.6's per-thread library scratchpad
    // breaks a primitive run on another thread than the one it first ran on.
    mutable memory scratch;
    // A constant B in the layout the primitive picked, packed once (null: B read in place).
    PackedConstant packed_b;
  };

  const Entry& prepared(const std::vector<int64_t>& a, const std::vector<int64_t>& b,
                        const std::vector<int64_t>* c) {
    if (const Entry* hit = cache_.find([&](const Entry& e) {
          return e.a_dims == a && e.b_dims == b && e.c_in.has_value() == (c != nullptr) &&
                 (!c || *e.c_in == *c);
        })) {
      return *hit;
    }
    KILN_CHECK_ARG(a.size() == 2 && b.size() == 2, "node {}: Gemm takes 2-D A and B, got {} {}",
                   node_.label(), dims_to_string(a), dims_to_string(b));
    Entry e;
    e.a_dims = a;
    e.b_dims = b;
    if (c) e.c_in = *c;
    e.m = trans_a_ ? a[1] : a[0];
    e.k = trans_a_ ? a[0] : a[1];
    const int64_t kb = trans_b_ ? b[1] : b[0];
    e.n = trans_b_ ? b[0] : b[1];
    KILN_CHECK_ARG(e.k == kb, "node {}: Gemm inner dims differ: A {} B {}", node_.label(),
                   dims_to_string(a), dims_to_string(b));
    if (c) {
      std::vector<int64_t> cd = *c;
      cd.insert(cd.begin(), 2 - std::min<size_t>(cd.size(), 2), 1);
      KILN_CHECK_ARG(cd.size() == 2 && (cd[0] == 1 || cd[0] == e.m) && (cd[1] == 1 || cd[1] == e.n),
                     "node {}: C {} does not broadcast to ({}, {})", node_.label(),
                     dims_to_string(*c), e.m, e.n);
      e.c_dims = cd;
      // A bias of one row is what oneDNN's matmul adds fastest; its output scale applies to
      // (A B + bias), so only when alpha is 1.
      e.c_as_bias = alpha_ == 1.f && cd[0] == 1;
    }
    check_output_fits(node_, {e.m, e.n});
    if (e.m > 0 && e.n > 0 && e.k > 0) {
      memory::desc a_md({e.m, e.k}, dt_, trans_a_ ? memory::dims{1, e.m} : memory::dims{e.k, 1});
      memory::desc b_md({e.k, e.n}, dt_, trans_b_ ? memory::dims{1, e.k} : memory::dims{e.n, 1});
      // C as oneDNN reads it: the float32 copy with beta folded in, or the input's own type.
      const memory::data_type c_dt = scaled_c_.empty() ? dt_ : memory::data_type::f32;
      dnnl::primitive_attr attr;
      attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
      if (alpha_ != 1.f) attr.set_output_scales(0, {alpha_});
      dnnl::post_ops post;
      if (c && !e.c_as_bias) {
        post.append_binary(dnnl::algorithm::binary_add, plain_desc(e.c_dims, c_dt));
      }
      if (after_.none()) append_activation(post, act_);
      attr.set_post_ops(post);
      const double mn = static_cast<double>(e.m) * static_cast<double>(e.n);
      e.threads = threads_for_work(2.0 * mn * static_cast<double>(e.k),
                                   4.0 * (static_cast<double>(e.k) * (e.m + e.n) + mn));
      ThreadLimit limit(e.threads);
      // A constant B in whatever layout the primitive reads fastest (pack_constant_b).
      const bool pack = constant_b_ && constant_b_->dims() == b && pack_constant_weights();
      try {
        e.pd = dnnl::matmul::primitive_desc(
            dnnl::matmul::desc(a_md,
                               pack ? memory::desc({e.k, e.n}, dt_, memory::format_tag::any) : b_md,
                               e.c_as_bias ? plain_desc(e.c_dims, c_dt) : memory::desc(),
                               plain_desc({e.m, e.n}, dt_)),
            attr, engine());
        e.prim = dnnl::matmul(e.pd);
        e.scratch = memory(e.pd.scratchpad_desc(), engine());
        note_implementation(node_, e.pd.impl_info_str());
        if (pack) pack_constant_b(cache_, e, b_md, constant_b_->raw_data());
      } catch (const dnnl::error& err) {
        fail(ErrorCode::Unsupported, "node {}: oneDNN has no matmul for Gemm {} x {}: {}",
             node_.label(), dims_to_string(a), dims_to_string(b), err.what());
      }
    }
    return cache_.add(std::move(e));
  }

  const ir::Node& node_;
  ops::FusedActivation act_;
  DataType type_;               // float32 or bfloat16 (check_gemm)
  dnnl::memory::data_type dt_;  // the same for oneDNN
  ActivationPass after_;        // act_ when Kiln's loop applies it (gelu_pass), else none
  float alpha_ = 1, beta_ = 1;
  bool trans_a_ = false, trans_b_ = false;
  const Tensor* constant_b_ = nullptr;  // B when it is a constant (packed once per layout)
  std::vector<float> scaled_c_;
  ShapeCache<Entry> cache_;
};

std::unique_ptr<Kernel> create_matmul(const ir::Node& node) {
  return std::make_unique<OnednnMatMul>(node);
}
std::unique_ptr<Kernel> create_gemm(const ir::Node& node) {
  return std::make_unique<OnednnGemm>(node);
}

}  // namespace

KILN_REGISTER_KERNEL({.backend = "cpu",
                      .op_type = "MatMul",
                      .name = "onednn.matmul",
                      .check = check_matmul,
                      .create = create_matmul});
KILN_REGISTER_KERNEL({.backend = "cpu",
                      .domain = "ai.kiln",
                      .op_type = "FusedMatMul",
                      .name = "onednn.matmul",
                      .check = check_matmul,
                      .create = create_matmul});
KILN_REGISTER_KERNEL({.backend = "cpu",
                      .op_type = "Gemm",
                      .name = "onednn.gemm",
                      .check = check_gemm,
                      .create = create_gemm});
KILN_REGISTER_KERNEL({.backend = "cpu",
                      .domain = "ai.kiln",
                      .op_type = "FusedGemm",
                      .name = "onednn.gemm",
                      .check = check_gemm,
                      .create = create_gemm});

}  // namespace kiln::backends::cpu
