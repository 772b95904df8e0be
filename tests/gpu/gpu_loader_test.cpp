// The GPU backend's loader where there is no GPU (CI): each way of not getting one must say
// which, in words a user can act on. On a machine with a GPU the driver tests skip.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "backends/gpu/loader.hpp"
#include "core/error.hpp"
#include "gpu_test_env.hpp"

namespace kiln::backends {
namespace {

void expect_unavailable(const GpuLoadOptions& options, const std::string& needle) {
  GpuProbe probe = probe_gpu_backend(options);
  EXPECT_FALSE(probe.backend);
  EXPECT_NE(probe.reason.find(needle), std::string::npos) << probe.reason;
  try {
    load_gpu_backend(options);
    ADD_FAILURE() << "load_gpu_backend succeeded; expected '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Unavailable) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(GpuLoader, MissingLibraryIsNamed) {
  expect_unavailable({"/nonexistent/libkiln_gpu_cuda.so", 0},
                     "/nonexistent/libkiln_gpu_cuda.so (KILN_GPU_BACKEND or --gpu-library) "
                     "does not exist");
}

TEST(GpuLoader, ForeignLibraryIsRefused) {
  // libc: loadable, but no Kiln entry points.
  Dl_info info{};
  ASSERT_TRUE(dladdr(reinterpret_cast<void*>(&std::printf), &info));
  expect_unavailable({info.dli_fname, 0}, "is not a Kiln GPU library (no kiln_gpu_open)");
}

TEST(GpuLoader, UnloadableFileIsRefused) {
  std::filesystem::path p = std::filesystem::temp_directory_path() / "kiln_not_a_library.so";
  std::ofstream(p) << "not an ELF file";
  expect_unavailable({p.string(), 0}, "cannot be loaded");
  std::filesystem::remove(p);
}

TEST(GpuLoader, SearchesBesideTheProgram) {
  // build/tests/kiln_gpu_tests finds build/lib; an install's bin/kiln finds lib/.
  std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe").parent_path();
  auto dirs = gpu_library_dirs();
  auto has = [&](const std::filesystem::path& p) {
    return std::find(dirs.begin(), dirs.end(), p.lexically_normal().string()) != dirs.end();
  };
  EXPECT_TRUE(has(exe));
  EXPECT_TRUE(has(exe / ".." / "lib"));
}

// Each library this build made, opened explicitly, says why it has no device here.
TEST(GpuLoader, SaysWhyThereIsNoDevice) {
  if (gpu_test::gpu_present())
    GTEST_SKIP() << "a GPU is present: the no-device path is not reachable";
  std::vector<std::string> libs = gpu_test::built_libraries();
  if (libs.empty()) {
    // No GPU library in this build: the search says so.
    expect_unavailable({}, "no GPU backend library found");
    return;
  }
  for (const std::string& lib : libs) {
    SCOPED_TRACE(lib);
    std::string name = std::filesystem::path(lib).filename().string();
    if (name == "libkiln_gpu_cuda.so") {
      // cudart is static in the library; without libcuda.so.1 it reports no driver.
      void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
      if (!driver) driver = dlopen("libcuda.so.1", RTLD_LAZY);
      expect_unavailable({lib, 0}, driver ? "no device" : "no CUDA driver");
    } else {
      void* runtime = dlopen("libamdhip64.so.5", RTLD_LAZY);
      // Without ROCm's runtime the library itself does not load; with it, there is no /dev/kfd.
      expect_unavailable({lib, 0}, runtime ? "no device" : "cannot be loaded");
    }
  }
  // The search finds them and reports each.
  GpuProbe probe = probe_gpu_backend();
  EXPECT_FALSE(probe.backend);
  EXPECT_EQ(probe.reason.rfind("no GPU available: ", 0), 0u) << probe.reason;
  for (const std::string& lib : libs) {
    EXPECT_NE(probe.reason.find(std::filesystem::path(lib).filename().string()), std::string::npos)
        << probe.reason;
  }
}

}  // namespace
}  // namespace kiln::backends
