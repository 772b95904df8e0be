// Conv, ConvInteger, QLinearConv and ConvTranspose: direct N-D loops over channels-last copies
// of the input (so the innermost loop runs over contiguous channels of input and weights).
#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/conv_utils.hpp"
#include "ops/infer_utils.hpp"
#include "ops/op_flops.hpp"
#include "ops/op_utils.hpp"
#include "ops/registry.hpp"

namespace kiln::ops {
namespace {

using namespace window;  // NOLINT: shared window/quantization helpers

// Every element of a numeric tensor converted to Acc.
template <typename Acc>
std::vector<Acc> read_as(const Tensor& t, std::string_view what) {
  return dispatch_dtype<DTypeSet::Numeric>(t.dtype(), what, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* p = t.data<T>();
    std::vector<Acc> out(static_cast<size_t>(t.numel()));
    for (int64_t i = 0; i < t.numel(); ++i) {
      if constexpr (std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>) {
        out[i] = static_cast<Acc>(static_cast<float>(p[i]));
      } else {
        out[i] = static_cast<Acc>(p[i]);
      }
    }
    return out;
  });
}

// Shapes and attributes of a (forward or transposed) convolution node, validated.
struct ConvShape {
  int64_t n = 0, c = 0, m = 0, group = 1;
  std::vector<int64_t> in, kernel;
};

// X is (N, C, D...); W is (M, C/group, k...) for Conv or (C, M/group, k...) for ConvTranspose.
ConvShape conv_shape(const KernelContext& ctx, const Tensor& x, const Tensor& w, bool transposed) {
  ctx.check(x.rank() >= 3, "X must have rank >= 3 (N, C, spatial...), got {}", x.describe());
  ctx.check(w.rank() == x.rank(), "W {} must have the rank of X {}", w.describe(), x.describe());
  ConvShape s;
  s.n = x.dim(0);
  s.c = x.dim(1);
  s.group = ctx.attr_int("group", 1);
  ctx.check(s.group >= 1 && s.group <= kMaxWindowValue, "group must be in [1, {}], got {}",
            kMaxWindowValue, s.group);
  ctx.check(s.c % s.group == 0, "input channels {} not divisible by group {}", s.c, s.group);
  if (transposed) {
    ctx.check(w.dim(0) == s.c, "W {} must have {} input channels", w.describe(), s.c);
    s.m = w.dim(1) * s.group;
  } else {
    s.m = w.dim(0);
    ctx.check(s.m % s.group == 0, "output channels {} not divisible by group {}", s.m, s.group);
    ctx.check(w.dim(1) * s.group == s.c, "W {} does not match {} input channels in {} groups",
              w.describe(), s.c, s.group);
  }
  s.in.assign(x.dims().begin() + 2, x.dims().end());
  s.kernel.assign(w.dims().begin() + 2, w.dims().end());
  if (ctx.has_attr("kernel_shape")) {
    ctx.check(ctx.attr_ints("kernel_shape") == s.kernel, "kernel_shape does not match W {}",
              w.describe());
  }
  return s;
}

// x[N][C][S] -> [N][S][C], converted to Acc and shifted by `zero` (0 for float convs).
template <typename Acc>
std::vector<Acc> channels_last(const std::vector<Acc>& x, int64_t n, int64_t c, int64_t s,
                               Acc zero) {
  std::vector<Acc> out(x.size());
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t ch = 0; ch < c; ++ch) {
      const Acc* src = x.data() + (b * c + ch) * s;
      for (int64_t i = 0; i < s; ++i) out[(b * s + i) * c + ch] = src[i] - zero;
    }
  }
  return out;
}

// w[A][B][K] -> [A][K][B] (so a tap's weights over input channels are contiguous).
template <typename Acc>
std::vector<Acc> taps_last(const std::vector<Acc>& w, int64_t a, int64_t b, int64_t k) {
  std::vector<Acc> out(w.size());
  for (int64_t i = 0; i < a; ++i)
    for (int64_t j = 0; j < b; ++j)
      for (int64_t t = 0; t < k; ++t) out[(i * k + t) * b + j] = w[(i * b + j) * k + t];
  return out;
}

