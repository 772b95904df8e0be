#pragma once
// The kiln command's subcommands. Each returns the process exit code (0 ok, 1 failure, 2 usage).
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace kiln::cli {

struct RunOptions {
  std::string model;
  std::vector<std::string> inputs;      // name=path.pb
  std::map<std::string, int64_t> dims;  // symbolic dim name -> value for random inputs
  uint64_t seed = 0;
  int repeat = 1;
  bool profile = false;
};
int run_command(const RunOptions& options);

struct InspectOptions {
  std::string model;
  bool print_graph = false;
};
int inspect_command(const InspectOptions& options);

struct CompileOptions {
  std::string model;
  std::string output;  // default: the model's path with extension .kiln
  bool no_optimize = false;
  std::string dump_after;  // pass name: print the graph after it
  bool trace_passes = false;
  std::string target;  // "cpu:x86-64,..." (Target::parse); default the portable CPU baseline
  // NAME:1x3x224x224 fixes an input's dims; NAME:1..64x3x224x224 bounds them (a range per dim).
  std::vector<std::string> shapes;
};
int compile_command(const CompileOptions& options);

}  // namespace kiln::cli
