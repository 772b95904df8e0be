// GridSample (2-D in opset 16, N-D from opset 20) and AffineGrid.
#include <algorithm>
#include <cmath>

#include "ops/conv_utils.hpp"
#include "ops/infer_utils.hpp"
#include "ops/op_utils.hpp"
#include "ops/registry.hpp"

namespace kiln::ops {
namespace {

using namespace window;  // NOLINT: shared window/quantization helpers

enum class Interp { Nearest, Linear, Cubic };
enum class Padding { Zeros, Border, Reflection };

// Reflects x into [lo, hi] by bouncing off the nearer border repeatedly.
double reflect(double x, double lo, double hi) {
  const double range = hi - lo;
  if (range <= 0) return lo;
  if (x < lo) {
    const double dx = lo - x;
    const int64_t n = static_cast<int64_t>(dx / range);
    const double r = dx - static_cast<double>(n) * range;
    return n % 2 == 0 ? lo + r : hi - r;
  }
  if (x > hi) {
    const double dx = x - hi;
    const int64_t n = static_cast<int64_t>(dx / range);
    const double r = dx - static_cast<double>(n) * range;
    return n % 2 == 0 ? hi - r : lo + r;
  }
  return x;
}

double keys_cubic(double x) {  // Keys kernel with a = -0.75, as GridSample specifies
  constexpr double a = -0.75;
  x = std::fabs(x);
  if (x <= 1) return ((a + 2) * x - (a + 3)) * x * x + 1;
  if (x < 2) return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a;
  return 0;
}

void grid_sample(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& grid = ctx.input(1);
  ctx.check(x.rank() >= 3, "X must have rank >= 3, got {}", x.describe());
  const size_t nsp = x.rank() - 2;
  if (ctx.opset() < 20) ctx.check(nsp == 2, "GridSample-{} takes 4-D inputs only", ctx.opset());
  ctx.check(grid.rank() == x.rank() && grid.dim(0) == x.dim(0) &&
                grid.dims().back() == static_cast<int64_t>(nsp),
            "grid {} must be (N, spatial..., {}) for X {}", grid.describe(), nsp, x.describe());
  std::string mode = ctx.attr_string("mode", ctx.opset() < 20 ? "bilinear" : "linear");
  Interp interp;
  if (mode == "nearest")
    interp = Interp::Nearest;
  else if (mode == "linear" || mode == "bilinear")
    interp = Interp::Linear;
  else if (mode == "cubic" || mode == "bicubic")
    interp = Interp::Cubic;
  else
    ctx.fail("unknown mode '{}'", mode);
  std::string pm = ctx.attr_string("padding_mode", "zeros");
  Padding padding;
  if (pm == "zeros")
    padding = Padding::Zeros;
  else if (pm == "border")
    padding = Padding::Border;
  else if (pm == "reflection")
    padding = Padding::Reflection;
  else
    ctx.fail("unknown padding_mode '{}'", pm);
  const bool align = ctx.attr_int("align_corners", 0) != 0;

  const int64_t n = x.dim(0), c = x.dim(1);
  std::vector<int64_t> in(x.dims().begin() + 2, x.dims().end());
  std::vector<int64_t> out_sp(grid.dims().begin() + 1, grid.dims().end() - 1);
  std::vector<int64_t> out_dims = {n, c};
  out_dims.insert(out_dims.end(), out_sp.begin(), out_sp.end());
  const int64_t in_size = product(in), out_size = product(out_sp);
  const std::vector<int64_t> in_strides = row_major_strides(in);
  std::vector<double> g =
      dispatch_dtype<DTypeSet::Float>(grid.dtype(), "GridSample grid", [&](auto tag) {
        using G = typename decltype(tag)::type;
        std::vector<double> v(static_cast<size_t>(grid.numel()));
        const G* p = grid.data<G>();
        for (int64_t i = 0; i < grid.numel(); ++i)
          v[i] = static_cast<double>(static_cast<acc_float_t<G>>(p[i]));
        return v;
      });
  const int64_t ntaps = interp == Interp::Nearest ? 1 : interp == Interp::Linear ? 2 : 4;
  ctx.set_output(
      0, dispatch_dtype<DTypeSet::Float>(x.dtype(), "GridSample", [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T* px = x.data<T>();
        Tensor y(x.dtype(), out_dims);
        T* py = y.data<T>();
        // Per spatial dim: tap offsets (-1 = zero padding) and weights.
        std::vector<int64_t> tap_off(nsp * ntaps);
        std::vector<double> tap_w(nsp * ntaps);
        std::vector<int64_t> combo(nsp);
        const std::vector<int64_t> combo_dims(nsp, ntaps);
        for (int64_t b = 0; b < n; ++b) {
          for (int64_t o = 0; o < out_size; ++o) {
            const double* gp = g.data() + (b * out_size + o) * static_cast<int64_t>(nsp);
            for (size_t d = 0; d < nsp; ++d) {
              const double len = static_cast<double>(in[d]);
              const double norm = gp[nsp - 1 - d];  // the grid lists coordinates innermost-first
              double xf = align ? (norm + 1) / 2 * (len - 1) : ((norm + 1) * len - 1) / 2;
              // Far outside is far outside: bounding keeps integer casts defined (NaN reads as
              // outside).
              xf = std::isnan(xf) ? -1e15 : std::clamp(xf, -1e15, 1e15);
              if (interp == Interp::Nearest) xf = std::nearbyint(xf);
              const double lo = align ? 0.0 : -0.5, hi = align ? len - 1 : len - 0.5;
              // Cubic applies the padding rule to each tap only (as PyTorch and ONNX Runtime do);
              // nearest and linear first move the sampling point itself.
              if (interp != Interp::Cubic && (xf < lo || xf > hi)) {
                if (padding == Padding::Border)
                  xf = std::clamp(xf, 0.0, len - 1);
                else if (padding == Padding::Reflection)
                  xf = reflect(xf, lo, hi);
              }
              int64_t first;
              double* w = tap_w.data() + d * ntaps;
              if (interp == Interp::Nearest) {
                first =
                    static_cast<int64_t>(xf);  // integral already (truncates like the spec's cast)
                w[0] = 1;
              } else {
                const double fl = std::floor(xf), t = xf - fl;
                if (interp == Interp::Linear) {
                  first = static_cast<int64_t>(fl);
                  w[0] = 1 - t;
                  w[1] = t;
                } else {
                  first = static_cast<int64_t>(fl) - 1;
                  for (int64_t j = 0; j < 4; ++j) w[j] = keys_cubic(static_cast<double>(j - 1) - t);
                }
              }
              for (int64_t j = 0; j < ntaps; ++j) {
                int64_t i = first + j;
                if (i < 0 || i >= in[d]) {
                  if (padding == Padding::Zeros) {
                    i = -1;
                  } else if (padding == Padding::Border) {
                    i = std::clamp<int64_t>(i, 0, in[d] - 1);
                  } else {
                    i = static_cast<int64_t>(reflect(static_cast<double>(i), lo, hi));
                    i = std::clamp<int64_t>(i, 0, in[d] - 1);
                  }
                }
                tap_off[d * ntaps + j] = i < 0 ? -1 : i * in_strides[d];
              }
            }
            for (int64_t ch = 0; ch < c; ++ch) {
              const T* xp = px + (b * c + ch) * in_size;
              double acc = 0;
              std::fill(combo.begin(), combo.end(), 0);
              do {
                double w = 1;
                int64_t off = 0;
                bool zero = false;
                for (size_t d = 0; d < nsp; ++d) {
                  const int64_t t = tap_off[d * ntaps + combo[d]];
                  w *= tap_w[d * ntaps + combo[d]];
                  if (t < 0) zero = true;
                  off += t;
                }
                if (!zero && w != 0) acc += w * static_cast<double>(xp[off]);
              } while (next_index(combo, combo_dims));
              py[(b * c + ch) * out_size + o] = static_cast<T>(acc);
            }
          }
        }
        return y;
      }));
}

void infer_grid_sample(InferContext& ctx) {
  const TypeInfo* x = ctx.input_type(0);
  const TypeInfo* g = ctx.input_type(1);
  if (!x || !x->is_tensor()) return;
  std::optional<Shape> shape;
  if (x->shape && g && g->is_tensor() && g->shape && g->shape->rank() == x->shape->rank() &&
      x->shape->rank() >= 3) {
    std::vector<Dim> dims = {(*x->shape)[0], (*x->shape)[1]};
    for (size_t i = 1; i + 1 < g->shape->rank(); ++i) dims.push_back((*g->shape)[i]);
    shape = Shape(dims);
  }
  ctx.set_output_type(0, TypeInfo::tensor(x->dtype, shape));
}

void affine_grid(KernelContext& ctx) {
  const Tensor& theta = ctx.input(0);
  std::vector<int64_t> size = ctx.input(1).to_int64_vector();
  ctx.check(size.size() == 4 || size.size() == 5, "size must have 4 or 5 entries, got {}",
            size.size());
  const size_t nsp = size.size() - 2;
  const int64_t n = size[0];
  ctx.check(theta.rank() == 3 && theta.dim(0) == n && theta.dim(1) == static_cast<int64_t>(nsp) &&
                theta.dim(2) == static_cast<int64_t>(nsp) + 1,
            "theta {} must be ({}, {}, {})", theta.describe(), n, nsp, nsp + 1);
  for (int64_t s : size) ctx.check(s >= 0, "size entries must be non-negative");
  const bool align = ctx.attr_int("align_corners", 0) != 0;
  std::vector<int64_t> sp(size.begin() + 2, size.end());
  std::vector<int64_t> out_dims = {n};
  out_dims.insert(out_dims.end(), sp.begin(), sp.end());
  out_dims.push_back(static_cast<int64_t>(nsp));
  // Normalized coordinate of index i along a dim of length len.
  auto coord = [&](int64_t i, int64_t len) {
    if (align)
      return len <= 1 ? -1.0 : -1.0 + 2.0 * static_cast<double>(i) / static_cast<double>(len - 1);
    return (2.0 * static_cast<double>(i) + 1.0) / static_cast<double>(len) - 1.0;
  };
  ctx.set_output(0, dispatch_dtype<DTypeSet::Float>(theta.dtype(), "AffineGrid", [&](auto tag) {
                   using T = typename decltype(tag)::type;
                   const T* pt = theta.data<T>();
                   Tensor y(theta.dtype(), out_dims);
                   T* py = y.data<T>();
                   const int64_t points = product(sp);
                   const int64_t cols = static_cast<int64_t>(nsp) + 1;
                   std::vector<int64_t> idx(nsp);
                   std::vector<double> h(nsp + 1);
                   for (int64_t b = 0; b < n; ++b) {
                     const T* th = pt + b * static_cast<int64_t>(nsp) * cols;
                     std::fill(idx.begin(), idx.end(), 0);
                     for (int64_t p = 0; p < points; ++p, next_index(idx, sp)) {
                       // Homogeneous point (x, y[, z], 1): x runs along the innermost dim.
                       for (size_t d = 0; d < nsp; ++d)
                         h[d] = coord(idx[nsp - 1 - d], sp[nsp - 1 - d]);
                       h[nsp] = 1.0;
                       T* out = py + (b * points + p) * static_cast<int64_t>(nsp);
                       for (size_t r = 0; r < nsp; ++r) {
                         double acc = 0;
                         for (int64_t k = 0; k < cols; ++k)
                           acc += static_cast<double>(th[r * cols + k]) * h[k];
                         out[r] = static_cast<T>(acc);
                       }
                     }
                   }
                   return y;
                 }));
}

void infer_affine_grid(InferContext& ctx) {
  const TypeInfo* t = ctx.input_type(0);
  if (!t || !t->is_tensor()) return;
  std::optional<Shape> shape;
  if (const Tensor* s = ctx.has_input(1) ? ctx.input_constant(1) : nullptr) {
    std::vector<int64_t> size = s->to_int64_vector();
    if (size.size() == 4 || size.size() == 5) {
      std::vector<int64_t> dims = {size[0]};
      dims.insert(dims.end(), size.begin() + 2, size.end());
      dims.push_back(static_cast<int64_t>(size.size()) - 2);
      shape = Shape::from_values(dims);
    }
  }
  ctx.set_output_type(0, TypeInfo::tensor(t->dtype, shape));
}

KILN_REGISTER_OP({.op_type = "GridSample", .kernel = grid_sample, .infer = infer_grid_sample});
KILN_REGISTER_OP({.op_type = "AffineGrid", .kernel = affine_grid, .infer = infer_affine_grid});

}  // namespace
}  // namespace kiln::ops
