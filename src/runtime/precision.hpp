#pragma once
// Precision checks: how far a candidate's outputs are from the reference's, and which node of the
// original graph drifts first. Used by `kiln verify` and by the precision gate of `kiln compile`,
// which refuses to write an engine whose outputs drift past the tolerance.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/rt_value.hpp"
#include "ir/graph.hpp"
#include "runtime/run_control.hpp"

namespace kiln {
class Session;
}

namespace kiln::runtime {

using Feeds = std::map<std::string, RtValue>;

struct DriftTolerance {
  // Relative L2 error ||a - e|| / ||e|| allowed per value (||a - e|| when e is all zeros).
  double max_rel_l2 = 1e-4;
  // Values of a type coarser than float32 cannot be held to 1e-4: the order of operations alone
  // moves them more. When set, the limit is at least 1e-3 for float16, 1e-2 for bfloat16 and 1e-1
  // for the float8/float4 types.
  bool scale_by_type = true;
  double max_rel_l2_for(DataType type) const;
  // When either is set, every element must also satisfy |a - e| <= atol + rtol * |e| (an unset
  // one counts as 0).
  std::optional<double> rtol, atol;
  // "relative L2 <= 1e-04", plus the element rule when set (not the per-type limits).
  std::string describe() const;
};

// How far `actual` is from `expected`. Real tensors: largest absolute error, largest relative
// error (over non-zero expected elements) and relative L2 error; NaN matches NaN, and NaN or an
// infinity against anything else is an infinite error. Integer, bool and string tensors compare
// exactly (error 0 or infinite). `mismatch` says why two values cannot be compared at all (kind,
// element type or shape differ); such a pair never passes.
struct ErrorStats {
  double max_abs = 0;
  double max_rel = 0;
  double rel_l2 = 0;
  int64_t elements = 0;
  int64_t outside = 0;  // elements breaking the rtol/atol rule, when one is set
  std::string mismatch;
  DataType dtype = DataType::Undefined;  // of the values compared
};

// Every value of `owner` that `n` reads, the captures of its subgraphs included (in reading
// order, repeats kept).
void collect_reads(const ir::Node& n, const ir::Graph& owner, std::vector<const ir::Value*>& out);

ErrorStats error_stats(const RtValue& actual, const RtValue& expected, const DriftTolerance& tol);
bool within_tolerance(const ErrorStats& stats, const DriftTolerance& tol);

// `value` converted to `reference`'s float type when both are float tensors of different types
// (a float16 engine's value against a float32 reference), else `value` as it is.
RtValue as_reference_float_type(const RtValue& value, const RtValue& reference);
// The feeds with each float tensor converted to the float type `graph` declares for that input
// (an engine with float16 inputs takes what the float32 original takes, and the other way).
Feeds feeds_for(const ir::Graph& graph, const Feeds& feeds);

struct OutputCheck {
  std::string name;
  ErrorStats stats;
  bool pass = false;
  std::string skipped;  // why the output was not held to the tolerance, when it was not
};

// Compares each value of `expected` with the value of the same name in `actual` (a missing one
// is a mismatch), in the order of `expected`.
std::vector<OutputCheck> compare_outputs(const Feeds& actual, const Feeds& expected,
                                         const DriftTolerance& tol);

// Outputs of `reference` computed from a random op (RandomNormal, Bernoulli, a Dropout in
// training mode, also inside subgraphs) differ from run to run: their checks pass, with
// `skipped` naming the op.
void skip_nondeterministic(const ir::Graph& reference, std::vector<OutputCheck>& checks);

struct NodeDrift {
  std::string node;   // the node of the reference graph, as its label: "Conv 'conv1'"
  std::string value;  // its output that drifts
  ErrorStats stats;
  // Nodes just before it whose outputs could not be compared (the candidate fused or renamed
  // them): the drift may start in one of them.
  std::vector<std::string> unobserved;
};

// Every node output of `graph`'s main graph by name, from one run of the reference interpreter
// (`feeds` may hold more names than the graph's inputs; the others are ignored). `control`
// bounds every run of this file's functions (RunStopped past its deadline).
Feeds run_keeping_values(std::shared_ptr<const ir::Graph> graph, const Feeds& feeds,
                         const RunControl* control = nullptr);

// Compares every node output of `reference` (the original graph) in `reference_values` with the
// value of the same name in `candidate_values` (values the candidate lacks, having fused or
// renamed them, are not compared), and returns the first node in topological order whose drift
// reaches a drifting graph output through values that drift or were not compared. A value that
// drifts only because a pass legitimately changed what its name holds (BatchNormalization folded
// into the Conv before it) is followed by matching values again, so it is not blamed. nullopt
// when no graph output drifts.
//
// With `candidate` (the graph `candidate_values` come from), a value the candidate renamed is
// still compared when its place says what it is: a candidate node whose output keeps its name and
// whose op is the reference node's (or Kiln's fused form of it) reads, in each input slot, the
// counterpart of the reference node's input in that slot (a FusedConv's output read by the MaxPool
// that read the Relu's output).
std::optional<NodeDrift> first_drift_in(const ir::Graph& reference, const Feeds& reference_values,
                                        const Feeds& candidate_values, const DriftTolerance& tol,
                                        const ir::Graph* candidate = nullptr);

// first_drift_in with both sides computed by the reference interpreter from `feeds`.
std::optional<NodeDrift> find_first_drift(std::shared_ptr<const ir::Graph> reference,
                                          std::shared_ptr<const ir::Graph> candidate,
                                          const Feeds& feeds, const DriftTolerance& tol,
                                          const RunControl* control = nullptr);

struct PrecisionReport {
  std::vector<OutputCheck> outputs;
  // Set when an output fails: the first drifting node, or the producer of the first failing
  // output when the drift does not reproduce on the reference kernels of the candidate's graph.
  std::optional<NodeDrift> first_drift;
  bool reproduced = false;  // first_drift came from find_first_drift
  bool pass() const;
};

// Runs `candidate` and the reference interpreter on `reference` (the original graph) with the same
// feeds, compares the outputs and, when one drifts, finds the first drifting node. The
// candidate's outputs are left in `candidate_outputs` when given.
PrecisionReport check_precision(Session& candidate, std::shared_ptr<const ir::Graph> reference,
                                const Feeds& feeds, const DriftTolerance& tol,
                                const RunControl* control = nullptr,
                                Feeds* candidate_outputs = nullptr);

}  // namespace kiln::runtime
