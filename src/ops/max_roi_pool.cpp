// MaxRoiPool (opset 1, 22): Caffe-style ROI max pooling. Each ROI (batch index, x1, y1, x2, y2 in
// input coordinates before spatial_scale) is rounded to whole pixels and split into a
// pooled_shape grid of bins; a bin holds the maximum of its pixels, or 0 when it is empty.
#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/op_utils.hpp"
#include "ops/registry.hpp"

namespace kiln::ops {
namespace {

void max_roi_pool(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& rois = ctx.input(1);
  ctx.check(x.rank() == 4, "X must be [N, C, H, W], got {}", x.describe());
  ctx.check(rois.rank() == 2 && rois.dim(1) == 5, "rois must be [num_rois, 5], got {}",
            rois.describe());
  ctx.check(rois.dtype() == x.dtype(), "rois must have X's element type");
  const std::vector<int64_t> pooled = ctx.attr_ints("pooled_shape");
  ctx.check(pooled.size() == 2 && pooled[0] > 0 && pooled[1] > 0,
            "pooled_shape must be two positive values, got {}", dims_to_string(pooled));
  const double scale = ctx.attr_float("spatial_scale", 1.0f);
  const int64_t n = x.dim(0), c = x.dim(1), h = x.dim(2), w = x.dim(3);
  const int64_t ph = pooled[0], pw = pooled[1], num = rois.dim(0);
  Tensor out(x.dtype(), {num, c, ph, pw});
  dispatch_dtype<DTypeSet::Float>(x.dtype(), "MaxRoiPool", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* px = x.data<T>();
    T* po = out.data<T>();
    for (int64_t r = 0; r < num; ++r) {
      const double bd = rois.double_at(r * 5);
      ctx.check(bd >= 0 && bd < static_cast<double>(n) && bd == std::trunc(bd),
                "roi {} names batch {} of {}", r, bd, n);
      const auto b = static_cast<int64_t>(bd);
      auto coord = [&](int k) {
        const double v = std::round(rois.double_at(r * 5 + k) * scale);
        ctx.check(std::abs(v) < 1e15, "roi {} coordinate {} is out of range", r, v);
        return static_cast<int64_t>(v);
      };
      const int64_t x1 = coord(1), y1 = coord(2), x2 = coord(3), y2 = coord(4);
      // Malformed (inverted) ROIs are forced to be 1x1.
      const double bin_h = static_cast<double>(std::max<int64_t>(y2 - y1 + 1, 1)) / ph;
      const double bin_w = static_cast<double>(std::max<int64_t>(x2 - x1 + 1, 1)) / pw;
      for (int64_t ch = 0; ch < c; ++ch) {
        const T* plane = px + (b * c + ch) * h * w;
        for (int64_t i = 0; i < ph; ++i) {
          const int64_t hs =
              std::clamp<int64_t>(static_cast<int64_t>(std::floor(i * bin_h)) + y1, 0, h);
          const int64_t he =
              std::clamp<int64_t>(static_cast<int64_t>(std::ceil((i + 1) * bin_h)) + y1, 0, h);
          for (int64_t j = 0; j < pw; ++j) {
            const int64_t ws =
                std::clamp<int64_t>(static_cast<int64_t>(std::floor(j * bin_w)) + x1, 0, w);
            const int64_t we =
                std::clamp<int64_t>(static_cast<int64_t>(std::ceil((j + 1) * bin_w)) + x1, 0, w);
            double best = 0;
            if (he > hs && we > ws) {
              best = -std::numeric_limits<double>::infinity();
              for (int64_t y = hs; y < he; ++y)
                for (int64_t xx = ws; xx < we; ++xx)
                  best = std::max(best, convert_element<double>(plane[y * w + xx]));
            }
            po[((r * c + ch) * ph + i) * pw + j] = convert_element<T>(best);
          }
        }
      }
    }
  });
  ctx.set_output(0, std::move(out));
}

void infer_max_roi_pool(InferContext& ctx) {
  const TypeInfo* x = ctx.input_type(0);
  const TypeInfo* rois = ctx.input_type(1);
  if (!x || x->kind != TypeInfo::Kind::Tensor) return;
  std::optional<Shape> shape;
  const std::vector<int64_t> pooled = ctx.attr_ints("pooled_shape", {});
  if (x->shape && x->shape->rank() == 4 && rois && rois->shape && rois->shape->rank() == 2 &&
      pooled.size() == 2)
    shape = Shape({(*rois->shape)[0], (*x->shape)[1], Dim(pooled[0]), Dim(pooled[1])});
  ctx.set_output_type(0, TypeInfo::tensor(x->dtype, shape));
}

KILN_REGISTER_OP({.op_type = "MaxRoiPool", .kernel = max_roi_pool, .infer = infer_max_roi_pool});

}  // namespace
}  // namespace kiln::ops
