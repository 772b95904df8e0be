// The KServe v2 HTTP body codec: JSON and binary tensors in, JSON and binary tensors out.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>

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
  // JSON that does not parse, or holds the wrong kind or count: Internal, as tritonserver.
  auto unparsed = [](const std::string& body, const std::string& needle) {
    expect_error([&] { decode_infer_request(body, std::nullopt); }, ErrorCode::Internal, needle);
  };
  unparsed("{", "failed to parse");
  unparsed("{\"inputs\": 3}",
           "Unable to parse 'inputs': attempt to access JSON non-array as array");
  unparsed(R"({"inputs":[{"name":"a","datatype":"FP32","shape":[2],"data":[1]}]})",
           "Shape does not match true shape of 'data' field (input 'a': 'data' has 1 elements");
  unparsed(R"({"inputs":[{"name":"a","datatype":"FP32","shape":[1],"data":[1,2]}]})",
           "'data' has 2 elements, shape [1] holds 1");
  unparsed(R"({"inputs":[{"name":"a","datatype":"INT8","shape":[1],"data":[300]}]})", "8-bit");
  unparsed(R"({"inputs":[{"name":"a","datatype":"UINT8","shape":[1],"data":[-1]}]})", "unsigned");
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

// The decoder reads JSON in two SAX passes (no document tree): what follows covers the order of
// keys, every datatype, the element count checked before anything is allocated, and bad JSON
// anywhere.

TEST(ServerCodec, JsonKeysInAnyOrder) {
  // "data" before "datatype" and "shape", "inputs" before "id", unknown keys anywhere (skipped,
  // however nested), and a repeated key read as its first occurrence.
  auto r = decode_infer_request(
      R"({"x":{"inputs":[1,{"y":[]}]},
          "inputs":[{"data":[[1,2,3],[4,5,6]],"extra":[{"data":[9]}],"shape":[2,3],
                     "name":"a","datatype":"INT32","shape":[7]},
                    {"data":7,"datatype":"UINT16","name":"b","shape":[]}],
          "id":"late","parameters":{"priority":1},"id":"ignored","more":[{"id":3}]})",
      std::nullopt);
  EXPECT_EQ(r->id, "late");
  EXPECT_EQ(r->priority, 1u);
  ASSERT_EQ(r->inputs.size(), 2u);
  EXPECT_EQ(r->inputs[0].data.dims(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(r->inputs[0].data.values<int32_t>()[5], 6);
  EXPECT_EQ(r->inputs[1].data.dims(), std::vector<int64_t>{});
  EXPECT_EQ(r->inputs[1].data.values<uint16_t>()[0], 7);
}

TEST(ServerCodec, JsonNestedEqualsFlat) {
  auto decode = [](const std::string& data) {
    return decode_infer_request(
        R"({"inputs":[{"name":"a","datatype":"FP32","shape":[2,2,2],"data":)" + data + "}]}",
        std::nullopt);
  };
  const std::vector<float> want{1, 2, 3, 4, 5, 6, 7, 8};
  for (const char* data :
       {"[1,2,3,4,5,6,7,8]", "[[1,2,3,4],[5,6,7,8]]", "[[[1,2],[3,4]],[[5,6],[7,8]]]",
        " [ [ [1 , 2] ] ,[[3,4]],[[5,6],[7,8]]]"}) {
    auto r = decode(data);
    auto v = r->inputs[0].data.values<float>();
    EXPECT_EQ(std::vector<float>(v.begin(), v.end()), want) << data;
  }
  // Empty tensors.
  auto r = decode_infer_request(
      R"({"inputs":[{"name":"a","datatype":"INT8","shape":[0,3],"data":[]},
                    {"name":"b","datatype":"BYTES","shape":[2,0],"data":[[],[]]}]})",
      std::nullopt);
  EXPECT_EQ(r->inputs[0].data.numel(), 0);
  EXPECT_EQ(r->inputs[1].data.dims(), (std::vector<int64_t>{2, 0}));
}

