#pragma once
// ONNX <-> Kiln IR. Import reads ModelProto bytes (with external-data weights beside the file),
// inlines model-local functions and infers shapes; export writes the IR back as a ModelProto.
#include <string>
#include <string_view>

#include "core/rt_value.hpp"
#include "core/type_info.hpp"
#include "ir/model.hpp"

namespace onnx {
class ModelProto;
class TensorProto;
class TypeProto;
class SequenceProto;
class OptionalProto;
}  // namespace onnx

namespace kiln::onnx_io {

struct ImportOptions {
  // Directory external-data paths are relative to (and confined to); empty forbids external data.
  std::string base_dir;
  // Run registered shape inference and check it against value_info.
  bool infer_shapes = true;
};

ir::Model import_model_file(const std::string& path, ImportOptions options = {});
ir::Model import_model_bytes(std::string_view bytes, const ImportOptions& options);
ir::Model import_model_proto(const onnx::ModelProto& proto, const ImportOptions& options);

onnx::ModelProto export_model(const ir::Model& model);
void save_model_file(const ir::Model& model, const std::string& path);

// Tensor conversions; `base_dir` resolves external data (empty forbids it).
Tensor tensor_from_proto(const onnx::TensorProto& proto, const std::string& base_dir,
                         std::string_view context);
onnx::TensorProto tensor_to_proto(const Tensor& tensor, const std::string& name);
TypeInfo type_from_proto(const onnx::TypeProto& proto, std::string_view context);
void type_to_proto(const TypeInfo& type, onnx::TypeProto* proto);

// Reads a serialized TensorProto / SequenceProto / OptionalProto file (ONNX test data) into a
// runtime value; `expected` selects which message the bytes hold.
RtValue read_value_file(const std::string& path, const TypeInfo& expected);

}  // namespace kiln::onnx_io
