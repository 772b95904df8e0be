// runtime/precision: error statistics, and the precision gate's check of a candidate against the
// reference on the original graph, with the first drifting node named.
#include "runtime/precision.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "runtime/session.hpp"

namespace kiln::runtime {
namespace {

RtValue floats(std::vector<int64_t> dims, std::vector<float> v) {
  return Tensor::from_vector<float>(std::move(dims), v);
}

TEST(Precision, ErrorStatsMeasureAbsRelativeAndL2) {
  DriftTolerance tol;
  ErrorStats s = error_stats(floats({3}, {1, 2, 3}), floats({3}, {1, 2, 4}), tol);
  EXPECT_TRUE(s.mismatch.empty());
  EXPECT_DOUBLE_EQ(s.max_abs, 1.0);
  EXPECT_DOUBLE_EQ(s.max_rel, 0.25);
  EXPECT_NEAR(s.rel_l2, 1.0 / std::sqrt(21.0), 1e-12);
  EXPECT_FALSE(within_tolerance(s, tol));
  tol.max_rel_l2 = 0.3;
  EXPECT_TRUE(within_tolerance(s, tol));
  // The element rule applies on top of the L2 one.
  tol.rtol = 0.1;
  EXPECT_FALSE(
      within_tolerance(error_stats(floats({3}, {1, 2, 3}), floats({3}, {1, 2, 4}), tol), tol));
}

TEST(Precision, NaNsMatchOnlyNaNsAndIntegersCompareExactly) {
  DriftTolerance tol;
  float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(
      within_tolerance(error_stats(floats({2}, {nan, 1}), floats({2}, {nan, 1}), tol), tol));
  ErrorStats s = error_stats(floats({2}, {nan, 1}), floats({2}, {0, 1}), tol);
  EXPECT_TRUE(std::isinf(s.max_abs));
  EXPECT_FALSE(within_tolerance(s, tol));

  tol.max_rel_l2 = 10;  // no tolerance lets an integer differ
  ErrorStats ints = error_stats(Tensor::from_vector<int64_t>({2}, {1, 1000000}),
                                Tensor::from_vector<int64_t>({2}, {1, 1000001}), tol);
  EXPECT_FALSE(within_tolerance(ints, tol));
  EXPECT_DOUBLE_EQ(ints.max_abs, 1.0);
}

TEST(Precision, CoarseTypesGetALooserDefaultLimit) {
  auto halves = [](std::vector<float> v) {
    Tensor t(DataType::Float16, {static_cast<int64_t>(v.size())});
    for (size_t i = 0; i < v.size(); ++i) t.data<Float16>()[i] = Float16(v[i]);
    return RtValue(t);
  };
  // 1000 and 1000.5 are both exact float16 values: a relative L2 error of 5e-4.
  DriftTolerance tol;
  ErrorStats s = error_stats(halves({1000.5f}), halves({1000}), tol);
  EXPECT_NEAR(s.rel_l2, 5e-4, 1e-9);
  EXPECT_TRUE(within_tolerance(s, tol));
  // The same error in float32 is past the default, as it is for float16 once a limit is given.
  EXPECT_FALSE(
      within_tolerance(error_stats(floats({1}, {1000.5f}), floats({1}, {1000}), tol), tol));
  tol.scale_by_type = false;
  EXPECT_FALSE(within_tolerance(s, tol));
}

TEST(Precision, ShapeOrTypeMismatchNeverPasses) {
  DriftTolerance tol;
  ErrorStats s = error_stats(floats({2}, {1, 2}), floats({1, 2}, {1, 2}), tol);
  EXPECT_NE(s.mismatch.find("shape"), std::string::npos) << s.mismatch;
  EXPECT_FALSE(within_tolerance(s, tol));
  s = error_stats(Tensor::from_vector<double>({2}, {1, 2}), floats({2}, {1, 2}), tol);
  EXPECT_NE(s.mismatch.find("element type"), std::string::npos) << s.mismatch;
}

// Builds graphs of float[2, 3] values by name; `scale` is an initializer read by a named Mul.
class GraphBuilder {
 public:
  GraphBuilder() : g_(std::make_shared<ir::Graph>()) {
    g_->opsets()[""] = 17;
    x_ = g_->add_input("x", type());
  }
  static TypeInfo type() { return TypeInfo::tensor(DataType::Float32, Shape({Dim(2), Dim(3)})); }
  ir::Value* x() const { return x_; }
  ir::Value* constant(const std::string& name, float v) {
    return g_->add_initializer(name, Tensor::from_vector<float>({1}, {v}));
  }
  ir::Value* node(const std::string& op, const std::string& node_name,
                  std::vector<ir::Value*> inputs, const std::string& out) {
    ir::Value* v = g_->add_value(out, type());
    g_->add_node(op, "", node_name, std::move(inputs), {v})->set_opset(17);
    return v;
  }
  std::shared_ptr<ir::Graph> finish(ir::Value* output) {
    g_->add_output(output);
    return g_;
  }