// Forward convolution. x_cl: [N][S][C]; w_r: [M][K][C/group]. Calls store(n, m, o, acc) once
// for each output element; taps outside the input contribute nothing (zero padding).
template <typename Acc, typename Store>
void conv_forward(const WindowGeometry& g, const ConvShape& s, const std::vector<Acc>& x_cl,
                  const std::vector<Acc>& w_r, Store&& store) {
  const size_t nsp = g.nsp;
  const int64_t in_size = product(g.in), out_size = product(g.out), k_size = product(g.kernel);
  const int64_t cg = s.c / s.group, mg = s.m / s.group;
  const std::vector<int64_t> in_strides = row_major_strides(g.in);
  // Dilated offset of every kernel tap along each spatial dim.
  std::vector<int64_t> tap_delta(static_cast<size_t>(k_size) * nsp);
  {
    std::vector<int64_t> k(nsp, 0);
    for (int64_t t = 0; t < k_size; ++t, next_index(k, g.kernel))
      for (size_t d = 0; d < nsp; ++d) tap_delta[t * nsp + d] = k[d] * g.dilations[d];
  }
  std::vector<int64_t> o(nsp, 0), base(nsp);
  std::vector<std::pair<int64_t, int64_t>> taps;  // (tap, channels-last input offset)
  taps.reserve(static_cast<size_t>(k_size));
  for (int64_t op = 0; op < out_size; ++op, next_index(o, g.out)) {
    for (size_t d = 0; d < nsp; ++d) base[d] = o[d] * g.strides[d] - g.pad_begin(d);
    taps.clear();
    for (int64_t t = 0; t < k_size; ++t) {
      int64_t off = 0;
      bool inside = true;
      for (size_t d = 0; d < nsp && inside; ++d) {
        int64_t p = base[d] + tap_delta[t * nsp + d];
        inside = p >= 0 && p < g.in[d];
        off += p * in_strides[d];
      }
      if (inside) taps.emplace_back(t, off * s.c);
    }
    for (int64_t b = 0; b < s.n; ++b) {
      const Acc* xb = x_cl.data() + b * in_size * s.c;
      for (int64_t m = 0; m < s.m; ++m) {
        const int64_t grp = m / mg;
        const Acc* wm = w_r.data() + m * k_size * cg;
        Acc acc = 0;
        for (const auto& [t, off] : taps) {
          const Acc* xp = xb + off + grp * cg;
          const Acc* wp = wm + t * cg;
          for (int64_t c = 0; c < cg; ++c) acc += xp[c] * wp[c];
        }
        store(b, m, op, acc);
      }
    }
  }
}

std::vector<int64_t> out_dims(const ConvShape& s, const WindowGeometry& g) {
  std::vector<int64_t> dims = {s.n, s.m};
  dims.insert(dims.end(), g.out.begin(), g.out.end());
  return dims;
}

