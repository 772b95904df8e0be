// com.microsoft MatMulNBits on the CPU (INT4 weight-only: what `kiln quantize --int4` and
// onnxruntime's MatMulNBitsQuantizer write). The weight stays packed in memory (4 bits a value
// plus a scale and zero point a block); each run dequantizes it a panel of columns at a time
// into a float buffer that stays in cache and multiplies the activation by that panel with
// oneDNN's float GEMM. The dequantization costs K * N per run against the product's 2 M K N,
// so the kernel runs at the float GEMM's speed for the row counts of a transformer layer while
// reading 1/7 of the float weight's bytes.
#include <omp.h>

#include <algorithm>
#include <atomic>

#include "backends/cpu/onednn_common.hpp"
#include "backends/cpu/work_threads.hpp"
#include "backends/kernel_table.hpp"
#include "ops/matmul_nbits_layout.hpp"

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define KILN_NBITS_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define KILN_NBITS_CLONES
#endif

namespace kiln::backends::cpu {
namespace {

// Floats of one dequantized panel: 256 KiB, well inside L2, so the GEMM reads it from cache.
constexpr int64_t kPanelFloats = 64 * 1024;

// Column `codes` (blocks * blob bytes) of the weight into dst[0, k): (code - zero_point) * scale,
// the reference's arithmetic.
KILN_NBITS_CLONES
void dequantize_column(const uint8_t* codes, const float* scale, const float* zero_point,
                       int64_t blocks, int64_t block_size, int64_t k, float* dst) {
  const int64_t blob = block_size / 2;
  for (int64_t j = 0; j < blocks; ++j) {
    const uint8_t* b = codes + j * blob;
    float* d = dst + j * block_size;
    const float s = scale[j], z = zero_point[j];
    const int64_t len = std::min(block_size, k - j * block_size);
    if (len == block_size) {
      for (int64_t r = 0; r < blob; ++r) {
        d[2 * r] = (static_cast<float>(b[r] & 15) - z) * s;
        d[2 * r + 1] = (static_cast<float>(b[r] >> 4) - z) * s;
      }
    } else {
      for (int64_t r = 0; r < len; ++r) {
        d[r] = (static_cast<float>(ops::nbits_code(b, r)) - z) * s;
      }
    }
  }
}

std::string check_matmul_nbits(const ir::Node& node) {
  if (std::string why = check_f32_input(node, 0, 1, 8); !why.empty()) return why;
  if (std::string why = check_f32_outputs(node); !why.empty()) return why;
  if (node.inputs().size() < 3 || node.inputs().size() > 6) return "MatMulNBits takes 3-6 inputs";
  const Tensor* b = constant_input(node, 1);
  const Tensor* scales = constant_input(node, 2);
  if (!b || !scales) return "B and scales are not constants";
  const bool has_zp = node.inputs().size() > 3 && node.input(3);
  const Tensor* zp = has_zp ? constant_input(node, 3) : nullptr;
  if (has_zp && !zp) return "zero_points is not a constant";
  if (node.inputs().size() > 4 && node.input(4)) return "g_idx (act-order) is not supported";
  if (std::string why = check_f32_input(node, 5, 1, 1, true); !why.empty()) return why;
  try {
    const ops::AttrReader attrs(node);
    const ops::NBitsLayout l = ops::nbits_layout(attrs);
    ops::check_nbits_operands(attrs, l, *b, *scales, zp, DataType::Float32);
  } catch (const Error& e) {
    return e.message();
  }
  return "";
}

class NBitsMatMul final : public Kernel {
 public:
  explicit NBitsMatMul(const ir::Node& node)
      : node_(node), layout_(ops::nbits_layout(ops::AttrReader(node))) {
    const bool has_zp = node.inputs().size() > 3 && node.input(3);
    params_ = ops::nbits_block_params(layout_, *constant_input(node, 2),
                                      has_zp ? constant_input(node, 3) : nullptr);
  }
  std::string_view name() const override { return "cpu.matmul_nbits"; }

