#include "core/error.hpp"

namespace kiln {

std::string_view error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::InvalidArgument:
      return "InvalidArgument";
    case ErrorCode::NotFound:
      return "NotFound";
    case ErrorCode::Unsupported:
      return "Unsupported";
    case ErrorCode::Unavailable:
      return "Unavailable";
    case ErrorCode::Internal:
      return "Internal";
  }
  return "Unknown";
}

Error::Error(ErrorCode code, const std::string& message)
    : std::runtime_error(fmt::format("[{}] {}", error_code_name(code), message)),
      code_(code),
      message_(message) {}

}  // namespace kiln
