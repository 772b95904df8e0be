#include "ops/registry.hpp"

#include <algorithm>

namespace kiln::ops {

OpRegistry& OpRegistry::instance() {
  static OpRegistry registry;
  return registry;
}

void OpRegistry::add(OpDef def) {
  auto& list = defs_[{def.domain, def.op_type}];
  for (const OpDef& d : list) {
    if (def.since_opset <= d.until_opset && d.since_opset <= def.until_opset) {
      duplicates_.push_back(fmt::format("{}.{}@{}", def.domain, def.op_type, def.since_opset));
    }
  }
  list.push_back(std::move(def));
  std::sort(list.begin(), list.end(),
            [](const OpDef& a, const OpDef& b) { return a.since_opset < b.since_opset; });
}

const OpDef* OpRegistry::find(const std::string& domain, const std::string& op_type,
                              int opset) const {
  auto it = defs_.find({domain == "ai.onnx" ? std::string() : domain, op_type});
  if (it == defs_.end()) return nullptr;
  for (const OpDef& d : it->second) {
    if (opset >= d.since_opset && opset <= d.until_opset) return &d;
  }
  return nullptr;
}

const OpDef& OpRegistry::get(const std::string& domain, const std::string& op_type,
                             int opset) const {
  if (const OpDef* d = find(domain, op_type, opset)) return *d;
  std::string dom = domain.empty() ? "ai.onnx" : domain;
  auto it = defs_.find({domain, op_type});
  if (it == defs_.end()) {
    fail(ErrorCode::Unsupported, "operator {} (domain {}) is not implemented", op_type, dom);
  }
  fail(ErrorCode::Unsupported, "operator {} (domain {}) is not implemented for opset {}", op_type,
       dom, opset);
}

const OpDef* OpRegistry::newest(const std::string& domain, const std::string& op_type) const {
  auto it = defs_.find({domain == "ai.onnx" ? std::string() : domain, op_type});
  return it == defs_.end() || it->second.empty() ? nullptr : &it->second.back();
}

const OpTraits& traits_of(const ir::Node& node) {
  static const OpTraits kNone;
  const OpRegistry& r = OpRegistry::instance();
  const OpDef* d = node.opset() > 0 ? r.find(node.domain(), node.op_type(), node.opset())
                                    : r.newest(node.domain(), node.op_type());
  return d ? d->traits : kNone;
}

std::vector<std::string> OpRegistry::op_names() const {
  std::vector<std::string> names;
  for (const auto& [key, list] : defs_) {
    names.push_back(key.first.empty() ? key.second : key.first + "." + key.second);
  }
  return names;
}

}  // namespace kiln::ops
