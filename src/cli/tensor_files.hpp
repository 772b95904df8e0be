#pragma once
// Run values as files: TensorProto .pb (SequenceProto for a sequence), the format of ONNX test
// data, which numpy_helper and onnxruntime's tools read directly.
#include <map>
#include <string>
#include <vector>

#include "core/rt_value.hpp"

namespace kiln::cli {

// Writes `value` to `path` as a TensorProto (a SequenceProto for a sequence) named `name`.
void write_value_file(const RtValue& value, const std::string& name, const std::string& path);

// Writes each value to `dir` (created when missing) as NAME.pb, the name made file-safe
// (characters other than letters, digits, '.', '-' and '_' become '_'; a clash gets a number);
// returns the paths in the order of `names`.
std::vector<std::string> write_values(const std::vector<std::string>& names,
                                      const std::map<std::string, RtValue>& values,
                                      const std::string& dir);

// Reads a TensorProto file: its name field and its tensor.
std::pair<std::string, Tensor> read_named_tensor(const std::string& path);

}  // namespace kiln::cli
