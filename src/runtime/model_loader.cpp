#include "runtime/model_loader.hpp"

#include "onnx/onnx_io.hpp"

namespace kiln::runtime {

LoadedModel load_model(const std::string& path) {
  LoadedModel out;
  if (engine::is_engine_file(path)) {
    engine::LoadedEngine e = engine::read_engine(path);
    out.model = std::move(e.model);
    out.engine = std::move(e.info);
    out.plan = std::move(e.plan);
  } else {
    out.model = onnx_io::import_model_file(path);
  }
  return out;
}

LoadedModel load_model_bytes(std::string_view bytes) {
  KILN_CHECK_ARG(!bytes.empty(), "the model buffer is empty");
  LoadedModel out;
  if (engine::has_engine_magic(bytes)) {
    // read_engine_bytes copies the bytes; the model's weights keep that copy alive.
    engine::LoadedEngine e = engine::read_engine_bytes(bytes);
    out.model = std::move(e.model);
    out.engine = std::move(e.info);
    out.plan = std::move(e.plan);
  } else {
    out.model = onnx_io::import_model_bytes(bytes, {});
  }
  return out;
}

}  // namespace kiln::runtime
