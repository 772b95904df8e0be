#pragma once
// Runs a graph node by node on the reference kernels. This is the oracle every faster path is
// checked against, so it favours clarity: values live in a map keyed by IR value and are freed
// after their last use.
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/rt_value.hpp"
#include "ir/graph.hpp"
#include "ops/registry.hpp"
#include "runtime/run_control.hpp"

namespace kiln::runtime {

struct NodeTiming {
  const ir::Node* node;
  double microseconds;
  // When the node started: `kiln profile`'s trace places each node where it really ran, gaps
  // between nodes included.
  std::chrono::steady_clock::time_point start{};
  // The node's outputs as they came out (RtValue::describe: "float16[1,128,768]") and their
  // bytes, in output order ("none", 0 for an absent one): `kiln profile`'s shapes and live
  // memory come from the run it times, not from a second run on the reference interpreter
  // (BERT at batch 32 in float16 took minutes there).
  std::vector<std::string> output_shapes;
  std::vector<size_t> output_bytes;

  // Appends one output (null: an absent one).
  void record_output(const RtValue* v) {
    output_shapes.push_back(v ? v->describe() : "none");
    output_bytes.push_back(v ? v->nbytes() : 0);
  }
};

class Interpreter {
 public:
  // Resolves a kernel for every node, subgraphs included; throws Unsupported naming the first
  // node that has none.
  explicit Interpreter(std::shared_ptr<const ir::Graph> graph);

  // Inputs in the graph's input order; an input left None falls back to its initializer.
  // `control`, when given, is checked before every node and every subgraph run (each Loop or
  // Scan iteration): a run past its deadline or cancelled throws RunStopped.
  std::vector<RtValue> run(const std::vector<RtValue>& inputs, const RunControl* control = nullptr);
  // Inputs by name; outputs by name.
  std::map<std::string, RtValue> run(const std::map<std::string, RtValue>& inputs,
                                     const RunControl* control = nullptr);

  // Runs `body`, a subgraph of this interpreter's graph, whose captures of values outside it
  // resolve through `outer` (the executor runs control-flow nodes this way).
  using ValueLookup = std::function<const RtValue*(const ir::Value*)>;
  std::vector<RtValue> run_subgraph(const ir::Graph& body, const std::vector<RtValue>& inputs,
                                    const ValueLookup& outer, const RunControl* control = nullptr);

  const ir::Graph& graph() const { return *graph_; }
  // Per-node wall time of the last run when profiling is on.
  void set_profiling(bool on) { profiling_ = on; }
  const std::vector<NodeTiming>& last_profile() const { return profile_; }
  // Called after each node of the main graph runs, with its outputs, before any are freed: how
  // `kiln verify` and the precision gate keep intermediate values to find the first node that
  // drifts, and how `kiln profile` measures each node's output bytes.
  using NodeObserver = std::function<void(const ir::Node&, const std::vector<RtValue>& outputs)>;
  void set_observer(NodeObserver observer) { observer_ = std::move(observer); }

 private:
  struct GraphPlan {
    std::vector<const ir::Node*> nodes;
    std::vector<const ops::OpDef*> defs;
    // Values whose last reader is node i (freed after it runs).
    std::vector<std::vector<const ir::Value*>> release_after;
  };
  class Scope;
  class BodyRunner;

  void plan(const ir::Graph& g);
  std::vector<RtValue> execute(const ir::Graph& g, const std::vector<RtValue>& inputs,
                               const Scope* outer, const ValueLookup* root,
                               const RunControl* control);

  std::shared_ptr<const ir::Graph> graph_;
  std::unordered_map<const ir::Graph*, GraphPlan> plans_;
  bool profiling_ = false;
  std::vector<NodeTiming> profile_;
  NodeObserver observer_;
};

// Every value a node reads, including those its subgraphs capture from enclosing graphs.
void collect_reads(const ir::Node& n, std::set<const ir::Value*>& out);

// Checks a runtime value against a declared type (element type, rank, static dims); throws
// InvalidArgument naming `what`.
void check_value_matches(const RtValue& value, const TypeInfo& type, const std::string& what);

}  // namespace kiln::runtime
