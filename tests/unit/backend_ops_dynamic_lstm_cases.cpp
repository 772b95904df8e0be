// The harness cases of com.microsoft DynamicQuantizeLSTM (int8 W and R, what `kiln quantize
// --dynamic` writes): the CPU's cpu.dynamic_quantize_lstm (AVX-512 VNNI, where the CPU has it)
// against the reference, forward per gate row with sizes off its blocks (K not a multiple of 4,
// 4 hidden not of 16, hidden not of 16: the padded weights and the cell's scalar tail), and
// bidirectional per direction with initial states; clip stays on the reference.
#include <string>

#include "backend_ops_case.hpp"

namespace kiln::backend_ops {
namespace {

// X [seq, batch, input]; W [dirs, input, 4 hidden] and R [dirs, hidden, 4 hidden] random int8
// with scales of 0.01 (per gate row or per direction) and zero points 0; B random.
Case dynamic_lstm(std::string name, int64_t seq, int64_t batch, int64_t input, int64_t hidden,
                  int64_t dirs, bool per_row, std::vector<Attr> attrs, bool states = false) {
  const int64_t g = 4 * hidden;
  const std::vector<int64_t> sdims =
      per_row ? std::vector<int64_t>{dirs, g} : std::vector<int64_t>{dirs};
  const int64_t scount = per_row ? dirs * g : dirs;
  const std::vector<double> scales(static_cast<size_t>(scount), 0.01);
  const std::vector<int64_t> zeros(static_cast<size_t>(scount), 0);
  const bool vnni = __builtin_cpu_supports("avx512vnni");
  attrs.push_back(i("hidden_size", hidden));
  return {.name = "dynamic_quantize_lstm_" + std::move(name),
          .op = "DynamicQuantizeLSTM",
          .inputs = {x({seq, batch, input}),
                     {{dirs, input, g}, true, false, DataType::Int8},
                     {{dirs, hidden, g}, true, false, DataType::Int8},
                     w({dirs, 2 * g}),
                     none(),
                     states ? x({dirs, batch, hidden}) : none(),
                     states ? x({dirs, batch, hidden}) : none(),
                     none(),
                     reals_in(sdims, scales),
                     ints_in(sdims, zeros, DataType::Int8),
                     reals_in(sdims, scales),
                     ints_in(sdims, zeros, DataType::Int8)},
          .attrs = std::move(attrs),
          .kernel = vnni ? "cpu.dynamic_quantize_lstm" : "reference",
          .domain = "com.microsoft",
          .opset = 1,
          .outputs = 3};
}

}  // namespace

std::vector<Case> dynamic_lstm_cases() {
  std::vector<Case> c;
  c.push_back(dynamic_lstm("forward_per_row_odd_sizes", 5, 2, 5, 6, 1, true, {}));
  c.push_back(dynamic_lstm("bidirectional_per_direction_states", 4, 3, 20, 16, 2, false,
                           {s("direction", "bidirectional")}, true));
  Case clip = dynamic_lstm("reverse_clip", 3, 2, 8, 4, 1, true,
                           {s("direction", "reverse"), f("clip", 0.5f)});
  clip.kernel = "reference";
  c.push_back(std::move(clip));
  return c;
}

}  // namespace kiln::backend_ops
