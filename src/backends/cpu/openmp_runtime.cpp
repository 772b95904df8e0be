#include "backends/cpu/openmp_runtime.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <string_view>

#include <fmt/format.h>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace kiln::backends::cpu {
namespace {

std::string library_of(const void* address) {
  Dl_info info{};
  if (!address || dladdr(address, &info) == 0 || !info.dli_fname) return "unknown";
  std::string_view file = info.dli_fname;
  const auto slash = file.rfind('/');
  return std::string(slash == std::string_view::npos ? file : file.substr(slash + 1));
}

bool is_llvm(std::string_view library) {
  return library.find("libomp") != std::string_view::npos ||
         library.find("libiomp") != std::string_view::npos;
}

// The wait variables the user set, "A=x, B=y"; empty when none.
std::string chosen(std::initializer_list<const char*> names) {
  std::string out;
  for (const char* name : names) {
    const char* v = std::getenv(name);
    if (v && *v) out += fmt::format("{}{}={}", out.empty() ? "" : ", ", name, v);
  }
  return out;
}

// libomp's per-thread blocktime calls, found where oneDNN's regions run.
struct Blocktime {
  void (*set)(int) = nullptr;
  int (*get)() = nullptr;
  int process_default = 0;
  bool ours = false;  // on libomp with KMP_BLOCKTIME unset: Kiln may change it
};

const Blocktime& blocktime() {
  static const Blocktime api = [] {
    Blocktime b;
    if (!is_llvm(openmp_kernels_runtime())) return b;
    b.set = reinterpret_cast<void (*)(int)>(dlsym(RTLD_DEFAULT, "kmp_set_blocktime"));
    b.get = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "kmp_get_blocktime"));
    if (!b.set || !b.get) return Blocktime{};
    b.process_default = b.get();
    const char* user = std::getenv("KMP_BLOCKTIME");
    b.ours = !(user && *user);
    return b;
  }();
  return api;
}

constexpr int kBriefSpinMs = 1;

}  // namespace

void set_team_spin(TeamSpin spin) {
  const Blocktime& b = blocktime();
  if (!b.ours) return;
  thread_local TeamSpin current = TeamSpin::Default;
  if (spin == current) return;
  b.set(spin == TeamSpin::Brief ? kBriefSpinMs : b.process_default);
  current = spin;
}

int team_spin_ms() {
  const Blocktime& b = blocktime();
  return b.get ? b.get() : -1;
}

std::string openmp_kernels_runtime() {
  // libdnnl.so.2 calls GOMP_parallel@GOMP_4.0. With RTLD_DEFAULT, dlvsym searches the scope of
  // the library that calls it (the global scope, then the group this library was loaded in),
  // which is the scope libdnnl's own references were bound in.
  void* f = dlvsym(RTLD_DEFAULT, "GOMP_parallel", "GOMP_4.0");
  return f ? library_of(f) : "none";
}

std::string openmp_loops_runtime() {
#ifdef _OPENMP
  return library_of(reinterpret_cast<const void*>(&omp_get_max_threads));
#else
  return "none";
#endif
}

std::string describe_openmp_wait_policy() {
  const std::string kernels = openmp_kernels_runtime();
  const std::string loops = openmp_loops_runtime();
  std::string runtime = kernels;
  if (loops != "none" && loops != kernels) {
    runtime = fmt::format("{} (oneDNN), {} (Kiln's loops): two OpenMP runtimes", kernels, loops);
  }
  if (is_llvm(kernels)) {
    std::string set = chosen({"KMP_BLOCKTIME", "OMP_WAIT_POLICY", "KMP_LIBRARY"});
    using GetBlocktime = int (*)();
    auto get = reinterpret_cast<GetBlocktime>(dlsym(RTLD_DEFAULT, "kmp_get_blocktime"));
    const std::string spin =
        get ? fmt::format("idle threads spin, yielding, {} ms, then sleep", get())
            : std::string("idle threads spin, yielding, then sleep");
    return fmt::format("{}: {} ({})", runtime, spin, set.empty() ? "default" : set);
  }
  if (kernels.find("libgomp") != std::string::npos) {
    std::string set = chosen({"OMP_WAIT_POLICY", "GOMP_SPINCOUNT"});
    return fmt::format("{}: {}", runtime,
                       set.empty() ? "OpenMP default (OMP_WAIT_POLICY unset: idle threads spin a "
                                     "while without yielding, then sleep)"
                                   : set);
  }
  return runtime;
}

}  // namespace kiln::backends::cpu