void conv(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& w = ctx.input(1);
  ctx.check(x.dtype() == w.dtype(), "X and W types differ: {} vs {}", dtype_name(x.dtype()),
            dtype_name(w.dtype()));
  ConvShape s = conv_shape(ctx, x, w, false);
  WindowGeometry g = forward_geometry(ctx, s.in, s.kernel, false);
  const int64_t out_size = product(g.out);
  ctx.set_output(0, dispatch_dtype<DTypeSet::Float>(x.dtype(), "Conv", [&](auto tag) {
                   using T = typename decltype(tag)::type;
                   using Acc = double;  // exact-enough sums: this kernel is the oracle
                   std::vector<Acc> bias(static_cast<size_t>(s.m), Acc(0));
                   if (ctx.has_input(2)) {
                     const Tensor& b = ctx.input(2);
                     ctx.check(b.dtype() == x.dtype() && b.rank() == 1 && b.dim(0) == s.m,
                               "B must be a 1-D {} tensor of {} elements, got {}",
                               dtype_name(x.dtype()), s.m, b.describe());
                     bias = read_as<Acc>(b, "Conv");
                   }
                   std::vector<Acc> x_cl =
                       channels_last(read_as<Acc>(x, "Conv"), s.n, s.c, product(s.in), Acc(0));
                   std::vector<Acc> w_r =
                       taps_last(read_as<Acc>(w, "Conv"), s.m, s.c / s.group, product(s.kernel));
                   Tensor y(x.dtype(), out_dims(s, g));
                   T* py = y.data<T>();
                   conv_forward<Acc>(
                       g, s, x_cl, w_r, [&](int64_t b, int64_t m, int64_t o, Acc acc) {
                         py[(b * s.m + m) * out_size + o] = static_cast<T>(acc + bias[m]);
                       });
                   return y;
                 }));
}

// Kernel dims for inference: kernel_shape, else W's static spatial dims; empty when unknown.
std::vector<int64_t> infer_kernel(const InferContext& ctx, const TypeInfo* w) {
  if (ctx.has_attr("kernel_shape")) return ctx.attr_ints("kernel_shape");
  if (!w || !w->shape || w->shape->rank() < 3) return {};
  std::vector<int64_t> k = static_or_unknown(*w->shape, 2);
  if (std::any_of(k.begin(), k.end(), [](int64_t v) { return v < 0; })) return {};
  return k;
}

// Shared by Conv, ConvInteger, QLinearConv: x and w input slots, output type.
void infer_conv_like(InferContext& ctx, size_t x_slot, size_t w_slot, DataType out_type) {
  const TypeInfo* x = ctx.input_type(x_slot);
  const TypeInfo* w = ctx.input_type(w_slot);
  if (!x || !x->is_tensor()) return;
  if (out_type == DataType::Undefined) out_type = x->dtype;
  Dim m;
  if (w && w->is_tensor() && w->shape && w->shape->rank() >= 1) m = (*w->shape)[0];
  ctx.set_output_type(
      0, TypeInfo::tensor(out_type,
                          window_output_shape(ctx, x->shape, m, infer_kernel(ctx, w), false)));
}

void infer_conv(InferContext& ctx) {
  infer_conv_like(ctx, 0, 1, DataType::Undefined);
}
void infer_conv_integer(InferContext& ctx) {
  infer_conv_like(ctx, 0, 1, DataType::Int32);
}
void infer_qlinear_conv(InferContext& ctx) {
  const TypeInfo* zp = ctx.has_input(7) ? ctx.input_type(7) : nullptr;
  DataType t = zp && zp->is_tensor() ? zp->dtype : DataType::Undefined;
  if (t == DataType::Undefined) {
    if (const TypeInfo* x = ctx.input_type(0)) t = x->dtype;
  }
  infer_conv_like(ctx, 0, 3, t);
}

// A quantized tensor with its zero point(s), as int64 values minus zero point.
// Zero point: scalar (or 1-element) for X; scalar or per-output-channel for W.
std::vector<int64_t> zero_points(const KernelContext& ctx, size_t slot, const Tensor& q,
                                 int64_t channels, const char* what) {
  if (!ctx.has_input(slot)) return std::vector<int64_t>(static_cast<size_t>(channels), 0);
  const Tensor& zp = ctx.input(slot);
  ctx.check(zp.dtype() == q.dtype(), "{} zero point type {} differs from its tensor's {}", what,
            dtype_name(zp.dtype()), dtype_name(q.dtype()));
  std::vector<int64_t> v = zp.to_int64_vector();
  if (v.size() == 1) return std::vector<int64_t>(static_cast<size_t>(channels), v[0]);
  ctx.check(zp.rank() == 1 && static_cast<int64_t>(v.size()) == channels,
            "{} zero point must be a scalar or have {} elements, got {}", what, channels,
            zp.describe());
  return v;
}

