// Server core: datatype mapping, model configuration (text, JSON, auto-complete, validation) and
// the batcher's tensor plumbing.
#include <gtest/gtest.h>

#include "expect_error.hpp"
#include "server/batching.hpp"
#include "server/infer_types.hpp"
#include "server/model_config.hpp"

namespace kiln::server {
namespace {

TEST(ServerTypes, DatatypeSpellingsAgree) {
  const char* names[] = {"BOOL",  "UINT8", "UINT16", "UINT32", "UINT64", "INT8",  "INT16",
                         "INT32", "INT64", "FP16",   "FP32",   "FP64",   "BYTES", "BF16"};
  for (const char* name : names) {
    std::optional<DataType> t = datatype_from_name(name);
    ASSERT_TRUE(t.has_value()) << name;
    EXPECT_EQ(datatype_name(*t), name);
    EXPECT_EQ(datatype_from_config(datatype_to_config(*t)), *t);
  }
  EXPECT_EQ(datatype_from_config(inference::TYPE_STRING), DataType::String);
  EXPECT_EQ(datatype_from_config(inference::TYPE_BF16), DataType::BFloat16);
  EXPECT_EQ(datatype_wire_size(DataType::Float16), 2u);
  EXPECT_EQ(datatype_wire_size(DataType::String), 0u);
  EXPECT_FALSE(datatype_from_name("FP8").has_value());
  expect_error([] { datatype_name(DataType::Float8E4M3FN); }, ErrorCode::Unsupported, "float8");
  expect_error([] { datatype_from_config(0); }, ErrorCode::InvalidArgument, "data type 0");
}

TEST(ServerTypes, TypedParameters) {
  Parameters p{{"a", true}, {"b", int64_t{5}}, {"c", std::string("x")}, {"d", uint64_t{7}}};
  EXPECT_EQ(parameter_bool(p, "a"), true);
  EXPECT_EQ(parameter_int(p, "b"), 5);
  EXPECT_EQ(parameter_int(p, "d"), 7);
  EXPECT_EQ(parameter_string(p, "c"), "x");
  EXPECT_FALSE(parameter_int(p, "missing").has_value());
  expect_error([&] { parameter_int(p, "c"); }, ErrorCode::InvalidArgument, "'c'");
  expect_error([&] { parameter_bool(p, "b"); }, ErrorCode::InvalidArgument, "'b'");
  EXPECT_EQ(http_status(ErrorCode::InvalidArgument), 400);
  EXPECT_EQ(http_status(ErrorCode::Unavailable), 503);
  EXPECT_EQ(http_status(ErrorCode::Unsupported), 501);
}

constexpr const char* kConfig = R"(
name: "m"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "x" data_type: TYPE_FP32 dims: [ -1, 3 ] } ]
output [ { name: "y" data_type: TYPE_INT64 dims: [ 2 ] reshape: { shape: [ 1, 2 ] } } ]
version_policy { specific { versions: [ 1, 3 ] } }
instance_group [ { count: 2 kind: KIND_GPU gpus: [ 0, 1 ] } ]
dynamic_batching {
  preferred_batch_size: [ 2, 4 ]
  max_queue_delay_microseconds: 500
  priority_levels: 3
  default_priority_level: 2
  default_queue_policy { timeout_action: DELAY default_timeout_microseconds: 9000000000 }
  priority_queue_policy { key: 1 value: { max_queue_size: 5 allow_timeout_override: true } }
}
parameters { key: "k" value: { string_value: "v" } }
)";

TEST(ServerConfig, ParsesTritonText) {
  ModelConfig c = parse_config_text(kConfig, "config.pbtxt");
  EXPECT_EQ(c.name(), "m");
  EXPECT_EQ(c.max_batch_size(), 8);
  EXPECT_TRUE(c.has_max_batch_size());
  EXPECT_EQ(c.input(0).dims(0), -1);
  EXPECT_EQ(c.output(0).reshape().shape_size(), 2);
  EXPECT_EQ(c.version_policy().specific().versions(1), 3);
  EXPECT_EQ(c.instance_group(0).kind(), inference::ModelInstanceGroup::KIND_GPU);
  EXPECT_EQ(c.dynamic_batching().default_queue_policy().default_timeout_microseconds(),
            9000000000u);
  EXPECT_EQ(c.dynamic_batching().priority_queue_policy().at(1).max_queue_size(), 5u);
  EXPECT_EQ(c.parameters().at("k").string_value(), "v");
  EXPECT_NO_THROW(validate_config(c));
  EXPECT_FALSE(parse_config_text("name: \"n\"", "x").has_max_batch_size());
}

