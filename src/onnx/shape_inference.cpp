#include "onnx/shape_inference.hpp"

#include "ops/registry.hpp"

namespace kiln::onnx_io {

TypeInfo merge_declared_type(const TypeInfo& known, const TypeInfo& declared,
                             const std::string& what) {
  if (known.kind == TypeInfo::Kind::Unknown) return declared;
  if (declared.kind == TypeInfo::Kind::Unknown) return known;
  KILN_CHECK_ARG(known.kind == declared.kind, "{}: declared {} but computed {}", what,
                 declared.to_string(), known.to_string());
  if (known.kind != TypeInfo::Kind::Tensor) return declared.elem ? declared : known;
  TypeInfo out = known;
  if (declared.dtype != DataType::Undefined) {
    KILN_CHECK_ARG(known.dtype == DataType::Undefined || known.dtype == declared.dtype,
                   "{}: declared {} but computed {}", what, declared.to_string(),
                   known.to_string());
    out.dtype = declared.dtype;
  }
  if (!declared.shape) return out;
  if (!known.shape) {
    out.shape = declared.shape;
    return out;
  }
  KILN_CHECK_ARG(known.shape->rank() == declared.shape->rank(), "{}: declared {} but computed {}",
                 what, declared.to_string(), known.to_string());
  Shape merged = *known.shape;
  for (size_t i = 0; i < merged.rank(); ++i) {
    const Dim& d = (*declared.shape)[i];
    const Dim& k = merged[i];
    if (d.is_static() && k.is_static()) {
      KILN_CHECK_ARG(d.value() == k.value(), "{}: declared {} but computed {}", what,
                     declared.to_string(), known.to_string());
    } else if (!k.is_static() && (d.is_static() || (d.is_symbolic() && !k.is_symbolic()))) {
      // A computed symbol keeps its bounds (from --shape-range); a declared one only fills a gap.
      merged[i] = d;
    }
  }
  out.shape = std::move(merged);
  return out;
}

void infer_node(ir::Node& node, const std::unordered_map<std::string, TypeInfo>& declared) {
  const ops::OpDef* def =
      ops::OpRegistry::instance().find(node.domain(), node.op_type(), node.opset());
  std::vector<TypeInfo> computed(node.outputs().size());
  if (def && def->infer) {
    ops::InferContext ctx(node);
    try {
      def->infer(ctx);
    } catch (const Error& e) {
      if (e.message().rfind("node ", 0) == 0) throw;
      throw Error(e.code(), fmt::format("node {}: {}", node.label(), e.message()));
    }
    for (const auto& [i, t] : ctx.inferred()) {
      if (i < computed.size()) computed[i] = t;
    }
  }
  for (size_t i = 0; i < node.outputs().size(); ++i) {
    ir::Value* v = node.output(i);
    if (!v) continue;
    TypeInfo t = computed[i];
    auto it = declared.find(v->name());
    if (it != declared.end()) {
      t = merge_declared_type(t, it->second,
                              fmt::format("node {}: output '{}'", node.label(), v->name()));
    }
    v->set_type(std::move(t));
  }
}

}  // namespace kiln::onnx_io
