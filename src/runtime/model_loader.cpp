#include "runtime/model_loader.hpp"

#include <algorithm>

#include "core/regular_file.hpp"
#include "onnx/onnx_io.hpp"

namespace kiln::runtime {
namespace {

LoadedModel from_engine(engine::LoadedEngine e) {
  LoadedModel out;
  out.model = std::move(e.model);
  out.engine = std::move(e.info);
  out.plan = std::move(e.plan);
  return out;
}

}  // namespace

LoadedModel load_model(const std::string& path) {
  std::string head;
  {
    // Refuses a directory, device or fifo before anything reads it.
    RegularFile file(path, "model file");
    head.resize(static_cast<size_t>(std::min<uint64_t>(file.size(), engine::kHeaderSize)));
    file.read_at(0, head.data(), head.size());
  }
  if (engine::has_engine_magic(head)) return from_engine(engine::read_engine(path));
  LoadedModel out;
  out.model = onnx_io::import_model_file(path);
  return out;
}

LoadedModel load_model_bytes(std::string_view bytes) {
  KILN_CHECK_ARG(!bytes.empty(), "the model buffer is empty");
  // read_engine_bytes copies the bytes; the model's weights keep that copy alive.
  if (engine::has_engine_magic(bytes)) return from_engine(engine::read_engine_bytes(bytes));
  LoadedModel out;
  out.model = onnx_io::import_model_bytes(bytes, {});
  return out;
}

}  // namespace kiln::runtime
