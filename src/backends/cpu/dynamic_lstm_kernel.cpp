// com.microsoft DynamicQuantizeLSTM on the CPU (int8 W and R: what `kiln quantize --dynamic` and
// onnxruntime's quantize_dynamic write), on AVX-512 VNNI: the activations quantized to uint8 as
// the reference does (ops/dynamic_u8.hpp: X as one block, each batch entry's h before each step),
// the products u8 x s8 -> s32 with vpdpbusd (exact: the activation's zero point is taken out
// afterwards with the weight's column sums), scaled in float32 as the reference scales them; the
// gates and the cell in float32 on AVX-512 (exp by backends/cpu/exp_avx512.hpp). The weights are
// packed once (by buffer) as [K/4][columns][4] int8, the layout vpdpbusd reads 16 columns at a
// time. Weight zero points other than 0, uint8 weights, peepholes, clip, input_forget,
// sequence_lens and other activations stay on the reference kernel.
#include <immintrin.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>

#include "backends/cpu/cpu_backend.hpp"
#include "backends/cpu/exp_avx512.hpp"
#include "backends/cpu/onednn_common.hpp"
#include "backends/kernel_table.hpp"
#include "ops/dynamic_quantize_lstm_slots.hpp"
#include "ops/dynamic_u8.hpp"
#include "ops/kernel_context.hpp"
#include "ops/matmul_nbits_layout.hpp"

namespace kiln::backends::cpu {
namespace {

using enum ops::dynamic_lstm::Slot;

bool has(const ir::Node& n, size_t i) {
  return n.inputs().size() > i && n.input(i);
}

std::string check_dynamic_lstm(const ir::Node& node) {
  if (!__builtin_cpu_supports("avx512vnni")) return "no AVX-512 VNNI on this CPU";
  ops::AttrReader attrs(node);
  if (attrs.attr_int("layout", 0) != 0) return "layout 1";
  if (attrs.attr_int("input_forget", 0) != 0) return "input_forget";
  if (attrs.has_attr("clip")) return "clip";
  if (attrs.has_attr("activations") || attrs.has_attr("activation_alpha") ||
      attrs.has_attr("activation_beta")) {
    return "explicit activations";
  }
  if (has(node, kSeqLens)) return "sequence_lens";
  if (has(node, kP)) return "peepholes";
  if (node.inputs().size() != 12) return "not 12 inputs";
  for (size_t i : {kW, kR, kWZero, kRZero}) {
    const ir::Value* v = node.input(i);
    if (!v || !v->type().is_tensor() || v->type().dtype != DataType::Int8) {
      return "weights or zero points not int8";
    }
  }
  for (size_t i : {kWZero, kRZero}) {
    const ir::Value* v = node.input(i);
    if (!v->is_constant()) return "zero points not constant";
    const Tensor& z = v->constant();
    for (int64_t k = 0; k < z.numel(); ++k) {
      if (z.data<int8_t>()[k] != 0) return "a weight zero point other than 0";
    }
  }
  if (std::string why = check_f32_input(node, kX, 3, 3); !why.empty()) return why;
  if (std::string why = check_f32_input(node, kB, 2, 2, true); !why.empty()) return why;
  if (std::string why = check_f32_input(node, kInitH, 3, 3, true); !why.empty()) return why;
  if (std::string why = check_f32_input(node, kInitC, 3, 3, true); !why.empty()) return why;
  return check_f32_outputs(node);
}

constexpr int64_t kCols = 16;  // int32 lanes of one vpdpbusd

int64_t round_up(int64_t v, int64_t m) {
  return (v + m - 1) / m * m;
}

// One int8 weight [dirs, K, cols] packed per direction as [K/4][cols (padded to 16)][4], with
// its column sums (for the activation's zero point) and scales per column.
struct PackedWeight8 {
  int64_t k = 0, k4 = 0, cols = 0, cols_pad = 0;
  std::vector<int8_t> data;      // [dirs][k4/4][cols_pad][4]
  std::vector<int32_t> col_sum;  // [dirs][cols_pad]
  std::vector<float> scale;      // [dirs][cols_pad]

