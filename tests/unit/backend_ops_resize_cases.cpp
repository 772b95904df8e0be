// The harness cases of the GPU's Resize (gpu.resize): nearest with each rule, linear and cubic
// under several coordinate transformations, exclude_outside, antialias, tf_crop_and_resize's
// roi and extrapolation value, the axes attribute, Resize-10, integer elements, scales and
// sizes; float32 and float16 (bfloat16 for one). Inputs and outputs are graph values, so the
// kernel reads and writes them row-major here; its channels-last walk is checked in
// tests/gpu_emu.
#include <string>

#include "backend_ops_case.hpp"

namespace kiln::backend_ops {
namespace {

constexpr const char* kGpu = "gpu.resize";

// A Resize-13+ case: X, an empty roi (or the one given), scales or sizes.
Case resize(std::string name, std::vector<int64_t> xd, In roi, In scales, In sizes,
            std::vector<Attr> attrs, int opset = 13) {
  std::vector<In> inputs = {x(std::move(xd)), std::move(roi), std::move(scales)};
  if (!sizes.absent) inputs.push_back(std::move(sizes));
  return {.name = "gpu_resize_" + std::move(name),
          .op = "Resize",
          .inputs = std::move(inputs),
          .attrs = std::move(attrs),
          .kernel = "cpu.resize",
          .opset = opset,
          .gpu = kGpu};
}

// float32 and its float16 twin; the CPU interpolates float16 on the reference.
void add(std::vector<Case>& out, Case c, const char* cpu16 = "reference") {
  push_with_f16(out, std::move(c), cpu16);
}

}  // namespace

std::vector<Case> gpu_resize_cases() {
  std::vector<Case> c;
  const Attr nearest = s("mode", "nearest"), linear = s("mode", "linear"),
             cubic = s("mode", "cubic");
  // YOLO's upsampling: nearest, asymmetric, floor, scales 2.
  add(c,
      resize(
          "nearest_asymmetric_floor_scales", {1, 3, 5, 6}, none(), reals_in({4}, {1, 1, 2, 2}),
          none(),
          {nearest, s("coordinate_transformation_mode", "asymmetric"), s("nearest_mode", "floor")}),
      "cpu.resize");
  // The default rule (round_prefer_floor, half_pixel) shrinking and growing by sizes.
  add(c,
      resize("nearest_sizes", {2, 3, 7, 9}, none(), none(), ints_in({4}, {2, 3, 4, 14}), {nearest}),
      "cpu.resize");
  add(c,
      resize("nearest_round_prefer_ceil", {1, 2, 5, 5}, none(), reals_in({4}, {1, 1, 1.5, 0.6}),
             none(), {nearest, s("nearest_mode", "round_prefer_ceil")}),
      "cpu.resize");
  // Integer elements move as they are.
  {
    Case k = resize("nearest_int64", {2, 3, 4}, none(), none(), ints_in({3}, {2, 5, 7}), {nearest});
    k.inputs[0] = typed({2, 3, 4}, DataType::Int64);
    c.push_back(std::move(k));
  }
  add(c, resize("linear_half_pixel_down", {2, 3, 9, 8}, none(), none(), ints_in({4}, {2, 3, 5, 4}),
                {linear}));
  Case bilinear =
      resize("linear_align_corners_up", {1, 4, 5, 7}, none(), reals_in({4}, {1, 1, 2, 1.5}), none(),
             {linear, s("coordinate_transformation_mode", "align_corners")});
  c.push_back(bilinear);
  {
    Case b = bilinear;
    b.name += "_bf16";
    b.dtype = DataType::BFloat16;
    b.kernel = "reference";
    c.push_back(std::move(b));
  }
  {
    Case h = bilinear;
    h.name += "_f16";
    h.dtype = DataType::Float16;
    h.kernel = "reference";
    c.push_back(std::move(h));
  }
  add(c,
      resize("linear_pytorch_half_pixel", {1, 2, 6, 1}, none(), none(), ints_in({4}, {1, 2, 9, 1}),
             {linear, s("coordinate_transformation_mode", "pytorch_half_pixel")}));
  add(c, resize("cubic_exclude_outside", {1, 2, 7, 7}, none(), none(), ints_in({4}, {1, 2, 11, 9}),
                {cubic, f("cubic_coeff_a", -0.5f), i("exclude_outside", 1)}));
  add(c,
      resize("cubic_half_pixel_symmetric", {2, 1, 6, 5}, none(), none(), ints_in({4}, {2, 1, 4, 8}),
             {cubic, s("coordinate_transformation_mode", "half_pixel_symmetric")}, 19));
  add(c, resize("linear_antialias_down", {1, 2, 12, 10}, none(), none(), ints_in({4}, {1, 2, 5, 4}),
                {linear, i("antialias", 1)}, 18));
  add(c, resize("cubic_antialias_down", {1, 2, 11, 9}, none(), none(), ints_in({4}, {1, 2, 4, 4}),
                {cubic, i("antialias", 1)}, 18));
  // tf_crop_and_resize: a window partly outside the input takes the extrapolation value there.
  add(c,
      resize("tf_crop_and_resize", {1, 2, 6, 6}, reals_in({8}, {0, 0, 0.1, -0.2, 1, 1, 0.9, 1.3}),
             none(), ints_in({4}, {1, 2, 4, 5}),
             {linear, s("coordinate_transformation_mode", "tf_crop_and_resize"),
              f("extrapolation_value", 10.f)}));
  // The axes attribute: only the last one, of a 3-D input.
  add(c, resize("linear_axes_last", {2, 5, 7}, none(), none(), ints_in({1}, {13}),
                {linear, ints("axes", {-1})}, 18));
  // Resize-10: X and scales, asymmetric coordinates and its nearest rule.
  {
    Case r = {.name = "gpu_resize_opset10_nearest",
              .op = "Resize",
              .inputs = {x({1, 2, 3, 4}), reals_in({4}, {1, 1, 2, 1.5})},
              .attrs = {nearest},
              .kernel = "cpu.resize",
              .opset = 10,
              .gpu = kGpu};
    add(c, std::move(r), "cpu.resize");
  }
  return c;
}

}  // namespace kiln::backend_ops
