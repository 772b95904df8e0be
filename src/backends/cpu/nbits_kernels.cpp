// com.microsoft MatMulNBits on the CPU (INT4 weight-only: what `kiln quantize --int4` and
// onnxruntime's MatMulNBitsQuantizer write). The weight stays packed in memory (4 bits a value
// plus a scale and zero point a block); each run dequantizes it into one float buffer per
// thread, shared by every such kernel, and multiplies by it with oneDNN's float matmul (the
// primitive the float MatMul uses, bias as its post-op; ai.kiln FusedMatMulNBits adds its
// activation as a post-op, as FusedMatMul does). The dequantization costs K N per run
// against the product's 2 rows K N, so for a transformer layer's row counts the kernel runs at
// the float product's speed while the model keeps 1/7 of the float weight bytes. (Dequantizing
// panels of columns into a cache-sized buffer with one sgemm each was tried first: 20 % slower
// than the float MatMul on MiniLM, as oneDNN's sgemm is slower than its matmul primitive.)
#include <algorithm>
#include <unordered_map>

#include "backends/cpu/onednn_common.hpp"
#include "backends/cpu/work_threads.hpp"
#include "backends/kernel_table.hpp"
#include "backends/shape_cache.hpp"
#include "ops/matmul_nbits_layout.hpp"

namespace kiln::backends::cpu {
namespace {

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#define KILN_NBITS_AVX2 1
// 32 codes (16 bytes, the lower nibble first) to (code - z) * s: the nibbles split with a mask
// and a shift, interleaved back into order, widened to int32 eight at a time. GCC does not
// vectorize the scalar loop's interleaved stores well (2.3x slower on MiniLM's weights).
__attribute__((target("avx2"))) inline void dequantize_32(const uint8_t* b, float z, float s,
                                                          float* d) {
  const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b));
  const __m128i mask = _mm_set1_epi8(15);
  const __m128i lo = _mm_and_si128(bytes, mask);
  const __m128i hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), mask);
  const __m128i first = _mm_unpacklo_epi8(lo, hi), second = _mm_unpackhi_epi8(lo, hi);
  const __m256 vz = _mm256_set1_ps(z), vs = _mm256_set1_ps(s);
  const __m128i parts[4] = {first, _mm_srli_si128(first, 8), second, _mm_srli_si128(second, 8)};
  for (int p = 0; p < 4; ++p) {
    const __m256 codes = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(parts[p]));
    _mm256_storeu_ps(d + 8 * p, _mm256_mul_ps(_mm256_sub_ps(codes, vz), vs));
  }
}
#endif

// Column `codes` (blocks * blob bytes) of the weight into dst[0, k): (code - zero_point) * scale,
// the reference's arithmetic (the same two roundings, so both give the same floats).
void dequantize_column_scalar(const uint8_t* codes, const float* scale, const float* zero_point,
                              int64_t blocks, int64_t block_size, int64_t k, float* dst) {
  for (int64_t j = 0; j < blocks; ++j) {
    const uint8_t* b = codes + j * (block_size / 2);
    const int64_t len = std::min(block_size, k - j * block_size);
    for (int64_t r = 0; r < len; ++r) {
      dst[j * block_size + r] =
          (static_cast<float>(ops::nbits_code(b, r)) - zero_point[j]) * scale[j];
    }
  }
}

#ifdef KILN_NBITS_AVX2
// The same, 32 codes at a time; a whole column per call, so that dequantize_32 inlines (a call
// per 32 codes cost 1.6 ms of MiniLM's 9 ms at 1 x 16 tokens).
__attribute__((target("avx2"))) void dequantize_column_avx2(const uint8_t* codes,
                                                            const float* scale,
                                                            const float* zero_point, int64_t blocks,
                                                            int64_t block_size, int64_t k,
                                                            float* dst) {
  for (int64_t j = 0; j < blocks; ++j) {
    const uint8_t* b = codes + j * (block_size / 2);
    float* d = dst + j * block_size;
    const int64_t len = std::min(block_size, k - j * block_size);
    int64_t r = 0;
    for (; r + 32 <= len; r += 32) dequantize_32(b + r / 2, zero_point[j], scale[j], d + r);
    for (; r < len; ++r)
      d[r] = (static_cast<float>(ops::nbits_code(b, r)) - zero_point[j]) * scale[j];
  }
}
#endif

void dequantize_column(const uint8_t* codes, const float* scale, const float* zero_point,
                       int64_t blocks, int64_t block_size, int64_t k, float* dst) {
#ifdef KILN_NBITS_AVX2
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx2) {
    dequantize_column_avx2(codes, scale, zero_point, blocks, block_size, k, dst);
    return;
  }
#endif
  dequantize_column_scalar(codes, scale, zero_point, blocks, block_size, k, dst);
}

