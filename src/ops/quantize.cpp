// QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, MatMulInteger and QLinearMatMul.
// Quantized types: int8/uint8/int16/uint16, int4/uint4/int2/uint2, float8 (e4m3fn, e4m3fnuz,
// e5m2, e5m2fnuz) and float4e2m1 (int32 too for DequantizeLinear).
#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/conv_utils.hpp"
#include "ops/infer_utils.hpp"
#include "ops/op_utils.hpp"
#include "ops/registry.hpp"

namespace kiln::ops {
namespace {

using namespace window;  // NOLINT: shared window/quantization helpers

bool is_quant_int(DataType t) {
  return t == DataType::UInt8 || t == DataType::Int8 || t == DataType::UInt16 ||
         t == DataType::Int16 || t == DataType::UInt4 || t == DataType::Int4 ||
         t == DataType::UInt2 || t == DataType::Int2;
}

// Float quantized types: values are rounded to the format instead of to an integer range.
bool is_quant_float(DataType t) {
  return t == DataType::Float8E4M3FN || t == DataType::Float8E4M3FNUZ ||
         t == DataType::Float8E5M2 || t == DataType::Float8E5M2FNUZ || t == DataType::Float4E2M1;
}

std::pair<double, double> int_range(DataType t) {
  switch (t) {
    case DataType::UInt8:
      return {0, 255};
    case DataType::Int8:
      return {-128, 127};
    case DataType::UInt16:
      return {0, 65535};
    case DataType::Int16:
      return {-32768, 32767};
    case DataType::Int32:
      return {-2147483648.0, 2147483647.0};
    case DataType::UInt4:
      return {0, 15};
    case DataType::Int4:
      return {-8, 7};
    case DataType::UInt2:
      return {0, 3};
    case DataType::Int2:
      return {-2, 1};
    default:
      return {0, 0};
  }
}

void require_quant_type(const AttrReader& ctx, DataType t, bool allow_int32) {
  if (is_quant_int(t) || is_quant_float(t) || (allow_int32 && t == DataType::Int32)) return;
  ctx.unsupported(
      "quantized element type {} is not supported (only 16-, 8-, 4- and 2-bit integers, float8 "
      "and float4e2m1{})",
      dtype_name(t), allow_int32 ? ", int32" : "");
}

// For every element of x (dims), the index of its scale / zero point: per tensor, per axis, or
// per block along `axis`.
std::vector<int64_t> param_index(const AttrReader& ctx, const std::vector<int64_t>& dims,
                                 const Tensor& scale) {
  const int64_t numel = shape_numel(dims);
  if (scale.numel() == 1 && scale.rank() <= 1) return std::vector<int64_t>(numel, 0);
  ctx.check(ctx.opset() >= 13, "per-axis scales need opset 13, model imports opset {}",
            ctx.opset());
  const int64_t rank = static_cast<int64_t>(dims.size());
  const int64_t axis = normalize_axis(ctx, ctx.attr_int("axis", 1), rank);
  const int64_t block = ctx.attr_int("block_size", 0);
  ctx.check(block >= 0, "block_size must be >= 0, got {}", block);
  std::vector<int64_t> out(static_cast<size_t>(numel));
  const int64_t inner = shape_numel(std::vector<int64_t>(dims.begin() + axis + 1, dims.end()));
  if (block == 0) {
    ctx.check(scale.rank() == 1 && scale.dim(0) == dims[axis],
              "per-axis scale must be 1-D with {} elements (axis {}), got {}", dims[axis], axis,
              scale.describe());
    for (int64_t i = 0; i < numel; ++i) out[i] = (i / inner) % dims[axis];
    return out;
  }
  ctx.check(scale.rank() == dims.size(), "blocked scale {} must have the rank of the input",
            scale.describe());
  for (int64_t d = 0; d < rank; ++d) {
    int64_t want = d == axis ? (dims[d] + block - 1) / block : dims[d];
    ctx.check(scale.dim(d) == want, "blocked scale {} does not match input {} with block_size {}",
              scale.describe(), dims_to_string(dims), block);
  }
  // Index over x's dims, where the block axis maps to axis / block.
  const int64_t outer = numel / std::max<int64_t>(1, dims[axis] * inner);
  const int64_t nblocks = scale.dim(axis);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t a = 0; a < dims[axis]; ++a)
      for (int64_t i = 0; i < inner; ++i)
        out[(o * dims[axis] + a) * inner + i] = (o * nblocks + a / block) * inner + i;
  return out;
}

// Zero points per parameter index (0 when absent) as doubles, exact for every quantized type;
// checks they pair with the scale.
std::vector<double> zero_point_values(const KernelContext& ctx, size_t slot, const Tensor& scale,
                                      DataType want) {
  if (!ctx.has_input(slot)) return std::vector<double>(static_cast<size_t>(scale.numel()), 0.0);
  const Tensor& zp = ctx.input(slot);
  ctx.check(zp.dtype() == want, "zero point type {} must be {}", dtype_name(zp.dtype()),
            dtype_name(want));
  ctx.check(zp.dims() == scale.dims() || (zp.numel() == 1 && scale.numel() == 1),
            "zero point {} must have the shape of the scale {}", zp.describe(), scale.describe());
  std::vector<double> out(static_cast<size_t>(zp.numel()));
  for (int64_t i = 0; i < zp.numel(); ++i) {
    out[static_cast<size_t>(i)] =
        is_quant_float(want) ? zp.double_at(i) : static_cast<double>(zp.int_at(i));
  }
  return out;
}

// Scales as doubles; they must be positive floats (float/float16/bfloat16).
std::vector<double> read_scale(const KernelContext& ctx, const Tensor& scale) {
  return dispatch_dtype<DTypeSet::Float>(scale.dtype(), "scale", [&](auto tag) {
    using T = typename decltype(tag)::type;
    std::vector<double> v(static_cast<size_t>(scale.numel()));
    const T* p = scale.data<T>();
    for (int64_t i = 0; i < scale.numel(); ++i)
      v[i] = static_cast<double>(static_cast<float>(p[i]));
    if constexpr (std::is_same_v<T, double>) {
      for (int64_t i = 0; i < scale.numel(); ++i) v[i] = p[i];
    }
    (void)ctx;
    return v;
  });
}

DataType quantize_output_type(const AttrReader& ctx, const DataType* zp_type) {
  if (zp_type) return *zp_type;
  int64_t code = ctx.attr_int("output_dtype", 0);
  if (code == 0) return DataType::UInt8;
  return static_cast<DataType>(code);
}

template <typename Q>
void store_quantized(Tensor& y, const std::vector<double>& v) {
  Q* p = y.data<Q>();
  for (size_t i = 0; i < v.size(); ++i) p[i] = static_cast<Q>(v[i]);
}

// `v` holds integers already clamped to the type's range, or for float types the unrounded
// values that the format rounds (ties to even), saturating or not.
Tensor make_quantized(DataType t, const std::vector<int64_t>& dims, const std::vector<double>& v,
                      bool saturate = true) {
  Tensor y(t, dims);
  if (dtype_is_low_precision(t)) {
    dispatch_dtype<DTypeSet::LowPrecision>(t, "quantized output", [&](auto tag) {
      using Q = typename decltype(tag)::type;
      Q* p = y.data<Q>();
      for (size_t i = 0; i < v.size(); ++i) {
        if constexpr (is_sub_byte_int_v<Q>) {
          p[i] = Q::wrap(static_cast<int64_t>(v[i]));
        } else if constexpr (is_minifloat_v<Q>) {
          p[i] = Q::from_double(v[i], saturate);
        } else {
          fail(ErrorCode::Unsupported, "quantized output type {} is not supported", dtype_name(t));
        }
      }
    });
    return y;
  }
  dispatch_dtype<DTypeSet::Integer>(t, "quantized output", [&](auto tag) {
    using Q = typename decltype(tag)::type;
    store_quantized<Q>(y, v);
  });
  return y;
}

void quantize_linear(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& scale = ctx.input(1);
  DataType zt = ctx.has_input(2) ? ctx.input(2).dtype() : DataType::Undefined;
  DataType yt = quantize_output_type(ctx, ctx.has_input(2) ? &zt : nullptr);
  require_quant_type(ctx, yt, false);
  if (ctx.has_input(2) && ctx.attr_int("output_dtype", 0) != 0)
    ctx.check(static_cast<DataType>(ctx.attr_int("output_dtype")) == yt,
              "output_dtype disagrees with the zero point type {}", dtype_name(yt));
  std::vector<int64_t> idx = param_index(ctx, x.dims(), scale);
  std::vector<double> s = read_scale(ctx, scale);
  std::vector<double> zp = zero_point_values(ctx, 2, scale, yt);
  const bool float_out = is_quant_float(yt);
  const bool saturate = ctx.attr_int("saturate", 1) != 0;
  // Plain variables, not a structured binding: clang 14 (the fuzz build) cannot capture those.
  const auto [range_lo, range_hi] = int_range(yt);
  const double lo = range_lo, hi = range_hi;
  // The division runs at `precision` (default: the scale's type); 16-bit float precisions
  // round operands and quotient the way arithmetic in that type does.
  DataType prec = static_cast<DataType>(ctx.attr_int("precision", 0));
  if (prec == DataType::Undefined) prec = scale.dtype();
  if (prec != DataType::Float32 && prec != DataType::Float16 && prec != DataType::BFloat16 &&
      prec != DataType::Float64) {
    ctx.unsupported("quantization precision {} is not supported", dtype_name(prec));
  }
  auto narrow = [prec](float v) {
    if (prec == DataType::Float16) return static_cast<float>(Float16(v));
    if (prec == DataType::BFloat16) return static_cast<float>(BFloat16(v));
    return v;
  };
  std::vector<double> out(static_cast<size_t>(x.numel()));
  dispatch_dtype<DTypeSet::Numeric>(x.dtype(), "QuantizeLinear", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!(std::is_floating_point_v<T> || std::is_same_v<T, Float16> ||
                    std::is_same_v<T, BFloat16> || std::is_same_v<T, int32_t>)) {
      ctx.fail("x must be float, float16, bfloat16 or int32, got {}", dtype_name(x.dtype()));
    } else {
      const T* px = x.data<T>();
      for (int64_t i = 0; i < x.numel(); ++i) {
        double q;
        if (prec == DataType::Float64 || std::is_same_v<T, int32_t>) {  // int32 / float: double
          q = static_cast<double>(px[i]) / s[idx[i]];
        } else {
          // Float division (not double) so rounding ties land where the reference's do.
          q = narrow(narrow(static_cast<float>(px[i])) / narrow(static_cast<float>(s[idx[i]])));
        }
        if (float_out) {
          // Rounded (and saturated) by the float format; the zero point is usually 0.
          out[i] = zp[idx[i]] == 0 ? q : q + zp[idx[i]];
        } else {
          out[i] = saturate_round(round_half_even(q) + zp[idx[i]], lo, hi);
        }
      }
    }
  });
  ctx.set_output(0, make_quantized(yt, x.dims(), out, saturate));
}

