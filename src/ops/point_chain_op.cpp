// ai.kiln PointChain (made by passes/fuse_point_chains): element-wise ops in a row as one node.
// The reference runs the steps' point functions in double on each element and rounds once to
// the element type (the fast kernels compute wide and round once too); the operands broadcast
// numpy-style into input 0's shape, which is the output's.
#include <array>
#include <vector>

#include "ops/elementwise_utils.hpp"
#include "ops/fused_activation.hpp"
#include "ops/point_chain_nodes.hpp"
#include "ops/registry.hpp"

namespace kiln::ops {
namespace {

void point_chain(KernelContext& ctx) {
  const std::vector<point::PointStep> steps = read_point_chain(ctx);
  const Tensor& x = ctx.input(0);
  const size_t inputs = ctx.input_count();
  ctx.check(inputs <= static_cast<size_t>(point::kMaxPointInputs), "{} inputs (at most {})", inputs,
            point::kMaxPointInputs);
  // Every input's strides into input 0's dims, which an operand may not grow.
  const std::vector<int64_t>& dims = x.dims();
  std::array<std::vector<int64_t>, point::kMaxPointInputs> strides;
  for (size_t k = 0; k < inputs; ++k) {
    ctx.check(ctx.has_input(k) && ctx.input(k).dtype() == x.dtype(), "input {} must be a {} tensor",
              k, dtype_name(x.dtype()));
    ctx.check(broadcast_dims(ctx, {dims, ctx.input(k).dims()}) == dims,
              "input {} {} does not broadcast into {}", k, ctx.input(k).describe(),
              dims_to_string(dims));
    strides[k] = broadcast_strides(ctx.input(k).dims(), dims);
  }
  for (size_t k = inputs; k < strides.size(); ++k) strides[k].assign(dims.size(), 0);
  ctx.set_output(0, dispatch_dtype<DTypeSet::Float>(x.dtype(), "PointChain", [&](auto tag) {
                   using T = typename decltype(tag)::type;
                   std::array<const T*, point::kMaxPointInputs> in{};
                   for (size_t k = 0; k < inputs; ++k) in[k] = ctx.input(k).template data<T>();
                   Tensor y(x.dtype(), dims);
                   T* py = y.data<T>();
                   for_each_broadcast(dims, strides, [&](int64_t i, const auto& at) {
                     double v = to_double(in[0][at[0]]);
                     for (const point::PointStep& s : steps) {
                       double operand = 0;
                       if (point::is_binary(s.op)) {
                         const auto k = static_cast<size_t>(s.operand);
                         operand = k == 0 ? v : to_double(in[k][at[k]]);
                       }
                       v = point::apply_point_step<double>(s, v, operand);
                     }
                     py[i] = from_double<T>(v);
                   });
                   return y;
                 }));
}

void infer_point_chain(InferContext& ctx) {
  if (const TypeInfo* x = ctx.input_type(0)) ctx.set_output_type(0, *x);
}

KILN_REGISTER_OP({.domain = kKilnDomain,
                  .op_type = "PointChain",
                  .kernel = point_chain,
                  .infer = infer_point_chain});

}  // namespace
}  // namespace kiln::ops
