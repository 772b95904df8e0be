// Signal ops: Hann/Hamming/Blackman windows, DFT (opset 17 axis attribute, opset 20 axis
// input), STFT and MelWeightMatrix. Transforms are plain O(n^2) sums in double.
#include <cmath>
#include <complex>
#include <numbers>

#include "ops/control_real_io.hpp"
#include "ops/control_utils.hpp"
#include "ops/op_utils.hpp"
#include "ops/registry.hpp"

namespace kiln::ops {
namespace {

using ctl::from_doubles;
using ctl::to_doubles;

using cd = std::complex<double>;

// exp(sign * 2 pi i k n / len), with k n reduced first so large indices keep their precision.
cd twiddle(int64_t k, int64_t n, int64_t len, double sign) {
  const int64_t m = (k % len) * (n % len) % len;
  const double a =
      sign * 2.0 * std::numbers::pi * static_cast<double>(m) / static_cast<double>(len);
  return {std::cos(a), std::sin(a)};
}

Tensor doubles_as(const KernelContext& ctx, DataType dtype, std::vector<int64_t> dims,
                  const std::vector<double>& v) {
  Tensor out(dtype, std::move(dims));
  dispatch_dtype<DTypeSet::Numeric>(dtype, ctx.node().op_type(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* p = out.data<T>();
    for (int64_t i = 0; i < out.numel(); ++i) {
      const double x = v[static_cast<size_t>(i)];
      // Integer outputs truncate; going through float first keeps 0.99999999999 (a 1 in exact
      // arithmetic) at 1 as single-precision implementations do.
      if constexpr (std::is_integral_v<T>) {
        p[i] = convert_element<T>(static_cast<double>(static_cast<float>(x)));
      } else {
        p[i] = convert_element<T>(x);
      }
    }
  });
  return out;
}

DataType output_datatype(const AttrReader& ctx) {
  return dtype_from_onnx(static_cast<int32_t>(ctx.attr_int("output_datatype", 1)),
                         "output_datatype");
}

// The transforms here are direct O(n^2) sums: refuse sizes that would run for minutes rather
// than appear to hang.
void check_work(const KernelContext& ctx, std::initializer_list<int64_t> factors) {
  constexpr double kMaxWork = 1e10;
  double work = 1;
  for (int64_t f : factors) work *= static_cast<double>(f);
  if (work > kMaxWork)
    ctx.unsupported("a transform of {:.3g} terms is too large for the reference DFT", work);
}

// ---- windows ----

enum class Window { Hann, Hamming, Blackman };

template <Window W>
void window(KernelContext& ctx) {
  const int64_t size = ctl::scalar_int(ctx, ctx.input(0), "size");
  ctx.check(size >= 0, "size must be non-negative, got {}", size);
  const bool periodic = ctx.attr_int("periodic", 1) != 0;
  const double denom = static_cast<double>(periodic ? size : size - 1);
  std::vector<double> v(static_cast<size_t>(size));
  for (int64_t n = 0; n < size; ++n) {
    const double x = 2.0 * std::numbers::pi * static_cast<double>(n) / denom;
    double w;
    if constexpr (W == Window::Hann) {
      w = 0.5 - 0.5 * std::cos(x);
    } else if constexpr (W == Window::Hamming) {
      w = 25.0 / 46.0 - (21.0 / 46.0) * std::cos(x);
    } else {
      w = 0.42 - 0.5 * std::cos(x) + 0.08 * std::cos(2 * x);
    }
    v[static_cast<size_t>(n)] = denom == 0 ? 1.0 : w;
  }
  ctx.set_output(0, doubles_as(ctx, output_datatype(ctx), {size}, v));
}

void infer_window(InferContext& ctx) {
  ctx.set_output_type(0, TypeInfo::tensor(output_datatype(ctx), Shape({Dim()})));
}

// ---- DFT ----

// x viewed as [outer, len, inner, comps]; transforms along len.
void dft_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  dispatch_dtype<DTypeSet::Float>(x.dtype(), "DFT", [](auto) { return 0; });
  const int64_t rank = static_cast<int64_t>(x.rank());
  ctx.check(rank >= 2, "input must have at least 2 dims, got {}", x.describe());
  const int64_t comps = x.dim(x.rank() - 1);
  ctx.check(comps == 1 || comps == 2, "last dim must be 1 (real) or 2 (complex), got {}", comps);
  int64_t axis;
  if (ctx.opset() >= 20) {
    axis = ctx.has_input(2) ? ctl::scalar_int(ctx, ctx.input(2), "axis") : -2;
  } else {
    axis = ctx.attr_int("axis", 1);
  }
  ctx.check(axis >= -rank && axis < rank, "axis {} is out of range for rank {}", axis, rank);
  if (axis < 0) axis += rank;
  ctx.check(axis != rank - 1, "axis cannot be the last (real/imaginary) dim");
  const bool inverse = ctx.attr_int("inverse", 0) != 0;
  const bool onesided = ctx.attr_int("onesided", 0) != 0;
  const int64_t in_len = x.dim(static_cast<size_t>(axis));
  int64_t n = in_len;
  if (inverse && onesided) n = 2 * (in_len - 1);
  if (ctx.has_input(1)) n = ctl::scalar_int(ctx, ctx.input(1), "dft_length");
  ctx.check(n > 0, "dft_length must be positive, got {}", n);
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= x.dim(static_cast<size_t>(i));
  for (int64_t i = axis + 1; i < rank - 1; ++i) inner *= x.dim(static_cast<size_t>(i));
  check_work(ctx, {outer, inner, n, n});
  const std::vector<double> in = to_doubles(x);
  auto at = [&](int64_t o, int64_t k, int64_t j) -> cd {
    const int64_t base = ((o * in_len + k) * inner + j) * comps;
    return {in[static_cast<size_t>(base)], comps == 2 ? in[static_cast<size_t>(base + 1)] : 0.0};
  };
  int64_t out_len = n, out_comps = 2;
  if (!inverse && onesided) out_len = n / 2 + 1;
  if (inverse && onesided) out_comps = 1;
  std::vector<int64_t> dims = x.dims();
  dims[static_cast<size_t>(axis)] = out_len;
  dims.back() = out_comps;
  std::vector<double> out(static_cast<size_t>(outer * out_len * inner * out_comps), 0.0);
  const double sign = inverse ? 1.0 : -1.0;
  // Inverse one-sided input holds bins 0..n/2; the rest follow from Hermitian symmetry.
  const int64_t avail = inverse && onesided ? std::min(in_len, n / 2 + 1) : std::min(in_len, n);
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t j = 0; j < inner; ++j) {
      for (int64_t k = 0; k < out_len; ++k) {
        cd s = 0;
        for (int64_t t = 0; t < n; ++t) {
          cd v;
          if (inverse && onesided) {
            if (t < avail) {
              v = at(o, t, j);
            } else if (n - t < avail) {
              v = std::conj(at(o, n - t, j));
            } else {
              continue;
            }
          } else {
            if (t >= avail) break;
            v = at(o, t, j);
          }
          s += v * twiddle(k, t, n, sign);
        }
        if (inverse) s /= static_cast<double>(n);
        const int64_t base = ((o * out_len + k) * inner + j) * out_comps;
        out[static_cast<size_t>(base)] = s.real();
        if (out_comps == 2) out[static_cast<size_t>(base + 1)] = s.imag();
      }
    }
  }
  ctx.set_output(0, from_doubles(x.dtype(), dims, out, "DFT"));
}

