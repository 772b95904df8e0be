// ai.kiln PointChain (made by passes/fuse_point_chains): element-wise ops in a row as one node.
// The reference runs the steps' point functions in double on each element and rounds once to
// the element type (the fast kernels compute wide and round once too); the operands broadcast
// numpy-style into input 0's shape, which is the output's.
#include <vector>

#include "ops/elementwise_utils.hpp"
#include "ops/fused_activation.hpp"
#include "ops/point_chain_nodes.hpp"
#include "ops/registry.hpp"

namespace kiln::ops {
namespace {

// Element strides of `t` along `dims` (its dims right-aligned, 0 where it is broadcast).
std::vector<int64_t> strides_into(const KernelContext& ctx, const Tensor& t,
                                  const std::vector<int64_t>& dims, size_t slot) {
  const size_t rank = dims.size(), r = static_cast<size_t>(t.rank());
  ctx.check(r <= rank, "input {} {} does not broadcast into {}", slot, t.describe(),
            dims_to_string(dims));
  std::vector<int64_t> strides(rank, 0);
  int64_t step = 1;
  for (size_t k = 0; k < r; ++k) {
    const size_t d = r - 1 - k, out = rank - 1 - k;
    const int64_t extent = t.dim(static_cast<int64_t>(d));
    ctx.check(extent == dims[out] || extent == 1, "input {} {} does not broadcast into {}", slot,
              t.describe(), dims_to_string(dims));
    if (extent != 1) strides[out] = step;
    step *= extent;
  }
  return strides;
}

void point_chain(KernelContext& ctx) {
  const std::vector<point::PointStep> steps = read_point_chain(ctx);
  const Tensor& x = ctx.input(0);
  const size_t inputs = ctx.input_count();
  ctx.check(inputs <= static_cast<size_t>(point::kMaxPointInputs), "{} inputs (at most {})", inputs,
            point::kMaxPointInputs);
  std::vector<std::vector<int64_t>> strides(inputs);
  for (size_t k = 1; k < inputs; ++k) {
    ctx.check(ctx.has_input(k) && ctx.input(k).dtype() == x.dtype(), "input {} must be a {} tensor",
              k, dtype_name(x.dtype()));
    strides[k] = strides_into(ctx, ctx.input(k), x.dims(), k);
  }
  for (const point::PointStep& s : steps) {
    ctx.check(!point::is_binary(s.op) || s.operand == 0 || static_cast<size_t>(s.operand) < inputs,
              "a step reads input {} of {}", static_cast<int>(s.operand), inputs);
  }
  const std::vector<int64_t>& dims = x.dims();
  ctx.set_output(
      0, dispatch_dtype<DTypeSet::Float>(x.dtype(), "PointChain", [&](auto tag) {
        using T = typename decltype(tag)::type;
        Tensor y(x.dtype(), dims);
        const T* px = x.data<T>();
        T* py = y.data<T>();
        std::vector<int64_t> at(inputs, 0);
        for (int64_t i = 0; i < x.numel(); ++i) {
          // Offsets of the operands for element i (row-major over dims).
          for (size_t k = 1; k < inputs; ++k) {
            int64_t rest = i, off = 0;
            for (size_t d = dims.size(); d-- > 0;) {
              off += (rest % dims[d]) * strides[k][d];
              rest /= dims[d];
            }
            at[k] = off;
          }
          double v = to_double(px[i]);
          for (const point::PointStep& s : steps) {
            double operand = 0;
            if (point::is_binary(s.op)) {
              operand =
                  s.operand == 0
                      ? v
                      : to_double(ctx.input(static_cast<size_t>(s.operand))
                                      .template data<T>()[at[static_cast<size_t>(s.operand)]]);
            }
            v = point::apply_point_step<double>(s, v, operand);
          }
          py[i] = from_double<T>(v);
        }
        return y;
      }));
}

// Not float16-safe as an op: convert_to_fp16 decides per node from the ops in the chain.
void infer_point_chain(InferContext& ctx) {
  if (const TypeInfo* x = ctx.input_type(0)) ctx.set_output_type(0, *x);
}

KILN_REGISTER_OP({.domain = kKilnDomain,
                  .op_type = "PointChain",
                  .kernel = point_chain,
                  .infer = infer_point_chain});

}  // namespace
}  // namespace kiln::ops
