#include "server/request_check.hpp"

#include <set>

#include "server/request_errors.hpp"

namespace kiln::server {
namespace {

// What tritonserver adds to a shape mismatch of a batching model (a missing batch dim is the
// usual cause).
constexpr const char* kBatchDimNote =
    ". NOTE: Setting a non-zero max_batch_size in the model config requires a batch dimension to "
    "be prepended to each input shape. If you want to specify the full shape including the batch "
    "dim in your input dims config, try setting max_batch_size to zero. See the model "
    "configuration docs for more info on max_batch_size.";

std::string shape_string(const std::vector<int64_t>& dims) {
  return fmt::format("[{}]", fmt::join(dims, ","));
}

}  // namespace

CheckedRequest check_request(const InferRequest& request, const std::vector<TensorSpec>& inputs,
                             const std::vector<TensorSpec>& outputs, int max_batch_size,
                             const std::string& model) {
  CheckedRequest checked;
  checked.by_spec.assign(inputs.size(), nullptr);
  check_input_count(request, inputs, model);
  const std::string rid = request_id_prefix(request);
  int64_t batch = -1;
  for (const InferInput& in : request.inputs) {
    size_t index = inputs.size();
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (inputs[i].name == in.name) index = i;
    }
    KILN_CHECK_ARG(index < inputs.size(), "unexpected inference input '{}' for model '{}'", in.name,
                   model);
    KILN_CHECK_ARG(checked.by_spec[index] == nullptr, "input '{}' appears more than once", in.name);
    const TensorSpec& spec = inputs[index];
    KILN_CHECK_ARG(in.datatype == spec.dtype,
                   "{}inference input '{}' data-type is '{}', but model '{}' expects '{}'", rid,
                   in.name, datatype_name(in.datatype), model, datatype_name(spec.dtype));
    KILN_CHECK(in.data.defined() && in.data.dims() == in.shape && in.data.dtype() == in.datatype,
               ErrorCode::Internal, "input '{}' data does not match its shape", in.name);
    std::vector<int64_t> dims = in.shape;
    if (max_batch_size > 0) {
      KILN_CHECK_ARG(!dims.empty(), "input '{}' has no batch dim; model '{}' batches", in.name,
                     model);
      const int64_t b = dims.front();
      KILN_CHECK_ARG(b >= 1 && b <= max_batch_size,
                     "{}inference request batch-size must be <= {} for '{}'", rid, max_batch_size,
                     model);
      KILN_CHECK_ARG(batch < 0 || batch == b,
                     "input '{}' batch size {} differs from the other inputs' {}", in.name, b,
                     batch);
      batch = b;
      dims.erase(dims.begin());
    }
    bool match = dims.size() == spec.dims.size();
    for (size_t i = 0; match && i < dims.size(); ++i) {
      match = spec.dims[i] == -1 || spec.dims[i] == dims[i];
    }
    if (!match) {
      std::vector<int64_t> expected = spec.dims;
      if (max_batch_size > 0) expected.insert(expected.begin(), -1);
      fail(ErrorCode::InvalidArgument,
           "{}unexpected shape for input '{}' for model '{}'. Expected {}, got {}{}", rid, in.name,
           model, shape_string(expected), shape_string(in.shape),
           max_batch_size > 0 ? kBatchDimNote : "");
    }
    checked.by_spec[index] = &in;
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (checked.by_spec[i] == nullptr && !inputs[i].optional) {
      input_count_error(request, inputs, model);
    }
  }
  checked.batch = batch > 0 ? batch : 0;
  if (request.outputs.empty()) {
    for (size_t i = 0; i < outputs.size(); ++i) checked.outputs.push_back(i);
    return checked;
  }
  std::set<std::string> seen;
  for (const RequestedOutput& out : request.outputs) {
    size_t index = outputs.size();
    for (size_t i = 0; i < outputs.size(); ++i) {
      if (outputs[i].name == out.name) index = i;
    }
    KILN_CHECK_ARG(index < outputs.size(), "unexpected inference output '{}' for model '{}'",
                   out.name, model);
    KILN_CHECK_ARG(seen.insert(out.name).second, "output '{}' is requested more than once",
                   out.name);
    KILN_CHECK(!out.parameters.count("classification"), ErrorCode::Unsupported,
               "output '{}': the classification extension is not supported", out.name);
    checked.outputs.push_back(index);
  }
  return checked;
}

}  // namespace kiln::server
