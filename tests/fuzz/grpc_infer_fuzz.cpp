// libFuzzer target: arbitrary bytes as a gRPC ModelInferRequest message through the gRPC
// frontend's decoder (typed contents and raw_input_contents, every datatype), and a decoded
// request encoded back as a ModelInferResponse with its inputs as outputs, so the encoder sees
// every tensor the decoder can produce. Any crash, leak or sanitizer report is a bug; a
// kiln::Error is the expected outcome for bad input.
#include <cstddef>
#include <cstdint>

#include "server/grpc/grpc_codec.hpp"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  kiln::Tensor::set_max_bytes(size_t{64} << 20);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  inference::ModelInferRequest message;
  if (!message.ParseFromArray(data, static_cast<int>(size))) return 0;
  try {
    std::unique_ptr<kiln::server::InferRequest> request =
        kiln::server::grpc::decode_infer_request(message);
    kiln::server::InferResponse response;
    response.model_name = request->model_name;
    response.id = request->id;
    response.parameters = request->parameters;
    for (const kiln::server::InferInput& in : request->inputs) {
      response.outputs.push_back({in.name, in.datatype, in.shape, in.parameters, in.data});
    }
    inference::ModelInferResponse encoded;
    kiln::server::grpc::encode_infer_response(response, encoded);
  } catch (const kiln::Error&) {
  }
  return 0;
}