void infer_dft(InferContext& ctx) {
  const TypeInfo* x = ctx.input_type(0);
  if (!x || !x->is_tensor()) return;
  std::optional<Shape> s;
  if (x->shape) {
    std::vector<Dim> d(x->shape->rank());
    if (!d.empty()) {
      const bool inverse = ctx.attr_int("inverse", 0) != 0;
      const bool onesided = ctx.attr_int("onesided", 0) != 0;
      d.back() = Dim(inverse && onesided ? 1 : 2);
    }
    s = Shape(d);
  }
  ctx.set_output_type(0, TypeInfo::tensor(x->dtype, s));
}

// ---- STFT ----

void stft_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  dispatch_dtype<DTypeSet::Float>(x.dtype(), "STFT", [](auto) { return 0; });
  ctx.check(x.rank() == 3 && (x.dim(2) == 1 || x.dim(2) == 2),
            "signal must be [batch, length, 1 or 2], got {}", x.describe());
  const int64_t batch = x.dim(0), len = x.dim(1), comps = x.dim(2);
  const int64_t step = ctl::scalar_int(ctx, ctx.input(1), "frame_step");
  ctx.check(step > 0, "frame_step must be positive, got {}", step);
  std::vector<double> win;
  if (ctx.has_input(2)) {
    const Tensor& w = ctx.input(2);
    ctx.check(w.rank() == 1, "window must be 1-D, got {}", w.describe());
    win = to_doubles(w);
  }
  int64_t frame = win.empty() ? len : static_cast<int64_t>(win.size());
  if (ctx.has_input(3)) {
    frame = ctl::scalar_int(ctx, ctx.input(3), "frame_length");
    ctx.check(win.empty() || frame == static_cast<int64_t>(win.size()),
              "frame_length {} differs from the window length {}", frame, win.size());
  }
  ctx.check(frame > 0 && frame <= len, "frame_length {} must be in [1, {}]", frame, len);
  if (win.empty()) win.assign(static_cast<size_t>(frame), 1.0);
  const bool onesided = ctx.attr_int("onesided", 1) != 0;
  ctx.check(!(onesided && comps == 2), "onesided output needs a real signal");
  const int64_t frames = 1 + (len - frame) / step;
  const int64_t bins = onesided ? frame / 2 + 1 : frame;
  check_work(ctx, {batch, frames, bins, frame});
  const std::vector<double> in = to_doubles(x);
  std::vector<double> out(static_cast<size_t>(batch * frames * bins * 2), 0.0);
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t f = 0; f < frames; ++f) {
      for (int64_t k = 0; k < bins; ++k) {
        cd s = 0;
        for (int64_t t = 0; t < frame; ++t) {
          const int64_t base = (b * len + f * step + t) * comps;
          cd v(in[static_cast<size_t>(base)], comps == 2 ? in[static_cast<size_t>(base + 1)] : 0.0);
          s += v * win[static_cast<size_t>(t)] * twiddle(k, t, frame, -1.0);
        }
        const size_t o = static_cast<size_t>(((b * frames + f) * bins + k) * 2);
        out[o] = s.real();
        out[o + 1] = s.imag();
      }
    }
  }
  ctx.set_output(0, from_doubles(x.dtype(), {batch, frames, bins, 2}, out, "STFT"));
}

