#pragma once
// The task-level gate that `kiln quantize` applies, as a reusable piece: a changed model and the
// float model run on the same input sets, each output's cosine similarity (over every set) is held
// to a minimum, [N, classes] outputs also report (and may be held to) their top-1 agreement, and
// the changed nodes whose own outputs drift most are named. The float model's outputs are kept
// once, so that a search trying many candidates runs the float model only once.
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "compiler/observe_values.hpp"
#include "compiler/quantize.hpp"

namespace kiln::compiler {

struct AgreementThresholds {
  double min_cosine = 0.99;
  std::optional<double> min_top1;
};

struct Agreement {
  std::vector<OutputScore> outputs;
  std::vector<std::pair<std::string, double>> worst_nodes;  // display name, cosine; worst first
  bool pass = true;
  std::string failure;  // the first output that misses, with the worst nodes
};

class FloatReference {
 public:
  // Runs `float_graph` on every set once and keeps its outputs.
  FloatReference(std::shared_ptr<ir::Graph> float_graph, std::vector<runtime::Feeds> sets,
                 ObserveOptions options);

  // Scores `candidate` (same inputs and outputs). `watched` maps value names the candidate shares
  // with the float model (a changed node's output) to the name to report them by; values whose
  // element counts differ are skipped. With watched values the float model runs again, keeping
  // those values of every set (a few layers' outputs).
  Agreement score(const std::shared_ptr<ir::Graph>& candidate,
                  const std::map<std::string, std::string>& watched,
                  const AgreementThresholds& thresholds) const;

  size_t sets() const { return sets_.size(); }

 private:
  std::shared_ptr<ir::Graph> float_graph_;
  std::vector<runtime::Feeds> sets_;
  ObserveOptions options_;
  std::vector<std::map<std::string, Tensor>> outputs_;  // per set
};

// "output 'logits': cosine 0.99992 (>= 0.99), top-1 agreement 1.0000 (>= 0.9)"
std::string describe_score(const OutputScore& score, const AgreementThresholds& thresholds);

}  // namespace kiln::compiler
