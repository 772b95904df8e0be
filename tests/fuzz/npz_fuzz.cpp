// libFuzzer target: arbitrary bytes through the .npz reader (`kiln quantize --calibration`,
// `kiln compile --calibration`, a task metric script's answers: files from outside). Any crash,
// leak or sanitizer report is a bug; a kiln::Error is the expected outcome for bad input.
#include <cstddef>
#include <cstdint>
#include <string>

#include "compiler/npz.hpp"
#include "core/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const kiln::runtime::Feeds arrays =
        kiln::compiler::parse_npz(std::string(reinterpret_cast<const char*>(data), size), "fuzz");
    for (const auto& [name, value] : arrays) (void)name.size();
  } catch (const kiln::Error&) {
  }
  return 0;
}