  void pack(const DeviceTensor& w, const DeviceTensor& s, int64_t dirs) {
    k = w.dims[1];
    cols = w.dims[2];
    k4 = round_up(k, 4);
    cols_pad = round_up(cols, kCols);
    data.assign(static_cast<size_t>(dirs * k4 * cols_pad), 0);
    col_sum.assign(static_cast<size_t>(dirs * cols_pad), 0);
    scale.assign(static_cast<size_t>(dirs * cols_pad), 0.f);
    const auto* src = static_cast<const int8_t*>(w.data);
    const auto* sc = static_cast<const float*>(s.data);
    const bool per_col = s.numel() == dirs * cols && s.numel() != dirs;
    for (int64_t d = 0; d < dirs; ++d) {
      int8_t* dst = data.data() + d * k4 * cols_pad;
      for (int64_t r = 0; r < k; ++r) {
        for (int64_t c = 0; c < cols; ++c) {
          const int8_t v = src[(d * k + r) * cols + c];
          dst[((r / 4) * cols_pad + c) * 4 + r % 4] = v;
          col_sum[static_cast<size_t>(d * cols_pad + c)] += v;
        }
      }
      for (int64_t c = 0; c < cols; ++c) {
        scale[static_cast<size_t>(d * cols_pad + c)] = sc[per_col ? d * cols + c : d];
      }
    }
  }
};

// The zero point's share taken out of 16 int32 sums, then the scale as the reference forms it
// (activation scale times the column's, in float).
__attribute__((target("avx512f,avx512bw,avx512vnni"))) inline void finish_block(
    __m512i acc, __m512i zp, __m512 a_scale, const int32_t* sums, const float* scales, int64_t c,
    float* out) {
  acc = _mm512_sub_epi32(acc, _mm512_mullo_epi32(zp, _mm512_loadu_si512(sums + c)));
  const __m512 scale = _mm512_mul_ps(a_scale, _mm512_loadu_ps(scales + c));
  _mm512_storeu_ps(out + c, _mm512_mul_ps(_mm512_cvtepi32_ps(acc), scale));
}

// out[r][c] = (sum_k code[r][k] * w[k][c] - zero_point * col_sum[c]) * (a_scale * w_scale[c])
// for R rows of uint8 codes that share one quantization (k4 codes a row, the padding 0; rows
// `stride` codes and `out_stride` floats apart). Four column blocks a pass over K: each weight
// vector loaded once serves the R rows, and 4 R independent vpdpbusd chains hide its latency.
template <int R>
__attribute__((target("avx512f,avx512bw,avx512vnni"))) void product_rows(
    const uint8_t* codes, int64_t stride, const ops::DynamicU8& q, const PackedWeight8& w,
    int64_t d, float* out, int64_t out_stride) {
  const int8_t* wd = w.data.data() + d * w.k4 * w.cols_pad;
  const int32_t* sums = w.col_sum.data() + d * w.cols_pad;
  const float* scales = w.scale.data() + d * w.cols_pad;
  const __m512i zp = _mm512_set1_epi32(q.zero_point);
  const __m512 a_scale = _mm512_set1_ps(q.scale);
  const int64_t quads = w.k4 / 4;
  for (int64_t c = 0; c < w.cols_pad; c += 4 * kCols) {
    const int blocks = static_cast<int>(std::min<int64_t>(4, (w.cols_pad - c) / kCols));
    __m512i acc[R][4];
    for (int r = 0; r < R; ++r) {
      for (int u = 0; u < 4; ++u) acc[r][u] = _mm512_setzero_si512();
    }
    for (int64_t j = 0; j < quads; ++j) {
      const int8_t* wj = wd + (j * w.cols_pad + c) * 4;
      __m512i wv[4];
      for (int u = 0; u < 4; ++u) {
        wv[u] = u < blocks ? _mm512_loadu_si512(wj + u * kCols * 4) : _mm512_setzero_si512();
      }
      for (int r = 0; r < R; ++r) {
        int32_t quad;
        std::memcpy(&quad, codes + r * stride + j * 4, 4);
        const __m512i a = _mm512_set1_epi32(quad);
        for (int u = 0; u < 4; ++u) acc[r][u] = _mm512_dpbusd_epi32(acc[r][u], a, wv[u]);
      }
    }
    for (int r = 0; r < R; ++r) {
      for (int u = 0; u < blocks; ++u) {
        finish_block(acc[r][u], zp, a_scale, sums, scales, c + u * kCols, out + r * out_stride);
      }
    }
  }
}

// sigmoid(v) = 1 / (1 + e^-v) and tanh(v) = 1 - 2 / (1 + e^2v), e^ held to [-87.3, 88] so
// that large inputs saturate to 0, 1 or -1 (NaN stays NaN).
__attribute__((target("avx512f"))) inline __m512 sigmoid_ps(__m512 v) {
  const __m512 e = exp_ps(
      _mm512_min_ps(_mm512_max_ps(_mm512_sub_ps(_mm512_setzero_ps(), v), _mm512_set1_ps(-87.3f)),
                    _mm512_set1_ps(88.f)));
  return _mm512_div_ps(_mm512_set1_ps(1.f), _mm512_add_ps(_mm512_set1_ps(1.f), e));
}
__attribute__((target("avx512f"))) inline __m512 tanh_ps(__m512 v) {
  const __m512 e = exp_ps(_mm512_min_ps(_mm512_max_ps(_mm512_add_ps(v, v), _mm512_set1_ps(-87.3f)),
                                        _mm512_set1_ps(88.f)));
  return _mm512_sub_ps(_mm512_set1_ps(1.f),
                       _mm512_div_ps(_mm512_set1_ps(2.f), _mm512_add_ps(_mm512_set1_ps(1.f), e)));
}

// The pre-activation of 16 units of one gate: both products and the summed biases.
__attribute__((target("avx512f"))) inline __m512 gate_pre(const float* xp, const float* rec,
                                                          const float* bias, int64_t hs,
                                                          int64_t gate, int64_t j) {
  const int64_t g = gate * hs + j;
  return _mm512_add_ps(_mm512_add_ps(_mm512_loadu_ps(xp + g), _mm512_loadu_ps(rec + g)),
                       _mm512_loadu_ps(bias + g));
}

// One batch entry's step: the gates i, o, f, c from the two products and the summed biases,
// then the cell c = f c + i g and h = o tanh(c), 16 units at a time (the rest one by one).
__attribute__((target("avx512f"))) void cell(const float* xp, const float* rec, const float* bias,
                                             int64_t hs, float* c, float* h) {
  int64_t j = 0;
  for (; j + 16 <= hs; j += 16) {
    const __m512 ig = sigmoid_ps(gate_pre(xp, rec, bias, hs, 0, j)),
                 og = sigmoid_ps(gate_pre(xp, rec, bias, hs, 1, j));
    const __m512 fg = sigmoid_ps(gate_pre(xp, rec, bias, hs, 2, j)),
                 gg = tanh_ps(gate_pre(xp, rec, bias, hs, 3, j));
    const __m512 cn = _mm512_fmadd_ps(fg, _mm512_loadu_ps(c + j), _mm512_mul_ps(ig, gg));
    _mm512_storeu_ps(c + j, cn);
    _mm512_storeu_ps(h + j, _mm512_mul_ps(og, tanh_ps(cn)));
  }
  auto sig = [](float v) { return 1.f / (1.f + std::exp(-v)); };
  for (; j < hs; ++j) {
    auto pre1 = [&](int64_t gate) {
      const int64_t g = gate * hs + j;
      return xp[g] + rec[g] + bias[g];
    };
    c[j] = sig(pre1(2)) * c[j] + sig(pre1(0)) * std::tanh(pre1(3));
    h[j] = sig(pre1(1)) * std::tanh(c[j]);
  }
}

// codes[i] = the uint8 code of x[i] for i < n, 0 after (the padding to K/4 quads): x / scale
// rounded half to even, plus the zero point, clamped, bit for bit as DynamicU8::code.
__attribute__((target("avx512f"))) void quantize_row(const float* x, int64_t n, uint8_t* codes,
                                                     int64_t padded, const ops::DynamicU8& q) {
  const __m512 scale = _mm512_set1_ps(q.scale);
  const __m512 zp = _mm512_set1_ps(static_cast<float>(q.zero_point));
  const __m512 lo = _mm512_setzero_ps(), hi = _mm512_set1_ps(255.f);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 r = _mm512_roundscale_ps(_mm512_div_ps(_mm512_loadu_ps(x + i), scale),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 v = _mm512_min_ps(_mm512_max_ps(_mm512_add_ps(r, zp), lo), hi);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + i),
                     _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(v)));
  }
  for (; i < n; ++i) codes[i] = q.code(x[i]);
  std::fill(codes + n, codes + padded, uint8_t{0});
}

