// libFuzzer target: arbitrary bytes through the ONNX importer (parse, functions, subgraphs,
// shape inference, validation), then the printer and the exporter. Any crash, leak or sanitizer
// report is a bug; a kiln::Error is the expected outcome for bad input.
//
// It runs with the production limits (Tensor::max_bytes, the protobuf recursion limit, the
// subgraph depth): the importer checks every declared size against the bytes the model holds
// before it allocates, so a tensor the importer allocates is never larger than its input, and an
// allocation driven by a declared size alone shows up as libFuzzer's malloc / RSS limit crash.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include <onnx/onnx-ml.pb.h>

#include "onnx/onnx_io.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    kiln::onnx_io::ImportOptions options;  // no base_dir: external data is refused
    kiln::ir::Model model = kiln::onnx_io::import_model_bytes(
        std::string_view(reinterpret_cast<const char*>(data), size), options);
    (void)kiln::ir::print_graph(*model.graph);
    (void)kiln::onnx_io::export_model(model);
  } catch (const kiln::Error&) {
  }
  return 0;
}
