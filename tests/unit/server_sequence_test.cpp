// The sequence batcher's config (sequence_config.hpp): Triton's checks on controls and states,
// auto-completion leaving the server-filled tensors out, the plan against the model's tensors,
// initial states, and the request parameters (sequence_batcher.hpp).
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "expect_error.hpp"
#include "server/model_config.hpp"
#include "server/sequence_batcher.hpp"
#include "server/sequence_config.hpp"

namespace kiln::server {
namespace {

IoInfo io(const std::string& name, DataType t, std::vector<Dim> dims) {
  return {name, TypeInfo::tensor(t, Shape(std::move(dims)))};
}

const char* kControls = R"(
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY bool_false_true: [ false, true ] } ] },
    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } ] }
  ]
  state [ { input_name: "S_IN" output_name: "S_OUT" data_type: TYPE_FP32 dims: [ 2 ] } ])";

ModelConfig config(const std::string& sequence, const std::string& extra = "") {
  return parse_config_text(
      "name: \"m\" backend: \"onnxruntime\" max_batch_size: 4 "
      "sequence_batching { " +
          sequence + " } " + extra,
      "c");
}

std::vector<IoInfo> model_inputs() {
  const Dim n = Dim::symbol("N");
  return {io("X", DataType::Float32, {n, 2}), io("START", DataType::Int32, {n, 1}),
          io("READY", DataType::Bool, {n, 1}), io("CORRID", DataType::UInt64, {n, 1}),
          io("S_IN", DataType::Float32, {n, 2})};
}

std::vector<IoInfo> model_outputs() {
  const Dim n = Dim::symbol("N");
  return {io("Y", DataType::Float32, {n, 2}), io("S_OUT", DataType::Float32, {n, 2})};
}

TEST(ServerSequence, AutocompleteLeavesServerTensorsOut) {
  ModelConfig c = config(kControls);
  autocomplete_config(c, model_inputs(), model_outputs());
  ASSERT_EQ(c.input_size(), 1);
  EXPECT_EQ(c.input(0).name(), "X");
  ASSERT_EQ(c.output_size(), 1);
  EXPECT_EQ(c.output(0).name(), "Y");
  EXPECT_FALSE(c.has_dynamic_batching());
  complete_sequence_config(c);
  EXPECT_EQ(c.sequence_batching().max_sequence_idle_microseconds(), 1000000u);
  EXPECT_NO_THROW(validate_config(c));
  // A state output the config lists stays a client output too.
  ModelConfig listed = config(kControls, "output [ { name: \"S_OUT\" } ]");
  autocomplete_config(listed, model_inputs(), model_outputs());
  EXPECT_EQ(listed.output_size(), 2);
}

TEST(ServerSequence, PlanFillsControlsAndStates) {
  ModelConfig c = config(std::string(kControls) +
                         " oldest { max_candidate_sequences: 6 max_queue_delay_microseconds: 50 }");
  autocomplete_config(c, model_inputs(), model_outputs());
  complete_sequence_config(c);
  validate_config(c);
  EXPECT_EQ(c.sequence_batching().oldest().preferred_batch_size(0), 4);
  const SequenceOptions o = plan_sequence(c, model_inputs(), model_outputs(), "", 2, 1 << 20);
  EXPECT_EQ(o.strategy, SequenceOptions::Strategy::Oldest);
  EXPECT_EQ(o.slots_per_instance, 6u);
  EXPECT_EQ(o.max_rows, 4u);
  EXPECT_EQ(o.max_queue_delay_us, 50u);
  EXPECT_EQ(o.max_backlog, 64u);
  ASSERT_EQ(o.controls.size(), 3u);
  EXPECT_EQ(o.controls[0].kind, SequenceControl::Kind::Start);
  EXPECT_EQ(o.controls[0].true_value.values<int32_t>()[0], 1);
  EXPECT_EQ(o.controls[1].dtype, DataType::Bool);
  EXPECT_EQ(o.controls[2].kind, SequenceControl::Kind::CorrId);
  EXPECT_EQ(o.controls[2].dtype, DataType::UInt64);
  ASSERT_EQ(o.states.size(), 1u);
  EXPECT_EQ(o.states[0].initial.dims(), (std::vector<int64_t>{2}));
  EXPECT_EQ(o.states[0].initial.values<float>()[1], 0.0f);
}

