#pragma once
// The checks a request passes before a model takes it: input names, count, datatypes, shapes and
// batch size against the model's config, and the outputs it asks for. One place for them, so a
// model's scheduler and an ensemble (which checks its own request before running any step)
// refuse the same requests in the same words (tritonserver 2.51's, request_errors.hpp).
#include <string>
#include <vector>

#include "core/tensor.hpp"
#include "server/infer_types.hpp"

namespace kiln::server {

// What a model's worker (or an ensemble) needs to know about one of its tensors.
struct TensorSpec {
  std::string name;
  DataType dtype = DataType::Undefined;
  std::vector<int64_t> dims;     // config dims (batch dim excluded when batching); -1: any
  std::vector<int64_t> reshape;  // shape inside the model (batch dim excluded); empty: none
  bool has_reshape = false;
  bool optional = false;
};

// What the checks found out about an accepted request.
struct CheckedRequest {
  std::vector<const InferInput*> by_spec;  // the request's input per input spec (null: absent)
  int64_t batch = 0;            // the batch dim all inputs share; 0 when the model does not batch
  std::vector<size_t> outputs;  // indices into the output specs, in the order to return
};

// Checks `request` against a model's tensors; throws kiln::Error in Triton's words (naming
// `model`) for the first thing wrong. The pointers in the result point into `request`.
CheckedRequest check_request(const InferRequest& request, const std::vector<TensorSpec>& inputs,
                             const std::vector<TensorSpec>& outputs, int max_batch_size,
                             const std::string& model);

}  // namespace kiln::server
