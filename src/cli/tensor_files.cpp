#include "cli/tensor_files.hpp"

#include <filesystem>
#include <fstream>
#include <set>

#include "onnx/onnx-data.pb.h"
#include "onnx/onnx-ml.pb.h"
#include "onnx/onnx_io.hpp"

namespace kiln::cli {
namespace fs = std::filesystem;
namespace {

std::string file_safe(const std::string& name) {
  std::string s = name.empty() ? "value" : name;
  for (char& c : s) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '-' || c == '_';
    if (!ok) c = '_';
  }
  if (s[0] == '.') s[0] = '_';
  return s;
}

void write_bytes(const std::string& bytes, const std::string& path) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  KILN_CHECK(out.good(), ErrorCode::Unavailable, "cannot write '{}'", path);
}

}  // namespace

void write_value_file(const RtValue& value, const std::string& name, const std::string& path) {
  if (value.is_tensor()) {
    write_bytes(onnx_io::tensor_to_proto(value.tensor(), name).SerializeAsString(), path);
  } else if (value.is_sequence()) {
    onnx::SequenceProto seq;
    seq.set_name(name);
    seq.set_elem_type(onnx::SequenceProto::TENSOR);
    for (const Tensor& t : value.sequence())
      *seq.add_tensor_values() = onnx_io::tensor_to_proto(t, "");
    write_bytes(seq.SerializeAsString(), path);
  } else {
    onnx::OptionalProto opt;  // an empty optional
    opt.set_name(name);
    write_bytes(opt.SerializeAsString(), path);
  }
}

std::vector<std::string> write_values(const std::vector<std::string>& names,
                                      const std::map<std::string, RtValue>& values,
                                      const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  KILN_CHECK(fs::is_directory(dir), ErrorCode::Unavailable, "cannot create directory '{}': {}", dir,
             ec.message());
  std::set<std::string> used;
  std::vector<std::string> paths;
  for (const std::string& name : names) {
    std::string stem = file_safe(name);
    for (int k = 1; used.count(stem); ++k) stem = fmt::format("{}_{}", file_safe(name), k);
    used.insert(stem);
    std::string path = (fs::path(dir) / (stem + ".pb")).string();
    write_value_file(values.at(name), name, path);
    paths.push_back(path);
  }
  return paths;
}

std::pair<std::string, Tensor> read_named_tensor(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  KILN_CHECK(in.good(), ErrorCode::NotFound, "cannot open '{}'", path);
  onnx::TensorProto proto;
  KILN_CHECK_ARG(proto.ParseFromIstream(&in), "'{}' is not a TensorProto", path);
  return {proto.name(), onnx_io::tensor_from_proto(proto, "", path)};
}

}  // namespace kiln::cli