TEST(ServerSequence, PlanChecksTheModel) {
  ModelConfig c = config(kControls);
  autocomplete_config(c, model_inputs(), model_outputs());
  std::vector<IoInfo> wrong = model_inputs();
  wrong[1] = io("START", DataType::Float32, {Dim::symbol("N"), 1});
  expect_error([&] { plan_sequence(c, wrong, model_outputs(), "", 1, 1 << 20); },
               ErrorCode::InvalidArgument, "control input 'START' is");
  std::vector<IoInfo> flat = model_inputs();
  flat[2] = io("READY", DataType::Bool, {Dim::symbol("N")});
  expect_error([&] { plan_sequence(c, flat, model_outputs(), "", 1, 1 << 20); },
               ErrorCode::InvalidArgument,
               "has rank 1 in the model; the sequence batcher feeds rank 2");
  std::vector<IoInfo> no_state = model_outputs();
  no_state.pop_back();
  expect_error([&] { plan_sequence(c, model_inputs(), no_state, "", 1, 1 << 20); },
               ErrorCode::InvalidArgument, "state output 'S_OUT' is not a tensor of the model");
  // A state larger than the request memory is refused before it is allocated.
  ModelConfig huge = config(R"(state [ { input_name: "S_IN" output_name: "S_OUT"
      data_type: TYPE_FP32 dims: [ 2 ] initial_state { data_type: TYPE_FP32 dims: [ 2 ]
      name: "i" zero_data: true } } ])");
  EXPECT_NO_THROW(plan_sequence(huge, model_inputs(), model_outputs(), "", 1, 8));
  expect_error([&] { plan_sequence(huge, model_inputs(), model_outputs(), "", 1, 7); },
               ErrorCode::InvalidArgument, "larger than the server's request memory budget");
  ModelConfig overflow = config(R"(state [ { input_name: "S_IN" output_name: "S_OUT"
      data_type: TYPE_FP32 dims: [ 2 ] } ] max_sequence_idle_microseconds: 1)",
                                "");
  overflow.mutable_sequence_batching()->mutable_state(0)->set_dims(0, int64_t{1} << 62);
  expect_error([&] { plan_sequence(overflow, model_inputs(), model_outputs(), "", 1, 1 << 20); },
               ErrorCode::InvalidArgument, "larger than the server's request memory budget");
}

TEST(ServerSequence, InitialStateFromFile) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / "kiln_sequence_test_model";
  std::filesystem::create_directories(dir / "initial_state");
  {
    std::ofstream f(dir / "initial_state" / "s.bin", std::ios::binary);
    const float values[2] = {1.5f, -2.0f};
    f.write(reinterpret_cast<const char*>(values), sizeof(values));
  }
  ModelConfig c = config(R"(state [ { input_name: "S_IN" output_name: "S_OUT"
      data_type: TYPE_FP32 dims: [ 2 ] initial_state { data_type: TYPE_FP32 dims: [ 2 ]
      name: "i" data_file: "s.bin" } } ])");
  const SequenceOptions o = plan_sequence(c, model_inputs(), model_outputs(), dir, 1, 1 << 20);
  EXPECT_EQ(o.states[0].initial.values<float>()[0], 1.5f);
  EXPECT_EQ(o.states[0].initial.values<float>()[1], -2.0f);
  c.mutable_sequence_batching()->mutable_state(0)->mutable_initial_state(0)->set_data_file(
      "../s.bin");
  expect_error([&] { plan_sequence(c, model_inputs(), model_outputs(), dir, 1, 1 << 20); },
               ErrorCode::InvalidArgument, "must be a file name inside");
  std::filesystem::remove_all(dir);
}

