#pragma once
// `kiln compile --fp16` / `--bf16`: the flags of the compiler's fp16 step (compiler/fp16.hpp), and
// the tolerance `kiln verify` holds a float16 engine to.
#include <CLI/CLI.hpp>

#include "cli/precision_options.hpp"
#include "compiler/fp16.hpp"

namespace kiln::cli {

using compiler::default_max_rel_l2_of_precision;
using compiler::describe_precision;
using compiler::Fp16Options;
using compiler::kFp16DefaultMaxRelL2;
using compiler::kPrecisionMetadataKey;

void add_fp16_options(CLI::App* cmd, Fp16Options& options);

// The tolerance for a float16 or bfloat16 engine: `max_rel_l2` (its precision's default) unless
// --max-rel-l2 was given.
void use_half_tolerance(ToleranceOptions& tolerance, double max_rel_l2);

}  // namespace kiln::cli