void infer_quantize_linear(InferContext& ctx) {
  const TypeInfo* x = ctx.input_type(0);
  if (!x || !x->is_tensor()) return;
  const TypeInfo* zp = ctx.has_input(2) ? ctx.input_type(2) : nullptr;
  if (zp && (!zp->is_tensor() || zp->dtype == DataType::Undefined)) return;
  DataType yt = quantize_output_type(ctx, zp ? &zp->dtype : nullptr);
  // The kernel reports unsupported types with a clear message.
  if (!is_quant_int(yt) && !is_quant_float(yt)) return;
  ctx.set_output_type(0, TypeInfo::tensor(yt, x->shape));
}

DataType dequantize_output_type(const AttrReader& ctx, DataType scale_type) {
  int64_t code = ctx.attr_int("output_dtype", 0);
  return code == 0 ? scale_type : static_cast<DataType>(code);
}

void dequantize_linear(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& scale = ctx.input(1);
  require_quant_type(ctx, x.dtype(), true);
  DataType yt = dequantize_output_type(ctx, scale.dtype());
  std::vector<int64_t> idx = param_index(ctx, x.dims(), scale);
  std::vector<double> s = read_scale(ctx, scale);
  std::vector<double> zp = zero_point_values(ctx, 2, scale, x.dtype());
  if (x.dtype() == DataType::Int32) {
    for (double z : zp) ctx.check(z == 0, "int32 input needs a zero point of 0, got {}", z);
  }
  const bool float_in = is_quant_float(x.dtype());
  ctx.set_output(
      0, dispatch_dtype<DTypeSet::Float>(yt, "DequantizeLinear", [&](auto tag) {
        using T = typename decltype(tag)::type;
        Tensor y(yt, x.dims());
        T* py = y.data<T>();
        for (int64_t i = 0; i < x.numel(); ++i) {
          // Multiply in float like the reference (double for double outputs).
          const double v = float_in ? static_cast<double>(static_cast<float>(x.double_at(i)) -
                                                          static_cast<float>(zp[idx[i]]))
                                    : static_cast<double>(x.int_at(i)) - zp[idx[i]];
          if constexpr (std::is_same_v<T, double>) {
            py[i] = v * s[idx[i]];
          } else {
            py[i] = static_cast<T>(static_cast<float>(v) * static_cast<float>(s[idx[i]]));
          }
        }
        return y;
      }));
}

