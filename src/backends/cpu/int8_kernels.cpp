// The dynamic INT8 path's ops on the CPU (what `kiln quantize --dynamic` and onnxruntime's
// quantize_dynamic write): DynamicQuantizeLinear (the activation's range, then uint8 with ties
// to even, bit for bit the reference's) and MatMulInteger of a uint8 activation and a constant
// int8 weight through oneDNN's int8 matmul (VNNI where the CPU has it). The activation's zero
// point is taken out after the product, exactly: C = A B - zp_a colsum(B), colsum once per
// weight. A weight zero point other than 0 is refused (the symmetric weights both quantizers
// write).
#include <algorithm>
#include <cmath>
#include <numeric>

#include "backends/cpu/int8_window_sums.hpp"
#include "backends/cpu/onednn_common.hpp"
#include "backends/cpu/qlinear_params.hpp"
#include "backends/cpu/quantize_loops.hpp"
#include "backends/cpu/work_threads.hpp"
#include "backends/kernel_table.hpp"
#include "backends/shape_cache.hpp"

namespace kiln::backends::cpu {
namespace {

using dnnl::memory;

// ---- DynamicQuantizeLinear ----

std::string check_dynamic_quantize(const ir::Node& node) {
  if (std::string why = check_f32_input(node, 0, 0, 8); !why.empty()) return why;
  if (node.outputs().size() != 3) return "DynamicQuantizeLinear has 3 outputs";
  return "";
}

class DynamicQuantize final : public Kernel {
 public:
  explicit DynamicQuantize(const ir::Node& node) : node_(node) {}
  std::string_view name() const override { return "cpu.dynamic_quantize"; }

  void run(std::span<const DeviceTensor> in, KernelOutputs& out, Stream&) override {
    const DeviceTensor& x = in[0];
    const float* px = static_cast<const float*>(x.data);
    const int64_t n = x.numel();
    // The range always holds 0 (as the reference's), so that 0 is exactly representable.
    float lo, hi;
    range_with_zero(px, n, lo, hi);
    const float scale = (hi == lo ? 1.0f : hi - lo) / 255.0f;
    const float zp = std::clamp(std::nearbyint(0.0f - lo / scale), 0.0f, 255.0f);
    DeviceTensor y = out.allocate(0, DataType::UInt8, x.dims);
    // The reference's rounding (to nearest, ties to even; NaN to 0) on the AVX-512 loop of
    // QuantizeLinear: BERT-base's 128 x 768 rows took 196 us on the vectorized loop that divided
    // and converted here.
    quantize_to_u8(px, static_cast<uint8_t*>(y.data), n, scale, zp);
    *static_cast<float*>(out.allocate(1, DataType::Float32, {}).data) = scale;
    *static_cast<uint8_t*>(out.allocate(2, DataType::UInt8, {}).data) = static_cast<uint8_t>(zp);
  }

 private:
  const ir::Node& node_;
};

// ---- MatMulInteger ----

// MatMulInteger of a uint8 activation (its zero point a scalar, constant or not) and a constant
// 8-bit B: oneDNN's u8 x s8 matmul over B as int8 (Int8Weight: b - zb where that fits int8,
// else b - c with c = 128 for uint8 B, 0 for int8), A's zero point and the rest of B's, d = zb - c
// per column, taken out after the product, exact in int32:
//   sum_k (a - za)(b - zb) = a . b' - za colsum(b') - d (rowsum(a) - K za).
std::string check_matmul_integer(const ir::Node& node) {
  const ir::Value* a = node.input(0);
  if (!a || !a->type().is_tensor() || a->type().dtype != DataType::UInt8) {
    return "A is not a uint8 tensor";
  }
  const Tensor* b = constant_input(node, 1);
  if (!b || (b->dtype() != DataType::Int8 && b->dtype() != DataType::UInt8) ||
      b->dims().size() != 2) {
    return "B is not a constant 2-D 8-bit tensor";
  }
  if (node.inputs().size() > 2 && node.input(2)) {
    const ir::Value* za = node.input(2);
    if (!za->type().is_tensor() || za->type().dtype != DataType::UInt8 ||
        (za->type().shape && za->type().shape->rank() > 1)) {
      return "A's zero point is not a uint8 scalar";
    }
  }
  if (node.inputs().size() > 3 && node.input(3)) {
    const Tensor* zb = constant_input(node, 3);
    if (!zb || zb->dtype() != b->dtype() || zb->rank() > 1 ||
        (zb->numel() != 1 && zb->numel() != b->dim(1))) {
      return "B's zero point is not a constant of B's type, one or one per column";
    }
  }
  return "";
}

class Int8MatMul final : public Kernel {
 public:
  explicit Int8MatMul(const ir::Node& node)
      : node_(node),
        b_dims_(constant_input(node, 1)->dims()),
        weight_(node, 1, 3, 1, /*correctable=*/true),
        b_(weight_.get().data<int8_t>()) {
    const int64_t k = b_dims_[0], n = b_dims_[1];
    colsum_.assign(static_cast<size_t>(n), 0);
    for (int64_t r = 0; r < k; ++r) {
      for (int64_t c = 0; c < n; ++c) colsum_[static_cast<size_t>(c)] += b_[r * n + c];
    }
  }
  std::string_view name() const override { return "onednn.matmul_integer"; }

