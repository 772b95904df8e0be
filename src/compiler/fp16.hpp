#pragma once
// The fp16 step of the compile pipeline: the conversion run after the optimizer, the tolerance
// the precision gate holds a float16 engine to, and the precision line `kiln inspect` and
// `kiln compile` print. docs/FP16.md explains the choices.
#include <set>
#include <string>
#include <vector>

#include "ir/model.hpp"

namespace kiln::compiler {

// Default relative L2 limit of the precision gate for a float16 engine: float16 keeps 11
// significant bits (unit roundoff 4.9e-4), and rounding the weights and every stored
// activation adds up over tens of layers; measured 0.5e-3 to 1.3e-3 on the CI-size real models
// (bench/results/2026-11-30-fp16.md), so 1e-2 leaves room without hiding a broken kernel or a
// corrupted weight (those drift by 1e-1 and more).
inline constexpr double kFp16DefaultMaxRelL2 = 1e-2;
// The same for a bfloat16 engine (`--bf16`): bfloat16 keeps 8 significant bits (unit roundoff
// 3.9e-3, 8x float16's); measured on the CI-size real models in docs/BF16.md.
inline constexpr double kBf16DefaultMaxRelL2 = 5e-2;
// Engine metadata key stamped by the fp16 step ("float16"); `kiln verify` reads it to pick the
// limit.
inline constexpr const char* kPrecisionMetadataKey = "kiln.precision";

struct Fp16Options {
  bool enabled = false;  // compute in 16 bits: float16, or bfloat16 with `bfloat16`
  // bfloat16 instead of float16 (`--bf16`): float32's range, so no range check; the CPU runs its
  // convolutions and matrix products on bfloat16 instructions (AVX512_BF16, AMX).
  bool bfloat16 = false;
  bool io_fp16 = false;               // float inputs/outputs become float16 too
  std::vector<std::string> keep_ops;  // op types left float32
  // Measure which float32 values leave float16's range before converting, and keep the nodes
  // around them in float32 (compiler/fp16_range.hpp); false: convert regardless.
  bool range_check = true;
  std::set<std::string> keep_values;  // filled by the range check: value names left float32
};

// Runs ConvertToFloat16 and the cleanup after it (constant folding of the Casts it inserts,
// CSE, dead-code removal), validating the graph; stamps the model's metadata. Returns the
// one-line summary ("fp16: 45 of 47 float nodes compute in float16, ...\n").
std::string convert_model_to_fp16(ir::Model& model, const Fp16Options& options);

// The gate's default relative L2 limit for an engine of these options' precision.
inline double default_half_max_rel_l2(const Fp16Options& o) {
  return o.bfloat16 ? kBf16DefaultMaxRelL2 : kFp16DefaultMaxRelL2;
}
// The precision an engine's kPrecisionMetadataKey names: "float16", "bfloat16", or empty.
// Its default gate limit (0 when the engine is not a 16-bit one).
double default_max_rel_l2_of_precision(const std::string& precision);

// "precision: float16 (45 of 47 float nodes compute in float16; weights: 12.1 MiB float16,
// 0.0 MiB float32)" — from the graph's types, so it works for any model.
std::string describe_precision(const ir::Graph& graph);

}  // namespace kiln::compiler
