// Random generators: RandomUniform(Like), RandomNormal(Like), Bernoulli. With a `seed` attribute
// the stream is deterministic (same seed, same values); without one it is seeded from the OS.
#include <bit>
#include <cmath>
#include <numbers>
#include <random>

#include "ops/op_utils.hpp"
#include "ops/registry.hpp"

namespace kiln::ops {
namespace {

class Generator {
 public:
  explicit Generator(const AttrReader& ctx) {
    if (ctx.has_attr("seed")) {
      gen_.seed(std::bit_cast<uint32_t>(ctx.attr_float("seed")));
    } else {
      std::random_device rd;
      gen_.seed((static_cast<uint64_t>(rd()) << 32) ^ rd());
    }
  }
  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(gen_() >> 11) * 0x1.0p-53; }
  double normal() {
    double u1 = uniform(), u2 = uniform();
    if (u1 <= 0) u1 = 0x1.0p-53;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
  }

 private:
  std::mt19937_64 gen_;
};

DataType attr_dtype(const AttrReader& ctx, DataType fallback) {
  if (!ctx.has_attr("dtype")) return fallback;
  return dtype_from_onnx(static_cast<int32_t>(ctx.attr_int("dtype")), "dtype attribute");
}

template <typename Fn>
Tensor fill(const KernelContext& ctx, DataType dtype, const std::vector<int64_t>& dims, Fn&& next) {
  Tensor out(dtype, dims);
  dispatch_dtype<DTypeSet::Float>(dtype, ctx.node().op_type(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* p = out.data<T>();
    for (int64_t i = 0; i < out.numel(); ++i) p[i] = convert_element<T>(next());
  });
  return out;
}

std::vector<int64_t> shape_attr(const KernelContext& ctx) {
  std::vector<int64_t> dims = ctx.attr_ints("shape");
  for (int64_t d : dims) ctx.check(d >= 0, "shape has a negative dim {}", d);
  return dims;
}

template <bool Normal, bool Like>
void random_kernel(KernelContext& ctx) {
  DataType dtype;
  std::vector<int64_t> dims;
  if constexpr (Like) {
    const Tensor& x = ctx.input(0);
    dtype = attr_dtype(ctx, x.dtype());
    dims = x.dims();
  } else {
    dtype = attr_dtype(ctx, DataType::Float32);
    dims = shape_attr(ctx);
  }
  Generator gen(ctx);
  if constexpr (Normal) {
    const double mean = ctx.attr_float("mean", 0.0f), scale = ctx.attr_float("scale", 1.0f);
    ctx.set_output(0, fill(ctx, dtype, dims, [&] { return mean + scale * gen.normal(); }));
  } else {
    const double low = ctx.attr_float("low", 0.0f), high = ctx.attr_float("high", 1.0f);
    ctx.check(low <= high, "low {} exceeds high {}", low, high);
    ctx.set_output(0, fill(ctx, dtype, dims, [&] { return low + (high - low) * gen.uniform(); }));
  }
}

void bernoulli(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const DataType dtype = attr_dtype(ctx, x.dtype());
  dispatch_dtype<DTypeSet::Float>(x.dtype(), "Bernoulli input", [](auto) { return 0; });
  Generator gen(ctx);
  Tensor out(dtype, x.dims());
  dispatch_dtype<DTypeSet::NumericBool>(dtype, "Bernoulli", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* p = out.data<T>();
    for (int64_t i = 0; i < x.numel(); ++i) {
      const double prob = x.double_at(i);
      ctx.check(prob >= 0 && prob <= 1, "probability {} is outside [0, 1]", prob);
      p[i] = convert_element<T>(gen.uniform() < prob ? 1.0 : 0.0);
    }
  });
  ctx.set_output(0, out);
}

void infer_like(InferContext& ctx) {
  const TypeInfo* x = ctx.input_type(0);
  if (!x || !x->is_tensor()) return;
  DataType dtype = ctx.has_attr("dtype")
                       ? dtype_from_onnx(static_cast<int32_t>(ctx.attr_int("dtype")), "dtype")
                       : x->dtype;
  ctx.set_output_type(0, TypeInfo::tensor(dtype, x->shape));
}

void infer_shaped(InferContext& ctx) {
  DataType dtype = dtype_from_onnx(static_cast<int32_t>(ctx.attr_int("dtype", 1)), "dtype");
  ctx.set_output_type(0, TypeInfo::tensor(dtype, Shape::from_values(ctx.attr_ints("shape"))));
}

KILN_REGISTER_OP({.op_type = "RandomUniform",
                  .kernel = random_kernel<false, false>,
                  .infer = infer_shaped});
KILN_REGISTER_OP({.op_type = "RandomNormal",
                  .kernel = random_kernel<true, false>,
                  .infer = infer_shaped});
KILN_REGISTER_OP({.op_type = "RandomUniformLike",
                  .kernel = random_kernel<false, true>,
                  .infer = infer_like});
KILN_REGISTER_OP({.op_type = "RandomNormalLike",
                  .kernel = random_kernel<true, true>,
                  .infer = infer_like});
KILN_REGISTER_OP({.op_type = "Bernoulli", .kernel = bernoulli, .infer = infer_like});

}  // namespace
}  // namespace kiln::ops