void infer_stft(InferContext& ctx) {
  const TypeInfo* x = ctx.input_type(0);
  if (!x || !x->is_tensor()) return;
  Dim batch;
  if (x->shape && x->shape->rank() == 3) batch = (*x->shape)[0];
  ctx.set_output_type(0, TypeInfo::tensor(x->dtype, Shape({batch, Dim(), Dim(), Dim(2)})));
}

// ---- MelWeightMatrix ----

void mel_weight_matrix(KernelContext& ctx) {
  const int64_t mels = ctl::scalar_int(ctx, ctx.input(0), "num_mel_bins");
  const int64_t dft_len = ctl::scalar_int(ctx, ctx.input(1), "dft_length");
  const int64_t rate = ctl::scalar_int(ctx, ctx.input(2), "sample_rate");
  ctx.check(ctx.input(3).numel() == 1 && ctx.input(4).numel() == 1,
            "edge frequencies must be scalars");
  const double lo = ctx.input(3).double_at(0), hi = ctx.input(4).double_at(0);
  ctx.check(mels > 0 && dft_len > 0 && rate > 0,
            "num_mel_bins, dft_length and sample_rate must "
            "be positive");
  ctx.check(std::isfinite(lo) && std::isfinite(hi) && lo >= 0 && hi >= lo,
            "edge frequencies must be finite with 0 <= lower <= upper, got {} and {}", lo, hi);
  const int64_t spec_bins = dft_len / 2 + 1;
  const double lo_mel = 2595 * std::log10(1 + lo / 700), hi_mel = 2595 * std::log10(1 + hi / 700);
  const double step = (hi_mel - lo_mel) / static_cast<double>(mels + 2);
  std::vector<int64_t> bins(static_cast<size_t>(mels + 2));
  for (int64_t i = 0; i < mels + 2; ++i) {
    const double hz = 700 * (std::pow(10.0, (static_cast<double>(i) * step + lo_mel) / 2595) - 1);
    bins[static_cast<size_t>(i)] = static_cast<int64_t>(
        std::floor(static_cast<double>(dft_len + 1) * hz / static_cast<double>(rate)));
    ctx.check(bins[static_cast<size_t>(i)] >= 0 && bins[static_cast<size_t>(i)] < spec_bins,
              "upper_edge_hertz {} maps past the last spectrogram bin", hi);
  }
  std::vector<double> out(static_cast<size_t>(spec_bins * mels), 0.0);
  for (int64_t i = 0; i < mels; ++i) {
    const int64_t l = bins[i], c = bins[i + 1], h = bins[i + 2];
    if (c == l) {
      out[static_cast<size_t>(c * mels + i)] = 1;
    } else {
      for (int64_t j = l; j <= c; ++j) {
        out[static_cast<size_t>(j * mels + i)] =
            static_cast<double>(j - l) / static_cast<double>(c - l);
      }
    }
    for (int64_t j = c; j < h; ++j) {
      out[static_cast<size_t>(j * mels + i)] =
          static_cast<double>(h - j) / static_cast<double>(h - c);
    }
  }
  ctx.set_output(0, doubles_as(ctx, output_datatype(ctx), {spec_bins, mels}, out));
}

void infer_mel(InferContext& ctx) {
  ctx.set_output_type(0, TypeInfo::tensor(output_datatype(ctx), Shape({Dim(), Dim()})));
}

KILN_REGISTER_OP({.op_type = "HannWindow", .kernel = window<Window::Hann>, .infer = infer_window});
KILN_REGISTER_OP({.op_type = "HammingWindow",
                  .kernel = window<Window::Hamming>,
                  .infer = infer_window});
KILN_REGISTER_OP({.op_type = "BlackmanWindow",
                  .kernel = window<Window::Blackman>,
                  .infer = infer_window});
KILN_REGISTER_OP({.op_type = "DFT", .kernel = dft_kernel, .infer = infer_dft});
KILN_REGISTER_OP({.op_type = "STFT", .kernel = stft_kernel, .infer = infer_stft});
KILN_REGISTER_OP({.op_type = "MelWeightMatrix", .kernel = mel_weight_matrix, .infer = infer_mel});

}  // namespace
}  // namespace kiln::ops