void infer_dequantize_linear(InferContext& ctx) {
  const TypeInfo* x = ctx.input_type(0);
  const TypeInfo* s = ctx.input_type(1);
  if (!x || !x->is_tensor() || !s || !s->is_tensor()) return;
  const DataType yt = dequantize_output_type(ctx, s->dtype);
  if (!dtype_is_float(yt)) return;  // the kernel reports it
  ctx.set_output_type(0, TypeInfo::tensor(yt, x->shape));
}

void dynamic_quantize_linear(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  ctx.check(x.dtype() == DataType::Float32, "x must be float, got {}", dtype_name(x.dtype()));
  const float* px = x.data<float>();
  float lo = 0, hi = 0;  // the range always includes 0 so that 0 is exactly representable
  for (int64_t i = 0; i < x.numel(); ++i) {
    lo = std::min(lo, px[i]);
    hi = std::max(hi, px[i]);
  }
  const float scale = (hi == lo ? 1.0f : hi - lo) / 255.0f;
  const float zp = static_cast<float>(saturate_round(0.0f - lo / scale, 0.0, 255.0));
  Tensor y(DataType::UInt8, x.dims());
  uint8_t* py = y.data<uint8_t>();
  for (int64_t i = 0; i < x.numel(); ++i) {
    const float q = px[i] / scale;
    py[i] = static_cast<uint8_t>(saturate_round(round_half_even(q) + zp, 0.0, 255.0));
  }
  ctx.set_output(0, y);
  ctx.set_output(1, Tensor::scalar(scale));
  ctx.set_output(2, Tensor::scalar(static_cast<uint8_t>(zp)));
}

