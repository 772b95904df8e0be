#pragma once
// The words of tritonserver 2.51 for a request its model refuses (the differential tests,
// tests/server/test_triton_diff_*.py, compare them), so that what users match in logs and
// client code reads the same on Kiln.

#include <string>
#include <vector>

#include "server/infer_types.hpp"

namespace kiln::server {

struct TensorSpec;

// "[request id: <id>] ": Triton's prefix of the input checks' messages (<id_unknown> without id).
std::string request_id_prefix(const InferRequest& request);

// Throws InvalidArgument in Triton's words when the request holds fewer inputs than the model
// requires or more than it has.
void check_input_count(const InferRequest& request, const std::vector<TensorSpec>& inputs,
                       const std::string& model);

// The same message, for a request that has the right count but misses a required input.
[[noreturn]] void input_count_error(const InferRequest& request,
                                    const std::vector<TensorSpec>& inputs,
                                    const std::string& model);

}  // namespace kiln::server
