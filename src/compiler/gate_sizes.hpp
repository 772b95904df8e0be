#pragma once
// The sizes at which the precision gate checks generated inputs. The reference interpreter is
// the oracle and is slow (plain loops, double sums, one thread: ResNet-18 costs it ~3 s an image
// here), so checking it at the top of a wide range (1..32 images: 90 s) costs far more than it
// proves. What a range adds over its low end is that kernels, strides and the memory plan work
// at sizes above it: the gate compares with the reference at the low end always, at the top when
// its reference cost fits a budget, else at the largest size inside the range that fits, and
// runs the engine alone at the top (the size its arena is planned for), where its outputs must
// come out with the right shapes and no non-finite values the low end lacks.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ir/graph.hpp"
#include "runtime/session.hpp"

namespace kiln::compiler {

// FLOPs of reference work an input set above the low end may cost: ~1.5 s of the reference
// interpreter here. The low end is checked whatever it costs.
inline constexpr double kGateReferenceFlops = 1e9;

struct GateSize {
  std::map<std::string, int64_t> dims;  // every symbolic dim with a range, plus the fixed ones
  bool reference = true;                // compared with the reference; false: the engine runs alone
  double flops = 0;                     // of one run at these dims (compiled graph's count)
  std::string label;                    // "low end", "top", "inside the range"
};

// The sizes for `inputs` (the engine's, with their declared ranges), the FLOPs counted on
// `compiled`. `fixed` holds the dims the caller set (--dim); `budget` <= 0 means no budget (the
// top is always compared with the reference). One size when no input has a bounded range.
std::vector<GateSize> choose_gate_sizes(const std::vector<IoInfo>& inputs,
                                        const ir::Graph& compiled,
                                        const std::map<std::string, int64_t>& fixed, double budget);

// "batch=32" or "batch=4, seq=128" (the ranged dims only).
std::string describe_dims(const GateSize& size, const std::map<std::string, int64_t>& fixed);

}  // namespace kiln::compiler