void infer_dynamic_quantize_linear(InferContext& ctx) {
  const TypeInfo* x = ctx.input_type(0);
  if (!x || !x->is_tensor()) return;
  ctx.set_output_type(0, TypeInfo::tensor(DataType::UInt8, x->shape));
  ctx.set_output_type(1, TypeInfo::tensor(DataType::Float32, Shape()));
  ctx.set_output_type(2, TypeInfo::tensor(DataType::UInt8, Shape()));
}

// numpy matmul of two int64 operands (already shifted by their zero points).
struct IntMatMul {
  std::vector<int64_t> dims;
  std::vector<int64_t> values;
  int64_t m = 0, n = 0;  // matrix dims (after promoting 1-D operands)
};

IntMatMul int_matmul(const KernelContext& ctx, const std::vector<int64_t>& a_dims,
                     const std::vector<int64_t>& av, const std::vector<int64_t>& b_dims,
                     const std::vector<int64_t>& bv) {
  ctx.check(!a_dims.empty() && !b_dims.empty(), "operands must have rank >= 1: {} and {}",
            dims_to_string(a_dims), dims_to_string(b_dims));
  std::vector<int64_t> ad = a_dims, bd = b_dims;
  const bool a_vec = ad.size() == 1, b_vec = bd.size() == 1;
  if (a_vec) ad.insert(ad.begin(), 1);
  if (b_vec) bd.push_back(1);
  const int64_t m = ad[ad.size() - 2], k = ad.back(), n = bd.back();
  ctx.check(bd[bd.size() - 2] == k, "inner dims differ: {} and {}", dims_to_string(a_dims),
            dims_to_string(b_dims));
  std::vector<int64_t> a_batch(ad.begin(), ad.end() - 2), b_batch(bd.begin(), bd.end() - 2);
  std::vector<int64_t> batch = broadcast_dims(ctx, {a_batch, b_batch});
  IntMatMul r;
  r.m = m;
  r.n = n;
  r.dims = batch;
  if (!a_vec) r.dims.push_back(m);
  if (!b_vec) r.dims.push_back(n);
  const int64_t batches = shape_numel(batch);
  const int64_t count = shape_numel({batches, m, n});
  check_scratch(ctx, count, sizeof(int64_t));
  r.values.assign(static_cast<size_t>(count), 0);
  std::array<std::vector<int64_t>, 2> strides = {broadcast_strides(a_batch, batch),
                                                 broadcast_strides(b_batch, batch)};
  auto mat = [&](int64_t i, const std::array<int64_t, 2>& off) {
    const int64_t* pa = av.data() + off[0] * m * k;
    const int64_t* pb = bv.data() + off[1] * k * n;
    int64_t* po = r.values.data() + i * m * n;
    for (int64_t row = 0; row < m; ++row) {
      for (int64_t col = 0; col < n; ++col) {
        int64_t acc = 0;
        for (int64_t t = 0; t < k; ++t) acc += pa[row * k + t] * pb[t * n + col];
        po[row * n + col] = acc;
      }
    }
  };
  if (batch.empty()) {
    mat(0, {0, 0});
  } else {
    for_each_broadcast<2>(batch, strides, mat);
  }
  return r;
}

