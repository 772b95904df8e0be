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
  out.deferred = std::move(e.deferred);
  return out;
}

bool named_like_engine(const std::string& path) {
  constexpr std::string_view ext = ".kiln";
  return path.size() >= ext.size() && path.compare(path.size() - ext.size(), ext.size(), ext) == 0;
}

}  // namespace

LoadedModel load_model(const std::string& path, bool defer_unpacking) {
  std::string head;
  {
    // Refuses a directory, device or fifo before anything reads it.
    RegularFile file(path, "model file");
    head.resize(static_cast<size_t>(std::min<uint64_t>(file.size(), engine::kHeaderSize)));
    file.read_at(0, head.data(), head.size());
  }
  // An engine's magic, or its header with the magic damaged: the engine reader accepts the file
  // or says what is wrong with it as an engine.
  if (engine::looks_like_engine(head)) {
    engine::ReadOptions options;
    options.defer_unpacking = defer_unpacking;
    return from_engine(engine::read_engine(path, options));
  }
  LoadedModel out;
  try {
    out.model = onnx_io::import_model_file(path);
  } catch (const Error& e) {
    // A .kiln file whose bytes are neither an engine nor ONNX protobuf: the name says it was meant
    // to be an engine, so its problem as one comes first. (A real ONNX model under that name keeps
    // its own error.)
    std::string onnx_problem = e.message();
    if (!named_like_engine(path) ||
        onnx_problem.find("not a valid ONNX model") == std::string::npos)
      throw;
    if (onnx_problem.rfind(path + ": ", 0) == 0) onnx_problem.erase(0, path.size() + 2);
    throw Error(e.code(), fmt::format("{}: {}; read as ONNX instead: {}", path,
                                      engine::engine_magic_problem(head), onnx_problem));
  }
  return out;
}

LoadedModel load_model_bytes(std::string_view bytes) {
  KILN_CHECK_ARG(!bytes.empty(), "the model buffer is empty");
  // read_engine_bytes copies the bytes; the model's weights keep that copy alive.
  if (engine::looks_like_engine(bytes)) return from_engine(engine::read_engine_bytes(bytes));
  LoadedModel out;
  out.model = onnx_io::import_model_bytes(bytes, {});
  return out;
}

}  // namespace kiln::runtime
