// libFuzzer target: arbitrary bytes through the engine file reader (header, section bounds,
// FlatBuffers verification, IR rebuild, validation), then the printer. The checksum is off, or
// it would reject nearly every mutation before the interesting code runs; the target check is
// off so engines compiled elsewhere still reach the parser. Any crash, leak or sanitizer report
// is a bug; a kiln::Error is the expected outcome for bad input.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "engine/engine_file.hpp"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  kiln::Tensor::set_max_bytes(size_t{64} << 20);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kiln::engine::ReadOptions options;
  options.verify_checksum = false;
  options.check_target = false;
  try {
    kiln::engine::LoadedEngine e = kiln::engine::read_engine_bytes(
        std::string_view(reinterpret_cast<const char*>(data), size), options);
    (void)kiln::ir::print_graph(*e.model.graph);
  } catch (const kiln::Error&) {
  }
  return 0;
}