 private:
  std::shared_ptr<ir::Graph> g_;
  ir::Value* x_;
};

// x -> Mul(w1) 'first' -> Relu 'act' -> Mul(w2) 'second' -> y
std::shared_ptr<ir::Graph> two_layer(float w1, float w2) {
  GraphBuilder b;
  ir::Value* h = b.node("Mul", "first", {b.x(), b.constant("w1", w1)}, "h");
  ir::Value* r = b.node("Relu", "act", {h}, "r");
  return b.finish(b.node("Mul", "second", {r, b.constant("w2", w2)}, "y"));
}

Session session_of(std::shared_ptr<ir::Graph> g) {
  ir::Model m;
  m.graph = std::move(g);
  m.ir_version = 8;
  SessionOptions o;
  o.optimize = false;
  return Session(std::move(m), o);
}

Feeds feeds() {
  return {{"x", floats({2, 3}, {-1.5f, -0.5f, 0.25f, 0.5f, 1, 2})}};
}

TEST(Precision, GatePassesAnUnchangedGraph) {
  Session candidate = session_of(two_layer(2, 3));
  PrecisionReport r = check_precision(candidate, two_layer(2, 3), feeds(), {});
  ASSERT_EQ(r.outputs.size(), 1u);
  EXPECT_TRUE(r.pass());
  EXPECT_EQ(r.outputs[0].stats.rel_l2, 0);
  EXPECT_FALSE(r.first_drift);
}

TEST(Precision, GateNamesTheNodeWhoseWeightsChanged) {
  Session candidate = session_of(two_layer(2, 3.01f));
  PrecisionReport r = check_precision(candidate, two_layer(2, 3), feeds(), {});
  EXPECT_FALSE(r.pass());
  ASSERT_TRUE(r.first_drift);
  EXPECT_TRUE(r.reproduced);
  EXPECT_EQ(r.first_drift->node, "Mul 'second'");
  EXPECT_EQ(r.first_drift->value, "y");
  EXPECT_NEAR(r.first_drift->stats.rel_l2, 0.01 / 3, 1e-6);

  // A change early on drifts everything after it; the first node is the one named.
  Session early = session_of(two_layer(2.5f, 3));
  r = check_precision(early, two_layer(2, 3), feeds(), {});
  ASSERT_TRUE(r.first_drift);
  EXPECT_EQ(r.first_drift->node, "Mul 'first'");
  EXPECT_EQ(r.first_drift->value, "h");

  // Within a looser tolerance the same change passes.
  DriftTolerance loose;
  loose.max_rel_l2 = 0.01;
  EXPECT_TRUE(check_precision(candidate, two_layer(2, 3), feeds(), loose).pass());
}

TEST(Precision, ValueRewrittenByALegitimateFoldIsNotBlamed) {
  // Reference: a = x*2; b = a+1; c = Relu(b); y = c*3.
  GraphBuilder ref;
  ir::Value* a = ref.node("Mul", "double", {ref.x(), ref.constant("two", 2)}, "a");
  ir::Value* b = ref.node("Add", "shift", {a, ref.constant("one", 1)}, "b");
  ir::Value* c = ref.node("Relu", "act", {b}, "c");
  auto reference = ref.finish(ref.node("Mul", "scale", {c, ref.constant("three", 3)}, "y"));
  // Candidate: the Add folded so that "a" now holds what "b" held (as BatchNormalization folded
  // into a Conv does), and a wrong last weight.
  GraphBuilder cand;
  ir::Value* t = cand.node("Mul", "double", {cand.x(), cand.constant("two", 2)}, "t");
  ir::Value* a2 = cand.node("Add", "shift", {t, cand.constant("one", 1)}, "a");
  ir::Value* c2 = cand.node("Relu", "act", {a2}, "c");
  auto candidate = cand.finish(cand.node("Mul", "scale", {c2, cand.constant("three", 3.3f)}, "y"));

  auto drift = find_first_drift(reference, candidate, feeds(), {});
  ASSERT_TRUE(drift);
  EXPECT_EQ(drift->node, "Mul 'scale'");  // not Mul 'double', whose "a" differs legitimately
}

TEST(Precision, RenamedValuesAreMatchedByPlace) {
  // The candidate renamed "h" (as a fusion pass names its result); the Relu reading it still has
  // its output "r", so the renamed value is compared where "h" stood, and the Mul that made it,
  // whose weight is wrong, is named.
  GraphBuilder cand;
  ir::Value* h = cand.node("Mul", "first", {cand.x(), cand.constant("w1", 2.5f)}, "h_fused");
  ir::Value* r = cand.node("Relu", "act", {h}, "r");
  auto candidate = cand.finish(cand.node("Mul", "second", {r, cand.constant("w2", 3)}, "y"));
  auto drift = find_first_drift(two_layer(2, 3), candidate, feeds(), {});
  ASSERT_TRUE(drift);
  EXPECT_EQ(drift->node, "Mul 'first'");
  EXPECT_EQ(drift->value, "h");
  EXPECT_TRUE(drift->unobserved.empty());
}

TEST(Precision, ValuesWithNoCounterpartAreReportedAsUnobserved) {
  // Both "h" and "r" renamed: "r" is matched by place (the last Mul reads it), "h" cannot be (the
  // node reading it renamed its output too), so the drift is seen first at the Relu and the Mul
  // before it is named as where it may start.
  GraphBuilder cand;
  ir::Value* h = cand.node("Mul", "first", {cand.x(), cand.constant("w1", 2.5f)}, "m");
  ir::Value* r = cand.node("Relu", "act", {h}, "r2");
  auto candidate = cand.finish(cand.node("Mul", "second", {r, cand.constant("w2", 3)}, "y"));
  auto drift = find_first_drift(two_layer(2, 3), candidate, feeds(), {});
  ASSERT_TRUE(drift);
  EXPECT_EQ(drift->node, "Relu 'act'");
  EXPECT_EQ(drift->value, "r");
  ASSERT_EQ(drift->unobserved.size(), 1u);
  EXPECT_EQ(drift->unobserved[0], "Mul 'first'");
}

}  // namespace
}  // namespace kiln::runtime