  void run(std::span<const DeviceTensor> in, KernelOutputs& out, Stream&) override {
    const DeviceTensor& a = in[0];
    const int64_t k = layout_.k, n = layout_.n;
    KILN_CHECK_ARG(!a.dims.empty() && a.dims.back() == k,
                   "node {}: MatMulNBits: A is {}; its last dim must be K={}", node_.label(),
                   dims_to_string(a.dims), k);
    const int64_t blob_bytes = n * layout_.blocks * layout_.blob;
    KILN_CHECK(in[1].numel() == blob_bytes, ErrorCode::Internal,
               "node {}: B is not the constant of {} bytes", node_.label(), blob_bytes);
    const DeviceTensor* bias = in.size() > 5 && in[5].defined() ? &in[5] : nullptr;
    if (bias) {
      KILN_CHECK_ARG(bias->numel() == n, "node {}: bias must have N={} values, got {}",
                     node_.label(), n, dims_to_string(bias->dims));
    }
    std::vector<int64_t> out_dims = a.dims;
    out_dims.back() = n;
    check_output_fits(node_, out_dims);
    DeviceTensor y = out.allocate(0, DataType::Float32, out_dims);
    if (y.numel() == 0) return;
    const int64_t rows = a.numel() / k;
    const auto* pa = static_cast<const float*>(a.data);
    const auto* codes = static_cast<const uint8_t*>(in[1].data);
    auto* py = static_cast<float*>(y.data);
    const double rk = static_cast<double>(rows) * static_cast<double>(k);
    const int threads =
        threads_for_work(2.0 * rk * static_cast<double>(n),
                         static_cast<double>(blob_bytes) + 4.0 * (rk + double(rows) * n));
    // Panels of whole 16-column groups, at most kPanelFloats, and at least one per thread.
    int64_t width = std::max<int64_t>(16, kPanelFloats / k / 16 * 16);
    if (threads > 1) width = std::min(width, ((n + threads - 1) / threads + 15) / 16 * 16);
    width = std::min(width, n);
    const int64_t panels = (n + width - 1) / width;
    const int team = static_cast<int>(std::min<int64_t>(threads, panels));
    scratch_.resize(static_cast<size_t>(team * width * k));
    const int64_t per_column = layout_.blocks * layout_.blob;
    std::atomic<bool> failed{false};
    ThreadLimit limit(team);
    // Each panel is one single-threaded GEMM (inside the region oneDNN runs sequentially).
#pragma omp parallel for num_threads(team) schedule(static) if (team > 1)
    for (int64_t p = 0; p < panels; ++p) {
      float* buf = scratch_.data() + static_cast<int64_t>(omp_get_thread_num()) * width * k;
      const int64_t c0 = p * width, cols = std::min(width, n - c0);
      for (int64_t c = 0; c < cols; ++c) {
        const size_t first = static_cast<size_t>((c0 + c) * layout_.blocks);
        dequantize_column(codes + (c0 + c) * per_column, params_.scale.data() + first,
                          params_.zero_point.data() + first, layout_.blocks, layout_.block_size, k,
                          buf + c * k);
      }
      // Y[:, c0:c0+cols] = A [rows, k] x panel^T (the panel holds its columns as rows of k).
      const dnnl_status_t st =
          dnnl_sgemm('N', 'T', rows, cols, k, 1.0f, pa, k, buf, k, 0.0f, py + c0, n);
      if (st != dnnl_success) failed = true;
    }
    KILN_CHECK(!failed, ErrorCode::Internal, "node {}: oneDNN's sgemm failed", node_.label());
    if (bias) {
      const auto* pb = static_cast<const float*>(bias->data);
      for (int64_t r = 0; r < rows; ++r) {
        float* yr = py + r * n;
#pragma omp simd
        for (int64_t c = 0; c < n; ++c) yr[c] += pb[c];
      }
    }
  }

 private:
  const ir::Node& node_;
  ops::NBitsLayout layout_;
  ops::NBitsBlockParams params_;
  std::vector<float> scratch_;  // one dequantized panel per thread
};

}  // namespace

KILN_REGISTER_KERNEL({.backend = "cpu",
                      .domain = ops::kMicrosoftDomain,
                      .op_type = "MatMulNBits",
                      .name = "cpu.matmul_nbits",
                      .check = check_matmul_nbits,
                      .create = [](const ir::Node& node) -> std::unique_ptr<Kernel> {
                        return std::make_unique<NBitsMatMul>(node);
                      }});

}  // namespace kiln::backends::cpu
