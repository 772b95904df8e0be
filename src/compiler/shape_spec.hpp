#pragma once
// Input shapes as the compile options give them: "NAME:1x3x224x224" fixes an input's dims,
// "NAME:1..64x3x224x224" bounds them (a range per dim; a range of one value is that value).
#include <string>
#include <utility>

#include "core/shape.hpp"

namespace kiln::compiler {

// (name, shape); a range becomes a bounded symbol named NAME_AXIS. InvalidArgument, quoting the
// spec, when it is not of that form.
std::pair<std::string, Shape> parse_shape_spec(const std::string& spec);

}  // namespace kiln::compiler
