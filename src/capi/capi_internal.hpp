#pragma once
// What the C ABI's opaque handles hold, and the guard that turns every C++ exception into a
// KilnStatus plus the thread's last error message, so none crosses the C boundary.
#include <exception>
#include <memory>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "core/rt_value.hpp"
#include "kiln/kiln.h"
#include "runtime/session.hpp"

struct KilnSessionOptions {
  kiln::SessionOptions options;
};

struct KilnSession {
  std::unique_ptr<kiln::Session> session;
};

struct KilnValue {
  kiln::RtValue value;
  // The caller's memory that KILN_MEMORY_BORROW tensors in this value read (address, bytes):
  // run outputs that alias it are copied, so they never outlive it.
  std::vector<std::pair<const void*, size_t>> borrowed;
};

struct KilnProfile {
  struct Entry {
    std::string node_name, op_type;
    double microseconds;
  };
  std::vector<Entry> entries;
};

namespace kiln::capi {

// Records `message` as this thread's last error and returns `status`.
KilnStatus set_error(KilnStatus status, const char* message) noexcept;
KilnStatus status_of(ErrorCode code) noexcept;

// Runs `fn`, mapping any exception to a status; fn returns nothing and reports through outputs.
template <typename Fn>
KilnStatus guarded(Fn&& fn) noexcept {
  try {
    fn();
    return KILN_OK;
  } catch (const Error& e) {
    return set_error(status_of(e.code()), e.message().c_str());
  } catch (const std::bad_alloc&) {
    return set_error(KILN_UNAVAILABLE, "out of memory");
  } catch (const std::exception& e) {
    return set_error(KILN_INTERNAL, e.what());
  } catch (...) {
    return set_error(KILN_INTERNAL, "an unknown exception escaped Kiln");
  }
}

// A *_set_config value: "0"/"1" (or "false"/"true") as a flag, or a whole string as a number of
// at least `minimum`; InvalidArgument naming the function and the key otherwise.
bool parse_config_flag(const char* function, const char* key, const std::string& v);
double parse_config_number(const char* function, const char* key, const std::string& v,
                           double minimum);

// Argument checks that name the C function and the argument.
#define KILN_CAPI_REQUIRE(ptr, function) \
  KILN_CHECK_ARG((ptr) != nullptr, "{}: argument '{}' is NULL", function, #ptr)

}  // namespace kiln::capi
