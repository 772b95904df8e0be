#pragma once
// What `kiln verify` and the precision gate of `kiln compile` share: the tolerance flags and the
// way a comparison is printed.
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

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

// "max abs 1.2e-07  max rel 3.4e-06  rel L2 5.6e-08" or the mismatch.
std::string format_stats(const runtime::ErrorStats& stats);
// One line per output, in `order` (names missing from `checks` are skipped), PASS or FAIL.
std::string format_checks(const std::vector<runtime::OutputCheck>& checks,
                          const std::vector<std::string>& order);
// "Conv 'conv1' (output 'conv': rel L2 3.1e-02, max abs 0.25)"
std::string format_drift(const runtime::NodeDrift& drift);

}  // namespace kiln::cli
