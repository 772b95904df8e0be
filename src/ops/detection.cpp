// RoiAlign and NonMaxSuppression.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "ops/conv_utils.hpp"
#include "ops/infer_utils.hpp"
#include "ops/op_utils.hpp"
#include "ops/registry.hpp"

namespace kiln::ops {
namespace {

using namespace window;  // NOLINT: shared window/quantization helpers

// One bilinear sample: four corner offsets and weights (all zero outside the feature map).
struct Sample {
  int64_t pos[4] = {0, 0, 0, 0};
  double w[4] = {0, 0, 0, 0};
};

Sample bilinear_sample(double y, double x, int64_t height, int64_t width) {
  Sample s;
  if (!(y >= -1.0 && y <= static_cast<double>(height) && x >= -1.0 &&
        x <= static_cast<double>(width)))  // also rejects NaN
    return s;
  y = std::max(y, 0.0);
  x = std::max(x, 0.0);
  int64_t y_low = static_cast<int64_t>(y), x_low = static_cast<int64_t>(x), y_high, x_high;
  if (y_low >= height - 1) {
    y_high = y_low = height - 1;
    y = static_cast<double>(y_low);
  } else {
    y_high = y_low + 1;
  }
  if (x_low >= width - 1) {
    x_high = x_low = width - 1;
    x = static_cast<double>(x_low);
  } else {
    x_high = x_low + 1;
  }
  const double ly = y - static_cast<double>(y_low), lx = x - static_cast<double>(x_low);
  const double hy = 1 - ly, hx = 1 - lx;
  s.pos[0] = y_low * width + x_low;
  s.pos[1] = y_low * width + x_high;
  s.pos[2] = y_high * width + x_low;
  s.pos[3] = y_high * width + x_high;
  s.w[0] = hy * hx;
  s.w[1] = hy * lx;
  s.w[2] = ly * hx;
  s.w[3] = ly * lx;
  return s;
}

void roi_align(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& rois = ctx.input(1);
  const Tensor& bi = ctx.input(2);
  ctx.check(x.rank() == 4, "X must be 4-D (N, C, H, W), got {}", x.describe());
  ctx.check(rois.rank() == 2 && rois.dim(1) == 4, "rois must be (num_rois, 4), got {}",
            rois.describe());
  ctx.check(rois.dtype() == x.dtype(), "rois type {} differs from X type {}",
            dtype_name(rois.dtype()), dtype_name(x.dtype()));
  ctx.check(bi.rank() == 1 && bi.dim(0) == rois.dim(0),
            "batch_indices must be 1-D with {} entries, got {}", rois.dim(0), bi.describe());
  std::string mode = ctx.attr_string("mode", "avg");
  ctx.check(mode == "avg" || mode == "max", "unknown mode '{}'", mode);
  // RoiAlign-10 behaves as "output_half_pixel"; opset 16 made half_pixel the default.
  std::string ctm = ctx.attr_string("coordinate_transformation_mode",
                                    ctx.opset() < 16 ? "output_half_pixel" : "half_pixel");
  ctx.check(ctm == "half_pixel" || ctm == "output_half_pixel",
            "unknown coordinate_transformation_mode '{}'", ctm);
  const bool half_pixel = ctm == "half_pixel";
  const int64_t ph_n = ctx.attr_int("output_height", 1), pw_n = ctx.attr_int("output_width", 1);
  ctx.check(ph_n > 0 && pw_n > 0, "output_height and output_width must be positive");
  const int64_t sampling = ctx.attr_int("sampling_ratio", 0);
  ctx.check(sampling >= 0, "sampling_ratio must be >= 0, got {}", sampling);
  const double spatial_scale = ctx.attr_float("spatial_scale", 1.0f);
  const int64_t n = x.dim(0), c = x.dim(1), height = x.dim(2), width = x.dim(3);
  const int64_t num_rois = rois.dim(0);
  std::vector<int64_t> batch = bi.to_int64_vector();
  for (int64_t b : batch)
    ctx.check(b >= 0 && b < n, "batch index {} is out of range [0, {})", b, n);
  ctx.set_output(
      0, dispatch_dtype<DTypeSet::Float>(x.dtype(), "RoiAlign", [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T* px = x.data<T>();
        const T* pr = rois.data<T>();
        Tensor y(x.dtype(), {num_rois, c, ph_n, pw_n});
        T* py = y.data<T>();
        if (height == 0 || width == 0) return y;
        const double offset = half_pixel ? 0.5 : 0.0;
        std::vector<Sample> samples;
        for (int64_t r = 0; r < num_rois; ++r) {
          const double sw = static_cast<double>(pr[r * 4 + 0]) * spatial_scale - offset;
          const double sh = static_cast<double>(pr[r * 4 + 1]) * spatial_scale - offset;
          const double ew = static_cast<double>(pr[r * 4 + 2]) * spatial_scale - offset;
          const double eh = static_cast<double>(pr[r * 4 + 3]) * spatial_scale - offset;
          double rw = ew - sw, rh = eh - sh;
          if (!half_pixel) {  // legacy mode forces rois to be at least one pixel
            rw = std::max(rw, 1.0);
            rh = std::max(rh, 1.0);
          }
          const double bh = rh / static_cast<double>(ph_n), bw = rw / static_cast<double>(pw_n);
          ctx.check(std::isfinite(rh) && std::isfinite(rw), "roi {} has non-finite coordinates", r);
          ctx.check(sampling > 0 || (rh / static_cast<double>(ph_n) < 1e6 &&
                                     rw / static_cast<double>(pw_n) < 1e6),
                    "roi {} is too large for adaptive sampling", r);
          // A negative extent (half_pixel mode allows it) samples nothing.
          const int64_t gh = std::max<int64_t>(
              0, sampling > 0 ? sampling
                              : static_cast<int64_t>(std::ceil(rh / static_cast<double>(ph_n))));
          const int64_t gw = std::max<int64_t>(
              0, sampling > 0 ? sampling
                              : static_cast<int64_t>(std::ceil(rw / static_cast<double>(pw_n))));
          ctx.check(static_cast<double>(gh) * static_cast<double>(gw) * static_cast<double>(ph_n) *
                            static_cast<double>(pw_n) <=
                        1e8,
                    "roi {} needs too many samples", r);
          const int64_t count = std::max<int64_t>(gh * gw, 1);
          samples.clear();
          for (int64_t ph = 0; ph < ph_n; ++ph)
            for (int64_t pw = 0; pw < pw_n; ++pw)
              for (int64_t iy = 0; iy < gh; ++iy) {
                const double yy = sh + static_cast<double>(ph) * bh +
                                  (static_cast<double>(iy) + 0.5) * bh / static_cast<double>(gh);
                for (int64_t ix = 0; ix < gw; ++ix) {
                  const double xx = sw + static_cast<double>(pw) * bw +
                                    (static_cast<double>(ix) + 0.5) * bw / static_cast<double>(gw);
                  samples.push_back(bilinear_sample(yy, xx, height, width));
                }
              }
          const int64_t per_bin = std::max<int64_t>(gh * gw, 0);
          for (int64_t ch = 0; ch < c; ++ch) {
            const T* plane = px + (batch[r] * c + ch) * height * width;
            for (int64_t bin = 0; bin < ph_n * pw_n; ++bin) {
              double acc = 0;
              bool first = true;
              for (int64_t k = 0; k < per_bin; ++k) {
                const Sample& s = samples[bin * per_bin + k];
                if (mode == "avg") {
                  for (int j = 0; j < 4; ++j) acc += s.w[j] * static_cast<double>(plane[s.pos[j]]);
                } else {
                  // Max of the weighted corners, as the reference runtimes define max mode.
                  double v = s.w[0] * static_cast<double>(plane[s.pos[0]]);
                  for (int j = 1; j < 4; ++j)
                    v = std::max(v, s.w[j] * static_cast<double>(plane[s.pos[j]]));
                  acc = first ? v : std::max(acc, v);
                  first = false;
                }
              }
              if (mode == "avg") acc /= static_cast<double>(count);
              py[((r * c + ch) * ph_n * pw_n) + bin] = static_cast<T>(acc);
            }
          }
        }
        return y;
      }));
}

void infer_roi_align(InferContext& ctx) {
  const TypeInfo* x = ctx.input_type(0);
  const TypeInfo* r = ctx.input_type(1);
  if (!x || !x->is_tensor()) return;
  Dim rois, c;
  if (r && r->is_tensor() && r->shape && r->shape->rank() == 2) rois = (*r->shape)[0];
  if (x->shape && x->shape->rank() == 4) c = (*x->shape)[1];
  ctx.set_output_type(
      0, TypeInfo::tensor(x->dtype, Shape({rois, c, Dim(ctx.attr_int("output_height", 1)),
                                           Dim(ctx.attr_int("output_width", 1))})));
}

struct Box {
  float y1, x1, y2, x2;
};

bool suppressed(const Box& a, const Box& b, float iou_threshold) {
  const float ix1 = std::max(a.x1, b.x1), iy1 = std::max(a.y1, b.y1);
  const float ix2 = std::min(a.x2, b.x2), iy2 = std::min(a.y2, b.y2);
  const float inter = std::max(0.0f, ix2 - ix1) * std::max(0.0f, iy2 - iy1);
  if (inter <= 0) return false;
  const float area_a = (a.x2 - a.x1) * (a.y2 - a.y1), area_b = (b.x2 - b.x1) * (b.y2 - b.y1);
  const float uni = area_a + area_b - inter;
  if (area_a <= 0 || area_b <= 0 || uni <= 0) return false;
  return inter / uni > iou_threshold;
}

void non_max_suppression(KernelContext& ctx) {
  const Tensor& boxes = ctx.input(0);
  const Tensor& scores = ctx.input(1);
  ctx.check(boxes.dtype() == DataType::Float32 && scores.dtype() == DataType::Float32,
            "boxes and scores must be float");
  ctx.check(boxes.rank() == 3 && boxes.dim(2) == 4,
            "boxes must be (num_batches, spatial_dimension, 4), got {}", boxes.describe());
  ctx.check(scores.rank() == 3 && scores.dim(0) == boxes.dim(0) && scores.dim(2) == boxes.dim(1),
            "scores {} must be (num_batches, num_classes, {})", scores.describe(), boxes.dim(1));
  int64_t max_out = 0;
  float iou_threshold = 0, score_threshold = 0;
  bool use_score_threshold = false;
  if (ctx.has_input(2) && ctx.input(2).numel() > 0) max_out = ctx.input(2).int_at(0);
  if (ctx.has_input(3) && ctx.input(3).numel() > 0)
    iou_threshold = static_cast<float>(ctx.input(3).double_at(0));
  if (ctx.has_input(4) && ctx.input(4).numel() > 0) {
    score_threshold = static_cast<float>(ctx.input(4).double_at(0));
    use_score_threshold = true;
  }
  ctx.check(iou_threshold >= 0 && iou_threshold <= 1, "iou_threshold must be in [0, 1], got {}",
            iou_threshold);
  const int64_t center = ctx.attr_int("center_point_box", 0);
  ctx.check(center == 0 || center == 1, "center_point_box must be 0 or 1, got {}", center);
  const int64_t nb = boxes.dim(0), nboxes = boxes.dim(1), nc = scores.dim(1);
  const float* pb = boxes.data<float>();
  const float* ps = scores.data<float>();
  std::vector<Box> bx(static_cast<size_t>(nb * nboxes));
  for (int64_t i = 0; i < nb * nboxes; ++i) {
    const float* b = pb + i * 4;
    if (center == 0) {
      bx[i] = {std::min(b[0], b[2]), std::min(b[1], b[3]), std::max(b[0], b[2]),
               std::max(b[1], b[3])};
    } else {
      const float xc = b[0], yc = b[1], w = b[2], h = b[3];
      bx[i] = {yc - h / 2, xc - w / 2, yc + h / 2, xc + w / 2};
    }
  }
  std::vector<int64_t> selected;
  std::vector<int64_t> order, chosen;
  for (int64_t b = 0; b < nb; ++b) {
    for (int64_t cl = 0; cl < nc; ++cl) {
      if (max_out <= 0) continue;
      const float* sc = ps + (b * nc + cl) * nboxes;
      order.clear();
      for (int64_t i = 0; i < nboxes; ++i)
        if (!std::isnan(sc[i]) && (!use_score_threshold || sc[i] > score_threshold))
          order.push_back(i);
      // Highest score first; equal scores keep the lower box index first.
      std::stable_sort(order.begin(), order.end(),
                       [&](int64_t l, int64_t r) { return sc[l] > sc[r]; });
      chosen.clear();
      for (int64_t i : order) {
        if (static_cast<int64_t>(chosen.size()) >= max_out) break;
        const Box& cand = bx[b * nboxes + i];
        bool keep = true;
        for (int64_t j : chosen) {
          if (suppressed(cand, bx[b * nboxes + j], iou_threshold)) {
            keep = false;
            break;
          }
        }
        if (keep) chosen.push_back(i);
      }
      for (int64_t i : chosen) {
        selected.push_back(b);
        selected.push_back(cl);
        selected.push_back(i);
      }
    }
  }
  ctx.set_output(
      0, Tensor::from_vector<int64_t>({static_cast<int64_t>(selected.size() / 3), 3}, selected));
}

void infer_nms(InferContext& ctx) {
  ctx.set_output_type(0, TypeInfo::tensor(DataType::Int64, Shape({Dim(), Dim(3)})));
}

KILN_REGISTER_OP({.op_type = "RoiAlign", .kernel = roi_align, .infer = infer_roi_align});
KILN_REGISTER_OP({.op_type = "NonMaxSuppression",
                  .kernel = non_max_suppression,
                  .infer = infer_nms});

}  // namespace
}  // namespace kiln::ops
