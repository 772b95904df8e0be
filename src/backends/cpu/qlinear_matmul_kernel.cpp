// Int8 matrix products on the CPU: ai.onnx QLinearMatMul and ai.kiln FusedQLinearMatMul (the
// static QDQ MatMul / Gemm that passes/fuse_quantized_ops folds) through oneDNN's u8/s8 x s8 ->
// s32 matmul (VNNI where the CPU has it): every row of A (of any rank >= 2) times one constant
// int8 [K, N] weight, packed once into the layout the primitive picks; the requantization, bias
// and activation in its attributes (backends/cpu/qlinear_params.hpp).
#include <algorithm>

#include "backends/cpu/gelu_loop.hpp"
#include "backends/cpu/onednn_common.hpp"
#include "backends/cpu/qlinear_params.hpp"
#include "backends/cpu/quantize_loops.hpp"
#include "backends/cpu/work_threads.hpp"
#include "backends/kernel_table.hpp"
#include "backends/shape_cache.hpp"
#include "core/half_convert.hpp"

namespace kiln::backends::cpu {
namespace {

using dnnl::memory;

std::string check_qlinear_matmul(const ir::Node& node) {
  const Tensor* b = node.inputs().size() > 3 && node.input(3) ? constant_input(node, 3) : nullptr;
  if (!b || b->rank() != 2) return "the weight is not a constant 2-D tensor";
  if (std::string why = check_qlinear(node, 1); !why.empty()) return why;
  if (node.input(0)->type().shape->rank() < 2) return "a has rank < 2";
  return "";
}

// A Gelu runs as Kiln's loop after the product (gelu_loop.hpp: faster than oneDNN's gelu_erf
// post-op): the product writes its real values in float32 (into the result, or a scratch the
// loop then quantizes or narrows from, a chunk at a time while it is in cache).
QLinearParams product_params(QLinearParams p) {
  if (p.act.kind == ops::Activation::Gelu) {
    p.act = {};
    p.y_type = DataType::Float32;
  }
  return p;
}

class QLinearMatMul final : public Kernel {
 public:
  explicit QLinearMatMul(const ir::Node& node)
      : node_(node),
        b_(*constant_input(node, 3)),
        k_(b_.dim(0)),
        n_(b_.dim(1)),
        params_(qlinear_params(node, n_)),
        product_(product_params(params_)) {
    if (auto a = declared_dims(node, 0); a && std::count(a->begin(), a->end(), -1) == 0) {
      prepared(shape_numel(*a) / std::max<int64_t>(k_, 1));
    }
  }
  std::string_view name() const override { return "onednn.qlinear_matmul"; }

  void run(std::span<const DeviceTensor> in, KernelOutputs& out, Stream& stream) override {
    const DeviceTensor& a = in[0];
    KILN_CHECK_ARG(a.dims.size() >= 2 && a.dims.back() == k_,
                   "node {}: QLinearMatMul of {} and {}: inner dims differ", node_.label(),
                   dims_to_string(a.dims), dims_to_string(b_.dims()));
    std::vector<int64_t> out_dims = a.dims;
    out_dims.back() = n_;
    check_output_fits(node_, out_dims);
    DeviceTensor y = out.allocate(0, params_.y_type, out_dims);
    if (y.numel() == 0) return;
    const int64_t rows = a.numel() / std::max<int64_t>(k_, 1);
    const Entry& e = prepared(rows);
    const bool gelu_after = product_.act.kind != params_.act.kind;
    const bool in_place = !gelu_after || params_.y_type == DataType::Float32;
    if (!in_place) real_.resize(static_cast<size_t>(y.numel()));
    float* real = in_place ? nullptr : real_.data();
    std::unordered_map<int, memory> args = {
        {DNNL_ARG_SRC, wrap(e.pd.src_desc(), a.data)},
        {DNNL_ARG_WEIGHTS, e.packed_b.mem},
        {DNNL_ARG_DST, wrap(e.pd.dst_desc(), in_place ? y.data : real)},
        {DNNL_ARG_SCRATCHPAD, e.scratch}};
    if (!params_.bias.empty()) args[DNNL_ARG_BIAS] = wrap(e.pd.bias_desc(), params_.bias.data());
    {
      ThreadLimit limit(e.threads);
      e.prim.execute(dnnl_stream(stream), args);
    }
    if (gelu_after) finish_gelu(in_place ? static_cast<float*>(y.data) : real, y, e.threads);
  }