  void run(std::span<const DeviceTensor> in, KernelOutputs& out, Stream& stream) override {
    const DeviceTensor& a = in[0];
    const int64_t k = b_dims_[0], n = b_dims_[1];
    KILN_CHECK_ARG(!a.dims.empty() && a.dims.back() == k,
                   "node {}: MatMulInteger of {} and {}: inner dims differ", node_.label(),
                   dims_to_string(a.dims), dims_to_string(b_dims_));
    KILN_CHECK(in[1].dims == b_dims_, ErrorCode::Internal, "node {}: B is not the constant {}",
               node_.label(), dims_to_string(b_dims_));
    std::vector<int64_t> out_dims = a.dims;
    if (a.dims.size() == 1) {
      out_dims = {n};
    } else {
      out_dims.back() = n;
    }
    DeviceTensor y = out.allocate(0, DataType::Int32, out_dims);
    const int64_t rows = k > 0 ? a.numel() / k : 0;
    if (y.numel() == 0) return;
    auto* py = static_cast<int32_t*>(y.data);
    if (k == 0) {
      std::fill(py, py + y.numel(), 0);
      return;
    }
    const Entry& e = prepared(rows);
    std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, wrap(e.pd.src_desc(), a.data)},
                                            {DNNL_ARG_WEIGHTS, e.packed_b.mem},
                                            {DNNL_ARG_DST, wrap(e.pd.dst_desc(), y.data)},
                                            {DNNL_ARG_SCRATCHPAD, e.scratch}};
    {
      ThreadLimit limit(e.threads);
      e.prim.execute(dnnl_stream(stream), args);
      dnnl_stream(stream).wait();
    }
    // The zero points out of every product (check_matmul_integer's identity).
    const int32_t za =
        in.size() > 2 && in[2].defined() ? *static_cast<const uint8_t*>(in[2].data) : 0;
    const std::vector<int32_t>& d = weight_.correction();
    if (za == 0 && d.empty()) return;
    if (!d.empty()) int8_row_sums(a.data, true, rows, k, 1, za, e.sums.data(), e.threads);
    for (int64_t r = 0; r < rows; ++r) {
      int32_t* row = py + r * n;
      if (za != 0) {
        for (int64_t c = 0; c < n; ++c) row[c] -= za * colsum_[static_cast<size_t>(c)];
      }
      if (!d.empty()) {
        const int32_t centred = e.sums[static_cast<size_t>(r)];
        for (int64_t c = 0; c < n; ++c) row[c] -= d[static_cast<size_t>(c)] * centred;
      }
    }
  }

 private:
  struct Entry {
    int64_t rows = 0;
    int threads = 1;
    dnnl::matmul::primitive_desc pd;
    dnnl::matmul prim;
    mutable memory scratch;
    mutable std::vector<int32_t> sums;  // the rows' sums of a - a_zero (int8_row_sums)
    // B in the layout the primitive picked, packed once (per layout, shared between row
    // counts): passed row-major, oneDNN re-blocked it at every run.
    PackedConstant packed_b;
  };

  const Entry& prepared(int64_t rows) {
    if (const Entry* hit = cache_.find([&](const Entry& e) { return e.rows == rows; })) {
      return *hit;
    }
    const int64_t k = b_dims_[0], n = b_dims_[1];
    Entry e;
    e.rows = rows;
    e.threads = threads_for_work(2.0 * static_cast<double>(rows * n * k),
                                 static_cast<double>(rows * k + k * n + 4 * rows * n));
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    using dt = memory::data_type;
    ThreadLimit limit(e.threads);
    try {
      e.pd = dnnl::matmul::primitive_desc(
          dnnl::matmul::desc(memory::desc({rows, k}, dt::u8, memory::format_tag::ab),
                             memory::desc({k, n}, dt::s8, memory::format_tag::any),
                             memory::desc({rows, n}, dt::s32, memory::format_tag::ab)),
          attr, engine());
      e.prim = dnnl::matmul(e.pd);
      e.scratch = memory(e.pd.scratchpad_desc(), engine());
      if (!weight_.correction().empty()) e.sums.resize(static_cast<size_t>(rows));
      note_implementation(node_, e.pd.impl_info_str());
      e.packed_b = pack_once_per_layout(
          cache_, [](const Entry& c) -> const PackedConstant& { return c.packed_b; },
          wrap(memory::desc({k, n}, dt::s8, memory::format_tag::ab), const_cast<int8_t*>(b_)),
          e.pd.weights_desc());
    } catch (const dnnl::error& err) {
      fail(ErrorCode::Unsupported, "node {}: oneDNN has no int8 matmul for {} x {}: {}",
           node_.label(), rows, dims_to_string(b_dims_), err.what());
    }
    return cache_.add(std::move(e));
  }

  const ir::Node& node_;
  std::vector<int64_t> b_dims_;
  // B as int8 (its zero points folded in where they fit, else less 128 with the rest of each
  // column's zero point in correction(): Int8Weight).
  Int8Weight weight_;
  const int8_t* b_;
  std::vector<int32_t> colsum_;  // of b_'s columns, for A's zero point
  ShapeCache<Entry> cache_;
};

}  // namespace

KILN_REGISTER_KERNEL({.backend = "cpu",
                      .op_type = "DynamicQuantizeLinear",
                      .name = "cpu.dynamic_quantize",
                      .check = check_dynamic_quantize,
                      .create = [](const ir::Node& node) -> std::unique_ptr<Kernel> {
                        return std::make_unique<DynamicQuantize>(node);
                      }});
KILN_REGISTER_KERNEL({.backend = "cpu",
                      .op_type = "MatMulInteger",
                      .name = "onednn.matmul_integer",
                      .check = check_matmul_integer,
                      .create = [](const ir::Node& node) -> std::unique_ptr<Kernel> {
                        return std::make_unique<Int8MatMul>(node);
                      }});

}  // namespace kiln::backends::cpu