TEST(ServerCodec, JsonEveryDatatype) {
  auto one = [](const std::string& datatype, const std::string& data, size_t n) {
    auto r = decode_infer_request(R"({"inputs":[{"name":"x","datatype":")" + datatype +
                                      R"(","shape":[)" + std::to_string(n) + R"(],"data":)" + data +
                                      "}]}",
                                  std::nullopt);
    EXPECT_EQ(r->inputs[0].datatype, r->inputs[0].data.dtype());
    return std::move(r->inputs[0].data);
  };
  auto ints = [](const Tensor& t) {
    std::vector<int64_t> v;
    for (int64_t i = 0; i < t.numel(); ++i) v.push_back(t.int_at(i));
    return v;
  };
  EXPECT_EQ(ints(one("BOOL", "[true,false]", 2)), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(ints(one("INT8", "[-128,127]", 2)), (std::vector<int64_t>{-128, 127}));
  EXPECT_EQ(ints(one("INT16", "[-32768,32767]", 2)), (std::vector<int64_t>{-32768, 32767}));
  EXPECT_EQ(ints(one("INT32", "[-2147483648,2147483647]", 2)),
            (std::vector<int64_t>{INT32_MIN, INT32_MAX}));
  EXPECT_EQ(ints(one("INT64", "[-9223372036854775808,9223372036854775807]", 2)),
            (std::vector<int64_t>{INT64_MIN, INT64_MAX}));
  EXPECT_EQ(ints(one("UINT8", "[0,255]", 2)), (std::vector<int64_t>{0, 255}));
  EXPECT_EQ(ints(one("UINT16", "[0,65535]", 2)), (std::vector<int64_t>{0, 65535}));
  EXPECT_EQ(ints(one("UINT32", "[0,4294967295]", 2)), (std::vector<int64_t>{0, 4294967295}));
  EXPECT_EQ(one("UINT64", "[0,18446744073709551615]", 2).values<uint64_t>()[1], UINT64_MAX);
  Tensor f = one("FP32", "[1.5,-2,3e2,NaN,-Infinity]", 5);
  EXPECT_EQ(f.values<float>()[0], 1.5f);
  EXPECT_EQ(f.values<float>()[1], -2.0f);
  EXPECT_EQ(f.values<float>()[2], 300.0f);
  EXPECT_TRUE(std::isnan(f.values<float>()[3]));
  EXPECT_EQ(f.values<float>()[4], -std::numeric_limits<float>::infinity());
  Tensor d = one("FP64", "[0.1,18446744073709551615,-9223372036854775808]", 3);
  EXPECT_EQ(d.values<double>()[0], 0.1);
  EXPECT_EQ(d.values<double>()[1], 18446744073709551615.0);
  EXPECT_EQ(d.values<double>()[2], -9223372036854775808.0);
  Tensor s = one("BYTES", R"(["", "a\"b", "\u0000", "\u00e9"])", 4);
  EXPECT_EQ(s.values<std::string>()[0], "");
  EXPECT_EQ(s.values<std::string>()[1], "a\"b");
  EXPECT_EQ(s.values<std::string>()[2], std::string("\0", 1));
  EXPECT_EQ(s.values<std::string>()[3], "\xc3\xa9");
  // Each datatype refuses what it cannot hold, with the message of its kind: Internal, as
  // tritonserver answers JSON it cannot read; FP16 / BF16 in JSON are InvalidArgument.
  auto bad = [](const std::string& datatype, const std::string& data, const std::string& needle) {
    const bool binary_only = datatype == "FP16" || datatype == "BF16";
    expect_error(
        [&] {
          decode_infer_request(R"({"inputs":[{"name":"x","datatype":")" + datatype +
                                   R"(","shape":[1],"data":)" + data + "}]}",
                               std::nullopt);
        },
        binary_only ? ErrorCode::InvalidArgument : ErrorCode::Internal, needle);
  };
  bad("BOOL", "[1]", "BOOL data must be true or false");
  bad("BOOL", "[null]", "BOOL data must be true or false");
  bad("INT8", "[-129]", "not a 8-bit signed integer");
  bad("INT16", "[32768]", "not a 16-bit signed integer");
  bad("INT32", "[1.5]", "not a 32-bit signed integer");
  bad("INT64", "[9223372036854775808]", "not a 64-bit signed integer");
  bad("INT64", "[true]", "not a 64-bit signed integer");
  bad("UINT8", "[256]", "not a 8-bit unsigned integer");
  bad("UINT16", "[-1]", "not a 16-bit unsigned integer");
  bad("UINT32", "[4294967296]", "not a 32-bit unsigned integer");
  bad("UINT64", "[18446744073709551616]", "not a 64-bit unsigned integer");
  bad("UINT64", R"(["1"])", "not a 64-bit unsigned integer");
  bad("FP32", R"(["1"])", "FP32 data must be numbers");
  bad("FP64", "[false]", "FP64 data must be numbers");
  bad("FP64", R"([{"a":1}])", "FP64 data must be numbers");
  bad("BYTES", "[1]", "BYTES data must be strings");
  bad("BYTES", "[[[null]]]", "BYTES data must be strings");
  bad("FP16", "[1]", "binary tensor data extension");
  bad("BF16", "[1]", "binary tensor data extension");
}

