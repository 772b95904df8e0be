#include "server/request_errors.hpp"

#include <set>

#include "server/request_check.hpp"

namespace kiln::server {
namespace {

// ['a','b'] as Triton lists names.
std::string name_list(const std::vector<std::string>& names) {
  std::string out = "[";
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += ',';
    out += '\'' + names[i] + '\'';
  }
  return out + "]";
}

}  // namespace

std::string request_id_prefix(const InferRequest& request) {
  return fmt::format("[request id: {}] ", request.id.empty() ? "<id_unknown>" : request.id);
}

void input_count_error(const InferRequest& request, const std::vector<TensorSpec>& inputs,
                       const std::string& model) {
  std::set<std::string> given;
  std::vector<std::string> got, missing;
  for (const InferInput& in : request.inputs) {
    got.push_back(in.name);
    given.insert(in.name);
  }
  size_t required = 0;
  for (const TensorSpec& spec : inputs) {
    if (spec.optional) continue;
    ++required;
    if (!given.count(spec.name)) missing.push_back(spec.name);
  }
  fail(ErrorCode::InvalidArgument,
       "{}expected {} inputs but got {} inputs for model '{}'. Got input(s) {}, but missing "
       "required input(s) {}. Please provide all required input(s).",
       request_id_prefix(request), required, request.inputs.size(), model, name_list(got),
       name_list(missing));
}

void check_input_count(const InferRequest& request, const std::vector<TensorSpec>& inputs,
                       const std::string& model) {
  size_t required = 0;
  for (const TensorSpec& spec : inputs) required += spec.optional ? 0 : 1;
  if (request.inputs.size() < required || request.inputs.size() > inputs.size()) {
    input_count_error(request, inputs, model);
  }
}

}  // namespace kiln::server
