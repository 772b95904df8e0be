// Server ensembles: the plan of an ensemble config (tensors, producers, readers, sorted maps),
// the checks against composing models, and what completion fills in. The messages are checked
// end to end (and against Triton) in tests/server/test_ensemble.py.
#include <gtest/gtest.h>

#include "expect_error.hpp"
#include "server/ensemble_config.hpp"

namespace kiln::server {
namespace {

const char* kIo =
    "input [ { name: \"IN0\" data_type: TYPE_FP32 dims: [ 4 ] }, "
    "{ name: \"IN1\" data_type: TYPE_FP32 dims: [ 4 ] } ] "
    "output [ { name: \"OUT0\" data_type: TYPE_FP32 dims: [ 4 ] } ] ";

ModelConfig ensemble(const std::string& steps, int max_batch = 8) {
  return parse_config_text(
      "name: \"e\" platform: \"ensemble\" max_batch_size: " + std::to_string(max_batch) + " " +
          kIo + "ensemble_scheduling { step [ " + steps + " ] }",
      "e");
}

// Step `model` reading `in0`, `in1` into INPUT0 / INPUT1 and writing OUTPUT0 to `out`.
std::string step(const std::string& model, const std::string& in0, const std::string& in1,
                 const std::string& out) {
  return "{ model_name: \"" + model + "\" model_version: -1 input_map { key: \"INPUT1\" value: \"" +
         in1 + "\" } input_map { key: \"INPUT0\" value: \"" + in0 +
         "\" } output_map { key: \"OUTPUT0\" value: \"" + out + "\" } }";
}

ModelConfig composing(int max_batch, const std::string& dtype = "TYPE_FP32") {
  return parse_config_text(
      "name: \"m\" backend: \"kiln\" max_batch_size: " + std::to_string(max_batch) +
          " input [ { name: \"INPUT0\" data_type: " + dtype +
          " dims: [ 4 ] }, { name: \"INPUT1\" data_type: TYPE_FP32 dims: [ 4 ] } ] "
          "output [ { name: \"OUTPUT0\" data_type: TYPE_FP32 dims: [ 4 ] } ]",
      "m");
}

TEST(ServerEnsemble, PlanOfADag) {
  // Step 0 and 1 read only the inputs; step 2 reads both their outputs.
  const ModelConfig c = ensemble(step("m", "IN0", "IN1", "a") + ", " +
                                 step("m", "IN1", "IN0", "b") + ", " + step("m", "a", "b", "OUT0"));
  const EnsemblePlan p = plan_ensemble(c);
  ASSERT_EQ(p.steps.size(), 3u);
  EXPECT_EQ(p.tensors, (std::vector<std::string>{"a", "IN0", "IN1", "b", "OUT0"}));
  EXPECT_EQ(p.inputs, (std::vector<size_t>{1, 2}));
  EXPECT_EQ(p.outputs, (std::vector<size_t>{4}));
  EXPECT_EQ(p.producer, (std::vector<int>{0, -1, -1, 1, 2}));
  EXPECT_EQ(p.readers[1], (std::vector<size_t>{0, 1}));  // IN0
  EXPECT_EQ(p.readers[0], (std::vector<size_t>{2}));     // a
  // The maps are sorted by model tensor name, whatever the order in the file.
  EXPECT_EQ(p.steps[0].inputs[0].model_tensor, "INPUT0");
  EXPECT_EQ(p.tensors[p.steps[0].inputs[0].tensor], "IN0");
}

TEST(ServerEnsemble, ACycleIsNamed) {
  // Step 0 needs x from step 1, which needs y from step 0.
  const ModelConfig c = ensemble(step("m", "IN0", "x", "y") + ", " + step("m", "y", "IN1", "x") +
                                 ", " + step("m", "x", "y", "OUT0"));
  expect_error([&] { plan_ensemble(c); }, ErrorCode::InvalidArgument,
               "the steps form a cycle, each waiting for a tensor the one before it writes: step "
               "0 -> step 1 -> step 0");
}

TEST(ServerEnsemble, AnInputWrittenByAStepIsRefused) {
  const ModelConfig c =
      ensemble(step("m", "IN0", "IN1", "IN0") + ", " + step("m", "IN0", "IN1", "OUT0"));
  expect_error([&] { plan_ensemble(c); }, ErrorCode::InvalidArgument, "a tensor has one source");
}

TEST(ServerEnsemble, StepsCheckedAgainstTheComposingModels) {
  const ModelConfig c = ensemble(step("m", "IN0", "IN1", "OUT0"));
  const EnsemblePlan p = plan_ensemble(c);
  const ModelConfig ok = composing(8), unbatched = composing(0), small = composing(4),
                    ints = composing(8, "TYPE_INT32");
  EXPECT_NO_THROW(check_ensemble_steps(c, p, {&ok}));
  // A model that does not batch may serve a batching ensemble (Triton reshapes between them).
  EXPECT_NO_THROW(check_ensemble_steps(c, p, {&unbatched}));
  expect_error([&] { check_ensemble_steps(c, p, {&small}); }, ErrorCode::InvalidArgument,
               "ensemble e allows maximum batch size 8, but it contains model m which only "
               "allows maximum batch size to be 4");
  expect_error([&] { check_ensemble_steps(c, p, {&ints}); }, ErrorCode::InvalidArgument,
               "in ensemble e, ensemble tensor IN0: inconsistent data type: TYPE_FP32 is inferred "
               "from model e while TYPE_INT32 is inferred from model m");
}

TEST(ServerEnsemble, CompletionFillsWhatTritonFills) {
  ModelConfig c = parse_config_text(std::string("name: \"e\" platform: \"ensemble\" ") + kIo +
                                        "ensemble_scheduling { step [ " +
                                        step("m", "IN0", "IN1", "OUT0") + " ] }",
                                    "e");
  complete_ensemble_config(c);
  EXPECT_TRUE(c.has_max_batch_size());
  EXPECT_EQ(c.max_batch_size(), 0);
  EXPECT_EQ(c.version_policy().latest().num_versions(), 1u);
  EXPECT_TRUE(c.has_model_transaction_policy());
  EXPECT_EQ(ensemble_composing_models(c), (std::vector<std::string>{"m"}));
  EXPECT_NE(config_to_json(c).find("\"ensemble_scheduling\""), std::string::npos);
  EXPECT_EQ(config_to_json(c).find("max_inflight_requests"), std::string::npos);
}

}  // namespace
}  // namespace kiln::server