TEST(ServerCodec, JsonCountCheckedBeforeAllocating) {
  // A shape far larger than its data is refused on the count alone: a tensor for it would take
  // gigabytes (or terabytes, which no allocator could give), so getting the count's error, and
  // quickly, shows nothing was allocated for it.
  const auto start = std::chrono::steady_clock::now();
  for (const char* dt : {"FP32", "INT64", "BYTES", "BOOL"}) {
    for (const char* shape : {"[1000000000]", "[1000000,1000000]"}) {
      const std::string data = std::string(dt) == "BYTES"  ? R"(["a","b","c"])"
                               : std::string(dt) == "BOOL" ? "[true,true,false]"
                                                           : "[1,2,3]";
      expect_error(
          [&] {
            decode_infer_request(R"({"inputs":[{"name":"a","datatype":")" + std::string(dt) +
                                     R"(","shape":)" + shape + R"(,"data":)" + data + "}]}",
                                 std::nullopt);
          },
          ErrorCode::Internal,
          fmt::format("input 'a': 'data' has 3 elements, shape {} holds", shape));
    }
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
  // Too many elements: refused the same way, whatever the kind of the extra ones.
  expect_error(
      [] {
        decode_infer_request(
            R"({"inputs":[{"name":"a","datatype":"INT8","shape":[2],"data":[1,2,"x"]}]})",
            std::nullopt);
      },
      ErrorCode::Internal, "'data' has 3 elements, shape [2] holds 2");
  // Every input is counted before any is allocated: a valid first input is not decoded when a
  // later one is refused (its bad value would be reported otherwise).
  expect_error(
      [] {
        decode_infer_request(R"({"inputs":[{"name":"a","datatype":"INT8","shape":[1],"data":[999]},
                                           {"name":"b","datatype":"INT8","shape":[4],"data":[1]}]})",
                             std::nullopt);
      },
      ErrorCode::Internal, "input 'b': 'data' has 1 elements, shape [4] holds 4");
}

TEST(ServerCodec, JsonDataCostsNoParseMemory) {
  // Tensor data is written straight into its tensor: even with no memory per byte of JSON (only
  // the scope's fixed 1 MiB), a 4 MiB request of numbers decodes.
  std::string data = "[";
  for (int i = 0; i < (1 << 21); ++i) data += "1,";
  data.back() = ']';
  CodecLimits limits;
  limits.json_memory_factor = 0;
  auto r = decode_infer_request(R"({"inputs":[{"name":"a","datatype":"FP32","shape":[)" +
                                    std::to_string(1 << 21) + R"(],"data":)" + data + "}]}",
                                std::nullopt, limits);
  EXPECT_EQ(r->inputs[0].data.numel(), 1 << 21);
  EXPECT_EQ(r->inputs[0].data.values<float>()[12345], 1.0f);
  // What the decoder keeps is still charged: a 2 MiB id is more than that 1 MiB.
  expect_error(
      [&] {
        decode_infer_request(R"({"id":")" + std::string(2 << 20, 'x') + R"(","inputs":[]})",
                             std::nullopt, limits);
      },
      ErrorCode::InvalidArgument, "decoding the request JSON needs more than");
}

