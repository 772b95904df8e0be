// The gRPC message codec: typed contents and raw_input_contents in, raw_output_contents out,
// statistics and status mapping, and the restricted-protocol flag.
#include <gtest/gtest.h>

#include <cstring>

#include "expect_error.hpp"
#include "server/grpc/grpc_codec.hpp"
#include "server/grpc/grpc_server.hpp"

namespace kiln::server::grpc {
namespace {

using inference::ModelInferRequest;
using inference::ModelInferResponse;

std::string le32(uint32_t v) {
  return std::string(reinterpret_cast<const char*>(&v), 4);
}

template <typename T>
std::string raw(std::initializer_list<T> values) {
  std::string out;
  for (T v : values) out.append(reinterpret_cast<const char*>(&v), sizeof(T));
  return out;
}

ModelInferRequest::InferInputTensor* add_input(ModelInferRequest& r, const std::string& name,
                                               const std::string& datatype,
                                               std::vector<int64_t> shape) {
  auto* in = r.add_inputs();
  in->set_name(name);
  in->set_datatype(datatype);
  for (int64_t d : shape) in->add_shape(d);
  return in;
}

TEST(ServerGrpcCodec, RawInputsAndRequestFields) {
  ModelInferRequest m;
  m.set_model_name("m");
  m.set_model_version("3");
  m.set_id("req");
  (*m.mutable_parameters())["priority"].set_uint64_param(2);
  (*m.mutable_parameters())["timeout"].set_int64_param(500);
  (*m.mutable_parameters())["custom"].set_string_param("x");
  add_input(m, "a", "FP32", {2});
  add_input(m, "b", "BOOL", {3});
  add_input(m, "s", "BYTES", {2});
  m.add_raw_input_contents(raw<float>({1.5f, -2.0f}));
  m.add_raw_input_contents(std::string("\x01\x00\x07", 3));
  m.add_raw_input_contents(le32(3) + std::string("a\0b", 3) + le32(0));
  m.add_outputs()->set_name("o");
  auto r = decode_infer_request(m);
  EXPECT_EQ(r->model_name, "m");
  EXPECT_EQ(r->model_version, 3);
  EXPECT_EQ(r->id, "req");
  EXPECT_EQ(r->priority, 2u);
  EXPECT_EQ(r->timeout_us, 500u);
  EXPECT_EQ(parameter_string(r->parameters, "custom"), "x");
  ASSERT_EQ(r->inputs.size(), 3u);
  EXPECT_EQ(r->inputs[0].data.data<float>()[1], -2.0f);
  EXPECT_EQ(r->inputs[1].data.values<bool>()[0], true);
  EXPECT_EQ(r->inputs[1].data.values<bool>()[1], false);
  EXPECT_EQ(r->inputs[1].data.values<bool>()[2], true);
  EXPECT_EQ(r->inputs[2].data.data<std::string>()[0], std::string("a\0b", 3));
  EXPECT_EQ(r->inputs[2].data.data<std::string>()[1], "");
  ASSERT_EQ(r->outputs.size(), 1u);
  EXPECT_EQ(r->outputs[0].name, "o");
}

TEST(ServerGrpcCodec, TypedContentsWidenedAndChecked) {
  ModelInferRequest m;
  m.set_model_name("m");
  auto* a = add_input(m, "a", "INT8", {3});
  for (int v : {-128, 0, 127}) a->mutable_contents()->add_int_contents(v);
  auto* b = add_input(m, "b", "UINT16", {1, 2});
  for (unsigned v : {0u, 65535u}) b->mutable_contents()->add_uint_contents(v);
  auto* s = add_input(m, "s", "BYTES", {1});
  s->mutable_contents()->add_bytes_contents(std::string("\0z", 2));
  auto r = decode_infer_request(m);
  EXPECT_EQ(r->inputs[0].data.data<int8_t>()[0], -128);
  EXPECT_EQ(r->inputs[1].data.data<uint16_t>()[1], 65535);
  EXPECT_EQ(r->inputs[2].data.data<std::string>()[0], std::string("\0z", 2));

  a->mutable_contents()->set_int_contents(2, 128);
  expect_error([&] { decode_infer_request(m); }, ErrorCode::InvalidArgument,
               "value 128 is out of range for INT8");
}

TEST(ServerGrpcCodec, RejectsMalformedRequests) {
  auto bad = [](auto&& edit, const std::string& needle) {
    ModelInferRequest m;
    m.set_model_name("m");
    add_input(m, "a", "FP32", {2});
    add_input(m, "b", "FP32", {2});
    m.add_raw_input_contents(raw<float>({1, 2}));
    m.add_raw_input_contents(raw<float>({3, 4}));
    edit(m);
    expect_error([&] { decode_infer_request(m); }, ErrorCode::InvalidArgument, needle);
  };
  bad([](ModelInferRequest& m) { m.mutable_raw_input_contents()->RemoveLast(); },
      "raw_input_contents has 1 entries for 2 inputs");
  bad([](ModelInferRequest& m) { m.set_raw_input_contents(0, raw<float>({1})); },
      "input byte size mismatch for input 'a' for model 'm'. Expected 8, got 4");
  bad([](ModelInferRequest& m) { m.mutable_inputs(0)->mutable_contents()->add_fp32_contents(1); },
      "both contents and raw_input_contents");
  bad([](ModelInferRequest& m) { m.mutable_inputs(1)->set_datatype("FLOAT32"); },
      "invalid datatype for input b");
  bad([](ModelInferRequest& m) { m.mutable_inputs(0)->set_shape(0, -2); }, "non-negative");
  bad([](ModelInferRequest& m) { m.mutable_inputs(0)->add_shape(int64_t{1} << 62); }, "overflows");
  bad([](ModelInferRequest& m) { m.set_model_version("v1"); }, "version string 'v1'");
  bad([](ModelInferRequest& m) { m.mutable_inputs(1)->set_name(""); }, "needs a name");
  bad([](ModelInferRequest& m) { (*m.mutable_parameters())["priority"].set_int64_param(-1); },
      "'priority' must not be negative");
  bad([](ModelInferRequest& m) { (*m.mutable_parameters())["x"]; }, "parameter 'x' has no value");
  bad(
      [](ModelInferRequest& m) {
        m.clear_raw_input_contents();
        m.mutable_inputs(0)->mutable_contents()->add_int_contents(1);
      },
      "FP32 data given in int_contents");
  bad(
      [](ModelInferRequest& m) {
        m.clear_raw_input_contents();
        m.mutable_inputs(0)->set_datatype("FP16");
      },
      "FP16 data must be sent in raw_input_contents");
  bad(
      [](ModelInferRequest& m) {
        m.clear_raw_input_contents();
        m.mutable_inputs(0)->mutable_contents()->add_fp32_contents(1);
      },
      "fp32_contents has 1 elements but shape [2] needs 2");

  ModelInferRequest shm;
  shm.set_model_name("m");
  (*add_input(shm, "a", "FP32", {0})->mutable_parameters())["shared_memory_region"]
      .set_string_param("r");
  // An input in shared memory has no raw_input_contents entry; the server reads the region.
  EXPECT_TRUE(decode_infer_request(shm)->inputs[0].shm.has_value());
  shm.mutable_inputs(0)->mutable_contents()->add_fp32_contents(1);
  expect_error([&] { decode_infer_request(shm); }, ErrorCode::InvalidArgument,
               "has both data and 'shared_memory_region'");
}

TEST(ServerGrpcCodec, ResponseInRawOutputContents) {
  InferResponse r;
  r.model_name = "m";
  r.model_version = 4;
  r.id = "x";
  r.parameters["p"] = int64_t{5};
  InferOutput o;
  o.name = "o";
  o.datatype = DataType::Int32;
  o.shape = {2};
  o.data = Tensor::from_vector<int32_t>({2}, {7, -1});
  r.outputs.push_back(o);
  InferOutput s;
  s.name = "s";
  s.datatype = DataType::String;
  s.shape = {2};
  s.data = Tensor::from_vector<std::string>({2}, {std::string("\0\xff", 2), "\xe6\x97\xa5"});
  r.outputs.push_back(s);
  ModelInferResponse m;
  encode_infer_response(r, m);
  EXPECT_EQ(m.model_name(), "m");
  EXPECT_EQ(m.model_version(), "4");
  EXPECT_EQ(m.id(), "x");
  EXPECT_EQ(m.parameters().at("p").int64_param(), 5);
  ASSERT_EQ(m.outputs_size(), 2);
  EXPECT_EQ(m.outputs(0).datatype(), "INT32");
  EXPECT_EQ(m.outputs(1).datatype(), "BYTES");
  EXPECT_EQ(m.outputs(1).shape(0), 2);
  EXPECT_FALSE(m.outputs(0).has_contents());
  ASSERT_EQ(m.raw_output_contents_size(), 2);
  EXPECT_EQ(m.raw_output_contents(0), raw<int32_t>({7, -1}));
  EXPECT_EQ(m.raw_output_contents(1),
            le32(2) + std::string("\0\xff", 2) + le32(3) + std::string("\xe6\x97\xa5"));
}

TEST(ServerGrpcCodec, StatisticsAndStatus) {
  ModelStatisticsEntry e{"m", 2, {}};
  e.stats.inference_count = 10;
  e.stats.execution_count = 4;
  e.stats.inference.success = {3, 3000};
  e.stats.inference.queue = {3, 300};
  e.stats.batches[4] = BatchStatistics{4, {1, 10}, {1, 20}, {1, 30}};
  inference::ModelStatisticsResponse m;
  encode_statistics({e}, m);
  ASSERT_EQ(m.model_stats_size(), 1);
  const auto& s = m.model_stats(0);
  EXPECT_EQ(s.version(), "2");
  EXPECT_EQ(s.inference_count(), 10u);
  EXPECT_EQ(s.execution_count(), 4u);
  EXPECT_EQ(s.inference_stats().success().ns(), 3000u);
  EXPECT_EQ(s.inference_stats().queue().count(), 3u);
  ASSERT_EQ(s.batch_stats_size(), 1);
  EXPECT_EQ(s.batch_stats(0).batch_size(), 4u);
  EXPECT_EQ(s.batch_stats(0).compute_infer().ns(), 20u);

  EXPECT_EQ(parse_model_version(""), -1);
  EXPECT_EQ(parse_model_version("12"), 12);
  EXPECT_EQ(grpc_status_code(ErrorCode::InvalidArgument), ::grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(grpc_status_code(ErrorCode::NotFound), ::grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(grpc_status_code(ErrorCode::Unavailable), ::grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(grpc_status_code(ErrorCode::Unsupported), ::grpc::StatusCode::UNIMPLEMENTED);
  ::grpc::Status st = to_grpc_status(Status(ErrorCode::Unavailable, "Exceeds maximum queue size"));
  EXPECT_EQ(st.error_code(), ::grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(st.error_message(), "Exceeds maximum queue size");
  EXPECT_TRUE(to_grpc_status(Status::ok()).ok());
}

TEST(ServerGrpcCodec, RestrictedProtocolFlag) {
  RestrictedProtocol r;
  r.add("inference,model-repository:Admin-Key=a:b=c", "--grpc-restricted-protocol");
  ASSERT_EQ(r.by_category.count("inference"), 1u);
  EXPECT_EQ(r.by_category["inference"].first, "admin-key");
  EXPECT_EQ(r.by_category["model-repository"].second, "a:b=c");
  expect_error([&] { r.add("statistics", "--grpc-restricted-protocol"); },
               ErrorCode::InvalidArgument, "--grpc-restricted-protocol 'statistics' must be");
  expect_error([&] { r.add("bogus:k=v"); }, ErrorCode::InvalidArgument,
               "--http-restricted-api: unknown category 'bogus'");
  expect_error([&] { r.add("inference:k=v"); }, ErrorCode::InvalidArgument, "given twice");
}

}  // namespace
}  // namespace kiln::server::grpc
