#pragma once
// The fast-kernel table: one entry per (backend, op, kernel), registered in one line beside the
// kernel with KILN_REGISTER_KERNEL. Entries are data keyed by op name, so a kernel for an op
// another part of Kiln adds later (an ai.kiln fused op) is registered the same way.
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "backends/backend.hpp"

namespace kiln::backends {

// Whether a kernel can run a node on a backend: empty, or the reason it cannot. Decided from the
// node's attributes and declared types, and the backend (a GPU kernel's support depends on the
// device's arch). A kernel whose answer does not depend on the backend may register a function
// of the node alone.
class KernelCheck {
 public:
  KernelCheck() = default;
  template <typename F>
  KernelCheck(F f) {  // NOLINT: registrations pass plain functions and lambdas
    if constexpr (std::is_invocable_v<F, const Backend&, const ir::Node&>) {
      fn_ = std::move(f);
    } else {
      fn_ = [f](const Backend&, const ir::Node& n) { return f(n); };
    }
  }
  std::string operator()(const Backend& backend, const ir::Node& node) const {
    return fn_(backend, node);
  }
  explicit operator bool() const { return static_cast<bool>(fn_); }

 private:
  std::function<std::string(const Backend&, const ir::Node&)> fn_;
};

// Builds a kernel for a node on the backend it runs on (creating it may allocate that device's
// memory). As with KernelCheck, a function of the node alone may be registered.
class KernelCreate {
 public:
  KernelCreate() = default;
  template <typename F>
  KernelCreate(F f) {  // NOLINT: registrations pass plain functions and lambdas
    if constexpr (std::is_invocable_v<F, Backend&, const ir::Node&>) {
      fn_ = std::move(f);
    } else {
      fn_ = [f](Backend&, const ir::Node& n) { return f(n); };
    }
  }
  std::unique_ptr<Kernel> operator()(Backend& backend, const ir::Node& node) const {
    return fn_(backend, node);
  }
  explicit operator bool() const { return static_cast<bool>(fn_); }

 private:
  std::function<std::unique_ptr<Kernel>(Backend&, const ir::Node&)> fn_;
};

struct KernelDef {
  std::string backend;  // "cpu"
  std::string domain;   // "" for ai.onnx, "ai.kiln" for Kiln's fused ops
  std::string op_type;
  std::string name;  // stored in engine files: renaming one invalidates their choices
  int priority = 0;  // higher is tried first when several kernels serve one op
  // The vendor library the kernel calls ("cuBLASLt", "cuDNN"); empty for Kiln's own code. A
  // KernelPreference other than Default orders (or filters) kernels by it.
  std::string library = {};
  // Input slots the kernel may overwrite with output 0, best first (onnxruntime's MayInplace):
  // only a kernel that reads each input element before writing the output element at the same
  // index declares any. The memory planner gives output 0 such an input's space when that
  // input dies here and has the output's type and shape; no other kernel ever gets it.
  std::vector<size_t> in_place_inputs = {};
  KernelCheck check;
  KernelCreate create;
};

class KernelTable {
 public:
  static KernelTable& instance();
  void add(KernelDef def);
  // Kernels of `backend` for an op, highest priority first; with KernelPreference::Own Kiln's
  // own kernels come before the vendor libraries' (each group by priority), with OwnOnly the
  // libraries' are left out.
  std::vector<const KernelDef*> for_op(
      std::string_view backend, std::string_view domain, std::string_view op_type,
      KernelPreference preference = KernelPreference::Default) const;
  // nullptr when `backend` has no kernel `name` for the op.
  const KernelDef* find(std::string_view backend, std::string_view domain, std::string_view op_type,
                        std::string_view name) const;
  const std::vector<KernelDef>& all() const { return defs_; }

  // The first kernel of `backend` (entries under its name, in for_op's order for the backend's
  // kernel_preference()) whose check accepts `node`, or every kernel's reason.
  Support select(const Backend& backend, const ir::Node& node) const {
    return select(backend, backend.name(), node);
  }
  // As above, over the entries registered under `table` (the GPU backend's kernels are
  // registered under "gpu" whatever its device's name, "cuda:sm_90" or "hip:gfx90a").
  Support select(const Backend& backend, std::string_view table, const ir::Node& node) const;
  // Builds kernel `name` of `backend` for `node`; Unsupported when the table has no such entry
  // or its check refuses the node.
  std::unique_ptr<Kernel> create(Backend& backend, const ir::Node& node,
                                 std::string_view name) const {
    return create(backend, backend.name(), node, name);
  }
  std::unique_ptr<Kernel> create(Backend& backend, std::string_view table, const ir::Node& node,
                                 std::string_view name) const;

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
// (__COUNTER__, not __LINE__: a macro may register several kernels on one line.)
#define KILN_REGISTER_KERNEL(...)                                    \
  static const ::kiln::backends::KernelRegistrar KILN_KERNEL_CONCAT( \
      kiln_kernel_registrar_, __COUNTER__)(::kiln::backends::KernelDef __VA_ARGS__)