TEST(ServerConfig, TextErrorsNamePosition) {
  expect_error([] { parse_config_text("name: \"m\"\nmax_batch_size: [", "my/config.pbtxt"); },
               ErrorCode::InvalidArgument, "my/config.pbtxt: line 2");
  expect_error([] { parse_config_text("no_such_field: 1", "c"); }, ErrorCode::InvalidArgument,
               "no_such_field");
}

TEST(ServerConfig, JsonRoundTripKeepsIntegersNumeric) {
  ModelConfig c = parse_config_text(kConfig, "c");
  std::string json = config_to_json(c);
  EXPECT_NE(json.find("\"max_queue_delay_microseconds\":500"), std::string::npos) << json;
  EXPECT_NE(json.find("\"dims\":[-1,3]"), std::string::npos) << json;
  EXPECT_NE(json.find("\"data_type\":\"TYPE_FP32\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"priority_queue_policy\":{\"1\":"), std::string::npos) << json;
  ModelConfig back = parse_config_json(json, "json");
  EXPECT_EQ(back.SerializeAsString(), c.SerializeAsString());
  expect_error([] { parse_config_json("{\"max_batch_size\": \"x\"}", "load of 'm'"); },
               ErrorCode::InvalidArgument, "load of 'm'");
}

IoInfo io(const std::string& name, DataType t, std::vector<Dim> dims) {
  return {name, TypeInfo::tensor(t, Shape(std::move(dims)))};
}

TEST(ServerConfig, AutocompleteFromModel) {
  ModelConfig c;
  c.set_name("m");
  c.set_backend("onnxruntime");
  autocomplete_config(c, {io("x", DataType::Float32, {Dim::symbol("N"), 3})},
                      {io("y", DataType::Int64, {Dim::symbol("N"), Dim::symbol("L")})});
  EXPECT_EQ(c.platform(), "onnxruntime_onnx");
  EXPECT_EQ(c.max_batch_size(), 4);
  EXPECT_TRUE(c.has_dynamic_batching());
  ASSERT_EQ(c.input_size(), 1);
  EXPECT_EQ(c.input(0).data_type(), inference::TYPE_FP32);
  EXPECT_EQ(std::vector<int64_t>(c.input(0).dims().begin(), c.input(0).dims().end()),
            std::vector<int64_t>{3});
  EXPECT_EQ(std::vector<int64_t>(c.output(0).dims().begin(), c.output(0).dims().end()),
            std::vector<int64_t>{-1});
  EXPECT_EQ(c.instance_group(0).count(), 1);
  EXPECT_EQ(c.version_policy().latest().num_versions(), 1u);
  EXPECT_NO_THROW(validate_config(c));

  // A declared range caps the batch; a static leading dim means no batching.
  ModelConfig small;
  small.set_name("s");
  small.set_backend("kiln");
  autocomplete_config(small, {io("x", DataType::Float32, {Dim::symbol("N", 1, 2), 3})},
                      {io("y", DataType::Float32, {Dim::symbol("N", 1, 2)})});
  EXPECT_EQ(small.max_batch_size(), 2);
  ModelConfig fixed;
  fixed.set_name("f");
  fixed.set_backend("kiln");
  autocomplete_config(fixed, {io("x", DataType::Float32, {1, 3})},
                      {io("y", DataType::Float32, {1})});
  EXPECT_EQ(fixed.max_batch_size(), 0);
  EXPECT_FALSE(fixed.has_dynamic_batching());
  EXPECT_EQ(fixed.input(0).dims_size(), 2);
}

TEST(ServerConfig, AutocompleteChecksGivenTensors) {
  ModelConfig c = parse_config_text(
      "name: \"m\" backend: \"onnxruntime\" input [ { name: \"x\" data_type: TYPE_INT32 } ]", "c");
  expect_error(
      [&] {
        autocomplete_config(c, {io("x", DataType::Float32, {2})},
                            {io("y", DataType::Float32, {2})});
      },
      ErrorCode::InvalidArgument, "TYPE_INT32 in the config but TYPE_FP32");
  ModelConfig d = parse_config_text(
      "name: \"m\" backend: \"onnxruntime\" input [ { name: \"zz\" data_type: TYPE_FP32 } ]", "c");
  expect_error(
      [&] {
        autocomplete_config(d, {io("x", DataType::Float32, {2})},
                            {io("y", DataType::Float32, {2})});
      },
      ErrorCode::InvalidArgument, "'zz' that the model does not have");
  ModelConfig e = parse_config_text("name: \"m\" backend: \"tensorflow\"", "c");
  expect_error([&] { autocomplete_config(e, {}, {}); }, ErrorCode::Unsupported, "tensorflow");
}

