#include "compiler/shape_spec.hpp"

#include <sstream>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>

#include "core/error.hpp"

namespace kiln::compiler {

std::pair<std::string, Shape> parse_shape_spec(const std::string& spec) {
  auto colon = spec.rfind(':');
  KILN_CHECK_ARG(colon != std::string::npos && colon > 0 && colon + 1 < spec.size(),
                 "--shape '{}' must be NAME:D1xD2x... (each D a number or MIN..MAX)", spec);
  std::string name = spec.substr(0, colon);
  std::vector<Dim> dims;
  std::stringstream ss(spec.substr(colon + 1));
  for (std::string part; std::getline(ss, part, 'x');) {
    try {
      size_t used = 0;
      auto range = part.find("..");
      if (range == std::string::npos) {
        int64_t v = std::stoll(part, &used);
        KILN_CHECK_ARG(used == part.size() && v >= 0, "bad dim '{}'", part);
        dims.emplace_back(v);
      } else {
        int64_t lo = std::stoll(part.substr(0, range), &used);
        KILN_CHECK_ARG(used == range, "bad dim '{}'", part);
        std::string hi_text = part.substr(range + 2);
        int64_t hi = std::stoll(hi_text, &used);
        KILN_CHECK_ARG(used == hi_text.size() && 0 <= lo && lo <= hi, "bad dim range '{}'", part);
        if (lo == hi)
          dims.emplace_back(lo);
        else
          dims.push_back(Dim::symbol(fmt::format("{}_{}", name, dims.size()), lo, hi));
      }
    } catch (const std::logic_error&) {
      fail(ErrorCode::InvalidArgument, "--shape '{}': '{}' is not a number or MIN..MAX", spec,
           part);
    }
  }
  return {name, Shape(std::move(dims))};
}

}  // namespace kiln::compiler
