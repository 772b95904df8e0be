// Multinomial (opset 7, 22): draws sample_size class indices per batch row from the categorical
// distribution whose unnormalized log-probabilities are the row. With a `seed` attribute the
// draws are deterministic; without one the generator is seeded from the OS.
#include <algorithm>
#include <bit>
#include <cmath>
#include <random>

#include "ops/op_utils.hpp"
#include "ops/registry.hpp"

namespace kiln::ops {
namespace {

DataType output_type(const AttrReader& ctx) {
  const int64_t code = ctx.attr_int("dtype", 6);
  if (code == 6) return DataType::Int32;
  if (code == 7) return DataType::Int64;
  ctx.fail("dtype must be int32 (6) or int64 (7), got {}", code);
}

void multinomial(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  ctx.check(dtype_is_float(x.dtype()), "input must be a float tensor, got {}", x.describe());
  ctx.check(x.rank() == 2, "input must be [batch_size, class_size], got {}", x.describe());
  const int64_t samples = ctx.attr_int("sample_size", 1);
  ctx.check(samples >= 0, "sample_size must be >= 0, got {}", samples);
  const DataType out_type = output_type(ctx);
  const int64_t batch = x.dim(0), classes = x.dim(1);
  ctx.check(classes > 0 || samples == 0 || batch == 0, "cannot sample from zero classes");
  std::mt19937_64 gen;
  if (ctx.has_attr("seed")) {
    gen.seed(std::bit_cast<uint32_t>(ctx.attr_float("seed")));
  } else {
    std::random_device rd;
    gen.seed((static_cast<uint64_t>(rd()) << 32) ^ rd());
  }
  Tensor out(out_type, {batch, samples});
  std::vector<double> cdf(static_cast<size_t>(classes));
  for (int64_t b = 0; b < batch; ++b) {
    double mx = -INFINITY;
    for (int64_t k = 0; k < classes; ++k) mx = std::max(mx, x.double_at(b * classes + k));
    double total = 0;
    for (int64_t k = 0; k < classes; ++k) {
      const double v = x.double_at(b * classes + k);
      total += std::isinf(mx) ? 0.0 : std::exp(v - mx);
      cdf[static_cast<size_t>(k)] = total;
    }
    ctx.check((total > 0 && std::isfinite(total)) || samples == 0,
              "row {} has no finite, positive probability mass", b);
    for (int64_t s = 0; s < samples; ++s) {
      const double u = static_cast<double>(gen() >> 11) * 0x1.0p-53 * total;
      int64_t k = std::upper_bound(cdf.begin(), cdf.end(), u) - cdf.begin();
      k = std::min(k, classes - 1);
      if (out_type == DataType::Int32) {
        out.data<int32_t>()[b * samples + s] = static_cast<int32_t>(k);
      } else {
        out.data<int64_t>()[b * samples + s] = k;
      }
    }
  }
  ctx.set_output(0, std::move(out));
}

void infer_multinomial(InferContext& ctx) {
  const TypeInfo* x = ctx.input_type(0);
  std::optional<Shape> shape;
  if (x && x->shape && x->shape->rank() == 2)
    shape = Shape({(*x->shape)[0], Dim(ctx.attr_int("sample_size", 1))});
  ctx.set_output_type(0, TypeInfo::tensor(output_type(ctx), shape));
}

KILN_REGISTER_OP({.op_type = "Multinomial", .kernel = multinomial, .infer = infer_multinomial});

}  // namespace
}  // namespace kiln::ops
