// The GPU's window geometry (runtime/window_2d.*: output extent and pads of convolutions and
// pooling) against the reference's (ops::window::forward_geometry) over strides, dilations,
// explicit and asymmetric pads, auto_pad and ceil_mode, on inputs of several sizes.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "backends/gpu/runtime/window_2d.hpp"
#include "ops/conv_utils.hpp"

namespace {

using kiln::backends::gpu::read_window_2d;
using kiln::backends::gpu::Window2d;
using kiln::backends::gpu::window_extent;

TEST(GpuWindow2d, MatchesTheReferenceGeometry) {
  int checked = 0;
  for (const std::string auto_pad : {"NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER"}) {
    for (int64_t ceil_mode : {0, 1}) {
      for (int64_t stride : {1, 2, 3}) {
        for (int64_t dil : {1, 2}) {
          for (const std::vector<int64_t>& pads :
               {std::vector<int64_t>{0, 0, 0, 0}, {1, 1, 1, 1}, {0, 1, 2, 1}, {2, 0, 0, 3}}) {
            kiln::ir::Graph g;
            kiln::ir::Value* x = g.add_input("x", kiln::TypeInfo{});
            kiln::ir::Node* node = g.add_node("MaxPool", "", "pool", {x}, {g.add_value("y")});
            node->set_opset(12);
            node->set_attribute("kernel_shape", kiln::ir::Attribute(std::vector<int64_t>{3, 2}));
            node->set_attribute("strides", kiln::ir::Attribute(std::vector<int64_t>{stride, 1}));
            node->set_attribute("dilations", kiln::ir::Attribute(std::vector<int64_t>{dil, 1}));
            node->set_attribute("auto_pad", kiln::ir::Attribute(auto_pad));
            node->set_attribute("ceil_mode", kiln::ir::Attribute(ceil_mode));
            if (auto_pad == "NOTSET") node->set_attribute("pads", kiln::ir::Attribute(pads));
            Window2d win;
            ASSERT_EQ(read_window_2d(*node, "pooling", win), "");
            win.kh = 3, win.kw = 2;
            for (int64_t h : {5, 6, 7, 12}) {
              const int64_t w = h + 1;
              const kiln::ops::AttrReader attrs(*node);
              const kiln::ops::window::WindowGeometry ref =
                  kiln::ops::window::forward_geometry(attrs, {h, w}, {3, 2}, ceil_mode != 0);
              const kiln::backends::gpu::WindowExtent e = window_extent(win, h, w);
              SCOPED_TRACE(auto_pad + " ceil " + std::to_string(ceil_mode) + " stride " +
                           std::to_string(stride) + " dilation " + std::to_string(dil) + " h " +
                           std::to_string(h));
              EXPECT_EQ(e.oh, ref.out[0]);
              EXPECT_EQ(e.ow, ref.out[1]);
              EXPECT_EQ(e.pads[0], ref.pad_begin(0));
              EXPECT_EQ(e.pads[1], ref.pad_begin(1));
              EXPECT_EQ(e.pads[2], ref.pad_end(0));
              EXPECT_EQ(e.pads[3], ref.pad_end(1));
              ++checked;
            }
          }
        }
      }
    }
  }
  EXPECT_EQ(checked, 4 * 2 * 3 * 2 * 4 * 4);
}

TEST(GpuWindow2d, RefusesBadAttributes) {
  kiln::ir::Graph g;
  kiln::ir::Value* x = g.add_input("x", kiln::TypeInfo{});
  kiln::ir::Node* node = g.add_node("MaxPool", "", "pool", {x}, {g.add_value("y")});
  Window2d win;
  node->set_attribute("ceil_mode", kiln::ir::Attribute(int64_t{2}));
  EXPECT_NE(read_window_2d(*node, "pooling", win), "");
  node->set_attribute("ceil_mode", kiln::ir::Attribute(int64_t{0}));
  node->set_attribute("auto_pad", kiln::ir::Attribute(std::string("SAME")));
  EXPECT_NE(read_window_2d(*node, "pooling", win).find("unknown auto_pad"), std::string::npos);
  node->set_attribute("auto_pad", kiln::ir::Attribute(std::string("NOTSET")));
  node->set_attribute("pads", kiln::ir::Attribute(std::vector<int64_t>{1, 1}));
  EXPECT_NE(read_window_2d(*node, "pooling", win), "");
  node->set_attribute("pads", kiln::ir::Attribute(std::vector<int64_t>{0, 0, 0, 0}));
  node->set_attribute("strides", kiln::ir::Attribute(std::vector<int64_t>{0, 1}));
  EXPECT_NE(read_window_2d(*node, "pooling", win), "");
}

}  // namespace
