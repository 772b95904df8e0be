#pragma once
// What `kiln verify` and `kiln compile` share: the tolerance flags (the way a comparison is
// printed is the compiler's, compiler/precision_report.hpp).
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "compiler/precision_report.hpp"
#include "runtime/precision.hpp"

namespace kiln::cli {

struct ToleranceOptions {
  double max_rel_l2 = 1e-4;
  double rtol = 0, atol = 0;
  CLI::Option* max_rel_l2_option = nullptr;
  CLI::Option* rtol_option = nullptr;
  CLI::Option* atol_option = nullptr;

  runtime::DriftTolerance tolerance() const;
};

// --max-rel-l2, --rtol, --atol.
void add_tolerance_options(CLI::App* cmd, ToleranceOptions& options);

using compiler::format_checks;
using compiler::format_drift;
using compiler::format_stats;

}  // namespace kiln::cli