TEST(ServerSequence, TritonsConfigErrors) {
  auto refused = [](const std::string& sequence, const std::string& message) {
    expect_error(
        [&] {
          validate_config(config(sequence,
                                 "input [ { name: \"X\" data_type: "
                                 "TYPE_FP32 dims: [ 2 ] } ] output [ { "
                                 "name: \"Y\" data_type: TYPE_FP32 dims: "
                                 "[ 2 ] } ]"));
        },
        ErrorCode::InvalidArgument, message);
  };
  refused(R"(control_input [ { control [ { kind: CONTROL_SEQUENCE_START
      int32_false_true: [ 0, 1 ] } ] } ])",
          "sequence batching control tensor must have a name for m");
  refused(R"(control_input [ { name: "A" control [ { kind: CONTROL_SEQUENCE_START
      int32_false_true: [ 0, 1 ] fp32_false_true: [ 0, 1 ] } ] } ])",
          "must specify exactly one of 'int32_false_true', 'fp32_false_true' and "
          "'bool_false_true' for CONTROL_SEQUENCE_START for m");
  refused(R"(control_input [ { name: "A" control [ { kind: CONTROL_SEQUENCE_END
      bool_false_true: [ true ] } ] } ])",
          "sequence batching control 'bool_false_true' must have exactly 2 entries for "
          "CONTROL_SEQUENCE_END for m");
  refused(R"(control_input [ { name: "A" control [ { kind: CONTROL_SEQUENCE_CORRID
      data_type: TYPE_UINT64 int32_false_true: [ 0, 1 ] } ] } ])",
          "sequence batching must not specify either");
  refused(R"(control_input [ { name: "A" control [ { kind: CONTROL_SEQUENCE_START
      int32_false_true: [ 0, 1 ] } ] }, { name: "A" control [ { kind: CONTROL_SEQUENCE_END
      int32_false_true: [ 0, 1 ] } ] } ])",
          "sequence batching control tensor 'A' is specified for multiple control kinds for m");
  refused(R"(state [ { input_name: "S" output_name: "T" data_type: TYPE_FP32 dims: [ 1 ] },
      { input_name: "S" output_name: "U" data_type: TYPE_FP32 dims: [ 1 ] } ])",
          "State input name 'S' specified more than once.");
  refused(R"(state [ { input_name: "S" output_name: "T" data_type: TYPE_FP32 dims: [ 1 ]
      initial_state { data_type: TYPE_INT32 dims: [ 1 ] name: "i" zero_data: true } } ])",
          "The data type used for 'initial_state' field of state 'S' does not match the state "
          "data type.");
  refused(R"(state [ { input_name: "S" output_name: "T" data_type: TYPE_FP32 dims: [ -1 ]
      initial_state { data_type: TYPE_FP32 dims: [ -1 ] name: "i" zero_data: true } } ])",
          "'initial_state' field for state input name 'S' contains variable dimensions.");
  refused(R"(state [ { input_name: "S" output_name: "T" data_type: TYPE_FP32 dims: [ 1 ]
      initial_state { data_type: TYPE_FP32 dims: [ 1 ] name: "i" } } ])",
          "initial_state setting expects state 'S' to have state_data set");
  refused(R"(state [ { input_name: "X" output_name: "T" data_type: TYPE_FP32 dims: [ 2 ] } ])",
          "input 'X' is a sequence batching control or state input");
  refused("direct { minimum_slot_utilization: 1.5 }", "minimum_slot_utilization 1.5");
}

TEST(ServerSequence, RequestParameters) {
  Parameters p;
  EXPECT_FALSE(read_sequence_parameters(p).id.has_value());
  p["sequence_id"] = uint64_t{0};
  EXPECT_FALSE(read_sequence_parameters(p).id.has_value());
  p["sequence_id"] = std::string();
  EXPECT_FALSE(read_sequence_parameters(p).id.has_value());
  p["sequence_id"] = int64_t{7};
  p["sequence_start"] = true;
  SequenceParameters sp = read_sequence_parameters(p);
  EXPECT_EQ(std::get<uint64_t>(*sp.id), 7u);
  EXPECT_TRUE(sp.start);
  EXPECT_FALSE(sp.end);
  p["sequence_id"] = uint64_t{18446744073709551615ull};
  EXPECT_EQ(sequence_id_string(*read_sequence_parameters(p).id), "18446744073709551615");
  p["sequence_id"] = std::string("abc");
  EXPECT_EQ(std::get<std::string>(*read_sequence_parameters(p).id), "abc");
  p["sequence_id"] = int64_t{-1};
  expect_error([&] { read_sequence_parameters(p); }, ErrorCode::InvalidArgument,
               "'sequence_id' must not be negative");
  p["sequence_id"] = 1.5;
  expect_error([&] { read_sequence_parameters(p); }, ErrorCode::InvalidArgument,
               "'sequence_id' must be an integer or a string");
  p["sequence_id"] = int64_t{3};
  p["sequence_end"] = std::string("yes");
  expect_error([&] { read_sequence_parameters(p); }, ErrorCode::InvalidArgument,
               "'sequence_end' must be a bool");
}

}  // namespace
}  // namespace kiln::server
