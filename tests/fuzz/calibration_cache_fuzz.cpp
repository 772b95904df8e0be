// libFuzzer target: arbitrary bytes through the calibration cache's parser (`kiln quantize
// --calibration-cache`, a file from outside), then the ranges the quantizer reads off what it
// accepted. Any crash, leak or sanitizer report is a bug; a kiln::Error is the expected outcome
// for bad input.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "compiler/calibration.hpp"
#include "core/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const kiln::compiler::CalibrationCache c = kiln::compiler::parse_calibration_cache(
        std::string_view(reinterpret_cast<const char*>(data), size), "fuzz");
    for (const auto& [name, h] : c.values) {
      (void)kiln::compiler::minmax_range(h);
      (void)kiln::compiler::percentile_range(h, 99.9);
      (void)kiln::compiler::entropy_range(h);
    }
    (void)kiln::compiler::serialize_calibration_cache(c);
  } catch (const kiln::Error&) {
  }
  return 0;
}
