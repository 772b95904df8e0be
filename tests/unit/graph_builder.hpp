#pragma once
// Builds small graphs for pass tests the way an exporter writes them (ops by name, types from
// each op's shape inference), and checks that a pass keeps a graph's results.
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "onnx/shape_inference.hpp"
#include "passes/passes.hpp"
#include "runtime/compare.hpp"
#include "runtime/interpreter.hpp"

namespace kiln::testing {

class GraphBuilder {
 public:
  explicit GraphBuilder(int onnx_opset = 13) : graph(std::make_shared<ir::Graph>("test")) {
    graph->opsets()[""] = onnx_opset;
  }

  ir::Value* input(const std::string& name, std::vector<Dim> dims,
                   DataType type = DataType::Float32) {
    return graph->add_input(name, TypeInfo::tensor(type, Shape(std::move(dims))));
  }
  ir::Value* constant(std::vector<int64_t> dims, std::vector<float> values) {
    return graph->add_initializer(fresh("c"), Tensor::from_vector<float>(std::move(dims), values));
  }
  // Values uniform in [lo, hi), reproducible per builder.
  ir::Value* random(std::vector<int64_t> dims, float lo = -1, float hi = 1) {
    std::vector<float> v(static_cast<size_t>(shape_numel(dims)));
    for (float& x : v) x = std::uniform_real_distribution<float>(lo, hi)(rng_);
    return constant(std::move(dims), v);
  }
  ir::Value* scalar(float v) {
    return graph->add_initializer(fresh("s"), Tensor::scalar<float>(v));
  }
  ir::Value* ints(std::vector<int64_t> v) {
    const int64_t n = static_cast<int64_t>(v.size());
    return graph->add_initializer(fresh("i"), Tensor::from_vector<int64_t>({n}, v));
  }
  // Adds a node (opset of its domain as imported) and infers its output types.
  std::vector<ir::Value*> node(const std::string& op_type, std::vector<ir::Value*> inputs,
                               std::map<std::string, ir::Attribute> attrs, size_t outputs,
                               const std::string& domain = "") {
    std::vector<ir::Value*> outs;
    for (size_t i = 0; i < outputs; ++i) outs.push_back(graph->add_value(fresh(op_type)));
    ir::Node* n =
        graph->add_node(op_type, domain, fresh(op_type + "_node"), std::move(inputs), outs);
    n->set_opset(graph->opsets().count(domain) ? graph->opsets().at(domain) : 1);
    for (auto& [name, a] : attrs) n->set_attribute(name, a);
    onnx_io::infer_node(*n, {});
    return outs;
  }
  ir::Value* op(const std::string& op_type, std::vector<ir::Value*> inputs,
                std::map<std::string, ir::Attribute> attrs = {}) {
    return node(op_type, std::move(inputs), std::move(attrs), 1)[0];
  }
  void output(ir::Value* v) { graph->add_output(v); }

  std::shared_ptr<ir::Graph> graph;

 private:
  std::string fresh(const std::string& base) { return graph->unique_name(base); }
  std::mt19937 rng_{1234};
};

// Random feeds for every non-constant input; symbolic dims take their value from `dims`.
inline std::vector<RtValue> random_feeds(const ir::Graph& g, uint32_t seed,
                                         const std::map<std::string, int64_t>& dims = {}) {
  std::mt19937 rng(seed);
  std::vector<RtValue> feeds;
  for (const ir::Value* v : g.inputs()) {
    std::vector<int64_t> shape;
    for (const Dim& d : v->type().shape->dims()) {
      shape.push_back(d.is_static() ? d.value() : dims.at(d.symbol_name()));
    }
    Tensor t(v->type().dtype, shape);
    for (int64_t i = 0; i < t.numel(); ++i) {
      const double x = std::uniform_real_distribution<double>(-2, 2)(rng);
      if (t.dtype() == DataType::Float64) {
        t.data<double>()[i] = x;
      } else {
        t.data<float>()[i] = static_cast<float>(x);
      }
    }
    feeds.emplace_back(t);
  }
  return feeds;
}

inline std::vector<RtValue> run_graph(std::shared_ptr<ir::Graph> g,
                                      const std::vector<RtValue>& feeds) {
  return runtime::Interpreter(std::move(g)).run(feeds);
}

inline void expect_same_values(const std::vector<RtValue>& actual,
                               const std::vector<RtValue>& expected, double rtol = 1e-5,
                               double atol = 1e-6) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i) {
    std::optional<std::string> diff =
        runtime::compare_values(actual[i], expected[i], runtime::Tolerance{rtol, atol});
    EXPECT_FALSE(diff) << "output " << i << ": " << *diff;
  }
}

// Ops of a graph as "Op" (ai.onnx) or "domain.Op", with counts.
inline std::map<std::string, size_t> ops_of(const ir::Graph& g) {
  return ir::op_histogram(g);
}

// Builds a graph twice, applies `pass` (then dead-code removal) to one copy, validates it and
// checks both copies give the same outputs on random feeds. Returns the rewritten copy.
template <typename Pass>
std::shared_ptr<ir::Graph> expect_rewrite_keeps_results(
    const std::function<std::shared_ptr<ir::Graph>()>& build, const Pass& pass,
    const std::map<std::string, int64_t>& dims = {}, double rtol = 1e-5) {
  std::shared_ptr<ir::Graph> reference = build();
  std::shared_ptr<ir::Graph> rewritten = build();
  EXPECT_TRUE(pass.apply(*rewritten)) << "the pass changed nothing";
  passes::EliminateDeadCode{}.apply(*rewritten);
  ir::validate_graph(*rewritten);
  for (uint32_t seed = 1; seed <= 2; ++seed) {
    std::vector<RtValue> feeds = random_feeds(*reference, seed, dims);
    expect_same_values(run_graph(rewritten, feeds), run_graph(reference, feeds), rtol);
  }
  return rewritten;
}

}  // namespace kiln::testing
