#include "cli/fp16.hpp"

namespace kiln::cli {

void add_fp16_options(CLI::App* cmd, Fp16Options& o) {
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
  // A flag that clears the default (on): the check costs one float32 run on the CPU.
  cmd->add_flag("--fp16-no-range-check{false}", o.range_check,
                "With --fp16: convert without first measuring which values leave float16's range "
                "(by default the nodes around such values stay float32)")
      ->needs(fp16);
}

void use_fp16_tolerance(ToleranceOptions& t) {
  if (!(t.max_rel_l2_option && t.max_rel_l2_option->count())) t.max_rel_l2 = kFp16DefaultMaxRelL2;
}

}  // namespace kiln::cli
