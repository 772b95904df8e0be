// The harness cases of the GPU's LSTM (gpu.lstm): forward with biases, bidirectional with
// initial states, peepholes and sequence lengths (one of them 0), reverse in layout 1 with clip
// and input_forget, other activations with their alpha / beta, and a size whose products take
// the GEMM's matrix tiles; every output compared; float32 and float16. The CPU runs cpu.lstm
// where it serves (the defaults, no sequence_lens or peepholes), else the reference.
#include <string>

#include "backend_ops_case.hpp"

namespace kiln::backend_ops {
namespace {

constexpr const char* kGpu = "gpu.lstm";

// X [seq, batch, input] (layout 0) with W, R, B for `dirs` directions of `hidden` units; more
// inputs appended by the caller.
Case lstm(std::string name, int64_t seq, int64_t batch, int64_t input, int64_t hidden, int64_t dirs,
          std::vector<Attr> attrs, const char* cpu, bool batch_major = false) {
  const int64_t g = 4 * hidden;
  return {.name = "gpu_lstm_" + std::move(name),
          .op = "LSTM",
          .inputs = {x(batch_major ? std::vector<int64_t>{batch, seq, input}
                                   : std::vector<int64_t>{seq, batch, input}),
                     w({dirs, g, input}), w({dirs, g, hidden}), w({dirs, 2 * g})},
          .attrs = std::move(attrs),
          .kernel = cpu,
          .opset = 14,
          .outputs = 3,
          .gpu = kGpu};
}

}  // namespace

std::vector<Case> gpu_lstm_cases() {
  std::vector<Case> c;
  // float16: the CPU runs the reference (cpu.lstm is float32). The GPU rounds the products and
  // the hidden state to float16 at every step, as a float16 LSTM does (the reference rounds
  // once at the end): up to 6 steps' worth of roundings (the tiles case at 3.0x on an H100).
  auto add = [&](Case k) {
    push_with_f16(c, std::move(k), "reference");
    c.back().reference_roundings = 8;
  };
  add(lstm("forward", 4, 3, 5, 6, 1, {i("hidden_size", 6)}, "cpu.lstm"));
  {
    // Bidirectional: initial states, lengths 3, 0 and 4 of 4 steps, peepholes.
    Case k = lstm("bidirectional_lens_peepholes", 4, 3, 5, 6, 2,
                  {i("hidden_size", 6), s("direction", "bidirectional")}, "reference");
    k.inputs.push_back(ints_in({3}, {3, 0, 4}, DataType::Int32));
    k.inputs.push_back(x({2, 3, 6}));
    k.inputs.push_back(x({2, 3, 6}));
    k.inputs.push_back(w({2, 18}));
    add(std::move(k));
  }
  {
    Case k = lstm("reverse_layout1_clip_input_forget", 5, 2, 3, 4, 1,
                  {i("hidden_size", 4), s("direction", "reverse"), i("layout", 1), f("clip", 1.5f),
                   i("input_forget", 1)},
                  "reference", true);
    k.inputs.push_back(none());
    k.inputs.push_back(x({2, 1, 4}));
    add(std::move(k));
  }
  add(lstm("activations", 3, 2, 4, 5, 1,
           {i("hidden_size", 5),
            {"activations",
             ir::Attribute(std::vector<std::string>{"HardSigmoid", "LeakyRelu", "Softsign"})},
            floats("activation_alpha", {0.3f, 0.05f}),
            floats("activation_beta", {0.4f})},
           "reference"));
  // Products large enough for the GEMM's tiles (16 x 16 fragments and more).
  add(lstm("tiles", 6, 8, 48, 32, 1, {}, "cpu.lstm"));
  return c;
}

}  // namespace kiln::backend_ops
