// libFuzzer target: arbitrary bytes through the engine file reader (header, section bounds,
// FlatBuffers verification, IR rebuild, validation), the printer, then a Session built on what was
// read, so the stored execution plan (arena slots, kernel choices) meets the executor's checks.
// Nothing is run: kernels with fuzzed shapes could legitimately take minutes. The checksum is off,
// or it would reject nearly every mutation before the interesting code runs; the target check is
// off so engines compiled elsewhere still reach the parser. Any crash, leak or sanitizer report
// is a bug; a kiln::Error is the expected outcome for bad input.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/log.hpp"
#include "engine/engine_file.hpp"
#include "runtime/session.hpp"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // The reader itself checks every weight against the weights section (production limits), but
  // the Session built next plans activation arenas for whatever shapes a fuzzed plan declares,
  // which may legitimately be large; this keeps those under libFuzzer's memory limit.
  kiln::Tensor::set_max_bytes(size_t{64} << 20);
  // Fallback warnings for fuzzed kernel choices are expected; they would drown libFuzzer's log.
  kiln::set_log_sink([](kiln::LogLevel, std::string_view) {});
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
    kiln::runtime::LoadedModel loaded;
    loaded.model = std::move(e.model);
    loaded.engine = std::move(e.info);
    loaded.plan = std::move(e.plan);
    kiln::SessionOptions session_options;
    session_options.threads = 1;
    kiln::Session session(std::move(loaded), session_options);
  } catch (const kiln::Error&) {
  }
  return 0;
}
