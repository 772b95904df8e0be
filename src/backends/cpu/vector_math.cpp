#include "backends/cpu/vector_math.hpp"

#include "ops/point_ops.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define KILN_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define KILN_CLONES
#endif

namespace kiln::backends::cpu {

namespace {

// Extent of the zero-padded plane the taps read: every window lies inside it.
int64_t padded_rows(const DepthwiseArgs& a) {
  return std::max(a.h + a.pt, (a.oh - 1) * a.sh + (a.kh - 1) * a.dh + 1);
}
int64_t padded_cols(const DepthwiseArgs& a) {
  return std::max(a.w + a.pl, (a.ow - 1) * a.sw + (a.kw - 1) * a.dw + 1);
}

}  // namespace

size_t depthwise_scratch_floats(const DepthwiseArgs& a) {
  // The padded plane, then the accumulators of the flattened output (stride 1).
  return static_cast<size_t>(padded_rows(a) * padded_cols(a) + a.oh * padded_cols(a));
}

KILN_CLONES
void depthwise_plane(const DepthwiseArgs& a, const float* x, const float* w, float bias, float* y,
                     float* scratch) {
  // Copy into a zero-padded plane, so no tap needs a bounds check.
  const int64_t ph = padded_rows(a), pw = padded_cols(a);
  float* pad = scratch;
  std::fill(pad, pad + ph * pw, 0.f);
  for (int64_t r = 0; r < a.h; ++r) {
    std::copy(x + r * a.w, x + (r + 1) * a.w, pad + (r + a.pt) * pw + a.pl);
  }
  if (a.sh == 1 && a.sw == 1) {
    // Output (oh, ow) reads pad[oh * pw + ow + tap offset]: over the output flattened with row
    // stride pw, each tap is one long contiguous multiply-add. Columns past ow are computed and
    // dropped.
    float* acc = pad + ph * pw;
    const int64_t len = (a.oh - 1) * pw + a.ow;
    std::fill(acc, acc + len, bias);
    for (int64_t kh = 0; kh < a.kh; ++kh) {
      for (int64_t kw = 0; kw < a.kw; ++kw) {
        const float wv = w[kh * a.kw + kw];
        const float* src = pad + kh * a.dh * pw + kw * a.dw;
        for (int64_t o = 0; o < len; ++o) acc[o] += wv * src[o];
      }
    }
    for (int64_t oh = 0; oh < a.oh; ++oh) {
      std::copy(acc + oh * pw, acc + oh * pw + a.ow, y + oh * a.ow);
    }
    return;
  }
  for (int64_t oh = 0; oh < a.oh; ++oh) {
    float* row = y + oh * a.ow;
    std::fill(row, row + a.ow, bias);
    for (int64_t kh = 0; kh < a.kh; ++kh) {
      const float* src = pad + (oh * a.sh + kh * a.dh) * pw;
      for (int64_t kw = 0; kw < a.kw; ++kw) {
        const float wv = w[kh * a.kw + kw];
        const float* s = src + kw * a.dw;
        for (int64_t o = 0; o < a.ow; ++o) row[o] += wv * s[o * a.sw];
      }
    }
  }
}

KILN_CLONES
void apply_activation(const ops::FusedActivation& act, const float* x, float* y, int64_t n) {
  using ops::Activation;
  const float alpha = act.alpha, beta = act.beta;
  switch (act.kind) {
    case Activation::None:
      if (x != y) std::copy(x, x + n, y);
      return;
    // Piecewise-linear ones: the point functions in float, which the compiler vectorizes.
    case Activation::Relu:
      for (int64_t i = 0; i < n; ++i) y[i] = point::relu(x[i]);
      return;
    case Activation::Clip:
      for (int64_t i = 0; i < n; ++i) y[i] = point::clip(x[i], alpha, beta);
      return;
    case Activation::LeakyRelu:
      for (int64_t i = 0; i < n; ++i) y[i] = point::leaky_relu(x[i], alpha);
      return;
    case Activation::HardSigmoid:
      for (int64_t i = 0; i < n; ++i) y[i] = point::hard_sigmoid(x[i], alpha, beta);
      return;
    case Activation::HardSwish:
      for (int64_t i = 0; i < n; ++i) y[i] = point::hard_swish(x[i]);
      return;
    default:
      // Transcendental ones: the point functions in double (FusedActivation::apply), one element
      // at a time, rounded once.
      for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(act.apply(x[i]));
      return;
  }
}

KILN_CLONES
void binary_same_shape(BinaryOp op, const float* a, const float* b, bool b_scalar, float* y,
                       int64_t n) {
  if (b_scalar) {
    const float s = b[0];
    switch (op) {
      case BinaryOp::Add:
        for (int64_t i = 0; i < n; ++i) y[i] = point::add(a[i], s);
        return;
      case BinaryOp::Sub:
        for (int64_t i = 0; i < n; ++i) y[i] = point::sub(a[i], s);
        return;
      case BinaryOp::Mul:
        for (int64_t i = 0; i < n; ++i) y[i] = point::mul(a[i], s);
        return;
      case BinaryOp::Div:
        for (int64_t i = 0; i < n; ++i) y[i] = point::div(a[i], s);
        return;
    }
  }
  switch (op) {
    case BinaryOp::Add:
      for (int64_t i = 0; i < n; ++i) y[i] = point::add(a[i], b[i]);
      return;
    case BinaryOp::Sub:
      for (int64_t i = 0; i < n; ++i) y[i] = point::sub(a[i], b[i]);
      return;
    case BinaryOp::Mul:
      for (int64_t i = 0; i < n; ++i) y[i] = point::mul(a[i], b[i]);
      return;
    case BinaryOp::Div:
      for (int64_t i = 0; i < n; ++i) y[i] = point::div(a[i], b[i]);
      return;
  }
}

KILN_CLONES
void row_means(const float* x, int64_t rows, int64_t len, float* y) {
  const float scale = len > 0 ? 1.f / static_cast<float>(len) : 0.f;
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * len;
    // 16 partial sums: one vector of independent lanes instead of a serial chain of adds.
    float part[16] = {};
    int64_t i = 0;
    for (; i + 16 <= len; i += 16) {
      for (int l = 0; l < 16; ++l) part[l] += xr[i + l];
    }
    float sum = 0;
    for (float p : part) sum += p;
    for (; i < len; ++i) sum += xr[i];
    y[r] = len > 0 ? sum * scale : std::numeric_limits<float>::quiet_NaN();
  }
}