std::string check_matmul_nbits(const ir::Node& node) {
  if (std::string why = check_f32_input(node, 0, 1, 8); !why.empty()) return why;
  if (std::string why = check_activation_post_ops(node); !why.empty()) return why;
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

// The dequantized weight of the kernel running on this thread: one buffer shared by every
// MatMulNBits kernel of the thread, so a model's float weights never exist all at once (the
// largest one does, while its product runs).
std::vector<float>& dequantized_scratch() {
  thread_local std::vector<float> buffer;
  return buffer;
}

class NBitsMatMul final : public Kernel {
 public:
  explicit NBitsMatMul(const ir::Node& node)
      : node_(node),
        layout_(ops::nbits_layout(ops::AttrReader(node))),
        act_(node_activation(node)) {
    const bool has_zp = node.inputs().size() > 3 && node.input(3);
    params_ = ops::nbits_block_params(layout_, *constant_input(node, 2),
                                      has_zp ? constant_input(node, 3) : nullptr);
  }
  std::string_view name() const override { return "cpu.matmul_nbits"; }

  void run(std::span<const DeviceTensor> in, KernelOutputs& out, Stream& stream) override {
    const DeviceTensor& a = in[0];
    const int64_t k = layout_.k, n = layout_.n;
    KILN_CHECK_ARG(!a.dims.empty() && a.dims.back() == k,
                   "node {}: MatMulNBits: A is {}; its last dim must be K={}", node_.label(),
                   dims_to_string(a.dims), k);
    const int64_t per_column = layout_.blocks * layout_.blob;
    KILN_CHECK(in[1].numel() == n * per_column, ErrorCode::Internal,
               "node {}: B is not the constant of {} bytes", node_.label(), n * per_column);
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
    const Entry& e = prepared(rows, bias != nullptr);
    // The whole weight as float [N][K] (column n's K values contiguous, as B holds them), then
    // the float product: dequantizing costs K N against the product's 2 rows K N.
    std::vector<float>& w = dequantized_scratch();
    if (w.size() < static_cast<size_t>(n * k)) w.resize(static_cast<size_t>(n * k));
    const auto* codes = static_cast<const uint8_t*>(in[1].data);
    {
      ThreadLimit limit(e.threads);
#pragma omp parallel for schedule(static) if (e.threads > 1)
      for (int64_t c = 0; c < n; ++c) {
        const size_t first = static_cast<size_t>(c * layout_.blocks);
        dequantize_column(codes + c * per_column, params_.scale.data() + first,
                          params_.zero_point.data() + first, layout_.blocks, layout_.block_size, k,
                          w.data() + c * k);
      }
    }
    std::unordered_map<int, dnnl::memory> args = {
        {DNNL_ARG_SRC, wrap(e.pd.src_desc(), a.data)},
        {DNNL_ARG_WEIGHTS, wrap(e.pd.weights_desc(), w.data())},
        {DNNL_ARG_DST, wrap(e.pd.dst_desc(), y.data)},
        {DNNL_ARG_SCRATCHPAD, e.scratch}};
    if (bias) args[DNNL_ARG_BIAS] = wrap(e.pd.bias_desc(), bias->data);
    ThreadLimit limit(e.threads);
    e.prim.execute(dnnl_stream(stream), args);
  }

 private:
  struct Entry {
    int64_t rows = 0;
    bool bias = false;
    int threads = 1;
    dnnl::matmul::primitive_desc pd;
    dnnl::matmul prim;
    mutable dnnl::memory scratch;
  };

  const Entry& prepared(int64_t rows, bool bias) {
    if (const Entry* hit =
            cache_.find([&](const Entry& e) { return e.rows == rows && e.bias == bias; })) {
      return *hit;
    }
    using dnnl::memory;
    const int64_t k = layout_.k, n = layout_.n;
    Entry e;
    e.rows = rows;
    e.bias = bias;
    e.threads = threads_for_work(2.0 * double(rows) * double(k) * double(n),
                                 4.0 * double(rows * k + k * n + rows * n));
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    dnnl::post_ops post;
    append_activation(post, act_);  // FusedMatMulNBits: its activation (checked at selection)
    attr.set_post_ops(post);
    ThreadLimit limit(e.threads);
    try {
      // Weights [K, N] read transposed ("ba"): the [N][K] buffer the dequantization fills.
      e.pd = dnnl::matmul::primitive_desc(
          dnnl::matmul::desc(plain_desc({rows, k}),
                             memory::desc({k, n}, memory::data_type::f32, memory::format_tag::ba),
                             bias ? plain_desc({1, n}) : memory::desc(), plain_desc({rows, n})),
          attr, engine());
      e.prim = dnnl::matmul(e.pd);
      e.scratch = memory(e.pd.scratchpad_desc(), engine());
      note_implementation(node_, e.pd.impl_info_str());
    } catch (const dnnl::error& err) {
      fail(ErrorCode::Unsupported, "node {}: oneDNN has no matmul for {} rows x [{}, {}]: {}",
           node_.label(), rows, k, n, err.what());
    }
    // A few row counts at most in practice (batch x sequence); bound the cache anyway.
    return cache_.add(std::move(e));
  }

  const ir::Node& node_;
  ops::NBitsLayout layout_;
  ops::FusedActivation act_;  // None for MatMulNBits
  ops::NBitsBlockParams params_;
  ShapeCache<Entry> cache_;
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
KILN_REGISTER_KERNEL({.backend = "cpu",
                      .domain = ops::kKilnDomain,
                      .op_type = "FusedMatMulNBits",
                      .name = "cpu.matmul_nbits",
                      .check = check_matmul_nbits,
                      .create = [](const ir::Node& node) -> std::unique_ptr<Kernel> {
                        return std::make_unique<NBitsMatMul>(node);
                      }});

}  // namespace kiln::backends::cpu