void check_int8ish(const KernelContext& ctx, const Tensor& t, const char* what) {
  ctx.check(t.dtype() == DataType::UInt8 || t.dtype() == DataType::Int8,
            "{} must be int8 or uint8, got {}", what, dtype_name(t.dtype()));
}

// The values of a MatMul operand minus its zero point. The zero point is a scalar, a vector
// per row of A ([M]) / per column of B ([N]), or an N-D tensor that broadcasts to the operand
// ([..., M, 1] for A, [..., 1, N] for B).
std::vector<int64_t> centered(const KernelContext& ctx, size_t zp_slot, const Tensor& q,
                              bool is_a) {
  std::vector<int64_t> v = q.to_int64_vector();
  if (!ctx.has_input(zp_slot)) return v;
  const Tensor& zp = ctx.input(zp_slot);
  ctx.check(zp.dtype() == q.dtype(), "zero point type {} differs from its tensor's {}",
            dtype_name(zp.dtype()), dtype_name(q.dtype()));
  std::vector<int64_t> z = zp.to_int64_vector();
  if (z.size() == 1) {
    for (int64_t& x : v) x -= z[0];
    return v;
  }
  std::vector<int64_t> zd = zp.dims();
  if (zd.size() == 1 && q.rank() >= 2)
    zd = is_a ? std::vector<int64_t>{zd[0], 1} : std::vector<int64_t>{1, zd[0]};
  ctx.check(zd.size() <= q.rank() && broadcast_dims(ctx, {q.dims(), zd}) == q.dims(),
            "zero point {} does not fit operand {} (per-{} quantization)", zp.describe(),
            q.describe(), is_a ? "row" : "column");
  std::array<std::vector<int64_t>, 1> strides = {broadcast_strides(zd, q.dims())};
  for_each_broadcast<1>(q.dims(), strides,
                        [&](int64_t i, const std::array<int64_t, 1>& off) { v[i] -= z[off[0]]; });
  return v;
}

void matmul_integer(KernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  check_int8ish(ctx, a, "A");
  check_int8ish(ctx, b, "B");
  IntMatMul r =
      int_matmul(ctx, a.dims(), centered(ctx, 2, a, true), b.dims(), centered(ctx, 3, b, false));
  Tensor y(DataType::Int32, r.dims);
  int32_t* py = y.data<int32_t>();
  for (size_t i = 0; i < r.values.size(); ++i) py[i] = static_cast<int32_t>(r.values[i]);
  ctx.set_output(0, y);
}

// Output shape of numpy matmul, for inference.
std::optional<Shape> matmul_shape(const AttrReader& ctx, const TypeInfo* a, const TypeInfo* b) {
  if (!a || !b || !a->shape || !b->shape) return std::nullopt;
  Shape as = *a->shape, bs = *b->shape;
  if (as.rank() == 0 || bs.rank() == 0) return std::nullopt;
  std::vector<Dim> ab(as.dims().begin(), as.dims().end() - std::min<size_t>(2, as.rank()));
  std::vector<Dim> bb(bs.dims().begin(), bs.dims().end() - std::min<size_t>(2, bs.rank()));
  std::optional<Shape> batch = broadcast_shapes(ctx, Shape(ab), Shape(bb));
  if (!batch) return std::nullopt;
  std::vector<Dim> dims = batch->dims();
  if (as.rank() >= 2) dims.push_back(as[as.rank() - 2]);
  if (bs.rank() >= 2) dims.push_back(bs[bs.rank() - 1]);
  return Shape(dims);
}

void infer_matmul_integer(InferContext& ctx) {
  ctx.set_output_type(0, TypeInfo::tensor(DataType::Int32,
                                          matmul_shape(ctx, ctx.input_type(0), ctx.input_type(1))));
}