void check_int8ish(const KernelContext& ctx, const Tensor& t, const char* what) {
  ctx.check(t.dtype() == DataType::UInt8 || t.dtype() == DataType::Int8,
            "{} must be int8 or uint8, got {}", what, dtype_name(t.dtype()));
}

// Integer convolution of (x - x_zp) and (w - w_zp[m]) with exact int64 accumulation.
template <typename Store>
void integer_conv(const KernelContext& ctx, const Tensor& x, const Tensor& w,
                  const std::vector<int64_t>& x_zp, const std::vector<int64_t>& w_zp,
                  const ConvShape& s, const WindowGeometry& g, Store&& store) {
  ctx.check(x_zp.size() == 1 ||
                std::all_of(x_zp.begin(), x_zp.end(), [&](int64_t v) { return v == x_zp[0]; }),
            "per-channel zero points for X are not supported");
  std::vector<int64_t> x_cl =
      channels_last(read_as<int64_t>(x, "X"), s.n, s.c, product(s.in), x_zp.empty() ? 0 : x_zp[0]);
  std::vector<int64_t> wv = read_as<int64_t>(w, "W");
  const int64_t per_m = static_cast<int64_t>(wv.size()) / std::max<int64_t>(s.m, 1);
  for (int64_t m = 0; m < s.m; ++m)
    for (int64_t i = 0; i < per_m; ++i) wv[m * per_m + i] -= w_zp[m];
  std::vector<int64_t> w_r = taps_last(wv, s.m, s.c / s.group, product(s.kernel));
  conv_forward<int64_t>(g, s, x_cl, w_r, store);
}

void conv_integer(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& w = ctx.input(1);
  check_int8ish(ctx, x, "x");
  check_int8ish(ctx, w, "w");
  ConvShape s = conv_shape(ctx, x, w, false);
  WindowGeometry g = forward_geometry(ctx, s.in, s.kernel, false);
  std::vector<int64_t> x_zp = zero_points(ctx, 2, x, 1, "x");
  std::vector<int64_t> w_zp = zero_points(ctx, 3, w, s.m, "w");
  Tensor y(DataType::Int32, out_dims(s, g));
  int32_t* py = y.data<int32_t>();
  const int64_t out_size = product(g.out);
  integer_conv(ctx, x, w, x_zp, w_zp, s, g, [&](int64_t b, int64_t m, int64_t o, int64_t acc) {
    py[(b * s.m + m) * out_size + o] = static_cast<int32_t>(acc);
  });
  ctx.set_output(0, y);
}

// Scale inputs are float32 scalars (or per-channel for w).
std::vector<float> scales(const KernelContext& ctx, size_t slot, int64_t channels,
                          const char* what) {
  const Tensor& t = ctx.input(slot);
  std::vector<float> v = read_as<float>(t, what);
  if (v.size() == 1) return std::vector<float>(static_cast<size_t>(channels), v[0]);
  ctx.check(t.rank() == 1 && static_cast<int64_t>(v.size()) == channels,
            "{} must be a scalar or have {} elements, got {}", what, channels, t.describe());
  return v;
}

