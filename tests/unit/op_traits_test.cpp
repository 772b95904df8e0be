// Op traits (ops/op_traits.hpp) against the lists they replaced, and the point functions
// (ops/point_ops.hpp) against the reference kernels and the CPU loops on edge values.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "backends/cpu/vector_math.hpp"
#include "ops/fused_activation.hpp"
#include "ops/op_flops.hpp"
#include "ops/point_ops.hpp"
#include "ops/registry.hpp"
#include "passes/passes.hpp"
#include "runtime/executor.hpp"
#include "runtime/interpreter.hpp"
#include "runtime/memory_planner.hpp"

namespace kiln {
namespace {

using ops::OpRegistry;
using ops::OpTraits;

// Every registered (domain, op) with its newest registration's traits.
std::map<std::pair<std::string, std::string>, OpTraits> all_traits() {
  std::map<std::pair<std::string, std::string>, OpTraits> out;
  for (const std::string& name : OpRegistry::instance().op_names()) {
    std::string domain, op = name;
    if (const size_t dot = name.rfind('.'); dot != std::string::npos) {
      domain = name.substr(0, dot);
      op = name.substr(dot + 1);
    }
    const ops::OpDef* d = OpRegistry::instance().newest(domain, op);
    EXPECT_NE(d, nullptr) << name;
    if (d) out[{domain, op}] = d->traits;
  }
  return out;
}

// A lone node of `op` (no inputs wired) for trait lookups.
struct LoneNode {
  explicit LoneNode(const std::string& op, const std::string& domain = "", int opset = 17)
      : graph("t") {
    ir::Value* x = graph.add_input("x", TypeInfo::tensor(DataType::Float32));
    node = graph.add_node(op, domain, "n", {x}, {graph.add_value("y")});
    node->set_opset(opset);
  }
  ir::Graph graph;
  ir::Node* node;
};

// convert_to_fp16's table before the traits (domain, op, input mask, output mask).
struct OldFp16 {
  const char* domain;
  const char* op;
  uint32_t inputs = ~0u, outputs = ~0u;
};
const OldFp16 kOldFp16[] = {
    {"", "Conv"},
    {"", "ConvTranspose"},
    {"", "MatMul"},
    {"", "Gemm"},
    {"ai.kiln", "FusedConv"},
    {"ai.kiln", "FusedGemm"},
    {"ai.kiln", "FusedMatMul"},
    {"ai.kiln", "ScaledDotProductAttention"},
    {"", "MaxPool"},
    {"", "AveragePool"},
    {"", "GlobalAveragePool"},
    {"", "GlobalMaxPool"},
    {"", "BatchNormalization", ~0u, 1},
    {"", "InstanceNormalization"},
    {"", "LayerNormalization", ~0u, 1},
    {"ai.kiln", "LayerNormalization", ~0u, 1},
    {"ai.kiln", "SkipLayerNormalization", ~0u, 0b1001},
    {"", "Softmax"},
    {"", "ReduceMean"},
    {"", "ReduceMax"},
    {"", "ReduceMin"},
    {"", "Relu"},
    {"", "LeakyRelu"},
    {"", "PRelu"},
    {"", "Clip"},
    {"", "Sigmoid"},
    {"", "HardSigmoid"},
    {"", "HardSwish"},
    {"", "Tanh"},
    {"", "Elu"},
    {"", "Selu"},
    {"", "Gelu"},
    {"ai.kiln", "Gelu"},
    {"", "Erf"},
    {"", "Softplus"},
    {"", "Mish"},
    {"", "Abs"},
    {"", "Neg"},
    {"", "Sqrt"},
    {"", "Add"},
    {"", "Sub"},
    {"", "Mul"},
    {"", "Div"},
    {"", "Max"},
    {"", "Min"},
    {"", "Where"},
    {"", "IsNaN"},  // added after the table moved into the traits: exact in float16
    {"", "Reshape"},
    {"", "Flatten"},
    {"", "Squeeze"},
    {"", "Unsqueeze"},
    {"", "Transpose"},
    {"", "Concat"},
    {"", "Split"},
    {"", "Slice"},
    {"", "Gather"},
    {"", "Expand"},
    {"", "Tile"},
    {"", "Pad"},
    {"", "Identity"},
    {"", "DepthToSpace"},
    {"", "SpaceToDepth"},
    {"", "Resize", 1},
    {"", "Upsample", 1},
    // Added with static INT8 in half-precision engines: x only (the scale stays float32), and
    // only where x arrives in the half type.
    {"", "QuantizeLinear", 1, 0},
    // Added then too: the float result only, bfloat16 only.
    {"ai.kiln", "FusedQLinearMatMul", 0, 1},
};

TEST(OpTraits, Fp16SafeOpsAreExactlyTheOldTable) {
  std::set<std::pair<std::string, std::string>> old;
  for (const OldFp16& r : kOldFp16) {
    old.insert({r.domain, r.op});
    LoneNode n(r.op, r.domain);
    const ops::Fp16Slots& s = ops::traits_of(*n.node).fp16;
    EXPECT_TRUE(s.safe) << r.domain << "::" << r.op;
    EXPECT_EQ(s.inputs, r.inputs) << r.op;
    EXPECT_EQ(s.outputs, r.outputs) << r.op;
    const DataType half = s.bf16_only ? DataType::BFloat16 : DataType::Float16;
    EXPECT_TRUE(passes::fp16_convertible(*n.node, half)) << r.op;
    if (s.bf16_only) EXPECT_FALSE(passes::fp16_convertible(*n.node)) << r.op;
  }
  for (const auto& [key, t] : all_traits()) {
    if (t.fp16.safe) {
      EXPECT_TRUE(old.count(key)) << key.first << "::" << key.second;
    }
  }
}

TEST(OpTraits, TransposePassThroughIsExactlyTheOldLists) {
  // cancel_transposes' kUnary, kBinary and Clip before the traits.
  const std::set<std::string> old = {"Abs",         "Acos",       "Acosh",
                                     "Asin",        "Asinh",      "Atan",
                                     "Atanh",       "Ceil",       "Cos",
                                     "Cosh",        "Elu",        "Erf",
                                     "Exp",         "Floor",      "Gelu",
                                     "HardSigmoid", "HardSwish",  "Identity",
                                     "IsInf",       "IsNaN",      "LeakyRelu",
                                     "Log",         "Mish",       "Neg",
                                     "Not",         "Reciprocal", "Relu",
                                     "Round",       "Selu",       "Sigmoid",
                                     "Sign",        "Sin",        "Sinh",
                                     "Softplus",    "Softsign",   "Sqrt",
                                     "Tan",         "Tanh",       "ThresholdedRelu",
                                     "Celu",        "Swish",      "Cast",
                                     "Clip",        "Add",        "Sub",
                                     "Mul",         "Div",        "Pow",
                                     "Max",         "Min"};
  std::set<std::string> now;
  for (const auto& [key, t] : all_traits()) {
    if (t.transposes) {
      EXPECT_EQ(key.first, "") << key.second;
      now.insert(key.second);
    }
  }
  EXPECT_EQ(now, old);
}

// Transpose -> op -> inverse Transpose: the pair cancels through a pass-through op and stays
// around one that is not.
bool cancels_through(const std::string& op, bool binary) {
  auto g = std::make_shared<ir::Graph>("t");
  g->opsets()[""] = 17;
  ir::Value* x =
      g->add_input("x", TypeInfo::tensor(DataType::Float32, Shape::from_values({2, 3, 4})));
  auto add = [&](const std::string& type, std::vector<ir::Value*> in, const std::string& out) {
    ir::Node* n = g->add_node(type, "", out + "_node", std::move(in), {g->add_value(out)});
    n->set_opset(17);
    return n;
  };
  ir::Node* t1 = add("Transpose", {x}, "t1");
  t1->set_attribute("perm", ir::Attribute(std::vector<int64_t>{2, 0, 1}));
  std::vector<ir::Value*> in = {t1->output(0)};
  if (binary) in.push_back(g->add_initializer("s", Tensor::scalar<float>(2.f)));
  ir::Node* e = add(op, in, "e");
  ir::Node* t2 = add("Transpose", {e->output(0)}, "t2");
  t2->set_attribute("perm", ir::Attribute(std::vector<int64_t>{1, 2, 0}));
  g->add_output(t2->output(0));
  passes::InferShapes{}.apply(*g);
  passes::CancelTransposes{}.apply(*g);
  for (const ir::Node* n : g->nodes()) {
    if (n->op_type() == "Transpose") return false;
  }
  return true;
}

TEST(OpTraits, CancelTransposesStillCancelsThroughTheSameOps) {
  for (const char* op : {"Relu", "Sigmoid", "Softsign", "Identity", "Exp"}) {
    EXPECT_TRUE(cancels_through(op, false)) << op;
  }
  for (const char* op : {"Add", "Mul", "Pow", "Max"}) EXPECT_TRUE(cancels_through(op, true)) << op;
  // Element-wise but not in the old lists: still blocks the rewrite.
  EXPECT_FALSE(cancels_through("Softmax", false));
  EXPECT_FALSE(cancels_through("Mod", true));
}

TEST(OpTraits, ViewOpsAreViews) {
  std::set<std::string> views;
  for (const auto& [key, t] : all_traits()) {
    if (t.view) views.insert(key.first + "::" + key.second);
  }
  EXPECT_EQ(views, (std::set<std::string>{"::Flatten", "::Identity", "::Reshape", "::Squeeze",
                                          "::Unsqueeze"}));
  for (const char* op : {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"}) {
    LoneNode n(op);
    EXPECT_TRUE(runtime::is_view_op(*n.node)) << op;
  }
  LoneNode relu("Relu"), transpose("Transpose");
  EXPECT_FALSE(runtime::is_view_op(*relu.node));
  EXPECT_FALSE(runtime::is_view_op(*transpose.node));
}

TEST(OpTraits, UnknownOpsAndOpsetsGetEmptyTraits) {
  LoneNode unknown("NoSuchOp"), other_domain("Relu", "com.example");
  for (const LoneNode* n : {&unknown, &other_domain}) {
    const OpTraits& t = ops::traits_of(*n->node);
    EXPECT_EQ(t.pointwise, ops::Pointwise::None);
    EXPECT_FALSE(t.view || t.fp16.safe || t.transposes || t.quantization);
    EXPECT_EQ(t.flops, nullptr);
    EXPECT_EQ(t.shape_inputs, 0u);
  }
  // A hand-built node without an opset gets the newest registration's traits.
  LoneNode no_opset("Reshape", "", 0);
  EXPECT_TRUE(ops::traits_of(*no_opset.node).view);
  EXPECT_EQ(ops::traits_of(*no_opset.node).shape_inputs, ops::slots({1}));
  LoneNode slice("Slice");
  EXPECT_EQ(ops::traits_of(*slice.node).shape_inputs, ops::slots({1, 2, 3, 4}));
}

using DimsTable = std::map<std::string, std::vector<int64_t>>;

// FLOPs of one `op` node reading the named inputs ("x", "w", "b"; "" for an absent one) and
// writing "y", with the dims in `table` (by value name; a value not there has unknown dims).
std::optional<double> flops_of(const std::string& op, const std::string& domain,
                               const std::vector<std::string>& inputs, const DimsTable& table,
                               std::map<std::string, ir::Attribute> attrs = {}) {
  ir::Graph g("t");
  std::vector<ir::Value*> in;
  for (const std::string& name : inputs) {
    in.push_back(name.empty() ? nullptr : g.add_input(name, TypeInfo::tensor(DataType::Float32)));
  }
  ir::Node* n = g.add_node(op, domain, op, std::move(in), {g.add_value("y")});
  n->set_opset(17);
  for (auto& [name, a] : attrs) n->set_attribute(name, a);
  const ops::ValueDims dims = [&](const ir::Value* v) -> std::optional<std::vector<int64_t>> {
    auto it = v ? table.find(v->name()) : table.end();
    if (it == table.end()) return std::nullopt;
    return it->second;
  };
  const ops::FlopsFn fn = ops::traits_of(*n).flops;
  return fn ? fn(*n, dims) : ops::flops_per_output(*n, dims);
}

TEST(OpTraits, FlopsFollowTheFormulas) {
  // Conv: 2 * |Y| * C/group * kh * kw, plus one per output for the bias (and the activation).
  const DimsTable conv = {
      {"x", {1, 3, 8, 8}}, {"w", {4, 3, 3, 3}}, {"b", {4}}, {"y", {1, 4, 6, 6}}};
  EXPECT_EQ(flops_of("Conv", "", {"x", "w"}, conv), 2.0 * 144 * 27);
  EXPECT_EQ(flops_of("Conv", "", {"x", "w", "b"}, conv), 2.0 * 144 * 27 + 144);
  EXPECT_EQ(flops_of("FusedConv", "ai.kiln", {"x", "w", "b"}, conv), 2.0 * 144 * 27 + 2 * 144);
  // ConvTranspose: 2 * |X| * M/group * kh * kw.
  const DimsTable convt = {{"x", {1, 4, 6, 6}}, {"w", {4, 3, 3, 3}}, {"y", {1, 3, 8, 8}}};
  EXPECT_EQ(flops_of("ConvTranspose", "", {"x", "w"}, convt), 2.0 * 144 * 27);
  // MatMul [2, 5, 7] x [7, 9]: 2 * |Y| * K.
  const DimsTable mm = {{"x", {2, 5, 7}}, {"w", {7, 9}}, {"y", {2, 5, 9}}};
  EXPECT_EQ(flops_of("MatMul", "", {"x", "w"}, mm), 2.0 * 90 * 7);
  EXPECT_EQ(flops_of("FusedMatMul", "ai.kiln", {"x", "w"}, mm), 2.0 * 90 * 7 + 90);
  // Gemm: K is A's second dim, or its first with transA.
  EXPECT_EQ(flops_of("Gemm", "", {"x", "w", "b"}, {{"x", {4, 6}}, {"y", {4, 3}}}),
            2.0 * 12 * 6 + 12);
  EXPECT_EQ(flops_of("Gemm", "", {"x", "w", "b"}, {{"x", {6, 4}}, {"y", {4, 3}}},
                     {{"transA", ir::Attribute(int64_t{1})}}),
            2.0 * 12 * 6 + 12);
  // Pooling by window, reductions by input element, data movement free.
  EXPECT_EQ(flops_of("MaxPool", "", {"x"}, {{"y", {1, 3, 4, 4}}},
                     {{"kernel_shape", ir::Attribute(std::vector<int64_t>{2, 2})}}),
            48.0 * 4);
  EXPECT_EQ(flops_of("ReduceSum", "", {"x"}, conv), 192.0);
  EXPECT_EQ(flops_of("Reshape", "", {"x", "w"}, conv), 0.0);
  // An unknown shape is not counted; an op without a formula counts one per output element.
  EXPECT_EQ(flops_of("Conv", "", {"x", "w"}, {}), std::nullopt);
  EXPECT_EQ(flops_of("Relu", "", {"x"}, conv), 144.0);
  EXPECT_EQ(flops_of("NoSuchOp", "", {"x"}, conv), 144.0);
}

// ---- point functions on edge values ----

const std::vector<float> kEdges = {std::numeric_limits<float>::quiet_NaN(),
                                   std::numeric_limits<float>::infinity(),
                                   -std::numeric_limits<float>::infinity(),
                                   -0.f,
                                   0.f,
                                   1e-30f,
                                   -1e-30f,
                                   std::numeric_limits<float>::denorm_min(),
                                   -1.f,
                                   1.f,
                                   -2.5f,
                                   3.f,
                                   -88.f,
                                   88.f,
                                   -1000.f,
                                   1000.f,
                                   std::numeric_limits<float>::max(),
                                   std::numeric_limits<float>::lowest()};

// The reference kernel of `op` on kEdges (float32).
std::vector<float> reference(const std::string& op,
                             std::map<std::string, ir::Attribute> attrs = {}) {
  auto g = std::make_shared<ir::Graph>("t");
  g->opsets()[""] = 20;
  const auto n = static_cast<int64_t>(kEdges.size());
  ir::Value* x = g->add_input("x", TypeInfo::tensor(DataType::Float32, Shape::from_values({n})));
  ir::Node* node = g->add_node(op, "", "n", {x}, {g->add_value("y")});
  node->set_opset(20);
  for (auto& [name, a] : attrs) node->set_attribute(name, a);
  passes::InferShapes{}.apply(*g);
  g->add_output(node->output(0));
  std::vector<RtValue> out =
      runtime::Interpreter(g).run({RtValue(Tensor::from_vector<float>({n}, kEdges))});
  const Tensor& t = out.at(0).tensor();
  return {t.data<float>(), t.data<float>() + t.numel()};
}

template <typename F>
std::vector<float> through_double(F f) {
  std::vector<float> out;
  for (float v : kEdges) out.push_back(static_cast<float>(f(static_cast<double>(v))));
  return out;
}

void expect_same_bits(const std::vector<float>& a, const std::vector<float>& b,
                      const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    // A NaN's sign and payload depend on the instructions the compiler picked, not the formula.
    if (std::isnan(a[i]) && std::isnan(b[i])) continue;
    EXPECT_EQ(std::bit_cast<uint32_t>(a[i]), std::bit_cast<uint32_t>(b[i]))
        << what << " at x = " << kEdges[i] << ": " << a[i] << " vs " << b[i];
  }
}

TEST(PointOps, ReferenceKernelsComputeThePointFunctions) {
  using ir::Attribute;
  expect_same_bits(reference("Relu"), through_double(point::relu<double>), "Relu");
  expect_same_bits(reference("Sigmoid"), through_double(point::sigmoid<double>), "Sigmoid");
  expect_same_bits(reference("Tanh"), through_double(point::tanh<double>), "Tanh");
  expect_same_bits(reference("Exp"), through_double(point::exp<double>), "Exp");
  expect_same_bits(reference("Log"), through_double(point::log<double>), "Log");
  expect_same_bits(reference("Abs"), through_double(point::abs<double>), "Abs");
  expect_same_bits(reference("Neg"), through_double(point::neg<double>), "Neg");
  expect_same_bits(reference("Sqrt"), through_double(point::sqrt<double>), "Sqrt");
  expect_same_bits(reference("Reciprocal"), through_double(point::reciprocal<double>),
                   "Reciprocal");
  expect_same_bits(reference("Erf"), through_double(point::erf<double>), "Erf");
  expect_same_bits(reference("Softplus"), through_double(point::softplus<double>), "Softplus");
  expect_same_bits(reference("Softsign"), through_double(point::softsign<double>), "Softsign");
  expect_same_bits(reference("HardSwish"), through_double(point::hard_swish<double>), "HardSwish");
  expect_same_bits(reference("Mish"), through_double(point::mish<double>), "Mish");
  expect_same_bits(reference("Gelu"), through_double(point::gelu_erf<double>), "Gelu");
  expect_same_bits(reference("Gelu", {{"approximate", Attribute(std::string("tanh"))}}),
                   through_double(point::gelu_tanh<double>), "Gelu tanh");
  const double a = 0.1f, b = 0.6f;  // the attributes are float32
  expect_same_bits(reference("LeakyRelu", {{"alpha", Attribute(0.1f)}}),
                   through_double([&](double v) { return point::leaky_relu(v, a); }), "LeakyRelu");
  expect_same_bits(reference("Elu", {{"alpha", Attribute(0.1f)}}),
                   through_double([&](double v) { return point::elu(v, a); }), "Elu");
  expect_same_bits(
      reference("HardSigmoid", {{"alpha", Attribute(0.1f)}, {"beta", Attribute(0.6f)}}),
      through_double([&](double v) { return point::hard_sigmoid(v, a, b); }), "HardSigmoid");
}

TEST(PointOps, EdgeValues) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_TRUE(std::isnan(point::relu(nan)));
  EXPECT_TRUE(std::signbit(point::relu(-0.0)));  // -0 is not below 0: it passes through
  EXPECT_EQ(point::relu(-inf), 0.0);
  EXPECT_EQ(point::sigmoid(-inf), 0.0);
  EXPECT_EQ(point::sigmoid(inf), 1.0);
  EXPECT_EQ(point::sigmoid(-1000.0), 0.0);  // no inf / inf
  EXPECT_EQ(point::softplus(1000.0), 1000.0);
  EXPECT_TRUE(std::isnan(point::clip(nan, -1.0, 1.0)));
  EXPECT_EQ(point::clip(5.0, 2.0, 1.0), 1.0);  // min > max gives max, as ONNX says
  EXPECT_EQ(point::clip(-inf, -1.0, 1.0), -1.0);
  EXPECT_TRUE(std::isnan(point::maximum(nan, 1.0)));
  EXPECT_TRUE(std::isnan(point::maximum(1.0, nan)));
  EXPECT_TRUE(std::isnan(point::minimum(1.0, nan)));
  EXPECT_EQ(point::maximum(-inf, 3.0), 3.0);
  EXPECT_EQ(point::abs(std::numeric_limits<int8_t>::min()), std::numeric_limits<int8_t>::min());
  EXPECT_EQ(point::neg(std::numeric_limits<int32_t>::min()), std::numeric_limits<int32_t>::min());
  EXPECT_EQ(point::div(std::numeric_limits<int32_t>::min(), -1),
            std::numeric_limits<int32_t>::min());
  EXPECT_EQ(point::add<uint8_t>(250, 10), 4);
  EXPECT_TRUE(std::signbit(point::neg(0.0)));
  EXPECT_TRUE(std::isnan(point::hard_swish(-inf)));  // -inf * 0, as the reference always gave
  EXPECT_EQ(point::sign(-0.0), 0.0);
  EXPECT_TRUE(std::isnan(point::sign(nan)));
}

TEST(PointOps, FusedActivationAndCpuLoopsAgreeWithThePointFunctions) {
  using ops::Activation;
  const struct {
    Activation kind;
    float alpha, beta;
  } cases[] = {{Activation::Relu, 0, 0},      {Activation::LeakyRelu, 0.1f, 0},
               {Activation::Clip, -1.f, 2.f}, {Activation::Clip, 2.f, -1.f},
               {Activation::Sigmoid, 0, 0},   {Activation::Tanh, 0, 0},
               {Activation::Gelu, 0, 0},      {Activation::GeluTanh, 0, 0}};
  for (const auto& c : cases) {
    ops::FusedActivation act{c.kind, c.alpha, c.beta};
    std::vector<float> loop(kEdges.size());
    backends::cpu::apply_activation(act, kEdges.data(), loop.data(),
                                    static_cast<int64_t>(kEdges.size()));
    const std::vector<float> fused = through_double([&](double v) { return act.apply(v); });
    // Relu, LeakyRelu and Clip compute exactly in float (a float product is exact in double).
    expect_same_bits(loop, fused, ops::FusedActivation::name(c.kind));
  }
  // The fused activation is the unfused reference: a fused node computes what the pair did.
  expect_same_bits(
      through_double([](double v) { return ops::FusedActivation{Activation::Sigmoid}.apply(v); }),
      reference("Sigmoid"), "fused Sigmoid vs Sigmoid");
}

}  // namespace
}  // namespace kiln
