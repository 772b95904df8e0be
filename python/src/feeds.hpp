#pragma once
// Feeds prepared by the pure-Python half (kiln/session.py, _prepare_tensor), turned into Kiln
// values: shared by the session's runs and the compiler's calibration sets.
#include <nanobind/nanobind.h>

#include <optional>
#include <string>
#include <vector>

#include "core/rt_value.hpp"
#include "runtime/precision.hpp"

namespace kiln::python {

// One prepared feed: ("t", array) | ("s", dims, [str | bytes]) | ("q", [prepared tensors]) |
// ("n",). A numeric array is read in place: it must stay alive (and unchanged) while the value is
// used.
RtValue value_from_feed(nanobind::handle feed, const std::string& what);
Tensor tensor_from_feed(nanobind::handle feed, const std::string& what);

// options[key] as a T, none when absent or None (the option dicts kiln/*.py build).
template <typename T>
std::optional<T> dict_get(const nanobind::dict& d, const char* key) {
  if (!d.contains(key) || d[key].is_none()) return std::nullopt;
  return nanobind::cast<T>(d[key]);
}

// The calibration sets kiln/compiler.py's _calibration prepares under "calibration" in an options
// dict ([[(name, prepared feed)]]), none when absent. The arrays stay referenced by the caller's
// list during the call that uses them.
std::vector<runtime::Feeds> calibration_sets(const nanobind::dict& options);

// Registers _compile (python/src/compile_binding.cpp) on the module.
void bind_compile(nanobind::module_& m);
// kiln._kiln._quantize (quantize_binding.cpp).
void bind_quantize(nanobind::module_& m);
// kiln._kiln._prune (prune_binding.cpp).
void bind_prune(nanobind::module_& m);

}  // namespace kiln::python
