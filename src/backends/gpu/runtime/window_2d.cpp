#include "backends/gpu/runtime/window_2d.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "backends/gpu/runtime/node_attrs.hpp"

namespace kiln::backends::gpu {

std::string read_window_2d(const ir::Node& node, const char* what, Window2d& out) {
  const std::vector<int64_t> strides = ints_attr(node, "strides", {1, 1});
  const std::vector<int64_t> dilations = ints_attr(node, "dilations", {1, 1});
  if (strides.size() != 2 || dilations.size() != 2) {
    return fmt::format("strides or dilations do not match a 2-D {}", what);
  }
  for (int64_t v : {strides[0], strides[1], dilations[0], dilations[1]}) {
    if (v < 1 || v > (1 << 16)) return "strides and dilations must be positive";
  }
  out.stride_h = static_cast<int>(strides[0]);
  out.stride_w = static_cast<int>(strides[1]);
  out.dil_h = static_cast<int>(dilations[0]);
  out.dil_w = static_cast<int>(dilations[1]);
  const int64_t ceil_mode = int_attr(node, "ceil_mode", 0);
  if (ceil_mode != 0 && ceil_mode != 1) return "ceil_mode must be 0 or 1";
  out.ceil_mode = ceil_mode == 1;
  const std::string auto_pad = string_attr(node, "auto_pad", "NOTSET");
  if (auto_pad == "NOTSET") {
    out.pads = ints_attr(node, "pads", {0, 0, 0, 0});
    if (out.pads.size() != 4) return fmt::format("pads do not match a 2-D {}", what);
    for (int64_t p : out.pads) {
      if (p < 0 || p > (1 << 16)) return "pads must be non-negative";
    }
  } else if (auto_pad == "SAME_UPPER") {
    out.auto_pad = Window2d::AutoPad::SameUpper;
  } else if (auto_pad == "SAME_LOWER") {
    out.auto_pad = Window2d::AutoPad::SameLower;
  } else if (auto_pad != "VALID") {
    return fmt::format("unknown auto_pad '{}'", auto_pad);
  }
  // ceil_mode rounds only what explicit pads leave (the reference's geometry): VALID and SAME
  // sizes are their own.
  if (auto_pad != "NOTSET") out.ceil_mode = false;
  return "";
}

namespace {

// Output extent along spatial dim `d` (0: H, 1: W) of an input extent `in`, and the pads there
// (pads[d] before, pads[d + 2] after), from the attributes or auto_pad SAME.
int64_t out_extent(const Window2d& win, int64_t in, int64_t k, int stride, int dil, int d,
                   int64_t (&pads)[4]) {
  const int64_t ek = (k - 1) * dil + 1;
  if (win.auto_pad == Window2d::AutoPad::None) {
    pads[d] = win.pads[d];
    pads[d + 2] = win.pads[d + 2];
    const int64_t span = in + pads[d] + pads[d + 2] - ek;
    if (span < 0) return 0;
    if (!win.ceil_mode) return span / stride + 1;
    int64_t out = (span + stride - 1) / stride + 1;
    if ((out - 1) * stride >= in + pads[d]) --out;
    return out;
  }
  const int64_t out = (in + stride - 1) / stride;
  const int64_t total = std::max<int64_t>(0, (out - 1) * stride + ek - in);
  const int64_t small = total / 2;
  pads[d] = win.auto_pad == Window2d::AutoPad::SameUpper ? small : total - small;
  pads[d + 2] = total - pads[d];
  return out;
}

}  // namespace

WindowExtent window_extent(const Window2d& win, int64_t h, int64_t w) {
  WindowExtent e;
  e.oh = out_extent(win, h, win.kh, win.stride_h, win.dil_h, 0, e.pads);
  e.ow = out_extent(win, w, win.kw, win.stride_w, win.dil_w, 1, e.pads);
  return e;
}

}  // namespace kiln::backends::gpu
