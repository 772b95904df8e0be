#pragma once
// How a precision comparison is printed, by the precision gate and by `kiln verify`.
#include <string>
#include <vector>

#include "runtime/precision.hpp"

namespace kiln::compiler {

// "max abs 1.2e-07  max rel 3.4e-06  rel L2 5.6e-08" or the mismatch.
std::string format_stats(const runtime::ErrorStats& stats);
// One line per output, in `order` (names missing from `checks` are skipped), PASS or FAIL.
// A float16 or bfloat16 output held to a looser limit than tol's says so.
std::string format_checks(const std::vector<runtime::OutputCheck>& checks,
                          const std::vector<std::string>& order,
                          const runtime::DriftTolerance& tol);
// "Conv 'conv1' (output 'conv': rel L2 3.1e-02, max abs 0.25)"
std::string format_drift(const runtime::NodeDrift& drift);

}  // namespace kiln::compiler
