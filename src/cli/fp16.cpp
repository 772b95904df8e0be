#include "cli/fp16.hpp"

namespace kiln::cli {

void add_fp16_options(CLI::App* cmd, Fp16Options& o) {
  auto* bf16 = cmd->add_flag_callback(
      "--bf16",
      [&o] {
        o.enabled = true;
        o.bfloat16 = true;
      },
      "Compute in bfloat16: as --fp16 with bfloat16 (float32's range, 8 significant bits); the "
      "CPU runs convolutions and matrix products on its bfloat16 instructions (AVX512_BF16 or "
      "AMX; refused on CPUs without them) (docs/BF16.md)");
  cmd->add_option("--bf16-keep-op", o.keep_ops,
                  "With --bf16: leave this op type float32 (repeatable or comma-separated)")
      ->delimiter(',')
      ->needs(bf16);
  auto* fp16 = cmd->add_flag("--fp16", o.enabled,
                             "Compute in float16: convert the allowlisted ops (convolutions, "
                             "matrix products, activations, ...) and store their weights as "
                             "float16; inputs and outputs stay float32 (docs/FP16.md)");
  cmd->add_flag("--fp16-io", o.io_fp16, "With --fp16: make float inputs and outputs float16 too")
      ->needs(fp16);
  cmd->add_option("--fp16-keep-op", o.keep_ops,
                  "With --fp16: leave this op type float32 (repeatable or comma-separated)")
      ->delimiter(',')
      ->needs(fp16);
  fp16->excludes(bf16);
  // A flag that clears the default (on): the check costs one float32 run on the CPU.
  cmd->add_flag("--fp16-no-range-check{false}", o.range_check,
                "With --fp16: convert without first measuring which values leave float16's range "
                "(by default the nodes around such values stay float32)")
      ->needs(fp16);
}

void use_half_tolerance(ToleranceOptions& t, double max_rel_l2) {
  if (!(t.max_rel_l2_option && t.max_rel_l2_option->count())) t.max_rel_l2 = max_rel_l2;
}

}  // namespace kiln::cli
