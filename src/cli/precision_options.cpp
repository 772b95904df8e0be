#include "cli/precision_options.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace kiln::cli {

runtime::DriftTolerance ToleranceOptions::tolerance() const {
  runtime::DriftTolerance t;
  t.max_rel_l2 = max_rel_l2;
  // A limit the user gives is taken as it is, for every element type.
  t.scale_by_type = !(max_rel_l2_option && max_rel_l2_option->count());
  if (rtol_option && rtol_option->count()) t.rtol = rtol;
  if (atol_option && atol_option->count()) t.atol = atol;
  return t;
}

void add_tolerance_options(CLI::App* cmd, ToleranceOptions& o) {
  o.max_rel_l2_option =
      cmd->add_option("--max-rel-l2", o.max_rel_l2,
                      "Largest relative L2 error ||a-e||/||e|| allowed per output (default "
                      "1e-4; at least 1e-3 for float16, 1e-2 for bfloat16 outputs unless given)")
          ->check(CLI::NonNegativeNumber)
          ->capture_default_str();
  o.rtol_option =
      cmd->add_option("--rtol", o.rtol, "Also require |a-e| <= atol + rtol*|e| for every element")
          ->check(CLI::NonNegativeNumber);
  o.atol_option = cmd->add_option("--atol", o.atol, "Absolute term of that element rule")
                      ->check(CLI::NonNegativeNumber);
}

}  // namespace kiln::cli