// DynamicU8::of with the range found 16 values at a time (min and max are exact either way).
__attribute__((target("avx512f"))) ops::DynamicU8 range_of(const float* x, int64_t n) {
  __m512 lo = _mm512_setzero_ps(), hi = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    lo = _mm512_min_ps(v, lo);  // a NaN keeps the running value, as std::min(lo, v)
    hi = _mm512_max_ps(v, hi);
  }
  float ends[2] = {_mm512_reduce_min_ps(lo), _mm512_reduce_max_ps(hi)};
  for (; i < n; ++i) {
    ends[0] = std::min(ends[0], x[i]);
    ends[1] = std::max(ends[1], x[i]);
  }
  return ops::DynamicU8::of({ends, 2});
}

class DynamicLstmKernel final : public Kernel {
 public:
  explicit DynamicLstmKernel(const ir::Node& node) : node_(node) {
    ops::AttrReader attrs(node);
    const std::string dir = attrs.attr_string("direction", "forward");
    attrs.check(dir == "forward" || dir == "reverse" || dir == "bidirectional",
                "unknown direction '{}'", dir);
    reverse_ = dir == "reverse";
    dirs_ = dir == "bidirectional" ? 2 : 1;
  }
  std::string_view name() const override { return "cpu.dynamic_quantize_lstm"; }

