// libFuzzer target: arbitrary bytes through the HTTP frontend's request parsing. The same input is
// fed (1) to Beast's HTTP/1.1 request parser with the server's limits, and (2) to the KServe v2
// infer-request decoder, with an Inference-Header-Content-Length taken from the first two bytes;
// a decoded request is then encoded back as a response (JSON and binary) so the encoder sees
// every tensor type the decoder can produce. Any crash, leak or sanitizer report is a bug; a
// kiln::Error is the expected outcome for bad input.
#include <boost/asio/buffer.hpp>
#include <boost/beast/http.hpp>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "server/http/infer_codec.hpp"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  kiln::Tensor::set_max_bytes(size_t{64} << 20);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace http = boost::beast::http;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  {
    http::request_parser<http::string_body> parser;
    parser.body_limit(1 << 20);
    parser.header_limit(16 << 10);
    parser.eager(true);
    boost::beast::error_code ec;
    parser.put(boost::asio::buffer(bytes.data(), bytes.size()), ec);
    if (!ec && parser.is_done()) (void)parser.get().target();
  }
  std::optional<size_t> header_length;
  std::string_view body = bytes;
  if (size >= 2 && (data[0] & 1)) {
    header_length = (size_t{data[0]} | size_t{data[1]} << 8) % (size - 1);
    body = bytes.substr(2);
    if (*header_length > body.size()) header_length = body.size();
  }
  try {
    std::unique_ptr<kiln::server::InferRequest> request =
        kiln::server::http::decode_infer_request(body, header_length);
    kiln::server::InferResponse response;
    response.model_name = "fuzz";
    response.id = request->id;
    for (kiln::server::InferInput& in : request->inputs) {
      kiln::server::InferOutput out;
      out.name = in.name;
      out.datatype = in.datatype;
      out.shape = in.shape;
      out.data = in.data;
      response.outputs.push_back(std::move(out));
    }
    kiln::server::http::OutputEncoding json;
    (void)kiln::server::http::encode_infer_response(response, json);
    kiln::server::http::OutputEncoding binary;
    binary.binary_default = true;
    (void)kiln::server::http::encode_infer_response(response, binary);
  } catch (const kiln::Error&) {
  }
  return 0;
}