TEST(ServerConfig, ValidationRefusesWhatItCannotHonour) {
  auto with = [](const std::string& extra) {
    return parse_config_text(
        "name: \"m\" backend: \"kiln\" max_batch_size: 4 input [ { name: \"x\" data_type: "
        "TYPE_FP32 dims: [ 2 ] } ] output [ { name: \"y\" data_type: TYPE_FP32 dims: [ 2 ] } ] " +
            extra,
        "c");
  };
  EXPECT_NO_THROW(validate_config(with("")));
  expect_error([&] { validate_config(with("dynamic_batching { preferred_batch_size: [ 8 ] }")); },
               ErrorCode::InvalidArgument, "preferred batch size 8");
  expect_error(
      [&] {
        validate_config(with("dynamic_batching { priority_levels: 2 default_priority_level: 3 }"));
      },
      ErrorCode::InvalidArgument, "default_priority_level 3");
  // Sequence batching is served (server_sequence_test.cpp), but not its iterative form.
  EXPECT_NO_THROW(validate_config(with("sequence_batching { }")));
  expect_error([&] { validate_config(with("sequence_batching { iterative_sequence: true }")); },
               ErrorCode::Unsupported, "iterative_sequence");
  // Ensembles are served (server_ensemble_test.cpp), but only with their platform.
  expect_error([&] { validate_config(with("ensemble_scheduling { }")); },
               ErrorCode::InvalidArgument, "whose platform is not ensemble");
  expect_error([&] { validate_config(with("model_transaction_policy { decoupled: true }")); },
               ErrorCode::Unsupported, "decoupled");
  ModelConfig reshape = parse_config_text(
      "name: \"m\" backend: \"kiln\" input [ { name: \"x\" data_type: TYPE_FP32 dims: [ 6 ] "
      "reshape: { shape: [ 4 ] } } ] output [ { name: \"y\" data_type: TYPE_FP32 dims: [ 2 ] } ]",
      "c");
  expect_error([&] { validate_config(reshape); }, ErrorCode::InvalidArgument,
               "reshape has 4 elements but dims have 6");
}

TEST(ServerBatching, ConcatAndSliceRows) {
  Tensor a = Tensor::from_vector<int32_t>({1, 2}, {1, 2});
  Tensor b = Tensor::from_vector<int32_t>({2, 2}, {3, 4, 5, 6});
  Tensor m = concat_rows({&a, &b});
  EXPECT_EQ(m.dims(), (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(std::vector<int32_t>(m.values<int32_t>().begin(), m.values<int32_t>().end()),
            (std::vector<int32_t>{1, 2, 3, 4, 5, 6}));
  Tensor s = slice_rows(m, 1, 2);
  EXPECT_EQ(std::vector<int32_t>(s.values<int32_t>().begin(), s.values<int32_t>().end()),
            (std::vector<int32_t>{3, 4, 5, 6}));
  Tensor x = Tensor::from_vector<std::string>({1}, {std::string("a\0b", 3)});
  Tensor y = Tensor::from_vector<std::string>({2}, {"", "c"});
  Tensor xy = concat_rows({&x, &y});
  EXPECT_EQ(xy.data<std::string>()[0], std::string("a\0b", 3));
  EXPECT_EQ(slice_rows(xy, 2, 1).data<std::string>()[0], "c");
}

TEST(ServerBatching, ReshapeBetweenProtocolAndModel) {
  TensorSpec spec;
  spec.name = "x";
  spec.dims = {4};
  spec.has_reshape = true;
  spec.reshape = {2, -1};
  Tensor t(DataType::Float32, {3, 4});
  EXPECT_EQ(to_model_shape(t, spec, true, "m").dims(), (std::vector<int64_t>{3, 2, 2}));
  Tensor model_out(DataType::Float32, {3, 2, 2});
  EXPECT_EQ(from_model_shape(model_out, spec, true, 3, "m").dims(), (std::vector<int64_t>{3, 4}));
  expect_error([&] { from_model_shape(model_out, spec, true, 2, "m"); }, ErrorCode::Internal,
               "batch has 2 rows");
}

}  // namespace
}  // namespace kiln::server
