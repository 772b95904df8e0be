#pragma once
// A vendor library (cuDNN, cuBLASLt, NVML) opened with dlopen and its functions looked up into a
// table of pointers, so Kiln loads where the vendor library is missing and what needs it says
// why. The first problem (library absent, a symbol missing) is kept as the reason.
#include <dlfcn.h>
#include <fmt/format.h>

#include <string>
#include <type_traits>

namespace kiln {

class VendorLibrary {
 public:
  // Opens `soname`; `what` names it in the reason ("cuDNN 9").
  VendorLibrary(const char* soname, const char* what) : soname_(soname) {
    lib_ = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
    if (!lib_) error_ = fmt::format("{} is not available ({})", what, dlerror());
  }
  // Sets `fn` to the library's `symbol`; a missing one becomes the error (the first only).
  template <typename Fn>
  void get(Fn& fn, const char* symbol) {
    fn = lib_ ? reinterpret_cast<std::remove_reference_t<Fn>>(dlsym(lib_, symbol)) : nullptr;
    if (!fn && error_.empty()) error_ = fmt::format("{} lacks {}", soname_, symbol);
  }
  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }

 private:
  const char* soname_;
  void* lib_ = nullptr;  // never closed: the vendor runtimes do not support being unloaded
  std::string error_;
};

}  // namespace kiln
