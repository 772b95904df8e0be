#include <cstring>
#include <unordered_map>

#include "passes/pass.hpp"
#include "passes/passes.hpp"

namespace kiln::passes {
namespace {

bool tensors_equal(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.dims() != b.dims()) return false;
  if (a.dtype() == DataType::String) {
    return std::equal(a.values<std::string>().begin(), a.values<std::string>().end(),
                      b.values<std::string>().begin());
  }
  return std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

bool attributes_equal(const ir::Node& a, const ir::Node& b) {
  if (a.attributes().size() != b.attributes().size()) return false;
  for (auto ia = a.attributes().begin(), ib = b.attributes().begin(); ia != a.attributes().end();
       ++ia, ++ib) {
    if (ia->first != ib->first || ia->second.kind() != ib->second.kind()) return false;
    const auto& va = ia->second.storage();
    const auto& vb = ib->second.storage();
    switch (ia->second.kind()) {
      case ir::AttrKind::Tensor:
        if (!tensors_equal(std::get<Tensor>(va), std::get<Tensor>(vb))) return false;
        break;
      case ir::AttrKind::Tensors: {
        const auto& ta = std::get<std::vector<Tensor>>(va);
        const auto& tb = std::get<std::vector<Tensor>>(vb);
        if (ta.size() != tb.size()) return false;
        for (size_t i = 0; i < ta.size(); ++i) {
          if (!tensors_equal(ta[i], tb[i])) return false;
        }
        break;
      }
      case ir::AttrKind::Graph:
      case ir::AttrKind::Graphs:
      case ir::AttrKind::Type:
        return false;  // bodies and types are not compared: never merged
      case ir::AttrKind::Float:
        if (std::get<float>(va) != std::get<float>(vb)) return false;
        break;
      case ir::AttrKind::Int:
        if (std::get<int64_t>(va) != std::get<int64_t>(vb)) return false;
        break;
      case ir::AttrKind::String:
        if (std::get<std::string>(va) != std::get<std::string>(vb)) return false;
        break;
      case ir::AttrKind::Floats:
        if (std::get<std::vector<float>>(va) != std::get<std::vector<float>>(vb)) return false;
        break;
      case ir::AttrKind::Ints:
        if (std::get<std::vector<int64_t>>(va) != std::get<std::vector<int64_t>>(vb)) return false;
        break;
      case ir::AttrKind::Strings:
        if (std::get<std::vector<std::string>>(va) != std::get<std::vector<std::string>>(vb)) {
          return false;
        }
        break;
    }
  }
  return true;
}

size_t hash_bytes(const Tensor& t) {
  if (t.dtype() == DataType::String) {
    size_t h = 0;
    for (const std::string& s : t.values<std::string>()) h = h * 31 + std::hash<std::string>()(s);
    return h;
  }
  return std::hash<std::string_view>()(
      std::string_view(static_cast<const char*>(t.raw_data()), t.nbytes()));
}

bool merge_initializers(ir::Graph& g) {
  bool changed = false;
  std::unordered_multimap<size_t, ir::Value*> seen;
  std::vector<ir::Value*> inits = g.initializers();
  for (ir::Value* v : inits) {
    if (g.is_output(v)) continue;
    size_t h = hash_bytes(v->constant()) ^ (static_cast<size_t>(v->constant().dtype()) << 1);
    ir::Value* same = nullptr;
    auto [lo, hi] = seen.equal_range(h);
    for (auto it = lo; it != hi && !same; ++it) {
      if (tensors_equal(it->second->constant(), v->constant())) same = it->second;
    }
    if (!same) {
      seen.emplace(h, v);
      continue;
    }
    if (g.replace_uses(v, same)) {
      g.remove_value(v);
      changed = true;
    }
  }
  return changed;
}

}  // namespace

bool EliminateCommonSubexpressions::apply(ir::Graph& root) const {
  return apply_recursively(root, [](ir::Graph& g) {
    bool changed = merge_initializers(g);
    std::unordered_multimap<std::string, ir::Node*> seen;
    for (ir::Node* n : g.nodes()) {
      if (is_nondeterministic(*n)) continue;
      std::string key = n->domain() + "|" + n->op_type() + "|" + std::to_string(n->opset());
      for (const ir::Value* v : n->inputs()) key += fmt::format("|{}", static_cast<const void*>(v));
      ir::Node* same = nullptr;
      auto [lo, hi] = seen.equal_range(key);
      for (auto it = lo; it != hi && !same; ++it) {
        if (it->second->outputs().size() == n->outputs().size() &&
            attributes_equal(*it->second, *n)) {
          same = it->second;
        }
      }
      if (!same) {
        seen.emplace(key, n);
        continue;
      }
      bool all_replaced = true;
      for (size_t i = 0; i < n->outputs().size(); ++i) {
        ir::Value* dup = n->output(i);
        ir::Value* keep = same->output(i);
        if (!dup) continue;
        if (!keep || !g.replace_uses(dup, keep)) all_replaced = false;
      }
      if (all_replaced) {
        g.remove_node(n);
        changed = true;
      }
    }
    return changed;
  });
}

}  // namespace kiln::passes