TEST(ServerCodec, JsonErrorsAtEveryStage) {
  const std::string good =
      R"({"id":"q","parameters":{"priority":1,"s":"t"},"inputs":[{"name":"a","datatype":"BYTES",)"
      R"("shape":[2],"parameters":{"k":true},"data":["x",["y"]]},{"name":"b","datatype":"FP32",)"
      R"("shape":[1],"data":[2.5]}],"outputs":[{"name":"o","parameters":{"binary_data":true}}]})";
  ASSERT_EQ(decode_infer_request(good, std::nullopt)->inputs.size(), 2u);
  // Every strict prefix is bad JSON, cut anywhere: in a key, a string, a number, between passes'
  // fields, inside "data".
  for (size_t n = 0; n < good.size(); ++n) {
    SCOPED_TRACE(good.substr(0, n));
    expect_error([&] { decode_infer_request(good.substr(0, n), std::nullopt); },
                 ErrorCode::Internal, "failed to parse");
  }
  // Bad JSON after a field that is wrong: the parse error is the one reported (the checks run
  // once the whole document has parsed).
  auto bad = [](const std::string& body, const std::string& needle) {
    expect_error([&] { decode_infer_request(body, std::nullopt); }, ErrorCode::InvalidArgument,
                 needle);
  };
  // What tritonserver cannot read answers Internal (500), in its words.
  auto unparsed = [](const std::string& body, const std::string& needle) {
    expect_error([&] { decode_infer_request(body, std::nullopt); }, ErrorCode::Internal, needle);
  };
  unparsed(R"({"inputs":3,})", "failed to parse");
  unparsed(R"({"inputs":[{"name":"a","datatype":"FP32","shape":[9],"data":[1,,2]}]})",
           "failed to parse");
  unparsed(R"({"inputs":[{"name":"a","datatype":"FP32","shape":[1],"data":[1]}]} x)",
           "failed to parse");
  unparsed(R"({"inputs":[{"name":"a","datatype":"FP32","shape":[1],"data":[tru]}]})",
           "failed to parse");
  unparsed(good + "\x01", "failed to parse");
  // Each field of the wrong kind, anywhere in its object.
  unparsed("[]", "must be a JSON object");
  unparsed("7", "must be a JSON object");
  bad(R"({"id":1,"inputs":[]})", "'id' must be a string");
  bad(R"({"inputs":[],"parameters":[]})", "request: 'parameters' must be a JSON object");
  bad(R"({"inputs":[],"parameters":{"a":null}})", "parameter 'a' must be a bool, number or string");
  bad(R"({"inputs":[],"parameters":{"a":1,"b":[2]}})", "parameter 'b' must be a bool");
  unparsed(R"({"inputs":{}})", "Unable to parse 'inputs': attempt to access JSON non-array");
  bad(R"({"inputs":[[]]})", "each input must be a JSON object");
  unparsed(R"({"inputs":[{"data":[1],"shape":[1],"datatype":"FP32"}]})",
           "Unable to parse 'name': attempt to access non-existing object member 'name'");
  bad(R"({"inputs":[{"name":"","datatype":"FP32","shape":[1],"data":[1]}]})", "needs a 'name'");
  unparsed(R"({"inputs":[{"name":["a"],"datatype":"FP32","shape":[1],"data":[1]}]})",
           "Unable to parse 'name': attempt to access JSON non-string as string");
  unparsed(R"({"inputs":[{"data":[1],"name":"a","shape":[1]}]})", "Unable to parse 'datatype'");
  unparsed(R"({"inputs":[{"data":[1],"name":"a","datatype":"FP32"}]})",
           "Unable to parse 'shape': attempt to access non-existing object member 'shape'");
  unparsed(R"({"inputs":[{"name":"a","datatype":"FP32","shape":3,"data":[1]}]})",
           "Unable to parse 'shape': attempt to access JSON non-array as array");
  bad(R"({"inputs":[{"name":"a","datatype":"FP32","shape":[1.0],"data":[1]}]})",
      "'shape' must hold non-negative integers");
  bad(R"({"inputs":[{"name":"a","datatype":"FP32","shape":[[1]],"data":[1]}]})",
      "'shape' must hold non-negative integers");
  bad(R"({"inputs":[{"name":"a","datatype":"FP32","shape":[-1],"data":[1]}]})",
      "'shape' must hold non-negative integers");
  bad(R"({"inputs":[{"name":"a","datatype":"FP32","shape":[)" + std::string(39, '1') +
          R"(],"data":[1]}]})",
      "'shape' must hold non-negative integers");  // past int64
  std::string rank40 = "[1";
  for (int i = 1; i < 40; ++i) rank40 += ",1";
  bad(R"({"inputs":[{"name":"a","datatype":"FP32","shape":)" + rank40 + R"(],"data":[1]}]})",
      "rank 40 is more than 32");
  bad(R"({"inputs":[{"name":"a","datatype":"FP32","shape":[1],"parameters":{"x":{}},"data":[1]}]})",
      "input 'a': parameter 'x' must be");
  bad(R"({"inputs":[{"name":"a","datatype":"FP32","shape":[1]}]})",
      "has neither 'data' nor 'binary_data_size'");
  bad(R"({"inputs":[{"name":"a","datatype":"FP32","shape":[1],"data":[1],)"
      R"("parameters":{"binary_data_size":4}}]})",
      "has both 'data' and 'binary_data_size'");
  bad(R"({"inputs":[{"name":"a","datatype":"FP32","shape":[1],"data":[1],)"
      R"("parameters":{"shared_memory_region":"r"}}]})",
      "Input must set only one of the following fields");
  bad(R"({"inputs":[],"outputs":[{"name":"o","parameters":{"binary_data":true,)"
      R"("shared_memory_region":"r"}}]})",
      "Output can't set both 'shared_memory_region' and 'binary_data'");
  {
    // An input in shared memory carries no data: the server reads it from the region.
    auto r = decode_infer_request(
        R"({"inputs":[{"name":"a","datatype":"FP32","shape":[4],"parameters":)"
        R"({"shared_memory_region":"r","shared_memory_offset":8,"shared_memory_byte_size":16}}]})",
        std::nullopt);
    ASSERT_TRUE(r->inputs[0].shm.has_value());
    EXPECT_EQ(r->inputs[0].shm->region, "r");
    EXPECT_EQ(r->inputs[0].shm->offset, 8u);
    EXPECT_EQ(r->inputs[0].shm->byte_size, 16u);
    EXPECT_FALSE(r->inputs[0].data.defined());
  }
  expect_error(
      [] {
        decode_infer_request(R"({"inputs":[{"name":"a","datatype":"FP32","shape":[1],)"
                             R"("parameters":{"shared_memory_region":"r",)"
                             R"("shared_memory_byte_size":-4}}]})",
                             std::nullopt);
      },
      ErrorCode::Internal, "Unable to parse 'shared_memory_byte_size'");
  bad(R"({"inputs":[],"outputs":{}})", "'outputs' must be an array");
  bad(R"({"inputs":[],"outputs":[1]})", "each requested output must be a JSON object");
  bad(R"({"inputs":[],"outputs":[{"name":2}]})", "each requested output needs a 'name' string");
  bad(R"({"inputs":[],"outputs":[{"name":"o","parameters":{"binary_data":"yes"}}]})",
      "binary_data");
}

TEST(ServerCodec, JsonCountLimitsNameTheCount) {
  CodecLimits limits;
  limits.max_inputs = 2;
  limits.max_parameters = 3;
  auto bad = [&](const std::string& body, const std::string& needle) {
    expect_error([&] { decode_infer_request(body, std::nullopt, limits); },
                 ErrorCode::InvalidArgument, needle);
  };
  const std::string in = R"({"name":"a","datatype":"FP32","shape":[1],"data":[1]})";
  bad(R"({"inputs":[)" + in + "," + in + "," + in + "," + in + "]}",
      "request has 4 inputs; at most 2");
  bad(R"({"inputs":[],"parameters":{"a":1,"b":2,"c":3,"d":[]}})",
      "request: more than 3 parameters");
  EXPECT_EQ(decode_infer_request(R"({"inputs":[],"parameters":{"a":1,"a":2,"b":"x"}})",
                                 std::nullopt, limits)
                ->parameters.size(),
            2u);
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
