#pragma once
// The task metric that `kiln quantize --metric` (and `--max-drop`) holds a compressed model to:
// a score of a candidate model's outputs against the float (reference) model's on the same input
// sets, and the drop from the reference's own score.
//
//   cosine         the smallest cosine similarity of an output to the reference's (over all
//                  sets); the reference scores 1. Higher is better.
//   top1           the smallest top-1 agreement of an [N, classes] output with the reference's;
//                  the reference scores 1. Higher is better.
//   max-abs-steps  the largest |candidate - reference| of an output, in steps of that output's
//                  range over 255 (one uint8 step of the reference's range); the reference
//                  scores 0. Lower is better: its "drop" is the rise.
//   script:PATH    a program of the user's: `PATH REFERENCE.npz CANDIDATE.npz` (a .py file that
//                  is not executable runs under python3, $KILN_PYTHON overriding), each .npz one
//                  float32 array per model output named as the output, the input sets' outputs
//                  concatenated along the first axis in set order. It prints the candidate's
//                  score, higher is better, as the last line of its stdout and exits 0. It is run
//                  once with CANDIDATE = REFERENCE for the reference's own score. It is stopped
//                  (with its children) past the time limit; a crash, a non-zero exit or a last
//                  line that is not a finite number is an error quoting what it printed.
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor.hpp"

namespace kiln::compiler {

enum class MetricKind { Cosine, Top1, MaxAbsSteps, Script };

struct TaskMetric {
  MetricKind kind = MetricKind::Cosine;
  std::string script;            // Script: the program
  double timeout_seconds = 120;  // Script: each run
};

// "cosine", "top1", "max-abs-steps" or "script:PATH"; InvalidArgument otherwise.
TaskMetric parse_task_metric(std::string_view text);
std::string metric_name(const TaskMetric& m);

// Output name -> that output's tensor of each input set (float32), in set order.
using OutputSets = std::map<std::string, std::vector<Tensor>>;

class MetricEvaluator {
 public:
  // `reference`: the float model's outputs; kept for every later score.
  MetricEvaluator(TaskMetric metric, OutputSets reference);
  // The reference's own score (cosine and top1 1, max-abs-steps 0, a script's its answer).
  double reference_score();
  double score(const OutputSets& candidate);
  // How much worse than the reference the candidate scores (>= 0 for the built-in metrics).
  double drop(const OutputSets& candidate);
  bool higher_is_better() const { return metric_.kind != MetricKind::MaxAbsSteps; }
  const TaskMetric& metric() const { return metric_; }

 private:
  TaskMetric metric_;
  OutputSets reference_;
  bool have_reference_score_ = false;
  double reference_score_ = 0;
  std::string reference_npz_;  // Script: written once
};

// numpy's .npz (stored, not compressed) of the arrays, each the tensors of one entry
// concatenated along the first axis (their other dims must agree). Float32 only.
void write_npz(const std::string& path, const OutputSets& arrays);

}  // namespace kiln::compiler
