#include "onnx/graph_depth.hpp"

#include <cstdint>
#include <vector>

namespace kiln::onnx_io {
namespace {

// The messages along the path a subgraph hangs from, and the onnx-ml.proto field numbers that
// lead from one to the next.
enum class Kind { Model, Function, Graph, Node, Attribute };

constexpr uint32_t kModelGraph = 7, kModelFunctions = 25;   // ModelProto
constexpr uint32_t kGraphNode = 1;                          // GraphProto
constexpr uint32_t kFunctionNode = 7;                       // FunctionProto
constexpr uint32_t kNodeAttribute = 5;                      // NodeProto
constexpr uint32_t kAttributeG = 6, kAttributeGraphs = 11;  // AttributeProto

// The message a length-delimited field of `parent` holds, when it is one on that path.
bool child_kind(Kind parent, uint32_t field, Kind* child) {
  switch (parent) {
    case Kind::Model:
      if (field == kModelGraph) *child = Kind::Graph;
      if (field == kModelFunctions) *child = Kind::Function;
      return field == kModelGraph || field == kModelFunctions;
    case Kind::Function:
      *child = Kind::Node;
      return field == kFunctionNode;
    case Kind::Graph:
      *child = Kind::Node;
      return field == kGraphNode;
    case Kind::Node:
      *child = Kind::Attribute;
      return field == kNodeAttribute;
    case Kind::Attribute:
      *child = Kind::Graph;
      return field == kAttributeG || field == kAttributeGraphs;
  }
  return false;
}

struct Frame {
  Kind kind;
  size_t end;  // one past the message's last byte
  int level;   // subgraph level of the graph or function the message belongs to
};

bool read_varint(std::string_view bytes, size_t& pos, size_t end, uint64_t* out) {
  uint64_t v = 0;
  for (int shift = 0; shift < 64 && pos < end; shift += 7) {
    const auto b = static_cast<uint8_t>(bytes[pos++]);
    v |= static_cast<uint64_t>(b & 0x7f) << shift;
    if (!(b & 0x80)) {
      *out = v;
      return true;
    }
  }
  return false;
}

}  // namespace

int subgraph_depth(std::string_view bytes, int stop_after) {
  std::vector<Frame> stack{{Kind::Model, bytes.size(), 0}};
  int deepest = 0;
  size_t pos = 0;
  while (!stack.empty()) {
    const Frame top = stack.back();
    if (pos >= top.end) {
      stack.pop_back();
      continue;
    }
    uint64_t tag = 0;
    if (!read_varint(bytes, pos, top.end, &tag)) break;
    const auto field = static_cast<uint32_t>(tag >> 3);
    uint64_t n = 0;
    switch (tag & 7) {
      case 0:  // varint
        if (!read_varint(bytes, pos, top.end, &n)) return deepest;
        break;
      case 1:  // fixed64
        pos += 8;
        break;
      case 5:  // fixed32
        pos += 4;
        break;
      case 2: {  // length-delimited: a message on the path, or bytes to skip
        if (!read_varint(bytes, pos, top.end, &n) || n > top.end - pos) return deepest;
        Kind child{};
        if (!child_kind(top.kind, field, &child)) {
          pos += static_cast<size_t>(n);
          break;
        }
        const int level = top.level + (top.kind == Kind::Attribute ? 1 : 0);
        if (level > deepest) deepest = level;
        if (deepest > stop_after) return deepest;
        stack.push_back({child, pos + static_cast<size_t>(n), level});
        break;
      }
      default:  // groups: ONNX has none, so these are not ONNX bytes
        return deepest;
    }
  }
  return deepest;
}

}  // namespace kiln::onnx_io
