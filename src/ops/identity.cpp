// Identity and Constant: pass a value through, or produce the one stored in an attribute.
#include "ops/infer_utils.hpp"
#include "ops/op_flops.hpp"
#include "ops/op_utils.hpp"
#include "ops/registry.hpp"

namespace kiln::ops {
namespace {

void identity(KernelContext& ctx) {
  ctx.set_output(0, ctx.input_value(0));
}

// Constant holds exactly one of: value (tensor), value_float(s), value_int(s), value_string(s).
Tensor constant_value(const AttrReader& ctx) {
  const auto& attrs = ctx.node().attributes();
  ctx.check(attrs.size() == 1, "needs exactly one value attribute, got {}", attrs.size());
  const std::string& name = attrs.begin()->first;
  if (name == "value") return ctx.attr_tensor(name);
  if (name == "value_float") return Tensor::scalar(ctx.attr_float(name));
  if (name == "value_int") return Tensor::scalar(ctx.attr_int(name));
  if (name == "value_string") return Tensor::scalar(ctx.attr_string(name));
  if (name == "value_floats") {
    auto v = ctx.attr_floats(name);
    return Tensor::from_vector<float>({static_cast<int64_t>(v.size())}, v);
  }
  if (name == "value_ints") {
    auto v = ctx.attr_ints(name);
    return Tensor::from_vector<int64_t>({static_cast<int64_t>(v.size())}, v);
  }
  if (name == "value_strings") {
    auto v = ctx.attr_strings(name);
    return Tensor::from_vector<std::string>({static_cast<int64_t>(v.size())}, v);
  }
  if (name == "sparse_value") ctx.unsupported("sparse_value constants are not supported");
  ctx.fail("unknown attribute '{}'", name);
}

void constant(KernelContext& ctx) {
  ctx.set_output(0, constant_value(ctx));
}

void infer_constant(InferContext& ctx) {
  Tensor t = constant_value(ctx);
  ctx.set_output_type(0, TypeInfo::tensor(t.dtype(), Shape::from_values(t.dims())));
}

KILN_REGISTER_OP({.op_type = "Identity",
                  .kernel = identity,
                  .infer = infer_same_as_input0,
                  .traits = {.view = true,
                             .fp16 = {.safe = true},
                             .transposes = true,
                             .quantization = true,
                             .flops = flops_zero}});
KILN_REGISTER_OP({.op_type = "Constant",
                  .kernel = constant,
                  .infer = infer_constant,
                  .traits = {.flops = flops_zero}});

}  // namespace
}  // namespace kiln::ops
