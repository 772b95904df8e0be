#pragma once
// Per-node type and shape inference during import: runs the op's registered inference and
// reconciles it with what the model declares (value_info, graph outputs).
#include <string>
#include <unordered_map>

#include "ir/graph.hpp"

namespace kiln::onnx_io {

// Sets the types of `node`'s outputs from its op's inference merged with `declared` (by value
// name). A contradiction (element type, rank or a static dim) is an InvalidArgument naming the
// node and value.
void infer_node(ir::Node& node, const std::unordered_map<std::string, TypeInfo>& declared);
// Merges a declared type into a known one; throws InvalidArgument naming `what` on conflict.
TypeInfo merge_declared_type(const TypeInfo& known, const TypeInfo& declared,
                             const std::string& what);

}  // namespace kiln::onnx_io
