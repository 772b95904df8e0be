#include "backends/kernel_table.hpp"

#include <algorithm>

namespace kiln::backends {

KernelTable& KernelTable::instance() {
  static KernelTable table;
  return table;
}

void KernelTable::add(KernelDef def) {
  defs_.push_back(std::move(def));
}

std::vector<const KernelDef*> KernelTable::for_op(std::string_view backend, std::string_view domain,
                                                  std::string_view op_type,
                                                  KernelPreference preference) const {
  std::vector<const KernelDef*> out;
  for (const KernelDef& d : defs_) {
    if (d.backend != backend || d.domain != domain || d.op_type != op_type) continue;
    if (preference == KernelPreference::OwnOnly && !d.library.empty()) continue;
    out.push_back(&d);
  }
  const bool own_first = preference == KernelPreference::Own;
  std::stable_sort(out.begin(), out.end(), [own_first](const KernelDef* a, const KernelDef* b) {
    if (own_first && a->library.empty() != b->library.empty()) return a->library.empty();
    return a->priority > b->priority;
  });
  return out;
}

const KernelDef* KernelTable::find(std::string_view backend, std::string_view domain,
                                   std::string_view op_type, std::string_view name) const {
  for (const KernelDef& d : defs_) {
    if (d.backend == backend && d.domain == domain && d.op_type == op_type && d.name == name) {
      return &d;
    }
  }
  return nullptr;
}

Support KernelTable::select(const Backend& backend, std::string_view table,
                            const ir::Node& node) const {
  const KernelPreference preference = backend.kernel_preference();
  std::vector<const KernelDef*> defs = for_op(table, node.domain(), node.op_type(), preference);
  if (defs.empty()) {
    if (preference == KernelPreference::OwnOnly &&
        !for_op(table, node.domain(), node.op_type()).empty()) {
      return Support::no(fmt::format("only Kiln's own {} kernels are allowed, and {} has none",
                                     table, node.op_type()));
    }
    return Support::no(fmt::format("no {} kernel for {}", table, node.op_type()));
  }
  std::string reasons;
  for (const KernelDef* d : defs) {
    std::string why = d->check(backend, node);
    if (why.empty()) return Support::yes(d->name);
    if (!reasons.empty()) reasons += "; ";
    reasons += fmt::format("{}: {}", d->name, why);
  }
  return Support::no(reasons);
}

std::unique_ptr<Kernel> KernelTable::create(Backend& backend, std::string_view table,
                                            const ir::Node& node, std::string_view name) const {
  const KernelDef* def = find(table, node.domain(), node.op_type(), name);
  // Names the node by its name and op (not Node::label: the GPU library links this file
  // without the IR's sources).
  KILN_CHECK(def, ErrorCode::Unsupported, "node '{}' ({}): the {} backend has no kernel '{}'",
             node.name(), node.op_type(), backend.name(), name);
  std::string why = def->check(backend, node);
  KILN_CHECK(why.empty(), ErrorCode::Unsupported, "node '{}' ({}): kernel '{}' cannot run it: {}",
             node.name(), node.op_type(), name, why);
  return def->create(backend, node);
}

}  // namespace kiln::backends
