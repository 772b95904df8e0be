#pragma once
// Score post-transforms shared by the ai.onnx.ml regressors and classifiers, with the formulas
// onnxruntime and the ONNX reference use (PROBIT through their erf-inverse approximation).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "ops/control_real_io.hpp"
#include "ops/kernel_context.hpp"

namespace kiln::ops::ml {

// The feature input X of the tree and SVM models ([C] or [N, C], float/double/int64/int32) as
// doubles, with its row and column counts.
inline std::vector<double> read_features(const KernelContext& ctx, int64_t& rows, int64_t& cols) {
  const Tensor& x = ctx.input(0);
  ctx.check(x.dtype() == DataType::Float32 || x.dtype() == DataType::Float64 ||
                x.dtype() == DataType::Int64 || x.dtype() == DataType::Int32,
            "X must be float, double, int64 or int32, got {}", x.describe());
  ctx.check(x.rank() == 1 || x.rank() == 2, "X must be [C] or [N, C], got {}", x.describe());
  rows = x.rank() == 2 ? x.dim(0) : 1;
  cols = x.dims().back();
  return ctl::to_doubles(x);
}

enum class PostTransform { None, Softmax, Logistic, SoftmaxZero, Probit };

inline PostTransform post_transform_from_string(const AttrReader& ctx, const std::string& s) {
  if (s == "NONE") return PostTransform::None;
  if (s == "SOFTMAX") return PostTransform::Softmax;
  if (s == "LOGISTIC") return PostTransform::Logistic;
  if (s == "SOFTMAX_ZERO") return PostTransform::SoftmaxZero;
  if (s == "PROBIT") return PostTransform::Probit;
  ctx.fail("unknown post_transform '{}'", s);
}

inline PostTransform post_transform_from_int(const AttrReader& ctx, int64_t v) {
  ctx.check(v >= 0 && v <= 4, "unknown post_transform {}", v);
  return static_cast<PostTransform>(v);
}

// Winitzki's approximation of erf^-1, as both runtimes compute PROBIT.
inline double probit(double p) {
  double x = 2 * p - 1;
  const double sgn = x < 0 ? -1.0 : 1.0;
  x = (1.0 - x) * (1.0 + x);
  if (x == 0) return 0;
  const double lg = std::log(x);
  const double v = 2.0 / (M_PI * 0.147) + 0.5 * lg;
  const double v2 = 1.0 / 0.147 * lg;
  return 1.41421356 * sgn * std::sqrt(-v + std::sqrt(v * v - v2));
}

// Applies `t` to one row of n scores in place.
inline void apply_post_transform(PostTransform t, double* row, int64_t n) {
  switch (t) {
    case PostTransform::None:
      return;
    case PostTransform::Logistic:
      for (int64_t i = 0; i < n; ++i) row[i] = 1.0 / (1.0 + std::exp(-row[i]));
      return;
    case PostTransform::Probit:
      for (int64_t i = 0; i < n; ++i) row[i] = probit(row[i]);
      return;
    case PostTransform::Softmax: {
      if (n == 0) return;
      const double mx = *std::max_element(row, row + n);
      double sum = 0;
      for (int64_t i = 0; i < n; ++i) sum += (row[i] = std::exp(row[i] - mx));
      for (int64_t i = 0; i < n; ++i) row[i] /= sum;
      return;
    }
    case PostTransform::SoftmaxZero: {
      // Scores that are (almost) exactly zero stay (almost) zero.
      if (n == 0) return;
      const double mx = *std::max_element(row, row + n);
      double sum = 0;
      for (int64_t i = 0; i < n; ++i) {
        row[i] = std::abs(row[i]) > 1e-7 ? std::exp(row[i] - mx) : row[i] * std::exp(-mx);
        sum += row[i];
      }
      for (int64_t i = 0; i < n; ++i) row[i] = sum == 0 ? 0.5 : row[i] / sum;
      return;
    }
  }
}

}  // namespace kiln::ops::ml
