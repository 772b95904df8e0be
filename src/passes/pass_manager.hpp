#pragma once
// Runs a pipeline of passes to a fixed point: validates the graph after every pass, times and
// optionally traces each one, skips passes disabled by name (KILN_DISABLE_PASSES=a,b), and when a
// pass throws, rethrows with the pass named and the graph dumped to a file.
#include <iosfwd>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "passes/pass.hpp"

namespace kiln::passes {

struct PassManagerOptions {
  bool validate = true;
  std::ostream* trace = nullptr;   // one line per pass run
  std::set<std::string> disabled;  // pass names to skip
  std::string dump_after;          // print the graph after this pass...
  std::ostream* dump = nullptr;    // ...to this stream
  int max_iterations = 4;          // pipeline repeats while something changes
  // Reads KILN_DISABLE_PASSES (comma-separated names) into `disabled`.
  static PassManagerOptions from_env();
};

struct PassStat {
  std::string name;
  int runs = 0;
  int changes = 0;
  double milliseconds = 0;
};

class PassManager {
 public:
  explicit PassManager(PassManagerOptions options = {}) : options_(std::move(options)) {}
  PassManager& add(Pass pass);
  // Throws InvalidArgument when a disabled or dump-after name matches no pass in the pipeline.
  std::vector<PassStat> run(ir::Graph& graph) const;

 private:
  PassManagerOptions options_;
  std::vector<Pass> passes_;
};

// The standard inference pipeline: cleanup, constant and shape folding, layout simplification,
// fusions. `device` as add_device_passes takes it: a few fusions depend on what its kernels run
// fastest (on the GPU, torch's NaN-guarded attention fuses only where it computes in float16:
// a float16 graph, or `float16_follows`, the float16 conversion that kiln compile --fp16 runs
// after the passes).
PassManager& add_default_passes(PassManager& pm, std::string_view device = "cpu",
                                bool float16_follows = false);
// The passes for models that run on `device` ("cpu", "gpu", ...: SessionOptions::device's
// names), after the default ones: fusions only that device's kernels compute (on the GPU,
// FuseConvResidual, MergeParallelMatMuls and FoldAttentionTransposes; on the CPU,
// FuseConvResidual and FuseConvDepthwise). `float16_follows` as add_default_passes takes it: the
// CPU's float32-only FuseConvDepthwise is left out, since the float16 / bfloat16 conversion would
// keep its nodes float32 between casts.
PassManager& add_device_passes(PassManager& pm, std::string_view device,
                               bool float16_follows = false);

}  // namespace kiln::passes
