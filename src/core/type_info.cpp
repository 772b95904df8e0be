#include "core/type_info.hpp"

#include <fmt/format.h>

namespace kiln {

std::string TypeInfo::to_string() const {
  switch (kind) {
    case Kind::Unknown:
      return "?";
    case Kind::Tensor:
      return fmt::format("{}{}", dtype_name(dtype), shape ? shape->to_string() : "[*]");
    case Kind::Sequence:
      return fmt::format("seq<{}>", elem ? elem->to_string() : "?");
    case Kind::Optional:
      return fmt::format("optional<{}>", elem ? elem->to_string() : "?");
  }
  return "?";
}

}  // namespace kiln