// Scale of a QLinearMatMul operand: per tensor or per row/column; keeps the storage type so
// the combined scale rounds like the reference.
struct QScale {
  DataType type;
  std::vector<float> values;
};

QScale qscale(const KernelContext& ctx, size_t slot) {
  const Tensor& t = ctx.input(slot);
  ctx.check(t.rank() <= 1, "scale must be a scalar or 1-D, got {}", t.describe());
  QScale s{t.dtype(), {}};
  for (double v : read_scale(ctx, t)) s.values.push_back(static_cast<float>(v));
  return s;
}

// Rounds a float to the precision of a scale type (float16/bfloat16 arithmetic rounds per op).
float round_to(DataType t, float v) {
  if (t == DataType::Float16) return static_cast<float>(Float16(v));
  if (t == DataType::BFloat16) return static_cast<float>(BFloat16(v));
  return v;
}

void qlinear_matmul(KernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(3);
  check_int8ish(ctx, a, "a");
  check_int8ish(ctx, b, "b");
  QScale as = qscale(ctx, 1), bs = qscale(ctx, 4), ys = qscale(ctx, 6);
  ctx.check(ys.values.size() == 1, "y_scale must be a scalar");
  DataType yt = ctx.has_input(7) ? ctx.input(7).dtype() : a.dtype();
  check_int8ish(ctx, ctx.has_input(7) ? ctx.input(7) : a, "y_zero_point");
  int64_t y_zp = 0;
  if (ctx.has_input(7)) {
    ctx.check(ctx.input(7).numel() == 1, "y_zero_point must be a scalar");
    y_zp = ctx.input(7).int_at(0);
  }
  IntMatMul r =
      int_matmul(ctx, a.dims(), centered(ctx, 2, a, true), b.dims(), centered(ctx, 5, b, false));
  ctx.check(as.values.size() == 1 || static_cast<int64_t>(as.values.size()) == r.m,
            "a_scale must be a scalar or have {} elements", r.m);
  ctx.check(bs.values.size() == 1 || static_cast<int64_t>(bs.values.size()) == r.n,
            "b_scale must be a scalar or have {} elements", r.n);
  auto [lo, hi] = int_range(yt);
  std::vector<double> out(r.values.size());
  for (size_t i = 0; i < out.size(); ++i) {
    const int64_t row = (static_cast<int64_t>(i) / r.n) % r.m, col = static_cast<int64_t>(i) % r.n;
    const float sa = as.values[as.values.size() == 1 ? 0 : row];
    const float sb = bs.values[bs.values.size() == 1 ? 0 : col];
    const float scale = round_to(as.type, round_to(as.type, sa * sb) / ys.values[0]);
    const double v = static_cast<double>(r.values[i]) * scale + static_cast<double>(y_zp);
    out[i] = saturate_round(v, lo, hi);
  }
  ctx.set_output(0, make_quantized(yt, r.dims, out));
}

void infer_qlinear_matmul(InferContext& ctx) {
  const TypeInfo* zp = ctx.has_input(7) ? ctx.input_type(7) : ctx.input_type(0);
  if (!zp || !zp->is_tensor()) return;
  ctx.set_output_type(
      0, TypeInfo::tensor(zp->dtype, matmul_shape(ctx, ctx.input_type(0), ctx.input_type(3))));
}

// In a half-precision engine x may arrive in float16 / bfloat16 while the scale stays float32:
// widening x is exact, so the node computes what a Cast to float32 before it would.
KILN_REGISTER_OP(
    {.op_type = "QuantizeLinear",
     .kernel = quantize_linear,
     .infer = infer_quantize_linear,
     .traits = {
         .fp16 = {.safe = true, .inputs = slots({0}), .outputs = 0, .after_half_inputs = true}}});
KILN_REGISTER_OP({.op_type = "DequantizeLinear",
                  .kernel = dequantize_linear,
                  .infer = infer_dequantize_linear});
KILN_REGISTER_OP({.op_type = "DynamicQuantizeLinear",
                  .kernel = dynamic_quantize_linear,
                  .infer = infer_dynamic_quantize_linear});
KILN_REGISTER_OP({.op_type = "MatMulInteger",
                  .kernel = matmul_integer,
                  .infer = infer_matmul_integer});
KILN_REGISTER_OP({.op_type = "QLinearMatMul",
                  .kernel = qlinear_matmul,
                  .infer = infer_qlinear_matmul});

}  // namespace
}  // namespace kiln::ops
