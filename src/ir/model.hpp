#pragma once
// A whole model: the main graph plus the metadata ONNX carries around it.
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "ir/graph.hpp"

namespace kiln::ir {

struct Model {
  std::shared_ptr<Graph> graph;
  int64_t ir_version = 0;
  std::string producer_name, producer_version, domain, doc_string;
  int64_t model_version = 0;
  std::map<std::string, std::string> metadata;
  std::string source_path;  // file it was read from, when any
};

}  // namespace kiln::ir
