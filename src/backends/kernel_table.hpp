#pragma once
// The fast-kernel table: one entry per (backend, op, kernel), registered in one line beside the
// kernel with KILN_REGISTER_KERNEL. Entries are data keyed by op name, so a kernel for an op
// another part of Kiln adds later (an ai.kiln fused op) is registered the same way.
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "backends/backend.hpp"

namespace kiln::backends {

struct KernelDef {
  std::string backend;  // "cpu"
  std::string domain;   // "" for ai.onnx, "ai.kiln" for Kiln's fused ops
  std::string op_type;
  std::string name;  // stored in engine files: renaming one invalidates their choices
  int priority = 0;  // higher is tried first when several kernels serve one op
  // Input slots the kernel may overwrite with output 0, best first (onnxruntime's MayInplace):
  // only a kernel that reads each input element before writing the output element at the same
  // index declares any. The memory planner gives output 0 such an input's space when that
  // input dies here and has the output's type and shape; no other kernel ever gets it.
  std::vector<size_t> in_place_inputs = {};
  // Empty when the kernel can run `node` (decided from attributes and declared types), else
  // the reason it cannot.
  std::string (*check)(const ir::Node& node) = nullptr;
  std::unique_ptr<Kernel> (*create)(const ir::Node& node) = nullptr;
};

class KernelTable {
 public:
  static KernelTable& instance();
  void add(KernelDef def);
  // Kernels of `backend` for an op, highest priority first.
  std::vector<const KernelDef*> for_op(std::string_view backend, std::string_view domain,
                                       std::string_view op_type) const;
  // nullptr when `backend` has no kernel `name` for the op.
  const KernelDef* find(std::string_view backend, std::string_view domain, std::string_view op_type,
                        std::string_view name) const;
  const std::vector<KernelDef>& all() const { return defs_; }

  // The first kernel of `backend` whose check accepts `node`, or every kernel's reason.
  Support select(std::string_view backend, const ir::Node& node) const;

 private:
  std::vector<KernelDef> defs_;
};

struct KernelRegistrar {
  explicit KernelRegistrar(KernelDef def) { KernelTable::instance().add(std::move(def)); }
};

}  // namespace kiln::backends

#define KILN_KERNEL_CONCAT_(a, b) a##b
#define KILN_KERNEL_CONCAT(a, b) KILN_KERNEL_CONCAT_(a, b)
// KILN_REGISTER_KERNEL({.backend = "cpu", .op_type = "Conv", .name = "onednn.conv", ...});
#define KILN_REGISTER_KERNEL(...)                                    \
  static const ::kiln::backends::KernelRegistrar KILN_KERNEL_CONCAT( \
      kiln_kernel_registrar_, __LINE__)(::kiln::backends::KernelDef __VA_ARGS__)
