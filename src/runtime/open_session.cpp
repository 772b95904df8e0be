#include "runtime/open_session.hpp"

#include "engine/engine_file.hpp"
#include "onnx/onnx_io.hpp"

namespace kiln::runtime {

std::unique_ptr<Session> open_session_from_bytes(std::string_view bytes, SessionOptions options) {
  KILN_CHECK_ARG(!bytes.empty(), "the model buffer is empty");
  if (engine::has_engine_magic(bytes)) {
    // read_engine_bytes copies the bytes; the model's weights keep that copy alive.
    engine::LoadedEngine e = engine::read_engine_bytes(bytes);
    options.optimize = false;  // an engine was optimized when it was compiled
    return std::make_unique<Session>(std::move(e.model), std::move(options));
  }
  return std::make_unique<Session>(onnx_io::import_model_bytes(bytes, {}), std::move(options));
}

}  // namespace kiln::runtime