  void run(std::span<const DeviceTensor> in, KernelOutputs& out, Stream&) override {
    auto input = [&](size_t i) -> const DeviceTensor* {
      return in.size() > i && in[i].defined() ? &in[i] : nullptr;
    };
    const DeviceTensor& x = in[kX];
    const int64_t steps = x.dims[0], batch = x.dims[1], in_size = x.dims[2];
    ops::AttrReader attrs(node_);
    attrs.check(in[kW].dims.size() == 3 && in[kW].dims[0] == dirs_ && in[kW].dims[1] == in_size,
                "W must be [{}, {}, 4 hidden]", dirs_, in_size);
    const int64_t hs = in[kR].dims[1], g4 = 4 * hs;
    attrs.check(in[kW].dims[2] == g4 && in[kR].dims[2] == g4, "W and R must have 4 x {} columns",
                hs);
    if (in[kW].data != w_from_ || in[kR].data != r_from_) {
      w_.pack(in[kW], in[kWScale], dirs_);
      r_.pack(in[kR], in[kRScale], dirs_);
      w_from_ = in[kW].data;
      r_from_ = in[kR].data;
    }
    const DeviceTensor* b = input(kB);
    const DeviceTensor* h0 = input(kInitH);
    const DeviceTensor* c0 = input(kInitC);
    DeviceTensor y, yh, yc;
    const bool want_y = !node_.outputs().empty() && node_.output(0);
    if (want_y) y = out.allocate(0, DataType::Float32, {steps, dirs_, batch, hs});
    if (node_.outputs().size() > 1 && node_.output(1)) {
      yh = out.allocate(1, DataType::Float32, {dirs_, batch, hs});
    }
    if (node_.outputs().size() > 2 && node_.output(2)) {
      yc = out.allocate(2, DataType::Float32, {dirs_, batch, hs});
    }
    if (batch == 0) return;
    const auto* px = static_cast<const float*>(x.data);
    const int64_t rows = steps * batch;
    // X: one block for every step and batch entry.
    const ops::DynamicU8 xq = range_of(px, rows * in_size);
    x_codes_.resize(static_cast<size_t>(rows * w_.k4));
    for (int64_t r = 0; r < rows; ++r) {
      quantize_row(px + r * in_size, in_size, x_codes_.data() + r * w_.k4, w_.k4, xq);
    }
    proj_.resize(static_cast<size_t>(rows * w_.cols_pad));
    rec_.resize(static_cast<size_t>(r_.cols_pad));
    h_codes_.resize(static_cast<size_t>(r_.k4));
    h_.resize(static_cast<size_t>(batch * hs));
    c_.resize(static_cast<size_t>(batch * hs));
    bias_.resize(static_cast<size_t>(g4));
    for (int64_t d = 0; d < dirs_; ++d) {
      int64_t r = 0;
      for (; r + 4 <= rows; r += 4) {
        product_rows<4>(x_codes_.data() + r * w_.k4, w_.k4, xq, w_, d,
                        proj_.data() + r * w_.cols_pad, w_.cols_pad);
      }
      for (; r < rows; ++r) {
        product_rows<1>(x_codes_.data() + r * w_.k4, w_.k4, xq, w_, d,
                        proj_.data() + r * w_.cols_pad, w_.cols_pad);
      }
      std::fill(bias_.begin(), bias_.end(), 0.f);
      if (b) {
        const auto* pb = static_cast<const float*>(b->data) + d * 2 * g4;
        for (int64_t k = 0; k < g4; ++k) bias_[k] = pb[k] + pb[g4 + k];
      }
      auto init = [&](const DeviceTensor* t, std::vector<float>& v) {
        if (t) {
          std::copy_n(static_cast<const float*>(t->data) + d * batch * hs, batch * hs, v.begin());
        } else {
          std::fill(v.begin(), v.end(), 0.f);
        }
      };
      init(h0, h_);
      init(c0, c_);
      const bool backwards = reverse_ || d == 1;
      for (int64_t step = 0; step < steps; ++step) {
        const int64_t t = backwards ? steps - 1 - step : step;
        for (int64_t n = 0; n < batch; ++n) {
          float* h = h_.data() + n * hs;
          float* c = c_.data() + n * hs;
          const ops::DynamicU8 hq = range_of(h, hs);
          quantize_row(h, hs, h_codes_.data(), r_.k4, hq);
          product_rows<1>(h_codes_.data(), r_.k4, hq, r_, d, rec_.data(), r_.cols_pad);
          const float* xp = proj_.data() + (t * batch + n) * w_.cols_pad;
          cell(xp, rec_.data(), bias_.data(), hs, c, h);
          if (want_y) {
            std::copy_n(h, hs, static_cast<float*>(y.data) + ((t * dirs_ + d) * batch + n) * hs);
          }
        }
      }
      if (yh.data)
        std::copy_n(h_.data(), batch * hs, static_cast<float*>(yh.data) + d * batch * hs);
      if (yc.data)
        std::copy_n(c_.data(), batch * hs, static_cast<float*>(yc.data) + d * batch * hs);
    }
  }

 private:
  const ir::Node& node_;
  bool reverse_ = false;
  int64_t dirs_ = 1;
  PackedWeight8 w_, r_;
  const void* w_from_ = nullptr;  // the buffers w_ and r_ were packed from
  const void* r_from_ = nullptr;
  std::vector<uint8_t> x_codes_, h_codes_;
  std::vector<float> proj_, rec_, h_, c_, bias_;
};

}  // namespace

KILN_REGISTER_KERNEL({.backend = "cpu",
                      .domain = ops::kMicrosoftDomain,
                      .op_type = "DynamicQuantizeLSTM",
                      .name = "cpu.dynamic_quantize_lstm",
                      .check = check_dynamic_lstm,
                      .create = [](const ir::Node& node) -> std::unique_ptr<Kernel> {
                        return std::make_unique<DynamicLstmKernel>(node);
                      }});

}  // namespace kiln::backends::cpu
