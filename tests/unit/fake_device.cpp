// The fake device's kernels (fake_device.hpp): element-wise on float32 tensors of one shape,
// registered in the kernel table under "fake-device" for every test that uses the device.
#include "fake_device.hpp"

#include <stdexcept>

#include "ir/graph.hpp"

namespace kiln::testing {
namespace {

// The fake device's kernels: element-wise on float32 tensors of one shape.
template <typename Fn>
class FakeEltwise final : public backends::Kernel {
 public:
  FakeEltwise(FakeDevice& dev, std::string name, Fn fn)
      : dev_(dev), name_(std::move(name)), fn_(fn) {}
  std::string_view name() const override { return name_; }
  // The work goes through the stream, as a GPU kernel's launch does, so that a recording
  // stream records it.
  void run(std::span<const backends::DeviceTensor> in, backends::KernelOutputs& out,
           backends::Stream& stream) override {
    ++dev_.kernel_runs;
    const std::string tactic = name_ + "@" + dims_to_string(in[0].dims);
    if (tactic_ != tactic) {
      ++dev_.timings;
      tactic_ = tactic;
    }
    for (const auto& t : in) {
      if (!dev_.owns(t.data)) throw std::runtime_error(name_ + ": a host pointer reached it");
    }
    backends::DeviceTensor y = out.allocate(0, in[0].dtype, in[0].dims);
    if (!dev_.owns(y.data)) throw std::runtime_error(name_ + ": output in host memory");
    auto* py = static_cast<float*>(y.data);
    const auto* pa = static_cast<const float*>(in[0].data);
    const float* pb = in.size() > 1 ? static_cast<const float*>(in[1].data) : nullptr;
    const int64_t n = y.numel();
    Fn fn = fn_;
    stream.enqueue([=] {
      for (int64_t i = 0; i < n; ++i) py[i] = fn(pa[i], pb ? pb[i] : 0.f);
    });
  }

  std::string tactics() const override { return tactic_; }
  void use_tactics(std::string_view text) override {
    dev_.tactics_given.emplace_back(text);
    tactic_ = std::string(text);
  }

 private:
  FakeDevice& dev_;  // the device it was created for: kernels are made for their backend
  std::string name_;
  Fn fn_;
  std::string tactic_;  // what it "timed", or was given
};

template <typename Fn>
std::unique_ptr<backends::Kernel> make_kernel(backends::Backend& b, const char* name, Fn fn) {
  return std::make_unique<FakeEltwise<Fn>>(dynamic_cast<FakeDevice&>(b), name, fn);
}

std::string same_shape_f32(const ir::Node& n) {
  for (const ir::Value* v : n.inputs()) {
    if (!v || !v->type().is_tensor() || v->type().dtype != DataType::Float32 || !v->type().shape ||
        !n.output(0)->type().shape || *v->type().shape != *n.output(0)->type().shape) {
      return "fake-device kernels take float32 operands of the output's shape";
    }
  }
  return "";
}

KILN_REGISTER_KERNEL({.backend = FakeDevice::kName,
                      .op_type = "Relu",
                      .name = "fake.relu",
                      .in_place_inputs = {0},
                      .check = same_shape_f32,
                      .create = [](backends::Backend& dev, const ir::Node&) {
                        return make_kernel(dev, "fake.relu",
                                           [](float a, float) { return a > 0 ? a : 0.f; });
                      }});
KILN_REGISTER_KERNEL({.backend = FakeDevice::kName,
                      .op_type = "Mul",
                      .name = "fake.mul",
                      .check = [](const backends::Backend& b, const ir::Node& n) -> std::string {
                        if (!dynamic_cast<const FakeDevice&>(b).has_multiplier) {
                          return "this fake device has no multiplier";
                        }
                        return same_shape_f32(n);
                      },
                      .create =
                          [](backends::Backend& dev, const ir::Node&) {
                            return make_kernel(dev, "fake.mul",
                                               [](float a, float b) { return a * b; });
                          }});
KILN_REGISTER_KERNEL({.backend = FakeDevice::kName,
                      .op_type = "Add",
                      .name = "fake.add",
                      .check = same_shape_f32,
                      .create = [](backends::Backend& dev, const ir::Node&) {
                        return make_kernel(dev, "fake.add", [](float a, float b) { return a + b; });
                      }});

}  // namespace
}  // namespace kiln::testing
