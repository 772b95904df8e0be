// Int8 matrix products on the CPU: ai.onnx QLinearMatMul and ai.kiln FusedQLinearMatMul (the
// static QDQ MatMul / Gemm that passes/fuse_quantized_ops folds) through oneDNN's u8/s8 x s8 ->
// s32 matmul (VNNI where the CPU has it): every row of A (of any rank >= 2) times one constant
// [K, N] weight (int8, or uint8 / zero points folded into int8: Int8Weight), packed once into the
// layout the primitive picks; the requantization, bias
// and activation in its attributes (backends/cpu/qlinear_params.hpp).
#include <algorithm>
#include <optional>

#include "backends/cpu/int8_window_sums.hpp"
#include "backends/cpu/onednn_common.hpp"
#include "backends/cpu/qlinear_epilogue.hpp"
#include "backends/cpu/qlinear_params.hpp"
#include "backends/cpu/work_threads.hpp"
#include "backends/kernel_table.hpp"
#include "backends/shape_cache.hpp"
#include "ops/qlinear_slots.hpp"

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

class QLinearMatMul final : public Kernel {
 public:
  explicit QLinearMatMul(const ir::Node& node)
      : node_(node),
        weight_(node, ops::qlinear::kW, ops::qlinear::kWZero, 1, /*correctable=*/true),
        b_(weight_.get()),
        k_(b_.dim(0)),
        n_(b_.dim(1)),
        params_(qlinear_params(node, n_)),
        after_(params_.y_type == DataType::Float32 && !widened()
                   ? gelu_pass(params_.act, DataType::Float32)
                   : ops::FusedActivation{}) {}
  std::string_view name() const override { return "onednn.qlinear_matmul"; }

  // Compile time: the weights packed for the declared rows (a dynamic dim taken as 1: the layout
  // does not depend on the rows), for the engine to store.
  std::vector<PackedWeight> pack_weights() override {
    const Entry* e = prepare_declared(/*any_dim=*/true);
    if (!e || !e->packed_b) return {};
    return weight_to_store(ops::qlinear::kW, e->packed_b.mem, weight_.plain_suffix());
  }
  // Opening an engine: its packed weights, then the primitive of the declared shape (built on
  // the first run otherwise: the plain constant may not be filled before this).
  void use_packed_weight(PackedWeight packed) override {
    if (packed.input != ops::qlinear::kW) return;
    stored_b_ = std::move(packed);
    prepare_declared();
  }

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
    std::unordered_map<int, memory> args = {
        {DNNL_ARG_SRC, wrap(e.pd.src_desc(), a.data)},
        {DNNL_ARG_WEIGHTS, e.packed_b.mem},
        {DNNL_ARG_DST, widened() ? e.acc : wrap(e.pd.dst_desc(), y.data)},
        {DNNL_ARG_SCRATCHPAD, e.scratch}};
    if (!params_.bias.empty() && !widened()) {
      args[DNNL_ARG_BIAS] = wrap(e.pd.bias_desc(), params_.bias.data());
    }
    {
      ThreadLimit limit(e.threads);
      e.prim.execute(dnnl_stream(stream), args);
    }
    if (widened()) {
      finish_widened(e, a, y.data, stream);
    } else {
      after_.run(static_cast<float*>(y.data), y.numel(), stream);
    }
  }

 private:
  struct Entry {
    int64_t rows = 0;
    int threads = 1;
    dnnl::matmul::primitive_desc pd;
    dnnl::matmul prim;
    PackedConstant packed_b;
    mutable memory scratch;             // oneDNN's execute takes non-const memories
    mutable memory acc;                 // the widened path's int32 product
    mutable std::vector<int32_t> sums;  // and its rows' sums of a - a_zero
  };

  // A weight whose zero points leave int8 (Int8Weight::correction): the product ran into int32
  // with b - c; each row's sum of a - a_zero, then finish_widened_product.
  bool widened() const { return !weight_.correction().empty(); }

  void finish_widened(const Entry& e, const DeviceTensor& a, void* y, Stream& stream) const {
    dnnl_stream(stream).wait();
    int8_row_sums(a.data, params_.x_type == DataType::UInt8, e.rows, k_, 1, params_.x_zero,
                  e.sums.data(), e.threads);
    finish_widened_product(params_, {.acc = static_cast<const int32_t*>(e.acc.get_data_handle()),
                                     .rows = e.rows,
                                     .channels = n_,
                                     .sums = e.sums.data(),
                                     .groups = 1,
                                     .d = weight_.correction(),
                                     .y = y,
                                     .threads = e.threads});
  }

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
    const memory::data_type at = qlinear_dnnl_type(params_.x_type);
    const memory::data_type yt = qlinear_dnnl_type(params_.y_type);
    ThreadLimit limit(e.threads);
    try {
      // The widened path's product: int32, its bias and the rest in finish_widened_product.
      const memory::desc bias_md = params_.bias.empty() || widened()
                                       ? memory::desc()
                                       : plain_desc({1, n_}, memory::data_type::f32);
      e.pd = dnnl::matmul::primitive_desc(
          dnnl::matmul::desc(plain_desc({rows, k_}, at),
                             memory::desc({k_, n_}, memory::data_type::s8, memory::format_tag::any),
                             bias_md,
                             plain_desc({rows, n_}, widened() ? memory::data_type::s32 : yt)),
          widened() ? widened_product_params(params_).attr(n_, 1 << 1)
                    : params_.attr(n_, 1 << 1, !after_.none()),
          engine());
      e.prim = dnnl::matmul(e.pd);
      e.scratch = memory(e.pd.scratchpad_desc(), engine());
      if (widened()) {
        e.acc = memory(e.pd.dst_desc(), engine());
        e.sums.resize(static_cast<size_t>(rows));
      }
      note_implementation(node_, e.pd.impl_info_str());
      // One packing per layout: an entry of another row count whose primitive took the same
      // one lends its bytes.
      e.packed_b = int8_weights_in(
          cache_, [](const Entry& c) -> const PackedConstant& { return c.packed_b; }, stored_b_,
          weight_, {k_, n_}, e.pd.weights_desc(), node_);
    } catch (const dnnl::error& err) {
      fail(ErrorCode::Unsupported, "node {}: oneDNN has no int8 matmul for {} x {}: {}",
           node_.label(), rows, dims_to_string(b_.dims()), err.what());
    }
    return cache_.add(std::move(e));
  }

  // The entry of the declared input shape when it is static; with `any_dim`, dynamic dims taken
  // as 1.
  const Entry* prepare_declared(bool any_dim = false) {
    std::optional<std::vector<int64_t>> a = declared_dims(node_, 0);
    if (!a) return nullptr;
    for (int64_t& d : *a) {
      if (d == -1 && any_dim) d = 1;
    }
    if (std::count(a->begin(), a->end(), -1) != 0) return nullptr;
    return &prepared(shape_numel(*a) / std::max<int64_t>(k_, 1));
  }

  const ir::Node& node_;
  std::optional<PackedWeight> stored_b_;  // the engine's packed b, when it stores one
  Int8Weight weight_;  // the constant b, with its zero points folded in when it has any
  const Tensor& b_;
  int64_t k_, n_;
  QLinearParams params_;
  // A float32 result's Gelu as Kiln's loop after the product (gelu_pass). Not for an 8-bit or
  // bfloat16 result: its float32 values would make a round trip through memory, which cost
  // what the loop saves (BERT-base's FFN up-projection, measured both ways).
  ActivationPass after_;
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
