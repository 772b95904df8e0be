#pragma once
// How deeply a serialized ModelProto nests its subgraphs, found without parsing it: when
// protobuf refuses a model for nesting past its recursion limit it says only that the bytes are
// corrupt, and the importer wants to say what is wrong instead.
#include <string_view>

namespace kiln::onnx_io {

// If / Loop / Scan bodies may nest this many levels below the main graph; deeper is refused (the
// importer, the passes and the executor recurse once per level).
inline constexpr int kMaxGraphDepth = 64;
// Protobuf's recursion limit while parsing a model. Each subgraph level takes three messages
// (GraphProto -> NodeProto -> AttributeProto), and the deepest graph still needs room for its
// tensors and nested types, so every model within kMaxGraphDepth parses and reaches the
// importer's own check. Protobuf's default of 100 stopped at about 32 levels.
inline constexpr int kProtoRecursionLimit = 3 * kMaxGraphDepth + 64;

// The deepest subgraph level (the main graph and function bodies are level 0) of the serialized
// ModelProto `bytes`, scanning the wire format iteratively (no recursion, whatever the input).
// Stops early once a level past `stop_after` is seen. Malformed bytes end the scan: the result
// is then what was seen up to that point.
int subgraph_depth(std::string_view bytes, int stop_after);

}  // namespace kiln::onnx_io
