#pragma once
// What the GPU tests know about the machine and the build.
#include <filesystem>
#include <string>
#include <vector>

namespace kiln::gpu_test {

// A GPU's device node exists (NVIDIA's driver or AMD's KFD).
inline bool gpu_present() {
  std::error_code ec;
  return std::filesystem::exists("/dev/nvidiactl", ec) || std::filesystem::exists("/dev/kfd", ec);
}

// The GPU libraries this build made (CMake passes their paths, comma-separated).
inline std::vector<std::string> built_libraries() {
  std::vector<std::string> out;
  std::string list = KILN_GPU_TEST_LIBRARIES, item;
  for (char c : list + ",") {
    if (c == ',') {
      if (!item.empty() && std::filesystem::exists(item)) out.push_back(item);
      item.clear();
    } else {
      item += c;
    }
  }
  return out;
}

}  // namespace kiln::gpu_test
