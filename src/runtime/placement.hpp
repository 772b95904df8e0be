#pragma once
// Placement: where each node of a model's main graph runs and where each value lives, decided
// once when a model is opened. Each node gets a step kind, a backend and, for fast kernels, the
// prepared kernel (weights packed there): the fast kernel of the first backend that supports it,
// else the CPU reference kernel. A node the preferred device cannot run falls back to the CPU
// with one warning per op type. Nodes with subgraphs (If, Loop, Scan) and sequence or optional
// values run on the interpreter's path (host, reference kernels); views (Reshape, Flatten, ...)
// only relabel their input's bytes and live where that input lives.
//
// The execution plan (execution_plan.hpp) turns a placement into steps, copies and arenas.
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backends/backend.hpp"
#include "engine/engine_file.hpp"
#include "ir/graph.hpp"
#include "ops/registry.hpp"

namespace kiln::runtime {

// Kernel names the executor itself implements on the host (not in any backend's table).
inline constexpr const char* kReferenceKernel = "reference";
inline constexpr const char* kViewKernel = "view";

struct KernelChoice {
  std::string backend;  // a backend name ("cpu")
  std::string kernel;   // a kernel of that backend's table, "reference" or "view"
};

enum class StepKind {
  Kernel,       // a backend's prepared fast kernel
  View,         // output 0 is input 0's bytes under other dims (no data moves)
  Interpreter,  // the op's reference kernel on the host (subgraphs run on the interpreter)
  Copy,         // a value brought from one device's memory into another's (planned, not placed)
};
const char* step_kind_name(StepKind kind);

struct NodePlacement {
  const ir::Node* node = nullptr;
  StepKind kind = StepKind::Interpreter;
  backends::Backend* backend = nullptr;      // Kernel: where it runs; otherwise the CPU
  std::unique_ptr<backends::Kernel> kernel;  // Kernel only
  const ops::OpDef* def = nullptr;           // View, Interpreter: the reference kernel
  // Kernel only: input slots the kernel may overwrite with output 0 (its table entry says so).
  std::vector<size_t> in_place_inputs;
};

struct Placement {
  std::vector<backends::Backend*> backends;  // preference order; the CPU last when not given
  std::vector<NodePlacement> nodes;          // main-graph nodes in order
  std::vector<KernelChoice> choices;         // by node, as the engine stores them
  bool any_subgraph = false;                 // some node runs subgraphs (needs an interpreter)
};

// `backends` in order of preference, with the CPU backend appended when absent.
std::vector<backends::Backend*> with_cpu(std::span<backends::Backend* const> backends);

// The kernel for each node of `graph`'s main graph, in node order (nothing is created).
std::vector<KernelChoice> choose_kernels(const ir::Graph& graph,
                                         std::span<backends::Backend* const> backends);

// Chooses (or takes `stored`'s choices, choosing afresh with a warning where this build lacks
// the stored kernel) and creates every node's kernel.
Placement place(const ir::Graph& graph, std::span<backends::Backend* const> backends,
                const engine::ExecutionPlan* stored);

// Host memory: the CPU backend's, or none named.
inline bool is_host(const backends::Backend* b) {
  return !b || b->device_kind() == backends::DeviceKind::Cpu;
}
// Whether two backends' memories are one (both host, or the same device).
inline bool same_memory(const backends::Backend* a, const backends::Backend* b) {
  return a == b || (is_host(a) && is_host(b));
}

bool has_subgraphs(const ir::Node& n);

// The backend of `backends` called `name`, or nullptr.
backends::Backend* backend_named(std::span<backends::Backend* const> backends,
                                 std::string_view name);

}  // namespace kiln::runtime
