#pragma once
// KServe v2 HTTP/REST inference body codec: the JSON request (row-major flat or nested "data")
// with the binary tensor data extension (a JSON header of Inference-Header-Content-Length bytes
// followed by raw tensors sized by each input's "binary_data_size"; BYTES as 4-byte
// little-endian length-prefixed elements; FP16 / BF16 only in binary), and the response in the
// same two forms. Untrusted input: every size is checked, JSON is read by a SAX parser without
// recursion or a document tree, and no tensor is allocated before its size is known to match the
// body (for JSON data: its element count to its shape, for every input).
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "server/infer_types.hpp"

namespace kiln::server::http {

struct CodecLimits {
  size_t max_inputs = 1024;
  size_t max_outputs = 1024;
  size_t max_rank = 32;
  size_t max_parameters = 256;
  size_t max_name_bytes = 1024;
  size_t max_json_depth = 48;  // a rank-32 nested "data" array inside the request's own levels
  // JSON tensor data is parsed straight into its tensors (two SAX passes, no document tree);
  // what the decoder keeps besides them (names, shapes, parameters, BYTES elements, the parser's
  // stack) may take this many bytes per byte of JSON (plus 1 MiB), and a request needing more is
  // refused. So a request costs about its body, its tensors and at most this multiple for the
  // rest; one refused before decoding its tensors, about its body and that rest.
  size_t json_memory_factor = 16;
};

// Decodes a request body. `header_length` is the Inference-Header-Content-Length value (nullopt:
// the whole body is JSON). Throws InvalidArgument (400) naming the offending field.
// `model` (the URL's) only names the model in error messages; the caller sets the request's
// model and version.
std::unique_ptr<InferRequest> decode_infer_request(std::string_view body,
                                                   std::optional<size_t> header_length,
                                                   const CodecLimits& limits = {},
                                                   std::string_view model = {});

struct EncodedResponse {
  std::string body;
  std::optional<size_t> header_length;  // set when binary outputs follow the JSON header
};

// Encodes a response. Output i is binary when the request asked (output parameter "binary_data"
// or request parameter "binary_data_output"), and always for FP16 / BF16, which JSON cannot
// carry. `request` is the decoded request the response answers.
EncodedResponse encode_infer_response(const InferResponse& response, const InferRequest& request);

// Only the output-encoding wishes of a request, kept by the frontend while the request itself
// travels through the scheduler.
struct OutputEncoding {
  bool binary_default = false;
  std::vector<std::pair<std::string, bool>> per_output;  // explicit "binary_data" per name
  size_t max_bytes = SIZE_MAX;  // largest body; larger is refused (InvalidArgument) unencoded
};
OutputEncoding output_encoding_of(const InferRequest& request);
EncodedResponse encode_infer_response(const InferResponse& response,
                                      const OutputEncoding& encoding);

// {"error": message} as Triton writes it.
std::string error_json(std::string_view message);

}  // namespace kiln::server::http
