// DeformConv (N-D, bilinear sampling at learned offsets with optional mask) and Col2Im.
#include <algorithm>
#include <cmath>

#include "ops/conv_utils.hpp"
#include "ops/infer_utils.hpp"
#include "ops/op_utils.hpp"
#include "ops/registry.hpp"

namespace kiln::ops {
namespace {

using namespace window;  // NOLINT: shared window/quantization helpers

template <typename T>
std::vector<double> as_doubles(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  const T* p = t.data<T>();
  for (int64_t i = 0; i < t.numel(); ++i)
    v[i] = static_cast<double>(static_cast<acc_float_t<T>>(p[i]));
  return v;
}

void deform_conv(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& w = ctx.input(1);
  const Tensor& offset = ctx.input(2);
  ctx.check(x.rank() >= 3, "X must have rank >= 3, got {}", x.describe());
  ctx.check(w.rank() == x.rank() && offset.rank() == x.rank(),
            "W {} and offset {} must have the rank of X {}", w.describe(), offset.describe(),
            x.describe());
  ctx.check(w.dtype() == x.dtype() && offset.dtype() == x.dtype(), "X, W and offset types differ");
  const size_t nsp = x.rank() - 2;
  const int64_t n = x.dim(0), c = x.dim(1), m = w.dim(0);
  const int64_t group = ctx.attr_int("group", 1), og_n = ctx.attr_int("offset_group", 1);
  ctx.check(group >= 1 && og_n >= 1 && group <= kMaxWindowValue && og_n <= kMaxWindowValue,
            "group and offset_group must be in [1, {}]", kMaxWindowValue);
  ctx.check(c % group == 0 && m % group == 0 && w.dim(1) * group == c,
            "W {} does not match {} input channels in {} groups", w.describe(), c, group);
  ctx.check(c % og_n == 0, "input channels {} not divisible by offset_group {}", c, og_n);
  std::vector<int64_t> in(x.dims().begin() + 2, x.dims().end());
  std::vector<int64_t> kernel(w.dims().begin() + 2, w.dims().end());
  if (ctx.has_attr("kernel_shape"))
    ctx.check(ctx.attr_ints("kernel_shape") == kernel, "kernel_shape does not match W {}",
              w.describe());
  WindowGeometry g = forward_geometry(ctx, in, kernel, false);
  const int64_t k_size = product(kernel), out_size = product(g.out), in_size = product(in);
  const int64_t nsp_i = static_cast<int64_t>(nsp);
  std::vector<int64_t> off_dims = {n, og_n * k_size * nsp_i};
  off_dims.insert(off_dims.end(), g.out.begin(), g.out.end());
  ctx.check(offset.dims() == off_dims, "offset {} must have shape {}", offset.describe(),
            dims_to_string(off_dims));
  std::vector<int64_t> mask_dims = off_dims;
  mask_dims[1] = og_n * k_size;
  if (ctx.has_input(4))
    ctx.check(ctx.input(4).dims() == mask_dims && ctx.input(4).dtype() == x.dtype(),
              "mask {} must have shape {}", ctx.input(4).describe(), dims_to_string(mask_dims));
  if (ctx.has_input(3))
    ctx.check(
        ctx.input(3).rank() == 1 && ctx.input(3).dim(0) == m && ctx.input(3).dtype() == x.dtype(),
        "B must be 1-D with {} elements, got {}", m, ctx.input(3).describe());
  const int64_t cg = c / group, mg = m / group, c_per_og = c / og_n;
  const std::vector<int64_t> in_strides = row_major_strides(in);
  ctx.set_output(
      0, dispatch_dtype<DTypeSet::Float>(x.dtype(), "DeformConv", [&](auto tag) {
        using T = typename decltype(tag)::type;
        std::vector<double> xv = as_doubles<T>(x), wv = as_doubles<T>(w),
                            ov = as_doubles<T>(offset);
        std::vector<double> mv =
            ctx.has_input(4) ? as_doubles<T>(ctx.input(4)) : std::vector<double>();
        std::vector<double> bv =
            ctx.has_input(3) ? as_doubles<T>(ctx.input(3)) : std::vector<double>(m, 0.0);
        std::vector<int64_t> ydims = {n, m};
        ydims.insert(ydims.end(), g.out.begin(), g.out.end());
        Tensor y(x.dtype(), ydims);
        T* py = y.data<T>();
        std::vector<double> cols(static_cast<size_t>(c * k_size));  // sampled values [c][k]
        std::vector<int64_t> o(nsp), k(nsp), corner(nsp);
        const std::vector<int64_t> two(nsp, 2);
        std::vector<double> pos(nsp);
        std::vector<std::pair<int64_t, double>> taps;  // (input offset, weight) of one sample
        for (int64_t b = 0; b < n; ++b) {
          std::fill(o.begin(), o.end(), 0);
          for (int64_t op = 0; op < out_size; ++op, next_index(o, g.out)) {
            for (int64_t og = 0; og < og_n; ++og) {
              std::fill(k.begin(), k.end(), 0);
              for (int64_t t = 0; t < k_size; ++t, next_index(k, kernel)) {
                for (size_t d = 0; d < nsp; ++d) {
                  const int64_t ch = ((og * k_size + t) * nsp_i + static_cast<int64_t>(d));
                  pos[d] = static_cast<double>(o[d] * g.strides[d] - g.pad_begin(d) +
                                               k[d] * g.dilations[d]) +
                           ov[(b * og_n * k_size * nsp_i + ch) * out_size + op];
                }
                const double mk =
                    mv.empty() ? 1.0 : mv[((b * og_n + og) * k_size + t) * out_size + op];
                // Bilinear (multilinear) interpolation; corners outside the input read zero.
                std::fill(corner.begin(), corner.end(), 0);
                taps.clear();
                bool finite = true;  // non-finite or absurd offsets sample nothing
                for (size_t d = 0; d < nsp; ++d) finite = finite && std::fabs(pos[d]) < 1e15;
                if (finite) do {
                    double wt = mk;
                    int64_t off = 0;
                    bool inside = true;
                    for (size_t d = 0; d < nsp; ++d) {
                      const double fl = std::floor(pos[d]);
                      const int64_t i = static_cast<int64_t>(fl) + corner[d];
                      const double frac = pos[d] - fl;
                      wt *= corner[d] ? frac : 1 - frac;
                      inside = inside && i >= 0 && i < in[d];
                      off += i * in_strides[d];
                    }
                    if (inside && wt != 0) taps.emplace_back(off, wt);
                  } while (next_index(corner, two));
                for (int64_t cc = og * c_per_og; cc < (og + 1) * c_per_og; ++cc) {
                  const double* plane = xv.data() + (b * c + cc) * in_size;
                  double v = 0;
                  for (const auto& [off, wt] : taps) v += wt * plane[off];
                  cols[cc * k_size + t] = v;
                }
              }
            }
            for (int64_t mm = 0; mm < m; ++mm) {
              const int64_t grp = mm / mg;
              double acc = bv[mm];
              for (int64_t cc = 0; cc < cg; ++cc) {
                const double* wp = wv.data() + (mm * cg + cc) * k_size;
                const double* cp = cols.data() + (grp * cg + cc) * k_size;
                for (int64_t t = 0; t < k_size; ++t) acc += wp[t] * cp[t];
              }
              py[(b * m + mm) * out_size + op] = static_cast<T>(acc);
            }
          }
        }
        return y;
      }));
}

void infer_deform_conv(InferContext& ctx) {
  const TypeInfo* x = ctx.input_type(0);
  const TypeInfo* w = ctx.input_type(1);
  const TypeInfo* off = ctx.input_type(2);
  if (!x || !x->is_tensor()) return;
  std::optional<Shape> shape;
  if (x->shape && off && off->is_tensor() && off->shape && off->shape->rank() == x->shape->rank() &&
      x->shape->rank() >= 3) {
    std::vector<Dim> dims = {(*x->shape)[0], Dim()};
    if (w && w->is_tensor() && w->shape && w->shape->rank() >= 1) dims[1] = (*w->shape)[0];
    for (size_t i = 2; i < off->shape->rank(); ++i) dims.push_back((*off->shape)[i]);
    shape = Shape(dims);
  }
  ctx.set_output_type(0, TypeInfo::tensor(x->dtype, shape));
}

void col2im(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  std::vector<int64_t> image = ctx.input(1).to_int64_vector();
  std::vector<int64_t> block = ctx.input(2).to_int64_vector();
  ctx.check(x.rank() == 3, "input must be (N, C * prod(block_shape), L), got {}", x.describe());
  ctx.check(!image.empty() && image.size() == block.size(),
            "image_shape ({}) and block_shape ({}) must have the same non-zero length",
            image.size(), block.size());
  for (int64_t v : image) ctx.check(v > 0, "image_shape entries must be positive");
  WindowGeometry g = forward_geometry(ctx, image, block, false);
  const int64_t k_size = product(block), l_size = product(g.out), img_size = product(image);
  ctx.check(k_size > 0 && x.dim(1) % k_size == 0, "input channels {} not divisible by {}", x.dim(1),
            k_size);
  ctx.check(x.dim(2) == l_size, "input has {} blocks, the geometry gives {}", x.dim(2), l_size);
  ctx.check(x.dim(1) >= k_size, "input has {} channels, fewer than one block of {}", x.dim(1),
            k_size);
  const int64_t n = x.dim(0), c = x.dim(1) / k_size;
  const size_t nsp = image.size();
  std::vector<int64_t> out_dims = {n, c};
  out_dims.insert(out_dims.end(), image.begin(), image.end());
  const std::vector<int64_t> strides = row_major_strides(image);
  // Image offset of every (tap, block) pair, -1 when it lands in padding.
  std::vector<int64_t> target(static_cast<size_t>(k_size * l_size));
  std::vector<int64_t> k(nsp, 0), l(nsp);
  for (int64_t t = 0; t < k_size; ++t, next_index(k, block)) {
    std::fill(l.begin(), l.end(), 0);
    for (int64_t p = 0; p < l_size; ++p, next_index(l, g.out)) {
      int64_t off = 0;
      bool inside = true;
      for (size_t d = 0; d < nsp; ++d) {
        const int64_t pos = l[d] * g.strides[d] - g.pad_begin(d) + k[d] * g.dilations[d];
        inside = inside && pos >= 0 && pos < image[d];
        off += pos * strides[d];
      }
      target[t * l_size + p] = inside ? off : -1;
    }
  }
  ctx.set_output(0, dispatch_dtype<DTypeSet::Numeric>(x.dtype(), "Col2Im", [&](auto tag) {
                   using T = typename decltype(tag)::type;
                   using Acc = std::conditional_t<std::is_integral_v<T>, T, acc_float_t<T>>;
                   const T* px = x.data<T>();
                   const int64_t y_count = product({n, c, img_size});
                   check_scratch(ctx, y_count, sizeof(Acc));
                   std::vector<Acc> acc(static_cast<size_t>(y_count), Acc(0));
                   for (int64_t b = 0; b < n; ++b)
                     for (int64_t ch = 0; ch < c; ++ch) {
                       Acc* dst = acc.data() + (b * c + ch) * img_size;
                       for (int64_t t = 0; t < k_size; ++t) {
                         const T* src = px + ((b * c + ch) * k_size + t) * l_size;
                         for (int64_t p = 0; p < l_size; ++p) {
                           const int64_t off = target[t * l_size + p];
                           if (off >= 0)
                             dst[off] = static_cast<Acc>(dst[off] + static_cast<Acc>(src[p]));
                         }
                       }
                     }
                   Tensor y(x.dtype(), out_dims);
                   T* py = y.data<T>();
                   for (size_t i = 0; i < acc.size(); ++i) py[i] = static_cast<T>(acc[i]);
                   return y;
                 }));
}

void infer_col2im(InferContext& ctx) {
  const TypeInfo* x = ctx.input_type(0);
  if (!x || !x->is_tensor()) return;
  std::optional<Shape> shape;
  const Tensor* image = ctx.input_constant(1);
  const Tensor* block = ctx.input_constant(2);
  if (image && x->shape && x->shape->rank() == 3) {
    std::vector<Dim> dims = {(*x->shape)[0], Dim()};
    if (block && (*x->shape)[1].is_static()) {
      int64_t k = 1;
      for (int64_t v : block->to_int64_vector()) k *= v;
      if (k > 0) dims[1] = Dim((*x->shape)[1].value() / k);
    }
    for (int64_t v : image->to_int64_vector()) dims.push_back(Dim(v));
    shape = Shape(dims);
  }
  ctx.set_output_type(0, TypeInfo::tensor(x->dtype, shape));
}

KILN_REGISTER_OP({.op_type = "DeformConv", .kernel = deform_conv, .infer = infer_deform_conv});
KILN_REGISTER_OP({.op_type = "Col2Im", .kernel = col2im, .infer = infer_col2im});

}  // namespace
}  // namespace kiln::ops
