// Symbolic shape inference through the shape arithmetic exporters emit (torch's expand, slicing
// by a sequence length, attention's batch * heads reshapes). Each test builds the pattern as the
// exporter writes it, infers shapes, and runs the graph to check the inferred dims hold.
#include <gtest/gtest.h>

#include "passes/passes.hpp"
#include "runtime/interpreter.hpp"
#include "runtime/memory_planner.hpp"

namespace kiln {
namespace {

TypeInfo tensor_type(DataType t, std::vector<Dim> dims) {
  return TypeInfo::tensor(t, Shape(std::move(dims)));
}

class Builder {
 public:
  explicit Builder(int opset = 17) : g(std::make_shared<ir::Graph>()), opset_(opset) {}

  ir::Value* op(const std::string& op_type, std::vector<ir::Value*> in,
                std::map<std::string, ir::Attribute> attrs = {}) {
    ir::Value* out = g->add_value(fmt::format("v{}", counter_++));
    ir::Node* n = g->add_node(op_type, "", fmt::format("n{}", counter_), std::move(in), {out});
    n->set_opset(opset_);
    for (auto& [name, a] : attrs) n->set_attribute(name, std::move(a));
    return out;
  }
  ir::Value* ints(std::vector<int64_t> v, bool scalar = false) {
    std::vector<int64_t> dims;
    if (!scalar) dims.push_back(static_cast<int64_t>(v.size()));
    return g->add_initializer(fmt::format("c{}", counter_++),
                              Tensor::from_vector<int64_t>(dims, v));
  }
  // Shape(x)[i] as a 1-element tensor, as exporters write it.
  ir::Value* dim_of(ir::Value* x, int64_t i) {
    ir::Value* d = op("Gather", {op("Shape", {x}), ints({i}, true)}, {{"axis", int64_t{0}}});
    return op("Unsqueeze", {d, ints({0})});
  }
  std::string inferred(const ir::Value* v) {
    passes::InferShapes{}.apply(*g);
    return v->type().to_string();
  }
  std::vector<int64_t> run_dims(const ir::Value* out, std::vector<RtValue> inputs) {
    g->add_output(const_cast<ir::Value*>(out));
    runtime::Interpreter interp(g);
    auto results = interp.run(inputs);
    return results.back().tensor().dims();
  }

  std::shared_ptr<ir::Graph> g;

