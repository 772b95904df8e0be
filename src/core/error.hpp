#pragma once
// The one exception type of Kiln. Edges (C ABI, wire) turn it into status codes.
#include <stdexcept>
#include <string>
#include <string_view>

#include <fmt/format.h>

namespace kiln {

enum class ErrorCode { InvalidArgument, NotFound, Unsupported, Unavailable, Internal };

std::string_view error_code_name(ErrorCode code);

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message);
  ErrorCode code() const { return code_; }
  // The message without the "[Code] " prefix that what() carries.
  const std::string& message() const { return message_; }

 private:
  ErrorCode code_;
  std::string message_;
};

template <typename... Args>
[[noreturn]] void fail(ErrorCode code, fmt::format_string<Args...> format, Args&&... args) {
  throw Error(code, fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace kiln

// Checks an internal or input invariant; the message names what broke.
#define KILN_CHECK(cond, code, ...)    \
  do {                                 \
    if (!(cond)) {                     \
      ::kiln::fail(code, __VA_ARGS__); \
    }                                  \
  } while (0)

#define KILN_CHECK_ARG(cond, ...) KILN_CHECK(cond, ::kiln::ErrorCode::InvalidArgument, __VA_ARGS__)
