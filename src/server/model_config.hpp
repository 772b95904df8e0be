#pragma once
// The model configuration (proto/model_config.proto, Triton's config.pbtxt schema): parsing the
// text format, JSON in and out (HTTP /config and the repository load override), validation, and
// auto-completion from the model's own inputs and outputs.
#include <string>
#include <string_view>
#include <vector>

#include "model_config.pb.h"
#include "runtime/session.hpp"

namespace kiln::server {

using ModelConfig = inference::ModelConfig;

// Parses config.pbtxt text; InvalidArgument naming `source` with the parser's line and column.
ModelConfig parse_config_text(std::string_view text, std::string_view source);
// Parses the JSON form (field names as in the .proto, as Triton's load API sends them).
ModelConfig parse_config_json(std::string_view json, std::string_view source);
// JSON as Triton's /config returns it: proto field names, every field printed, int64 as numbers.
std::string config_to_json(const ModelConfig& config);

// The backend a config asks for, from `backend` or else `platform`: "kiln" or "onnxruntime";
// Unsupported for anything else.
std::string config_backend(const ModelConfig& config);
// The model file name inside a version folder: default_model_filename, else model.kiln /
// model.onnx by backend.
std::string config_model_filename(const ModelConfig& config);

// Fills what the config leaves out from the model, as Triton's auto-complete does: platform and
// backend, inputs and outputs (names, types, dims), and max_batch_size when every input and output
// has a symbolic leading dim and the config does not set it (then the batch dim leaves `dims` and
// dynamic batching is switched on). Given inputs/outputs are checked against the model.
void autocomplete_config(ModelConfig& config, const std::vector<IoInfo>& inputs,
                         const std::vector<IoInfo>& outputs);

// Checks a complete config: names, types, dims, reshape element counts, batching and queue
// settings, an ensemble's steps on their own (ensemble_config.hpp); InvalidArgument naming the
// model and field; a sequence_batching section as sequence_config.hpp checks it. Unsupported
// for features Kiln does not implement (batch inputs/outputs, decoupled, warmup files ...).
void validate_config(const ModelConfig& config);

}  // namespace kiln::server