 private:
  int opset_;
  int counter_ = 0;
};

TEST(SymbolicShapes, TorchExpandPatternKeepsTheBatchDim) {
  // class_token.expand(x.shape[0], -1, -1) exports as
  // Expand(t, Where(Equal(s, ConstantOfShape(Shape(Reshape(s, [-1]))) * -1), ones, s)).
  Builder b;
  ir::Value* x =
      b.g->add_input("x", tensor_type(DataType::Float32, {Dim::symbol("batch", 1, 8), 4, 6}));
  ir::Value* token = b.g->add_initializer("token", Tensor(DataType::Float32, {1, 1, 6}));
  ir::Value* s =
      b.op("Concat", {b.dim_of(x, 0), b.ints({-1}), b.ints({-1})}, {{"axis", int64_t{0}}});
  ir::Value* flat = b.op("Reshape", {s, b.ints({-1})});
  Tensor one = Tensor::from_vector<int64_t>({1}, {1});
  ir::Value* ones = b.op("ConstantOfShape", {b.op("Shape", {flat})}, {{"value", one}});
  ir::Value* minus = b.op("Mul", {ones, b.ints({-1}, true)});
  ir::Value* target = b.op("Where", {b.op("Equal", {flat, minus}), ones, flat});
  ir::Value* y = b.op("Expand", {token, target});
  EXPECT_EQ(b.inferred(y), "float[batch[1..8],1,6]");
  EXPECT_EQ(b.run_dims(y, {Tensor(DataType::Float32, {3, 4, 6})}), (std::vector<int64_t>{3, 1, 6}));
}

TEST(SymbolicShapes, SlicingToASequenceLengthKeepsItWhenTheTableIsLongEnough) {
  // position_ids[:, :seq] with position_ids a [1, 16] table and seq an input dim.
  for (int64_t max_len : {int64_t{12}, int64_t{16}, int64_t{40}}) {
    Builder b;
    ir::Value* ids =
        b.g->add_input("ids", tensor_type(DataType::Int64, {2, Dim::symbol("seq", 1, max_len)}));
    ir::Value* table = b.g->add_initializer("table", Tensor(DataType::Int64, {1, 16}));
    ir::Value* y = b.op("Slice", {table, b.ints({0}), b.dim_of(ids, 1), b.ints({1})});
    // Past the table's length the result is min(seq, 16): a symbol of its own, bounded by 16.
    std::string want =
        max_len <= 16 ? fmt::format("int64[1,seq[1..{}]]", max_len) : "int64[1,min(seq,16)[1..16]]";
    EXPECT_EQ(b.inferred(y), want) << "seq up to " << max_len;
    EXPECT_EQ(b.run_dims(y, {Tensor(DataType::Int64, {2, 7})}), (std::vector<int64_t>{1, 7}));
  }
}

TEST(SymbolicShapes, AddingASlicedTableKeepsTheSequenceLength) {
  // BERT's embeddings: word [2, seq, 4] + position_table[:, :seq] ([1, 16, 4] sliced) is
  // [2, seq, 4] whatever seq's range: where seq <= 16 the two agree; past it the sum fails.
  Builder b;
  ir::Value* ids = b.g->add_input("ids", tensor_type(DataType::Int64, {2, Dim::symbol("seq")}));
  ir::Value* words =
      b.g->add_input("words", tensor_type(DataType::Float32, {2, Dim::symbol("seq"), 4}));
  ir::Value* table = b.g->add_initializer("table", Tensor(DataType::Float32, {1, 16, 4}));
  ir::Value* pos = b.op("Slice", {table, b.ints({0}), b.dim_of(ids, 1), b.ints({1})});
  EXPECT_EQ(b.inferred(pos), "float[1,min(seq,16)[0..16],4]");
  ir::Value* sum = b.op("Add", {words, pos});
  EXPECT_EQ(b.inferred(sum), "float[2,seq,4]");
  ir::Value* other = b.op("Add", {pos, words});
  EXPECT_EQ(b.inferred(other), "float[2,seq,4]");
  EXPECT_EQ(
      b.run_dims(sum, {Tensor(DataType::Int64, {2, 5}), Tensor(DataType::Float32, {2, 5, 4})}),
      (std::vector<int64_t>{2, 5, 4}));
  // Another symbol against the clamped one stays undecided.
  ir::Value* lengths =
      b.g->add_input("other", tensor_type(DataType::Float32, {2, Dim::symbol("len"), 4}));
  EXPECT_EQ(b.inferred(b.op("Add", {lengths, pos})), "float[2,?,4]");
}

TEST(SymbolicShapes, SlicingFromASequenceLengthIsUnknown) {
  Builder b;
  ir::Value* ids =
      b.g->add_input("ids", tensor_type(DataType::Int64, {2, Dim::symbol("seq", 1, 8)}));
  ir::Value* table = b.g->add_initializer("table", Tensor(DataType::Int64, {1, 16}));
  ir::Value* y = b.op("Slice", {table, b.dim_of(ids, 1), b.ints({16}), b.ints({1})});
  EXPECT_EQ(b.inferred(y), "int64[1,?]");
}

TEST(SymbolicShapes, BatchTimesHeadsIsAPlannableSymbol) {
  // torch's MultiheadAttention: [seq, batch, 6] -> [seq, batch * heads, 6 / heads], heads 3.
  Builder b;
  ir::Value* x =
      b.g->add_input("x", tensor_type(DataType::Float32, {5, Dim::symbol("batch", 1, 8), 6}));
  ir::Value* batch =
      b.op("Gather", {b.op("Shape", {x}), b.ints({1}, true)}, {{"axis", int64_t{0}}});
  ir::Value* heads = b.op("Unsqueeze", {b.op("Mul", {batch, b.ints({3}, true)}), b.ints({0})});
  ir::Value* target = b.op("Concat", {b.ints({5}), heads, b.ints({2})}, {{"axis", int64_t{0}}});
  ir::Value* y = b.op("Reshape", {x, target});
  ir::Value* z = b.op("Relu", {y});
  EXPECT_EQ(b.inferred(z), "float[5,batch*3[3..24],2]");
  EXPECT_EQ(b.run_dims(z, {Tensor(DataType::Float32, {5, 4, 6})}),
            (std::vector<int64_t>{5, 12, 2}));
  // Both reshaped values are planned for the declared maximum batch.
  runtime::MemoryPlan plan = runtime::plan_memory(*b.g);
  EXPECT_TRUE(plan.unplanned.empty());
  for (const auto& buf : plan.buffers) {
    if (buf.value == z) {
      EXPECT_EQ(buf.bytes, 5u * 24 * 2 * 4);
    }
  }
}

TEST(SymbolicShapes, OpsetOneSliceAttributesGiveStaticDims) {
  Builder b(9);
  ir::Value* x = b.g->add_input("x", tensor_type(DataType::Float32, {4, 10}));
  ir::Value* y = b.op("Slice", {x},
                      {{"starts", std::vector<int64_t>{1, 2}},
                       {"ends", std::vector<int64_t>{3, 100}},
                       {"axes", std::vector<int64_t>{0, 1}}});
  EXPECT_EQ(b.inferred(y), "float[2,8]");
  EXPECT_EQ(b.run_dims(y, {Tensor(DataType::Float32, {4, 10})}), (std::vector<int64_t>{2, 8}));
}

}  // namespace
}  // namespace kiln
