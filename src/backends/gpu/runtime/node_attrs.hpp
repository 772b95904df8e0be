#pragma once
// A node's attributes with their ONNX defaults, for the GPU kernels' checks (the GPU library
// carries the IR but not the ops' own readers).
#include <cstdint>
#include <string>
#include <vector>

#include "ir/graph.hpp"

namespace kiln::backends::gpu {

inline int64_t int_attr(const ir::Node& n, const char* name, int64_t fallback) {
  auto it = n.attributes().find(name);
  return it == n.attributes().end() ? fallback : it->second.get<int64_t>(name);
}

inline float float_attr(const ir::Node& n, const char* name, float fallback) {
  auto it = n.attributes().find(name);
  return it == n.attributes().end() ? fallback : it->second.get<float>(name);
}

inline std::vector<int64_t> ints_attr(const ir::Node& n, const char* name,
                                      std::vector<int64_t> fallback = {}) {
  auto it = n.attributes().find(name);
  return it == n.attributes().end() ? fallback : it->second.get<std::vector<int64_t>>(name);
}

inline std::vector<float> floats_attr(const ir::Node& n, const char* name) {
  auto it = n.attributes().find(name);
  return it == n.attributes().end() ? std::vector<float>{}
                                    : it->second.get<std::vector<float>>(name);
}

inline std::string string_attr(const ir::Node& n, const char* name, std::string fallback) {
  auto it = n.attributes().find(name);
  return it == n.attributes().end() ? fallback : it->second.get<std::string>(name);
}

}  // namespace kiln::backends::gpu
