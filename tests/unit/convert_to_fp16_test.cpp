// ConvertToFloat16 (the pass behind `kiln compile --fp16`) and the cpu.fp16 kernels that run its
// result: Casts at precision boundaries, graph inputs/outputs kept float32, the allowlist and
// the slots it leaves alone, clamping of out-of-range weights, folding afterwards, and every
// converted op checked three ways (the fast kernel, the reference kernel on float16, the
// original float32 graph).
#include <gtest/gtest.h>

#include <cmath>
#include <mutex>
#include <random>

#include "core/half_convert.hpp"
#include "core/log.hpp"
#include "graph_builder.hpp"
#include "ops/registry.hpp"
#include "passes/passes.hpp"
#include "runtime/executor.hpp"
#include "runtime/interpreter.hpp"

namespace kiln {
namespace {

using testing::GraphBuilder;

DataType dtype_of_value(const ir::Value* v) {
  return v->type().dtype;
}

// The nodes of `g` of one op type.
std::vector<const ir::Node*> nodes_of(const ir::Graph& g, const std::string& op) {
  std::vector<const ir::Node*> out;
  for (const ir::Node* n : g.nodes()) {
    if (n->op_type() == op) out.push_back(n);
  }
  return out;
}

Tensor to_half_tensor(const Tensor& t) {
  Tensor out(DataType::Float16, t.dims());
  floats_to_halves(t.data<float>(), static_cast<uint16_t*>(out.raw_data()),
                   static_cast<size_t>(t.numel()));
  return out;
}

// Relative L2 error of `a` against `e`, any float types.
double rel_l2(const Tensor& a, const Tensor& e) {
  EXPECT_EQ(a.dims(), e.dims());
  double diff = 0, ref = 0;
  for (int64_t i = 0; i < e.numel(); ++i) {
    const double x = a.double_at(i), y = e.double_at(i);
    diff += (x - y) * (x - y);
    ref += y * y;
  }
  return ref > 0 ? std::sqrt(diff / ref) : std::sqrt(diff);
}

// Captures warnings while alive.
class LogCapture {
 public:
  LogCapture() {
    previous_ = set_log_sink([this](LogLevel level, std::string_view m) {
      std::lock_guard<std::mutex> lock(mu_);
      if (level >= LogLevel::Warning) lines_.emplace_back(m);
    });
  }
  ~LogCapture() { set_log_sink(previous_); }
  std::vector<std::string> lines() {
    std::lock_guard<std::mutex> lock(mu_);
    return lines_;
  }