void qlinear_conv(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& w = ctx.input(3);
  check_int8ish(ctx, x, "x");
  check_int8ish(ctx, w, "w");
  ConvShape s = conv_shape(ctx, x, w, false);
  WindowGeometry g = forward_geometry(ctx, s.in, s.kernel, false);
  const float x_scale = scales(ctx, 1, 1, "x_scale")[0];
  std::vector<int64_t> x_zp = zero_points(ctx, 2, x, 1, "x");
  std::vector<float> w_scale = scales(ctx, 4, s.m, "w_scale");
  std::vector<int64_t> w_zp = zero_points(ctx, 5, w, s.m, "w");
  const float y_scale = scales(ctx, 6, 1, "y_scale")[0];
  DataType yt = ctx.has_input(7) ? ctx.input(7).dtype() : x.dtype();
  int64_t y_zp = 0;
  if (ctx.has_input(7)) {
    const Tensor& z = ctx.input(7);
    check_int8ish(ctx, z, "y_zero_point");
    ctx.check(z.numel() == 1, "y_zero_point must be a scalar, got {}", z.describe());
    y_zp = z.int_at(0);
  }
  std::vector<int64_t> bias(static_cast<size_t>(s.m), 0);
  if (ctx.has_input(8)) {
    const Tensor& b = ctx.input(8);
    ctx.check(b.dtype() == DataType::Int32 && b.rank() == 1 && b.dim(0) == s.m,
              "B must be a 1-D int32 tensor of {} elements, got {}", s.m, b.describe());
    bias = b.to_int64_vector();
  }
  const int64_t lo = yt == DataType::UInt8 ? 0 : -128, hi = yt == DataType::UInt8 ? 255 : 127;
  Tensor y(yt, out_dims(s, g));
  const int64_t out_size = product(g.out);
  std::vector<int64_t> q(static_cast<size_t>(y.numel()));
  integer_conv(ctx, x, w, x_zp, w_zp, s, g, [&](int64_t b, int64_t m, int64_t o, int64_t acc) {
    const float scale = x_scale * w_scale[m] / y_scale;
    const double v = static_cast<double>(acc + bias[m]) * scale + static_cast<double>(y_zp);
    q[(b * s.m + m) * out_size + o] = static_cast<int64_t>(saturate_round(v, lo, hi));
  });
  if (yt == DataType::UInt8) {
    std::copy(q.begin(), q.end(), y.data<uint8_t>());
  } else {
    std::copy(q.begin(), q.end(), y.data<int8_t>());
  }
  ctx.set_output(0, y);
}

// ConvTranspose output size and pads from output_shape / auto_pad / pads.
WindowGeometry transpose_geometry(const AttrReader& ctx, const std::vector<int64_t>& in,
                                  const std::vector<int64_t>& kernel) {
  WindowGeometry g;
  g.nsp = kernel.size();
  g.in = in;
  g.kernel = kernel;
  for (int64_t k : kernel) {
    ctx.check(k > 0 && k <= kMaxWindowValue, "kernel dims must be in [1, {}], got {}",
              kMaxWindowValue, k);
  }
  g.strides = spatial_ints(ctx, "strides", g.nsp, 1, 1);
  g.dilations = spatial_ints(ctx, "dilations", g.nsp, 1, 1);
  std::vector<int64_t> out_pad = spatial_ints(ctx, "output_padding", g.nsp, 0, 0);
  std::string auto_pad = ctx.attr_string("auto_pad", "NOTSET");
  ctx.check(auto_pad == "NOTSET" || auto_pad == "VALID" || auto_pad == "SAME_UPPER" ||
                auto_pad == "SAME_LOWER",
            "unknown auto_pad '{}'", auto_pad);
  std::vector<int64_t> out_shape;
  if (ctx.has_attr("output_shape")) {
    out_shape = ctx.attr_ints("output_shape");
    // Either the spatial dims or the full (N, C, spatial...) shape.
    if (out_shape.size() == g.nsp + 2) out_shape.erase(out_shape.begin(), out_shape.begin() + 2);
    ctx.check(out_shape.size() == g.nsp, "output_shape has {} spatial dims, expected {}",
              out_shape.size(), g.nsp);
    for (int64_t v : out_shape) {
      ctx.check(v >= 0 && v <= kMaxWindowValue, "output_shape entry {} is out of range", v);
    }
  }
  g.pads.assign(2 * g.nsp, 0);
  if (auto_pad == "NOTSET" && out_shape.empty())
    g.pads = spatial_ints(ctx, "pads", 2 * g.nsp, 0, 0);
  g.out.assign(g.nsp, -1);
  for (size_t d = 0; d < g.nsp; ++d) {
    if (in[d] < 0) continue;
    const int64_t full = g.strides[d] * (in[d] - 1) + out_pad[d] + g.effective_kernel(d);
    int64_t target = -1;
    if (!out_shape.empty()) {
      target = out_shape[d];
    } else if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      target = in[d] * g.strides[d];
    }
    if (target < 0) {
      g.out[d] = full - g.pads[d] - g.pads[g.nsp + d];
      ctx.check(g.out[d] >= 0, "output size {} is negative", g.out[d]);
      continue;
    }
    g.out[d] = target;
    const int64_t total = full - target;  // may be negative: the output grows at the end
    const int64_t half = floor_div(total, 2);
    g.pads[d] = auto_pad == "SAME_UPPER" ? half : total - half;
    g.pads[g.nsp + d] = total - g.pads[d];
  }
  return g;
}

