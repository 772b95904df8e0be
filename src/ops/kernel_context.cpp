#include "ops/kernel_context.hpp"

namespace kiln::ops {

void AttrReader::fail_with(ErrorCode code, const std::string& message) const {
  throw Error(code, fmt::format("node {}: {}", node_.label(), message));
}

const ir::Attribute& AttrReader::require(const std::string& name) const {
  const ir::Attribute* a = node_.attribute(name);
  if (!a) fail("required attribute '{}' is missing", name);
  return *a;
}

namespace {
template <typename T>
const T& typed(const AttrReader& r, const ir::Attribute& a, const std::string& name) {
  if (const T* p = std::get_if<T>(&a.storage())) return *p;
  r.fail("attribute '{}' has kind {}, which this op does not accept", name,
         ir::attr_kind_name(a.kind()));
}
}  // namespace

int64_t AttrReader::attr_int(const std::string& name) const {
  return typed<int64_t>(*this, require(name), name);
}
int64_t AttrReader::attr_int(const std::string& name, int64_t fallback) const {
  const ir::Attribute* a = node_.attribute(name);
  return a ? typed<int64_t>(*this, *a, name) : fallback;
}
float AttrReader::attr_float(const std::string& name) const {
  return typed<float>(*this, require(name), name);
}
float AttrReader::attr_float(const std::string& name, float fallback) const {
  const ir::Attribute* a = node_.attribute(name);
  return a ? typed<float>(*this, *a, name) : fallback;
}
std::string AttrReader::attr_string(const std::string& name) const {
  return typed<std::string>(*this, require(name), name);
}
std::string AttrReader::attr_string(const std::string& name, const std::string& fallback) const {
  const ir::Attribute* a = node_.attribute(name);
  return a ? typed<std::string>(*this, *a, name) : fallback;
}
std::vector<int64_t> AttrReader::attr_ints(const std::string& name) const {
  return typed<std::vector<int64_t>>(*this, require(name), name);
}
std::vector<int64_t> AttrReader::attr_ints(const std::string& name,
                                           std::vector<int64_t> fallback) const {
  const ir::Attribute* a = node_.attribute(name);
  return a ? typed<std::vector<int64_t>>(*this, *a, name) : fallback;
}
std::vector<float> AttrReader::attr_floats(const std::string& name) const {
  return typed<std::vector<float>>(*this, require(name), name);
}
std::vector<float> AttrReader::attr_floats(const std::string& name,
                                           std::vector<float> fallback) const {
  const ir::Attribute* a = node_.attribute(name);
  return a ? typed<std::vector<float>>(*this, *a, name) : fallback;
}
std::vector<std::string> AttrReader::attr_strings(const std::string& name) const {
  return typed<std::vector<std::string>>(*this, require(name), name);
}
std::vector<std::string> AttrReader::attr_strings(const std::string& name,
                                                  std::vector<std::string> fallback) const {
  const ir::Attribute* a = node_.attribute(name);
  return a ? typed<std::vector<std::string>>(*this, *a, name) : fallback;
}
const Tensor& AttrReader::attr_tensor(const std::string& name) const {
  return typed<Tensor>(*this, require(name), name);
}
const ir::Graph& AttrReader::attr_graph(const std::string& name) const {
  const auto& g = typed<ir::GraphPtr>(*this, require(name), name);
  if (!g) fail("attribute '{}' holds no graph", name);
  return *g;
}
const TypeInfo& AttrReader::attr_type(const std::string& name) const {
  return typed<TypeInfo>(*this, require(name), name);
}

const Tensor& KernelContext::input(size_t i) const {
  if (!has_input(i)) fail("input {} is required but missing", i);
  if (!inputs_[i]->is_tensor())
    fail("input {} must be a tensor, got {}", i, inputs_[i]->describe());
  return inputs_[i]->tensor();
}

const RtValue& KernelContext::input_value(size_t i) const {
  static const RtValue none;
  if (i >= inputs_.size() || !inputs_[i]) return none;
  return *inputs_[i];
}

void KernelContext::set_output(size_t i, RtValue value) {
  if (i >= outputs_.size()) {
    fail_with(ErrorCode::Internal, fmt::format("kernel set output {} of {}", i, outputs_.size()));
  }
  outputs_[i] = std::move(value);
}

std::vector<RtValue> KernelContext::run_subgraph(const ir::Graph& body,
                                                 const std::vector<RtValue>& inputs) const {
  if (!runner_) fail_with(ErrorCode::Internal, "no subgraph runner available");
  return runner_->run_subgraph(body, inputs);
}

const TypeInfo* InferContext::input_type(size_t i) const {
  const ir::Value* v = node().input(i);
  return v ? &v->type() : nullptr;
}

const Tensor* InferContext::input_constant(size_t i) const {
  const ir::Value* v = node().input(i);
  return v && v->is_constant() ? &v->constant() : nullptr;
}

void InferContext::set_output_type(size_t i, TypeInfo type) {
  inferred_.emplace_back(i, std::move(type));
}

}  // namespace kiln::ops