 private:
  LogSink previous_;
  std::mutex mu_;
  std::vector<std::string> lines_;
};

// x -> Conv -> Relu -> ReduceSum (left float32) -> Add(constant) -> y
std::shared_ptr<ir::Graph> conv_reduce_graph() {
  GraphBuilder b;
  ir::Value* x = b.input("x", {Dim(1), Dim(3), Dim(8), Dim(8)});
  ir::Value* c = b.op("Conv", {x, b.random({4, 3, 3, 3}), b.random({4})},
                      {{"pads", std::vector<int64_t>{1, 1, 1, 1}}});
  ir::Value* r = b.op("Relu", {c});
  ir::Value* s = b.op("ReduceSum", {r, b.ints({1})}, {{"keepdims", int64_t{1}}});
  ir::Value* y = b.op("Add", {s, b.random({1, 1, 8, 8})});
  b.output(y);
  return b.graph;
}

TEST(ConvertToFp16, CastsAtEveryBoundaryAndIoStaysFloat32) {
  auto original = conv_reduce_graph();
  auto g = conv_reduce_graph();
  const std::string out_name = g->outputs()[0]->name();
  passes::Fp16Summary summary;
  passes::ConvertToFloat16 pass;
  pass.summary = &summary;
  ASSERT_TRUE(pass.apply(*g));
  ir::validate_graph(*g);

  // Inputs and outputs keep their names and float32.
  EXPECT_EQ(dtype_of_value(g->inputs()[0]), DataType::Float32);
  ASSERT_EQ(g->outputs().size(), 1u);
  EXPECT_EQ(g->outputs()[0]->name(), out_name);
  EXPECT_EQ(dtype_of_value(g->outputs()[0]), DataType::Float32);
  // Conv, Relu, Add in float16; ReduceSum (not allowlisted) in float32.
  for (const char* op : {"Conv", "Relu", "Add"}) {
    ASSERT_EQ(nodes_of(*g, op).size(), 1u) << op;
    EXPECT_EQ(dtype_of_value(nodes_of(*g, op)[0]->output(0)), DataType::Float16) << op;
  }
  const ir::Node* reduce = nodes_of(*g, "ReduceSum").at(0);
  EXPECT_EQ(dtype_of_value(reduce->input(0)), DataType::Float32);
  EXPECT_EQ(dtype_of_value(reduce->output(0)), DataType::Float32);
  // Conv's weights are float16 initializers now.
  const ir::Node* conv = nodes_of(*g, "Conv").at(0);
  EXPECT_TRUE(conv->input(1)->is_constant());
  EXPECT_EQ(conv->input(1)->constant().dtype(), DataType::Float16);
  EXPECT_EQ(conv->input(2)->constant().dtype(), DataType::Float16);
  // Four boundaries: x -> Conv, Relu -> ReduceSum, ReduceSum -> Add, Add -> y.
  std::vector<const ir::Node*> casts = nodes_of(*g, "Cast");
  ASSERT_EQ(casts.size(), 4u);
  EXPECT_EQ(summary.casts, 4u);
  EXPECT_EQ(summary.converted_nodes, 3u);
  for (const ir::Node* c : casts) {
    const DataType from = dtype_of_value(c->input(0)), to = dtype_of_value(c->output(0));
    EXPECT_NE(from, to);
    EXPECT_TRUE(from == DataType::Float16 || to == DataType::Float16);
    EXPECT_EQ(c->attribute("to")->get<int64_t>("to"), static_cast<int64_t>(to));
  }
  EXPECT_EQ(conv->input(0)->producer()->op_type(), "Cast");
  EXPECT_EQ(reduce->input(0)->producer()->op_type(), "Cast");
  EXPECT_EQ(g->outputs()[0]->producer()->op_type(), "Cast");

  // Same results within float16 precision, on the interpreter and on the executor.
  std::vector<RtValue> feeds = testing::random_feeds(*original, 7);
  Tensor expected = testing::run_graph(original, feeds)[0].tensor();
  EXPECT_LT(rel_l2(testing::run_graph(g, feeds)[0].tensor(), expected), 3e-3);
  runtime::Executor ex(g);
  EXPECT_LT(rel_l2(ex.run(feeds)[0].tensor(), expected), 3e-3);
  for (size_t i = 0; i < g->nodes().size(); ++i) {
    const ir::Node* n = g->nodes()[i];
    const bool to_half = n->op_type() == "Cast" && n->output(0)->type().dtype == DataType::Float16;
    if (n->op_type() == "Conv" || to_half) {
      EXPECT_EQ(ex.kernel_choices()[i].kernel, "cpu.fp16") << n->label();
    }
  }
}

TEST(ConvertToFp16, IoFloat16WhenAsked) {
  auto g = conv_reduce_graph();
  passes::ConvertToFloat16 pass;
  pass.keep_io_types = false;
  ASSERT_TRUE(pass.apply(*g));
  ir::validate_graph(*g);
  EXPECT_EQ(dtype_of_value(g->inputs()[0]), DataType::Float16);
  EXPECT_EQ(dtype_of_value(g->outputs()[0]), DataType::Float16);
  // Only the two boundaries around ReduceSum remain.
  EXPECT_EQ(nodes_of(*g, "Cast").size(), 2u);
  EXPECT_EQ(nodes_of(*g, "Conv").at(0)->input(0), g->inputs()[0]);
}

TEST(ConvertToFp16, AllowlistLeavesNonFloatAndFloat32OnlySlotsAlone) {
  GraphBuilder b(17);
  ir::Value* x = b.input("x", {Dim(1), Dim(2), Dim(4), Dim(4)});
  // Resize's scales are float32 by the spec (no float16); roi stays too.
  ir::Value* scales = b.constant({4}, {1, 1, 2, 2});
  ir::Value* r =
      b.op("Resize", {x, b.constant({0}, {}), scales}, {{"mode", std::string("nearest")}});
  // LayerNormalization: Y is T, Mean / InvStdDev are float32 statistics.
  std::vector<ir::Value*> ln =
      b.node("LayerNormalization", {r, b.random({8}), b.random({8})}, {}, 3);
  // Exp is not allowlisted; Softmax is.
  ir::Value* e = b.op("Exp", {ln[0]});
  ir::Value* s = b.op("Softmax", {e});
  b.output(s);
  b.output(ln[1]);
  passes::ConvertToFloat16 pass;
  ASSERT_TRUE(pass.apply(*b.graph));
  ir::validate_graph(*b.graph);
  const ir::Node* resize = nodes_of(*b.graph, "Resize").at(0);
  EXPECT_EQ(dtype_of_value(resize->input(0)), DataType::Float16);
  EXPECT_EQ(dtype_of_value(resize->input(1)), DataType::Float32);
  EXPECT_EQ(dtype_of_value(resize->input(2)), DataType::Float32);
  EXPECT_EQ(resize->input(2), scales);
  const ir::Node* norm = nodes_of(*b.graph, "LayerNormalization").at(0);
  EXPECT_EQ(dtype_of_value(norm->output(0)), DataType::Float16);
  EXPECT_EQ(dtype_of_value(norm->output(1)), DataType::Float32);
  EXPECT_EQ(dtype_of_value(nodes_of(*b.graph, "Exp").at(0)->output(0)), DataType::Float32);
  EXPECT_EQ(dtype_of_value(nodes_of(*b.graph, "Softmax").at(0)->output(0)), DataType::Float16);

  // keep_ops leaves an allowlisted op float32.
  auto g = conv_reduce_graph();
  passes::ConvertToFloat16 keep;
  keep.keep_ops = {"Relu"};
  ASSERT_TRUE(keep.apply(*g));
  EXPECT_EQ(dtype_of_value(nodes_of(*g, "Relu").at(0)->output(0)), DataType::Float32);
  EXPECT_EQ(dtype_of_value(nodes_of(*g, "Conv").at(0)->output(0)), DataType::Float16);
}

TEST(ConvertToFp16, KeepValuesLeaveTheirReadersAndWritersFloat32) {
  // The range check's result (compiler/fp16_range.hpp) names the Conv's output: the Conv
  // writing it and the Relu reading it stay float32.
  auto g = conv_reduce_graph();
  const std::string conv_out = nodes_of(*g, "Conv").at(0)->output(0)->name();
  passes::Fp16Summary summary;
  passes::ConvertToFloat16 keep;
  keep.keep_values = {conv_out};
  keep.summary = &summary;
  ASSERT_TRUE(keep.apply(*g));
  EXPECT_EQ(dtype_of_value(nodes_of(*g, "Conv").at(0)->output(0)), DataType::Float32);
  EXPECT_EQ(dtype_of_value(nodes_of(*g, "Relu").at(0)->output(0)), DataType::Float32);
  EXPECT_EQ(summary.kept_for_range, 2u);
}

TEST(ConvertToFp16, ClampsOutOfRangeWeightsWithAWarningNamingThem) {
  GraphBuilder b;
  ir::Value* x = b.input("x", {Dim(2), Dim(3)});
  ir::Value* big = b.constant({3}, {1e6f, -2e5f, 0.5f});
  ir::Value* y = b.op("Mul", {x, big});
  b.output(y);
  passes::Fp16Summary summary;
  passes::ConvertToFloat16 pass;
  pass.summary = &summary;
  LogCapture log;
  ASSERT_TRUE(pass.apply(*b.graph));
  const ir::Node* mul = nodes_of(*b.graph, "Mul").at(0);
  const Tensor& w = mul->input(1)->constant();
  ASSERT_EQ(w.dtype(), DataType::Float16);
  EXPECT_EQ(w.double_at(0), 65504.0);
  EXPECT_EQ(w.double_at(1), -65504.0);
  EXPECT_EQ(w.double_at(2), 0.5);
  ASSERT_EQ(summary.clamped, std::vector<std::string>{big->name()});
  std::vector<std::string> lines = log.lines();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("'" + big->name() + "'"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("2 of 3"), std::string::npos) << lines[0];
}

TEST(ConvertToFp16, SharedWeightGetsAFloat16CopyAndConstantsFoldAfterwards) {
  GraphBuilder b;
  ir::Value* x = b.input("x", {Dim(2), Dim(3)});
  ir::Value* w = b.random({2, 3});
  ir::Value* m = b.op("Mul", {x, w});  // float16
  ir::Value* p = b.op("Pow", {m, w});  // not allowlisted: float32
  // A Constant node (not an initializer) read in float16: Cast, then folded.
  ir::Value* k = b.graph->add_value("k");
  ir::Node* kn = b.graph->add_node("Constant", "", "k_node", {}, {k});
  kn->set_opset(13);
  kn->set_attribute("value", ir::Attribute(Tensor::from_vector<float>({2, 3}, {1, 2, 3, 4, 5, 6})));
  onnx_io::infer_node(*kn, {});
  ir::Value* y = b.op("Add", {m, k});
  b.output(y);
  b.output(p);
  passes::ConvertToFloat16 pass;
  ASSERT_TRUE(pass.apply(*b.graph));
  ir::validate_graph(*b.graph);
  const ir::Node* mul = nodes_of(*b.graph, "Mul").at(0);
  const ir::Node* pow = nodes_of(*b.graph, "Pow").at(0);
  EXPECT_EQ(mul->input(1)->constant().dtype(), DataType::Float16);
  EXPECT_EQ(pow->input(1), w);
  EXPECT_EQ(w->constant().dtype(), DataType::Float32);
  // Folding turns the Cast of the Constant into a float16 initializer.
  passes::FoldConstants{}.apply(*b.graph);
  passes::EliminateDeadCode{}.apply(*b.graph);
  ir::validate_graph(*b.graph);
  for (const ir::Node* c : nodes_of(*b.graph, "Cast")) {
    EXPECT_FALSE(c->input(0)->is_constant()) << "a Cast of a constant was not folded";
  }
  const ir::Node* add = nodes_of(*b.graph, "Add").at(0);
  EXPECT_TRUE(add->input(1)->is_constant());
  EXPECT_EQ(add->input(1)->constant().dtype(), DataType::Float16);
}

TEST(ConvertToFp16, IdempotentAndNothingToDoOnIntegerGraphs) {
  auto g = conv_reduce_graph();
  ASSERT_TRUE(passes::ConvertToFloat16{}.apply(*g));
  const size_t nodes = g->node_count();
  EXPECT_FALSE(passes::ConvertToFloat16{}.apply(*g));
  EXPECT_EQ(g->node_count(), nodes);

  GraphBuilder b;
  ir::Value* i = b.input("i", {Dim(4)}, DataType::Int64);
  b.output(b.op("Add", {i, i}));
  EXPECT_FALSE(passes::ConvertToFloat16{}.apply(*b.graph));
}

// ---- every converted op: fast kernel vs reference kernel on float16 vs float32 original ----

struct OpCase {
  std::string name;
  std::string op;
  std::vector<std::vector<int64_t>> inputs;   // graph inputs
  std::vector<std::vector<int64_t>> weights;  // initializers after them
  std::map<std::string, ir::Attribute> attrs;
  std::string domain;
  int opset = 17;
  std::string kernel = "cpu.fp16";              // what the executor must pick for the node
  std::vector<std::vector<int64_t>> ints = {};  // int64 1-D initializers after the weights
};

void PrintTo(const OpCase& c, std::ostream* os) {
  *os << c.name;
}

std::vector<OpCase> op_cases() {
  using A = std::map<std::string, ir::Attribute>;
  const std::vector<int64_t> pad1 = {1, 1, 1, 1};
  return {
      {"conv", "Conv", {{1, 3, 8, 8}}, {{4, 3, 3, 3}, {4}}, A{{"pads", pad1}}},
      {"conv_depthwise", "Conv", {{1, 4, 7, 7}}, {{4, 1, 3, 3}}, A{{"group", int64_t{4}}}},
      {"fused_conv_relu",
       "FusedConv",
       {{2, 3, 6, 6}},
       {{5, 3, 3, 3}, {5}},
       A{{"activation", std::string("Relu")}},
       "ai.kiln",
       1},
      {"matmul", "MatMul", {{2, 5, 16}}, {{16, 8}}},
      {"fused_matmul_gelu",
       "FusedMatMul",
       {{3, 16}},
       {{16, 8}, {8}},
       A{{"activation", std::string("Gelu")}},
       "ai.kiln",
       1},
      {"gemm_transB", "Gemm", {{4, 16}}, {{10, 16}, {10}}, A{{"transB", int64_t{1}}}},
      {"maxpool",
       "MaxPool",
       {{1, 3, 8, 8}},
       {},
       A{{"kernel_shape", std::vector<int64_t>{3, 3}}, {"strides", std::vector<int64_t>{2, 2}}}},
      {"avgpool",
       "AveragePool",
       {{1, 3, 8, 8}},
       {},
       A{{"kernel_shape", std::vector<int64_t>{2, 2}}}},
      {"global_avgpool", "GlobalAveragePool", {{2, 6, 5, 5}}},
      {"relu", "Relu", {{3, 40}}},
      {"sigmoid", "Sigmoid", {{3, 40}}},
      {"hardswish", "HardSwish", {{3, 40}}},
      {"clip", "Clip", {{3, 40}}, {{}, {}}},
      {"gelu", "Gelu", {{3, 40}}, {}, {}, "", 20},
      {"add_broadcast", "Add", {{2, 3, 4}}, {{4}}},
      {"mul", "Mul", {{2, 3, 4}, {2, 3, 4}}},
      {"div", "Div", {{2, 3, 4}}, {{3, 1}}},
      {"softmax", "Softmax", {{4, 33}}},
      {"layer_norm", "LayerNormalization", {{2, 3, 16}}, {{16}, {16}}},
      {"skip_layer_norm",
       "SkipLayerNormalization",
       {{2, 3, 16}, {2, 3, 16}},
       {{16}, {16}},
       {},
       "ai.kiln",
       1},
      {"attention",
       "ScaledDotProductAttention",
       {{2, 5, 8}, {2, 6, 8}, {2, 6, 8}},
       {},
       {},
       "ai.kiln",
       1},
      {"attention_masked",
       "ScaledDotProductAttention",
       {{2, 4, 5, 8}, {2, 4, 6, 8}, {2, 4, 6, 8}, {2, 1, 1, 6}},
       {},
       {},
       "ai.kiln",
       1},
      {"reduce_mean", "ReduceMean", {{3, 20}}, {}, A{{"axes", std::vector<int64_t>{1}}}, "", 13},
      {"batch_norm", "BatchNormalization", {{2, 3, 4, 4}}, {{3}, {3}, {3}, {3}}},
      // The rest of the allowlist: reference kernels on float16 (or views), or cpu.fp16.
      {"conv_transpose",
       "ConvTranspose",
       {{1, 3, 5, 5}},
       {{3, 2, 3, 3}, {2}},
       {},
       "",
       17,
       "reference"},
      {"global_maxpool", "GlobalMaxPool", {{2, 3, 4, 4}}},
      {"instance_norm",
       "InstanceNormalization",
       {{2, 3, 4, 4}},
       {{3}, {3}},
       {},
       "",
       17,
       "reference"},
      {"leaky_relu", "LeakyRelu", {{3, 40}}, {}, A{{"alpha", 0.1f}}},
      {"prelu", "PRelu", {{2, 3, 4}}, {{4}}, {}, "", 17, "reference"},
      {"elu", "Elu", {{3, 40}}},
      {"selu", "Selu", {{3, 40}}, {}, {}, "", 17, "reference"},
      {"tanh", "Tanh", {{3, 40}}},
      {"hard_sigmoid", "HardSigmoid", {{3, 40}}},
      {"erf", "Erf", {{3, 40}}, {}, {}, "", 17, "reference"},
      {"softplus", "Softplus", {{3, 40}}, {}, {}, "", 17, "reference"},
      {"mish", "Mish", {{3, 40}}, {}, {}, "", 18},
      {"abs", "Abs", {{3, 40}}},
      {"neg", "Neg", {{3, 40}}},
      {"sub", "Sub", {{2, 3, 4}}, {{2, 3, 4}}},
      {"max", "Max", {{2, 3, 4}, {4}}, {}, {}, "", 17, "reference"},
      {"min", "Min", {{2, 3, 4}, {4}}, {}, {}, "", 17, "reference"},
      {"fused_gemm_sigmoid",
       "FusedGemm",
       {{4, 16}},
       {{16, 6}, {6}},
       A{{"activation", std::string("Sigmoid")}},
       "ai.kiln",
       1},
      {"kiln_gelu", "Gelu", {{3, 40}}, {}, {}, "ai.kiln", 1},
      {"kiln_layer_norm", "LayerNormalization", {{2, 3, 16}}, {{16}, {16}}, {}, "ai.kiln", 1},
      {"reduce_max",
       "ReduceMax",
       {{3, 20}},
       {},
       A{{"axes", std::vector<int64_t>{1}}},
       "",
       13,
       "reference"},
      {"reduce_min",
       "ReduceMin",
       {{3, 20}},
       {},
       A{{"axes", std::vector<int64_t>{0}}},
       "",
       13,
       "reference"},
      {"flatten", "Flatten", {{2, 3, 4}}, {}, {}, "", 17, "view"},
      {"identity", "Identity", {{2, 3}}, {}, {}, "", 17, "view"},
      {"depth_to_space",
       "DepthToSpace",
       {{1, 8, 2, 3}},
       {},
       A{{"blocksize", int64_t{2}}},
       "",
       17,
       "reference"},
      {"space_to_depth",
       "SpaceToDepth",
       {{1, 2, 4, 6}},
       {},
       A{{"blocksize", int64_t{2}}},
       "",
       17,
       "reference"},
      {"reshape", "Reshape", {{2, 3, 4}}, {}, {}, "", 17, "view", {{4, 6}}},
      {"squeeze", "Squeeze", {{2, 1, 4}}, {}, {}, "", 17, "view", {{1}}},
      {"unsqueeze", "Unsqueeze", {{2, 4}}, {}, {}, "", 17, "view", {{0}}},
      {"slice", "Slice", {{4, 6}}, {}, {}, "", 17, "cpu.slice", {{1}, {5}, {1}}},
      {"gather", "Gather", {{5, 3}}, {}, {}, "", 17, "cpu.gather", {{4, 0, 2}}},
      {"pad", "Pad", {{2, 3}}, {}, {}, "", 17, "cpu.pad", {{1, 0, 0, 2}}},
      {"tile", "Tile", {{2, 3}}, {}, {}, "", 17, "cpu.tile", {{2, 1}}},
      {"expand", "Expand", {{3, 1}}, {}, {}, "", 17, "cpu.expand", {{2, 3, 4}}},
      {"transpose",
       "Transpose",
       {{2, 3, 4}},
       {},
       A{{"perm", std::vector<int64_t>{2, 0, 1}}},
       "",
       17,
       "cpu.transpose"},
      {"concat", "Concat", {{2, 3}, {2, 5}}, {}, A{{"axis", int64_t{1}}}, "", 17, "cpu.concat"},
  };
}

class Fp16Ops : public ::testing::TestWithParam<OpCase> {};

TEST_P(Fp16Ops, FastKernelReferenceAndFloat32Agree) {
  const OpCase& c = GetParam();
  if (!ops::OpRegistry::instance().find(c.domain, c.op, c.opset))
    GTEST_SKIP() << c.op << " has no reference kernel in this build";
  auto build = [&] {
    auto g = std::make_shared<ir::Graph>();
    g->opsets()[""] = c.domain.empty() ? c.opset : 17;
    if (!c.domain.empty()) g->opsets()[c.domain] = c.opset;
    std::mt19937 rng(42);
    std::vector<ir::Value*> ins;
    for (size_t k = 0; k < c.inputs.size(); ++k) {
      ins.push_back(
          g->add_input(fmt::format("in{}", k),
                       TypeInfo::tensor(DataType::Float32, Shape::from_values(c.inputs[k]))));
    }
    for (size_t k = 0; k < c.weights.size(); ++k) {
      Tensor t(DataType::Float32, c.weights[k]);
      for (float& v : t.values<float>()) v = std::uniform_real_distribution<float>(-1, 1)(rng);
      if (c.op == "Clip") t.data<float>()[0] = k == 0 ? -0.5f : 0.75f;
      if (c.op == "BatchNormalization" && k == 3) {
        for (float& v : t.values<float>()) v = std::abs(v) + 0.5f;  // variance
      }
      ins.push_back(g->add_initializer(fmt::format("w{}", k), std::move(t)));
    }
    for (size_t k = 0; k < c.ints.size(); ++k) {
      const int64_t len = static_cast<int64_t>(c.ints[k].size());
      ins.push_back(g->add_initializer(fmt::format("i{}", k),
                                       Tensor::from_vector<int64_t>({len}, c.ints[k])));
    }
    ir::Value* y = g->add_value("y");
    ir::Node* n = g->add_node(c.op, c.domain, c.name, ins, {y});
    n->set_opset(c.opset);
    for (const auto& [name, a] : c.attrs) n->set_attribute(name, a);
    passes::InferShapes{}.apply(*g);
    g->add_output(y);
    return g;
  };
  auto original = build();
  auto half = build();
  passes::ConvertToFloat16 pass;
  pass.keep_io_types = false;
  ASSERT_TRUE(pass.apply(*half));
  ir::validate_graph(*half);
  ASSERT_EQ(half->node_count(), 1u) << "the op should convert with no Casts";
  const ir::Node* node = half->nodes()[0];
  EXPECT_EQ(node->output(0)->type().dtype, DataType::Float16);

  std::vector<RtValue> feeds = testing::random_feeds(*original, 3);
  std::vector<RtValue> half_feeds;
  for (const RtValue& f : feeds) half_feeds.emplace_back(to_half_tensor(f.tensor()));
  // Float16 rounding of inputs and weights moves the result by a few units of 2^-11.
  Tensor expected = testing::run_graph(original, feeds)[0].tensor();
  Tensor reference = testing::run_graph(half, half_feeds)[0].tensor();
  ASSERT_EQ(reference.dtype(), DataType::Float16);
  EXPECT_LT(rel_l2(reference, expected), 3e-3) << "the reference kernel on float16";

  runtime::Executor ex(half);
  EXPECT_EQ(ex.kernel_choices().at(0).kernel, c.kernel);
  Tensor fast = ex.run(half_feeds)[0].tensor();
  ASSERT_EQ(fast.dtype(), DataType::Float16);
  EXPECT_LT(rel_l2(fast, expected), 3e-3) << "the executor's kernel";
  // Both compute in float32 or wider and round once: at most an ulp or so apart.
  for (int64_t i = 0; i < fast.numel(); ++i) {
    const double a = fast.double_at(i), r = reference.double_at(i);
    EXPECT_LE(std::abs(a - r), 2e-3 * std::abs(r) + 1e-3) << "element " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Cpu, Fp16Ops, ::testing::ValuesIn(op_cases()),
                         [](const ::testing::TestParamInfo<OpCase>& info) {
                           return info.param.name;
                         });

TEST(HalfConvert, VectorAndScalarPathsAgreeIncludingSpecialValues) {
  std::vector<float> v = {
      0.f,           -0.f,    1.f,   -2.5f, 65504.f,
      65519.f,       65520.f, 1e-8f, 6e-5f, std::numeric_limits<float>::infinity(),
      std::nanf(""), 3.14159f};
  for (int i = 0; i < 40; ++i) v.push_back(static_cast<float>(i) * 0.37f - 7.f);
  std::vector<uint16_t> h(v.size());
  floats_to_halves(v.data(), h.data(), v.size());
  for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(h[i], float_to_half_bits(v[i])) << v[i];
  std::vector<float> back(v.size());
  halves_to_floats(h.data(), back.data(), v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const float want = half_bits_to_float(h[i]);
    if (std::isnan(want))
      EXPECT_TRUE(std::isnan(back[i]));
    else
      EXPECT_EQ(back[i], want);
  }
  std::vector<uint16_t> c(v.size());
  EXPECT_EQ(floats_to_halves_clamped(v.data(), c.data(), v.size()), 1u);  // 65520 rounds to inf
  EXPECT_EQ(half_bits_to_float(c[6]), 65504.f);
  EXPECT_TRUE(std::isinf(half_bits_to_float(c[9])));  // a real infinity stays one
}

}  // namespace
}  // namespace kiln