  // Gelu over the float32 real values, then the result's type from them, a chunk at a time.
  void finish_gelu(float* real, DeviceTensor& y, int threads) const {
    constexpr int64_t kChunk = 1 << 12;
    const int64_t n = y.numel(), chunks = (n + kChunk - 1) / kChunk;
    const QLinearParams& p = params_;
#pragma omp parallel for schedule(static) num_threads(threads) if (chunks > 1 && threads > 1)
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t at = c * kChunk, len = std::min(kChunk, n - at);
      gelu_in_place(real + at, len);
      const float zero = static_cast<float>(p.y_zero);
      switch (p.y_type) {
        case DataType::UInt8:
          quantize_to_u8(real + at, static_cast<uint8_t*>(y.data) + at, len, p.y_scale, zero);
          break;
        case DataType::Int8:
          quantize_to_s8(real + at, static_cast<int8_t*>(y.data) + at, len, p.y_scale, zero);
          break;
        case DataType::BFloat16:
          floats_to_bfloat16s(real + at, static_cast<uint16_t*>(y.data) + at,
                              static_cast<size_t>(len));
          break;
        default:  // float32: done in place
          break;
      }
    }
  }

 private:
  struct Entry {
    int64_t rows = 0;
    int threads = 1;
    dnnl::matmul::primitive_desc pd;
    dnnl::matmul prim;
    PackedConstant packed_b;
    mutable memory scratch;  // oneDNN's execute takes non-const memories
  };

  const Entry& prepared(int64_t rows) {
    if (const Entry* hit = cache_.find([&](const Entry& e) { return e.rows == rows; })) {
      return *hit;
    }
    Entry e;
    e.rows = rows;
    e.threads = threads_for_work(2.0 * static_cast<double>(rows * n_ * k_),
                                 static_cast<double>(rows * k_ + k_ * n_ + 4 * rows * n_));
    if (rows == 0 || k_ == 0) {
      KILN_CHECK(k_ > 0 || rows == 0, ErrorCode::Unsupported,
                 "node {}: an int8 product over an empty K", node_.label());
      return cache_.add(std::move(e));
    }
    const memory::data_type at = qlinear_dnnl_type(product_.x_type);
    const memory::data_type yt = qlinear_dnnl_type(product_.y_type);
    ThreadLimit limit(e.threads);
    try {
      const memory::desc bias_md =
          params_.bias.empty() ? memory::desc() : plain_desc({1, n_}, memory::data_type::f32);
      e.pd = dnnl::matmul::primitive_desc(
          dnnl::matmul::desc(plain_desc({rows, k_}, at),
                             memory::desc({k_, n_}, memory::data_type::s8, memory::format_tag::any),
                             bias_md, plain_desc({rows, n_}, yt)),
          product_.attr(n_, 1 << 1), engine());
      e.prim = dnnl::matmul(e.pd);
      e.scratch = memory(e.pd.scratchpad_desc(), engine());
      note_implementation(node_, e.pd.impl_info_str());
      // One packing per layout: an entry of another row count whose primitive took the same
      // one lends its bytes.
      e.packed_b = pack_once_per_layout(
          cache_, [](const Entry& c) -> const PackedConstant& { return c.packed_b; },
          wrap(plain_desc({k_, n_}, memory::data_type::s8), b_.raw_data()), e.pd.weights_desc());
    } catch (const dnnl::error& err) {
      fail(ErrorCode::Unsupported, "node {}: oneDNN has no int8 matmul for {} x {}: {}",
           node_.label(), rows, dims_to_string(b_.dims()), err.what());
    }
    return cache_.add(std::move(e));
  }

  const ir::Node& node_;
  const Tensor& b_;
  int64_t k_, n_;
  QLinearParams params_;
  QLinearParams product_;    // what oneDNN's primitive computes (product_params)
  std::vector<float> real_;  // the product's float32 result when a Gelu follows an 8-bit or
                             // bfloat16 result
  ShapeCache<Entry> cache_;  // an entry per row count seen (bounded)
};

std::unique_ptr<Kernel> create(const ir::Node& node) {
  return std::make_unique<QLinearMatMul>(node);
}

}  // namespace

KILN_REGISTER_KERNEL({.backend = "cpu",
                      .op_type = "QLinearMatMul",
                      .name = "onednn.qlinear_matmul",
                      .check = check_qlinear_matmul,
                      .create = create});
KILN_REGISTER_KERNEL({.backend = "cpu",
                      .domain = "ai.kiln",
                      .op_type = "FusedQLinearMatMul",
                      .name = "onednn.qlinear_matmul",
                      .check = check_qlinear_matmul,
                      .create = create});

}  // namespace kiln::backends::cpu