KILN_CLONES
void row_maxes(const float* x, int64_t rows, int64_t len, float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * len;
    float m = -std::numeric_limits<float>::infinity();
    for (int64_t i = 0; i < len; ++i) m = xr[i] > m ? xr[i] : m;
    y[r] = m;
  }
}

namespace {

// Four interleaved accumulators per lane, so consecutive rows do not wait on each other's add.
template <int B, bool Max>
[[gnu::always_inline]] inline void lane_reduce(const float* x, int64_t rows, float* out) {
  auto step = [](float a, float v) { return Max ? (v > a ? v : a) : a + v; };
  const float init = Max ? -std::numeric_limits<float>::infinity() : 0.f;
  float a0[B], a1[B], a2[B], a3[B];
  for (int l = 0; l < B; ++l) a0[l] = a1[l] = a2[l] = a3[l] = init;
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) {
    const float* p = x + r * B;
    for (int l = 0; l < B; ++l) {
      a0[l] = step(a0[l], p[l]);
      a1[l] = step(a1[l], p[B + l]);
      a2[l] = step(a2[l], p[2 * B + l]);
      a3[l] = step(a3[l], p[3 * B + l]);
    }
  }
  for (; r < rows; ++r) {
    for (int l = 0; l < B; ++l) a0[l] = step(a0[l], x[r * B + l]);
  }
  for (int l = 0; l < B; ++l) out[l] = step(step(a0[l], a1[l]), step(a2[l], a3[l]));
}

}  // namespace

