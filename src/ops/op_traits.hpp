#pragma once
// What the passes, the planner, the precision conversion and the cost model need to know about an
// op, declared once beside the op's registration (OpDef::traits) instead of in op-name lists
// spread over the code base. Every field defaults to "nothing known", so an op that declares
// nothing is treated conservatively everywhere.
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "ir/graph.hpp"

namespace kiln::ops {

// Bit i = input (or output) slot i.
using SlotMask = uint32_t;
inline constexpr SlotMask kAllSlots = ~SlotMask{0};
constexpr SlotMask slots(std::initializer_list<unsigned> list) {
  SlotMask m = 0;
  for (unsigned s : list) m |= SlotMask{1} << s;
  return m;
}
inline bool has_slot(SlotMask mask, size_t slot) {
  return slot < 32 && ((mask >> slot) & 1u);
}

// How an op maps elements: each output element from the element(s) at the same index.
enum class Pointwise : uint8_t {
  None,
  Unary,     // y[i] = f(x[i]) (extra inputs, if any, are scalars: Clip's bounds)
  Binary,    // y[i] = f(a[i], b[i]) with numpy broadcasting
  Variadic,  // y[i] = f(a[i], b[i], ...) with numpy broadcasting (Max, Min, Sum, Mean)
};

// Float16-safe slots (docs/FP16.md): the op may compute in float16, reading and writing float16
// in the masked slots (the slots whose type constraint is the op's main float type). Slots outside
// the masks keep their type (Resize's float-only scales, LayerNormalization's statistics).
struct Fp16Slots {
  bool safe = false;
  SlotMask inputs = kAllSlots;
  SlotMask outputs = kAllSlots;
  // Converts only to bfloat16 (its fast kernel has no float16 form).
  bool bf16_only = false;
  // Converts only where every masked float32 input already arrives in the half type: the op
  // reads it exactly as a Cast to float32 before it would, so converting saves that Cast, but
  // adding a Cast before it would only add work (QuantizeLinear).
  bool after_half_inputs = false;
  // The attribute that names the converted outputs' type (set to the half type's code) for an op
  // whose outputs' float type no input decides (an int8 product's float result).
  const char* output_type_attribute = nullptr;
};

// Dims of a value as the cost model sees them (symbolic dims already bound), or nullopt.
using ValueDims = std::function<std::optional<std::vector<int64_t>>(const ir::Value*)>;
// Floating-point operations of one node (a multiply-add is 2); nullopt when a shape it needs is
// unknown.
using FlopsFn = std::optional<double> (*)(const ir::Node&, const ValueDims&);

struct OpTraits {
  Pointwise pointwise = Pointwise::None;
  // Output 0 holds input 0's bytes under other dims (Reshape, Flatten, Squeeze, Unsqueeze,
  // Identity): the memory planner gives it input 0's buffer.
  bool view = false;
  // Inputs that hold shapes, axes, pads or sizes (int64 data that decides output shapes).
  SlotMask shape_inputs = 0;
  Fp16Slots fp16;
  // Commutes with any Transpose of input 0: element-wise on its own (unary ops; binary ones when
  // the other operand is a rank-0 constant).
  bool transposes = false;
  // A QDQ scale and zero point on input 0 hold unchanged for output 0 (the op only moves,
  // selects or clips values), so a quantizer may move a QuantizeLinear across it.
  bool quantization = false;
  // nullptr: about one operation per output element (flops_per_output).
  FlopsFn flops = nullptr;
};

// The traits of the op registered for the node's domain, op type and opset (a node without an
// opset, as built by hand, gets the newest registration's). Unknown ops get empty traits.
const OpTraits& traits_of(const ir::Node& node);

}  // namespace kiln::ops
