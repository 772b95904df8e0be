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

}  // namespace kiln::runtime