namespace {

// Each row goes through local arrays: dst may be src (in place) and the compiler cannot prove
// v apart from dst, so loading a whole row before storing any of it is what lets it use one
// vector per row.
template <int B, typename F>
[[gnu::always_inline]] inline void rows_with_lanes(const float* src, const float* v, int64_t rows,
                                                   float* dst, F f) {
  float c[B];
  for (int l = 0; l < B; ++l) c[l] = v[l];
  for (int64_t r = 0; r < rows; ++r) {
    float t[B];
    for (int l = 0; l < B; ++l) t[l] = src[r * B + l];
    for (int l = 0; l < B; ++l) t[l] = f(t[l], c[l]);
    for (int l = 0; l < B; ++l) dst[r * B + l] = t[l];
  }
}

template <int B>
[[gnu::always_inline]] inline void channel_binary(BinaryOp op, const float* src, const float* v,
                                                  bool swapped, int64_t rows, float* dst) {
  switch (op) {
    case BinaryOp::Add:
      return rows_with_lanes<B>(src, v, rows, dst,
                                [](float x, float c) { return point::add(x, c); });
    case BinaryOp::Mul:
      return rows_with_lanes<B>(src, v, rows, dst,
                                [](float x, float c) { return point::mul(x, c); });
    case BinaryOp::Sub:
      if (swapped) {
        return rows_with_lanes<B>(src, v, rows, dst,
                                  [](float x, float c) { return point::sub(c, x); });
      }
      return rows_with_lanes<B>(src, v, rows, dst,
                                [](float x, float c) { return point::sub(x, c); });
    case BinaryOp::Div:
      if (swapped) {
        return rows_with_lanes<B>(src, v, rows, dst,
                                  [](float x, float c) { return point::div(c, x); });
      }
      return rows_with_lanes<B>(src, v, rows, dst,
                                [](float x, float c) { return point::div(x, c); });
  }
}

}  // namespace

KILN_CLONES
void blocked_channel_binary(BinaryOp op, const float* src, const float* v, bool swapped,
                            int64_t rows, int block, int lanes, float* dst) {
  if (block == 16) {
    channel_binary<16>(op, src, v, swapped, rows, dst);
  } else if (block == 8) {
    channel_binary<8>(op, src, v, swapped, rows, dst);
  } else {
    for (int64_t r = 0; r < rows; ++r) {
      if (swapped) {
        binary_same_shape(op, v, src + r * block, false, dst + r * block, block);
      } else {
        binary_same_shape(op, src + r * block, v, false, dst + r * block, block);
      }
    }
  }
  // Channel padding stays zero whatever the op makes of it.
  if (lanes < block) {
    for (int64_t r = 0; r < rows; ++r) {
      for (int l = lanes; l < block; ++l) dst[r * block + l] = 0.f;
    }
  }
}

KILN_CLONES
void affine(const float* x, float a, float b, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * a + b;
}

KILN_CLONES
void blocked_channel_affine(const float* src, const float* a, const float* b, int64_t rows,
                            int block, float* dst) {
  if (block == 16) {
    float ca[16], cb[16];
    for (int l = 0; l < 16; ++l) ca[l] = a[l], cb[l] = b[l];
    for (int64_t r = 0; r < rows; ++r) {
      float t[16];
      for (int l = 0; l < 16; ++l) t[l] = src[r * 16 + l];
      for (int l = 0; l < 16; ++l) dst[r * 16 + l] = t[l] * ca[l] + cb[l];
    }
    return;
  }
  for (int64_t r = 0; r < rows; ++r) {
    for (int l = 0; l < block; ++l) dst[r * block + l] = src[r * block + l] * a[l] + b[l];
  }
}

KILN_CLONES
void blocked_lane_reduce(const float* x, int64_t rows, int block, bool max, float* out) {
  if (block == 16) {
    max ? lane_reduce<16, true>(x, rows, out) : lane_reduce<16, false>(x, rows, out);
  } else if (block == 8) {
    max ? lane_reduce<8, true>(x, rows, out) : lane_reduce<8, false>(x, rows, out);
  } else {
    for (int l = 0; l < block; ++l) {
      float a = max ? -std::numeric_limits<float>::infinity() : 0.f;
      for (int64_t r = 0; r < rows; ++r) {
        const float v = x[r * block + l];
        a = max ? (v > a ? v : a) : a + v;
      }
      out[l] = a;
    }
  }
}

}  // namespace kiln::backends::cpu
