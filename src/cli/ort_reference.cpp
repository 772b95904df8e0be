#include "cli/ort_reference.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "cli/ort_script.hpp"
#include "cli/tensor_files.hpp"
#include "onnx/onnx-data.pb.h"
#include "onnx/onnx-ml.pb.h"
#include "onnx/onnx_io.hpp"

extern char** environ;

namespace kiln::cli {
namespace fs = std::filesystem;
namespace {

// A private temporary directory, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "kiln-ort-XXXXXX").string();
    KILN_CHECK(mkdtemp(pattern.data()) != nullptr, ErrorCode::Unavailable,
               "cannot create a temporary directory under {}", fs::temp_directory_path().string());
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

std::string python() {
  const char* env = std::getenv("KILN_PYTHON");
  return env && *env ? env : "python3";
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

struct ProcessResult {
  int status = -1;  // exit code; -1 when it could not start or died of a signal
  std::string out, err;
};

// Runs the script with `args`, capturing stdout and stderr through files in `dir`.
ProcessResult run_script(const TempDir& dir, const std::vector<std::string>& args) {
  fs::path script = dir.path() / "ort_reference.py";
  if (!fs::exists(script)) std::ofstream(script) << kOrtReferenceScript;
  std::vector<std::string> argv_s = {python(), script.string()};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::string out_path = (dir.path() / "stdout.txt").string();
  std::string err_path = (dir.path() / "stderr.txt").string();
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0600);
  posix_spawn_file_actions_addopen(&actions, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0600);
  pid_t pid = 0;
  int rc = posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ProcessResult result;
  if (rc != 0) {
    result.err = fmt::format("cannot start '{}': {}", argv_s[0], std::strerror(rc));
    return result;
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) result.status = WEXITSTATUS(status);
  result.out = read_text(out_path);
  result.err = read_text(err_path);
  return result;
}

}  // namespace

OrtStatus probe_onnxruntime() {
  OrtStatus s;
  TempDir dir;
  ProcessResult r = run_script(dir, {"--version"});
  if (r.status == 0) {
    s.available = true;
    s.version = r.out;
  } else {
    s.reason = r.err.empty() ? fmt::format("{} exited with status {}", python(), r.status) : r.err;
  }
  return s;
}

runtime::Feeds run_onnxruntime(const std::string& model_path, const runtime::Feeds& feeds,
                               bool all_values, int threads) {
  TempDir dir;
  fs::path in_dir = dir.path() / "in", out_dir = dir.path() / "out";
  fs::create_directories(in_dir);
  fs::create_directories(out_dir);
  size_t i = 0;
  for (const auto& [name, value] : feeds) {
    KILN_CHECK(value.is_tensor(), ErrorCode::Unsupported,
               "input '{}' is {}: the onnxruntime reference takes tensors only", name,
               value.describe());
    write_value_file(value, name, (in_dir / fmt::format("input_{}.pb", i++)).string());
  }
  std::vector<std::string> args = {fs::absolute(model_path).string(), in_dir.string(),
                                   out_dir.string()};
  if (all_values) args.push_back("--all-values");
  if (threads > 0) {
    args.push_back("--threads");
    args.push_back(std::to_string(threads));
  }
  ProcessResult r = run_script(dir, args);
  KILN_CHECK(r.status == 0, ErrorCode::Unavailable, "onnxruntime failed on '{}': {}", model_path,
             r.err.empty() ? fmt::format("exit status {}", r.status) : r.err);
  runtime::Feeds outputs;
  for (const auto& entry : fs::directory_iterator(out_dir)) {
    std::string file = entry.path().filename().string();
    if (file.rfind("output_", 0) != 0) continue;
    if (file.size() > 7 && file.substr(file.size() - 7) == ".seq.pb") {
      std::ifstream in(entry.path(), std::ios::binary);
      onnx::SequenceProto seq;
      KILN_CHECK(seq.ParseFromIstream(&in), ErrorCode::Internal, "unreadable '{}'", file);
      std::vector<Tensor> items;
      for (const auto& t : seq.tensor_values())
        items.push_back(onnx_io::tensor_from_proto(t, "", file));
      outputs[seq.name()] = RtValue::sequence(std::move(items));
    } else {
      auto [name, tensor] = read_named_tensor(entry.path().string());
      outputs[name] = std::move(tensor);
    }
  }
  return outputs;
}

}  // namespace kiln::cli
