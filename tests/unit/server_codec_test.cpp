// The KServe v2 HTTP body codec: JSON and binary tensors in, JSON and binary tensors out.
#include <gtest/gtest.h>

#include <cstring>

#include "expect_error.hpp"
#include "server/http/infer_codec.hpp"

namespace kiln::server::http {
namespace {

std::string le32(uint32_t v) {
  return std::string(reinterpret_cast<const char*>(&v), 4);
}

TEST(ServerCodec, JsonNestedAndFlatData) {
  auto r = decode_infer_request(
      R"({"id":"7","parameters":{"priority":2,"timeout":100,"binary_data_output":true},
          "inputs":[{"name":"a","datatype":"INT8","shape":[2,2],"data":[[1,-2],[3,4]]},
                    {"name":"b","datatype":"BOOL","shape":[3],"data":[true,false,true]},
                    {"name":"c","datatype":"BYTES","shape":[2],"data":["x\u0000y","\u00e9"]},
                    {"name":"d","datatype":"FP64","shape":[],"data":2.5}],
          "outputs":[{"name":"o","parameters":{"binary_data":false}}]})",
      std::nullopt);
  EXPECT_EQ(r->id, "7");
  EXPECT_EQ(r->priority, 2u);
  EXPECT_EQ(r->timeout_us, 100u);
  ASSERT_EQ(r->inputs.size(), 4u);
  EXPECT_EQ(r->inputs[0].data.data<int8_t>()[1], -2);
  EXPECT_EQ(r->inputs[0].data.dims(), (std::vector<int64_t>{2, 2}));
  EXPECT_TRUE(r->inputs[1].data.data<bool>()[2]);
  EXPECT_EQ(r->inputs[2].data.data<std::string>()[0], std::string("x\0y", 3));
  EXPECT_EQ(r->inputs[2].data.data<std::string>()[1], "\xc3\xa9");
  EXPECT_EQ(r->inputs[3].data.data<double>()[0], 2.5);
  OutputEncoding e = output_encoding_of(*r);
  EXPECT_TRUE(e.binary_default);
  ASSERT_EQ(e.per_output.size(), 1u);
  EXPECT_FALSE(e.per_output[0].second);
}

TEST(ServerCodec, BinaryTensors) {
  std::string header =
      R"({"inputs":[{"name":"a","datatype":"FP16","shape":[2],"parameters":{"binary_data_size":4}},
                    {"name":"s","datatype":"BYTES","shape":[2],"parameters":{"binary_data_size":11}}]})";
  const uint16_t halves[2] = {0x3c00, 0xc000};  // 1.0, -2.0
  std::string body = header + std::string(reinterpret_cast<const char*>(halves), 4) + le32(0) +
                     le32(3) + std::string("a\0b", 3);
  auto r = decode_infer_request(body, header.size());
  EXPECT_EQ(static_cast<float>(r->inputs[0].data.data<Float16>()[1]), -2.0f);
  EXPECT_EQ(r->inputs[1].data.data<std::string>()[0], "");
  EXPECT_EQ(r->inputs[1].data.data<std::string>()[1], std::string("a\0b", 3));
}

TEST(ServerCodec, RejectsBadRequests) {
  auto bad = [](const std::string& body, const std::string& needle,
                std::optional<size_t> header = std::nullopt) {
    expect_error([&] { decode_infer_request(body, header); }, ErrorCode::InvalidArgument, needle);
  };
  bad("{", "failed to parse");
  bad("{\"inputs\": 3}", "'inputs' must be an array");
  bad(R"({"inputs":[{"name":"a","datatype":"FP32","shape":[2],"data":[1]}]})", "has 1 elements");
  bad(R"({"inputs":[{"name":"a","datatype":"FP32","shape":[1],"data":[1,2]}]})", "more elements");
  bad(R"({"inputs":[{"name":"a","datatype":"INT8","shape":[1],"data":[300]}]})", "8-bit");
  bad(R"({"inputs":[{"name":"a","datatype":"UINT8","shape":[1],"data":[-1]}]})", "unsigned");
  bad(R"({"inputs":[{"name":"a","datatype":"FP16","shape":[1],"data":[1]}]})", "binary tensor");
  bad(R"({"inputs":[{"name":"a","datatype":"FP32","shape":[4611686018427387904,4],"data":[1]}]})",
      "overflow");
  bad(R"({"inputs":[{"name":"a","datatype":"X","shape":[1],"data":[1]}]})", "invalid datatype");
  bad(R"({"inputs":[{"name":"a","datatype":"FP32","shape":[1],"parameters":{"binary_data_size":8}}]})",
      "only 0 bytes");
  std::string header =
      R"({"inputs":[{"name":"a","datatype":"INT32","shape":[2],"parameters":{"binary_data_size":8}}]})";
  bad(header + std::string(9, '\0'), "binary data follow", header.size());
  bad(header, "larger than the body", header.size() + 1);
  CodecLimits limits;
  limits.max_outputs = 2;
  expect_error(
      [&] {
        decode_infer_request(R"({"inputs":[],"outputs":[{"name":"a"},{"name":"b"},{"name":"c"}]})",
                             std::nullopt, limits);
      },
      ErrorCode::InvalidArgument, "3 outputs");
}

TEST(ServerCodec, EncodesJsonAndBinaryOutputs) {
  InferResponse resp;
  resp.model_name = "m";
  resp.model_version = 3;
  resp.id = "q";
  InferOutput f;
  f.name = "f";
  f.datatype = DataType::Float32;
  f.data = Tensor::from_vector<float>({2}, {1.5f, -2.0f});
  f.shape = f.data.dims();
  InferOutput h;
  h.name = "h";
  h.datatype = DataType::Float16;
  h.data = Tensor(DataType::Float16, {1});
  h.shape = {1};
  InferOutput s;
  s.name = "s";
  s.datatype = DataType::String;
  s.data = Tensor::from_vector<std::string>({1}, {std::string("\0z", 2)});
  s.shape = {1};
  resp.outputs = {f, h, s};

  OutputEncoding json_only;
  EncodedResponse a = encode_infer_response(resp, json_only);
  // FP16 has no JSON form: it goes binary even when JSON is asked for.
  ASSERT_TRUE(a.header_length.has_value());
  std::string head = a.body.substr(0, *a.header_length);
  EXPECT_NE(head.find(R"("model_version":"3")"), std::string::npos) << head;
  EXPECT_NE(head.find(R"("data":[1.5,-2.0])"), std::string::npos) << head;
  EXPECT_NE(head.find(R"("data":["\u0000z"])"), std::string::npos) << head;
  EXPECT_NE(head.find(R"("binary_data_size":2)"), std::string::npos) << head;
  EXPECT_EQ(a.body.size(), *a.header_length + 2);

  OutputEncoding binary;
  binary.binary_default = true;
  EncodedResponse b = encode_infer_response(resp, binary);
  EXPECT_EQ(b.body.size(), *b.header_length + 8 + 2 + 4 + 2);
  EXPECT_EQ(b.body.substr(b.body.size() - 6), le32(2) + std::string("\0z", 2));
  float first = 0;
  std::memcpy(&first, b.body.data() + *b.header_length, 4);
  EXPECT_EQ(first, 1.5f);
  EXPECT_EQ(error_json("bad \"x\""), R"({"error":"bad \"x\""})");
}

}  // namespace
}  // namespace kiln::server::http
