#pragma once
// onnxruntime as a second reference for `kiln verify`, run in a Python subprocess: its Python
// package is what users have and compare against. The interpreter is $KILN_PYTHON or python3.
#include <string>

#include "runtime/precision.hpp"

namespace kiln::cli {

struct OrtStatus {
  bool available = false;
  std::string version;  // when available
  std::string reason;   // why not, when not
};

// Whether `import onnxruntime` works in the Python interpreter.
OrtStatus probe_onnxruntime();

// Runs the ONNX model at `model_path` on onnxruntime with `feeds` (tensors only) and returns its
// outputs by name; with `all_values`, every node output of the main graph too. Throws Unavailable
// with onnxruntime's message when it fails.
runtime::Feeds run_onnxruntime(const std::string& model_path, const runtime::Feeds& feeds,
                               bool all_values, int threads);

}  // namespace kiln::cli