void conv_transpose(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& w = ctx.input(1);
  ctx.check(x.dtype() == w.dtype(), "X and W types differ: {} vs {}", dtype_name(x.dtype()),
            dtype_name(w.dtype()));
  ConvShape s = conv_shape(ctx, x, w, true);
  WindowGeometry g = transpose_geometry(ctx, s.in, s.kernel);
  const size_t nsp = g.nsp;
  const int64_t in_size = product(g.in), out_size = product(g.out), k_size = product(g.kernel);
  const int64_t cg = s.c / s.group, mg = s.m / s.group;
  ctx.set_output(0, dispatch_dtype<DTypeSet::Float>(x.dtype(), "ConvTranspose", [&](auto tag) {
                   using T = typename decltype(tag)::type;
                   using Acc = double;
                   std::vector<Acc> bias(static_cast<size_t>(s.m), Acc(0));
                   if (ctx.has_input(2)) {
                     const Tensor& b = ctx.input(2);
                     ctx.check(b.dtype() == x.dtype() && b.rank() == 1 && b.dim(0) == s.m,
                               "B must be a 1-D {} tensor of {} elements, got {}",
                               dtype_name(x.dtype()), s.m, b.describe());
                     bias = read_as<Acc>(b, "ConvTranspose");
                   }
                   std::vector<Acc> x_cl =
                       channels_last(read_as<Acc>(x, "ConvTranspose"), s.n, s.c, in_size, Acc(0));
                   // W is [C][M/group][K]; regroup as [group][M/group][K][C/group] =
                   // [M][K][C/group].
                   std::vector<Acc> wv = read_as<Acc>(w, "ConvTranspose");
                   std::vector<Acc> w_r(wv.size());
                   for (int64_t c = 0; c < s.c; ++c) {
                     const int64_t grp = c / cg, cc = c % cg;
                     for (int64_t m = 0; m < mg; ++m)
                       for (int64_t t = 0; t < k_size; ++t)
                         w_r[(((grp * mg + m) * k_size) + t) * cg + cc] =
                             wv[(c * mg + m) * k_size + t];
                   }
                   const int64_t y_count = product({s.n, s.m, out_size});
                   check_scratch(ctx, y_count, sizeof(Acc));
                   std::vector<Acc> acc(static_cast<size_t>(y_count), Acc(0));
                   const std::vector<int64_t> out_strides = row_major_strides(g.out);
                   std::vector<int64_t> tap_delta(static_cast<size_t>(k_size) * nsp);
                   {
                     std::vector<int64_t> k(nsp, 0);
                     for (int64_t t = 0; t < k_size; ++t, next_index(k, g.kernel))
                       for (size_t d = 0; d < nsp; ++d)
                         tap_delta[t * nsp + d] = k[d] * g.dilations[d];
                   }
                   std::vector<int64_t> i(nsp, 0), base(nsp);
                   std::vector<std::pair<int64_t, int64_t>> taps;  // (tap, output offset)
                   for (int64_t ip = 0; ip < in_size; ++ip, next_index(i, g.in)) {
                     for (size_t d = 0; d < nsp; ++d)
                       base[d] = i[d] * g.strides[d] - g.pad_begin(d);
                     taps.clear();
                     for (int64_t t = 0; t < k_size; ++t) {
                       int64_t off = 0;
                       bool inside = true;
                       for (size_t d = 0; d < nsp && inside; ++d) {
                         int64_t p = base[d] + tap_delta[t * nsp + d];
                         inside = p >= 0 && p < g.out[d];
                         off += p * out_strides[d];
                       }
                       if (inside) taps.emplace_back(t, off);
                     }
                     for (int64_t b = 0; b < s.n; ++b) {
                       const Acc* xp = x_cl.data() + (b * in_size + ip) * s.c;
                       for (int64_t m = 0; m < s.m; ++m) {
                         const Acc* xg = xp + (m / mg) * cg;
                         Acc* ym = acc.data() + (b * s.m + m) * out_size;
                         for (const auto& [t, off] : taps) {
                           const Acc* wp = w_r.data() + (m * k_size + t) * cg;
                           Acc sum = 0;
                           for (int64_t c = 0; c < cg; ++c) sum += xg[c] * wp[c];
                           ym[off] += sum;
                         }
                       }
                     }
                   }
                   Tensor y(x.dtype(), out_dims(s, g));
                   T* py = y.data<T>();
                   for (int64_t b = 0; b < s.n; ++b)
                     for (int64_t m = 0; m < s.m; ++m)
                       for (int64_t o = 0; o < out_size; ++o) {
                         const int64_t idx = (b * s.m + m) * out_size + o;
                         py[idx] = static_cast<T>(acc[idx] + bias[m]);
                       }
                   return y;
                 }));
}

