#include "runtime/placement.hpp"

#include <algorithm>
#include <set>

#include "backends/cpu/cpu_backend.hpp"
#include "core/log.hpp"
#include "runtime/memory_planner.hpp"

namespace kiln::runtime {
namespace {

using backends::Backend;

// Nodes whose values are not plain tensors, or that run subgraphs, stay on the interpreter's
// path (host, reference kernels).
bool needs_interpreter(const ir::Node& n) {
  if (has_subgraphs(n)) return true;
  auto non_tensor = [](const ir::Value* v) {
    return v && (v->type().kind == TypeInfo::Kind::Sequence ||
                 v->type().kind == TypeInfo::Kind::Optional);
  };
  return std::any_of(n.inputs().begin(), n.inputs().end(), non_tensor) ||
         std::any_of(n.outputs().begin(), n.outputs().end(), non_tensor);
}

}  // namespace

Backend* backend_named(std::span<Backend* const> backends, std::string_view name) {
  for (Backend* b : backends) {
    if (b->name() == name) return b;
  }
  return nullptr;
}

const char* step_kind_name(StepKind kind) {
  switch (kind) {
    case StepKind::Kernel:
      return "kernel";
    case StepKind::View:
      return "view";
    case StepKind::Interpreter:
      return "interpreter";
    case StepKind::Copy:
      return "copy";
  }
  return "?";
}

bool has_subgraphs(const ir::Node& n) {
  for (const auto& [name, a] : n.attributes()) {
    if (a.kind() == ir::AttrKind::Graph || a.kind() == ir::AttrKind::Graphs) return true;
  }
  return false;
}

std::vector<Backend*> with_cpu(std::span<Backend* const> backends) {
  std::vector<Backend*> out(backends.begin(), backends.end());
  bool has_cpu = std::any_of(out.begin(), out.end(), [](const Backend* b) {
    return b->name() == backends::kCpuBackendName;
  });
  if (!has_cpu) out.push_back(&backends::CpuBackend::instance());
  return out;
}

std::vector<KernelChoice> choose_kernels(const ir::Graph& graph,
                                         std::span<Backend* const> backends) {
  std::vector<Backend*> all = with_cpu(backends);
  std::vector<KernelChoice> out;
  for (const ir::Node* n : graph.nodes()) {
    if (needs_interpreter(*n)) {
      out.push_back({backends::kCpuBackendName, kReferenceKernel});
    } else if (is_view_op(*n)) {
      out.push_back({std::string(all.front()->name()), kViewKernel});
    } else {
      KernelChoice c{backends::kCpuBackendName, kReferenceKernel};
      for (Backend* b : all) {
        backends::Support s = b->supports(*n);
        if (s.ok()) {
          c = {std::string(b->name()), s.kernel};
          break;
        }
      }
      out.push_back(std::move(c));
    }
  }
  return out;
}

Placement place(const ir::Graph& graph, std::span<Backend* const> requested,
                const engine::ExecutionPlan* stored) {
  Placement p;
  p.backends = with_cpu(requested);
  const std::vector<ir::Node*> nodes = graph.nodes();
  if (!stored || stored->kernels.empty()) {
    p.choices = choose_kernels(graph, p.backends);
  } else {
    p.choices.assign(nodes.size(), KernelChoice{});
    std::vector<bool> given(nodes.size(), false);
    for (const engine::StoredKernel& k : stored->kernels) {
      KILN_CHECK_ARG(k.node < nodes.size(), "engine plan: kernel choice for node #{} of {}", k.node,
                     nodes.size());
      p.choices[k.node] = {k.backend, k.kernel};
      given[k.node] = true;
    }
    if (std::find(given.begin(), given.end(), false) != given.end()) {
      std::vector<KernelChoice> fresh = choose_kernels(graph, p.backends);
      for (size_t i = 0; i < nodes.size(); ++i) {
        if (!given[i]) p.choices[i] = fresh[i];
      }
    }
  }

  Backend* preferred = p.backends.front();
  Backend* cpu = backend_named(p.backends, backends::kCpuBackendName);
  std::set<std::string> warned;
  auto warn_once = [&](const ir::Node& n, const std::string& what) {
    std::string key = n.domain() + "." + n.op_type() + ":" + what.substr(0, what.find(':'));
    if (warned.insert(key).second) log_warning("{}", what);
  };
  for (size_t i = 0; i < nodes.size(); ++i) {
    const ir::Node& n = *nodes[i];
    NodePlacement np;
    np.node = &n;
    np.backend = cpu;
    KernelChoice& c = p.choices[i];
    if (c.kernel == kViewKernel && is_view_op(n)) {
      np.kind = StepKind::View;
    } else if (c.kernel != kReferenceKernel && !needs_interpreter(n)) {
      Backend* b = backend_named(p.backends, c.backend);
      if (!b) {
        warn_once(n, fmt::format("{}: backend '{}' of the engine's kernel choice is not "
                                 "available: running the CPU reference kernel",
                                 n.op_type(), c.backend));
      } else {
        try {
          np.kernel = b->create_kernel(n, c.kernel);
          np.kind = StepKind::Kernel;
          np.backend = b;
          np.in_place_inputs = b->in_place_inputs(n, c.kernel);
        } catch (const Error& e) {
          warn_once(n, fmt::format("{}: kernel '{}' cannot run node {} ({}): running the CPU "
                                   "reference kernel",
                                   n.op_type(), c.kernel, n.label(), e.message()));
        }
      }
    }
    if (np.kind == StepKind::Interpreter) c = {backends::kCpuBackendName, kReferenceKernel};
    if (np.kind != StepKind::Kernel) {
      np.def = &ops::OpRegistry::instance().get(n.domain(), n.op_type(), n.opset());
    }
    // A node the preferred device cannot run falls back to the CPU: say so once per op type.
    if (!is_host(preferred) && np.kind != StepKind::View &&
        (np.kind != StepKind::Kernel || np.backend != preferred)) {
      backends::Support s = preferred->supports(n);
      warn_once(n, fmt::format("{}: {} cannot run it ({}): falling back to the CPU ({}) with "
                               "copies to and from host memory",
                               n.op_type(), preferred->name(),
                               s.ok() ? "kernel failed to prepare" : s.reason,
                               np.kind == StepKind::Kernel ? np.kernel->name() : kReferenceKernel));
    }
    p.any_subgraph |= has_subgraphs(n);
    p.nodes.push_back(std::move(np));
  }
  return p;
}

}  // namespace kiln::runtime
