#pragma once
// Kernel-table entries for ops whose GPU kernel needs a vendor library this build lacks (on AMD:
// MIOpen for convolutions and pooling, hipBLASLt for GEMMs; Debian's ROCm 5.2 has neither). The
// entries refuse every node with a reason that names the library, so the node's fallback to the
// CPU says what is missing instead of "no GPU kernel".
#include <fmt/format.h>

#include <initializer_list>
#include <memory>
#include <string>
#include <utility>

#include "backends/gpu/runtime/gpu_backend_impl.hpp"
#include "backends/kernel_table.hpp"
#include "ir/graph.hpp"

namespace kiln::backends::gpu {

// Registers `kernel` for each (domain, op type) in `ops`, refusing with "OP on AMD needs
// LIBRARY, which this build (ROCm 5.2) lacks". Returns true (for a static initializer).
inline bool register_missing_library(
    const char* library, const char* kernel,
    std::initializer_list<std::pair<const char*, const char*>> ops) {
  for (const auto& [domain, op] : ops) {
    KernelDef def;
    def.backend = kGpuKernelTable;
    def.domain = domain;
    def.op_type = op;
    def.name = kernel;
    def.library = library;
    def.check = [library](const ir::Node& node) {
      return fmt::format("{} on AMD needs {}, which this build (ROCm 5.2) lacks", node.op_type(),
                         library);
    };
    def.create = [](const ir::Node&) -> std::unique_ptr<Kernel> { return nullptr; };
    KernelTable::instance().add(std::move(def));
  }
  return true;
}

}  // namespace kiln::backends::gpu