void infer_conv_transpose(InferContext& ctx) {
  const TypeInfo* x = ctx.input_type(0);
  const TypeInfo* w = ctx.input_type(1);
  if (!x || !x->is_tensor()) return;
  if (!x->shape) {
    ctx.set_output_type(0, TypeInfo::tensor(x->dtype));
    return;
  }
  ctx.check(x->shape->rank() >= 3, "X must have rank >= 3, got {}", x->shape->rank());
  Dim m;
  const int64_t group = ctx.attr_int("group", 1);
  ctx.check(group >= 1 && group <= kMaxWindowValue, "group must be in [1, {}], got {}",
            kMaxWindowValue, group);
  if (w && w->is_tensor() && w->shape && w->shape->rank() >= 2 && (*w->shape)[1].is_static())
    m = Dim((*w->shape)[1].value() * group);
  std::vector<Dim> dims = {(*x->shape)[0], m};
  std::vector<int64_t> kernel = infer_kernel(ctx, w);
  if (kernel.size() == x->shape->rank() - 2) {
    WindowGeometry g = transpose_geometry(ctx, static_or_unknown(*x->shape, 2), kernel);
    for (int64_t o : g.out) dims.push_back(o >= 0 ? Dim(o) : Dim());
  } else {
    for (size_t i = 2; i < x->shape->rank(); ++i) dims.emplace_back();
  }
  ctx.set_output_type(0, TypeInfo::tensor(x->dtype, Shape(dims)));
}

KILN_REGISTER_OP({.op_type = "Conv",
                  .kernel = conv,
                  .infer = infer_conv,
                  .traits = {.fp16 = {.safe = true}, .flops = flops_conv}});
KILN_REGISTER_OP({.op_type = "ConvInteger", .kernel = conv_integer, .infer = infer_conv_integer});
KILN_REGISTER_OP({.op_type = "QLinearConv", .kernel = qlinear_conv, .infer = infer_qlinear_conv});
KILN_REGISTER_OP({.op_type = "ConvTranspose",
                  .kernel = conv_transpose,
                  .infer = infer_conv_transpose,
                  .traits = {.fp16 = {.safe = true}, .flops = flops_conv_transpose}});

}  // namespace
}  // namespace kiln::ops
