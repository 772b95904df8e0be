// ai.onnx.ml preprocessing and linear models: Scaler, Normalizer, Imputer, OneHotEncoder,
// CategoryMapper, FeatureVectorizer, LinearRegressor and LinearClassifier. Semantics follow the
// ONNX reference (which matches onnxruntime and the scikit-learn converters).
#include <cmath>
#include <map>

#include "ops/control_real_io.hpp"
#include "ops/infer_utils.hpp"
#include "ops/ml_post.hpp"
#include "ops/op_utils.hpp"
#include "ops/registry.hpp"
#include "ops/scratch_guard.hpp"

namespace kiln::ops {
namespace {

constexpr const char* kMl = "ai.onnx.ml";

bool is_ml_real(DataType t) {
  return t == DataType::Float32 || t == DataType::Float64 || t == DataType::Int64 ||
         t == DataType::Int32;
}

void require_ml_real(const AttrReader& ctx, const Tensor& x, const char* what) {
  ctx.check(is_ml_real(x.dtype()), "{} must be float, double, int64 or int32, got {}", what,
            x.describe());
}

// [N, C] view of an input: a 1-D [C] tensor is one row.
std::pair<int64_t, int64_t> rows_cols(const AttrReader& ctx, const Tensor& x) {
  ctx.check(x.rank() == 1 || x.rank() == 2, "input must be [C] or [N, C], got {}", x.describe());
  if (x.rank() == 1) return {1, x.dim(0)};
  return {x.dim(0), x.dim(1)};
}

Tensor float_tensor(std::vector<int64_t> dims, const std::vector<double>& v) {
  return ctl::from_doubles(DataType::Float32, std::move(dims), v, "ai.onnx.ml");
}

void infer_float_same_shape(InferContext& ctx) {
  const TypeInfo* x = ctx.input_type(0);
  if (!x || x->kind != TypeInfo::Kind::Tensor) return;
  ctx.set_output_type(0, TypeInfo::tensor(DataType::Float32, x->shape));
}

// ---- Scaler: (x - offset) * scale, per last-axis column or one value for all ----

void scaler(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  require_ml_real(ctx, x, "X");
  const std::vector<float> scale = ctx.attr_floats("scale", {});
  const std::vector<float> offset = ctx.attr_floats("offset", {});
  const int64_t c = x.rank() == 0 ? 1 : x.dims().back();
  auto pick = [&](const std::vector<float>& v, int64_t col, float fallback) -> double {
    if (v.empty()) return fallback;
    return v.size() == 1 ? v[0] : v[static_cast<size_t>(col)];
  };
  for (const auto* v : {&scale, &offset})
    ctx.check(v->size() <= 1 || static_cast<int64_t>(v->size()) == c,
              "scale/offset must have 1 or {} values, got {}", c, v->size());
  std::vector<double> xd = ctl::to_doubles(x);
  for (int64_t i = 0; i < x.numel(); ++i) {
    const int64_t col = c == 0 ? 0 : i % c;
    xd[static_cast<size_t>(i)] =
        (xd[static_cast<size_t>(i)] - pick(offset, col, 0.0f)) * pick(scale, col, 1.0f);
  }
  ctx.set_output(0, float_tensor(x.dims(), xd));
}

// ---- Normalizer: per row, divide by the max |x|, the sum of |x| or the L2 norm ----

void normalizer(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  require_ml_real(ctx, x, "X");
  const auto [rows, cols] = rows_cols(ctx, x);
  const std::string norm = ctx.attr_string("norm", "MAX");
  if (norm != "MAX" && norm != "L1" && norm != "L2") ctx.fail("unknown norm '{}'", norm);
  std::vector<double> xd = ctl::to_doubles(x);
  for (int64_t r = 0; r < rows; ++r) {
    double* row = xd.data() + r * cols;
    double div = 0;
    for (int64_t j = 0; j < cols; ++j) {
      if (norm == "MAX") {
        div = std::max(div, std::abs(row[j]));
      } else if (norm == "L1") {
        div += std::abs(row[j]);
      } else {
        div += row[j] * row[j];
      }
    }
    if (norm == "L2") div = std::sqrt(div);
    div = std::max(div, 1e-30);
    for (int64_t j = 0; j < cols; ++j) row[j] /= div;
  }
  ctx.set_output(0, float_tensor(x.dims(), xd));
}

// ---- Imputer: replace a sentinel (or NaN) per column ----

void imputer(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  require_ml_real(ctx, x, "X");
  // Plain variables: clang 14 (the fuzz build) cannot capture structured bindings.
  const auto shape = rows_cols(ctx, x);
  const int64_t rows = shape.first, cols = shape.second;
  const bool is_float = dtype_is_float(x.dtype());
  std::vector<double> values;
  double replaced;
  if (is_float) {
    for (float v : ctx.attr_floats("imputed_value_floats", {})) values.push_back(v);
    replaced = ctx.attr_float("replaced_value_float", 0.0f);
  } else {
    for (int64_t v : ctx.attr_ints("imputed_value_int64s", {}))
      values.push_back(static_cast<double>(v));
    replaced = static_cast<double>(ctx.attr_int("replaced_value_int64", 0));
  }
  ctx.check(!values.empty(), "imputed_value_{} must be set for {} input",
            is_float ? "floats" : "int64s", dtype_name(x.dtype()));
  ctx.check(values.size() == 1 || static_cast<int64_t>(values.size()) == cols,
            "{} imputed values for {} columns", values.size(), cols);
  Tensor out = x.clone();
  dispatch_dtype<DTypeSet::Numeric>(x.dtype(), "Imputer", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* p = out.data<T>();
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < cols; ++j) {
        T& v = p[r * cols + j];
        const double dv = convert_element<double>(v);
        const bool hit = std::isnan(replaced) ? std::isnan(dv) : dv == replaced;
        if (hit) v = convert_element<T>(values[values.size() == 1 ? 0 : static_cast<size_t>(j)]);
      }
  });
  ctx.set_output(0, std::move(out));
}

// ---- OneHotEncoder: [...] -> [..., categories] ----

void one_hot_encoder(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const bool zeros = ctx.attr_int("zeros", 1) != 0;
  std::map<std::string, int64_t> str_cats;
  std::map<int64_t, int64_t> int_cats;
  int64_t n_cats = 0;
  if (x.dtype() == DataType::String) {
    const auto cats = ctx.attr_strings("cats_strings", {});
    ctx.check(!cats.empty(), "a string input needs cats_strings");
    for (const auto& c : cats) str_cats.emplace(c, n_cats++);
  } else {
    require_ml_real(ctx, x, "X");
    const auto cats = ctx.attr_ints("cats_int64s", {});
    ctx.check(!cats.empty(), "a numeric input needs cats_int64s");
    for (int64_t c : cats) int_cats.emplace(c, n_cats++);
  }
  std::vector<int64_t> dims = x.dims();
  dims.push_back(n_cats);
  Tensor out(DataType::Float32, dims);
  float* o = out.data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) {
    int64_t j = -1;
    if (x.dtype() == DataType::String) {
      auto it = str_cats.find(x.data<std::string>()[i]);
      if (it != str_cats.end()) j = it->second;
    } else {
      const double v = x.double_at(i);
      // Float inputs match a category only when they hold that integer exactly.
      if (v == std::trunc(v) && std::abs(v) < 9.2e18) {
        auto it = int_cats.find(static_cast<int64_t>(v));
        if (it != int_cats.end()) j = it->second;
      }
    }
    if (j >= 0) {
      o[i * n_cats + j] = 1.0f;
    } else if (!zeros) {
      ctx.fail("element {} matches no category and zeros=0", i);
    }
  }
  ctx.set_output(0, std::move(out));
}

void infer_one_hot_encoder(InferContext& ctx) {
  const TypeInfo* x = ctx.input_type(0);
  if (!x || x->kind != TypeInfo::Kind::Tensor) return;
  std::optional<Shape> shape;
  const size_t n = x->dtype == DataType::String ? ctx.attr_strings("cats_strings", {}).size()
                                                : ctx.attr_ints("cats_int64s", {}).size();
  if (x->shape) {
    std::vector<Dim> dims = x->shape->dims();
    dims.emplace_back(static_cast<int64_t>(n));
    shape = Shape(dims);
  }
  ctx.set_output_type(0, TypeInfo::tensor(DataType::Float32, shape));
}

// ---- CategoryMapper: strings <-> int64 through parallel lists ----

void category_mapper(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const auto strs = ctx.attr_strings("cats_strings");
  const auto ints = ctx.attr_ints("cats_int64s");
  ctx.check(strs.size() == ints.size(), "cats_strings has {} entries, cats_int64s {}", strs.size(),
            ints.size());
  if (x.dtype() == DataType::String) {
    std::map<std::string, int64_t> m;
    for (size_t i = 0; i < strs.size(); ++i) m.emplace(strs[i], ints[i]);
    const int64_t def = ctx.attr_int("default_int64", -1);
    Tensor out(DataType::Int64, x.dims());
    for (int64_t i = 0; i < x.numel(); ++i) {
      auto it = m.find(x.data<std::string>()[i]);
      out.data<int64_t>()[i] = it == m.end() ? def : it->second;
    }
    ctx.set_output(0, std::move(out));
    return;
  }
  ctx.check(x.dtype() == DataType::Int64, "input must be string or int64, got {}", x.describe());
  std::map<int64_t, std::string> m;
  for (size_t i = 0; i < strs.size(); ++i) m.emplace(ints[i], strs[i]);
  const std::string def = ctx.attr_string("default_string", "_Unused");
  Tensor out(DataType::String, x.dims());
  for (int64_t i = 0; i < x.numel(); ++i) {
    auto it = m.find(x.data<int64_t>()[i]);
    out.data<std::string>()[i] = it == m.end() ? def : it->second;
  }
  ctx.set_output(0, std::move(out));
}

void infer_category_mapper(InferContext& ctx) {
  const TypeInfo* x = ctx.input_type(0);
  if (!x || x->kind != TypeInfo::Kind::Tensor) return;
  ctx.set_output_type(
      0, TypeInfo::tensor(x->dtype == DataType::String ? DataType::Int64 : DataType::String,
                          x->shape));
}

// ---- FeatureVectorizer: concatenate inputs' columns, each cut or zero-padded ----

void feature_vectorizer(KernelContext& ctx) {
  const std::vector<int64_t> widths = ctx.attr_ints("inputdimensions");
  ctx.check(widths.size() == ctx.input_count(), "inputdimensions has {} entries for {} inputs",
            widths.size(), ctx.input_count());
  int64_t total = 0, rows = -1;
  for (size_t k = 0; k < widths.size(); ++k) {
    ctx.check(widths[k] >= 0 && widths[k] < (int64_t{1} << 32), "bad input dimension {}",
              widths[k]);
    total += widths[k];
    const Tensor& x = ctx.input(k);
    require_ml_real(ctx, x, "input");
    const int64_t r = rows_cols(ctx, x).first;
    const int64_t xr = x.rank() == 1 ? x.dim(0) : r;  // a 1-D input is one column per row
    ctx.check(rows < 0 || rows == xr, "inputs disagree on the row count ({} vs {})", rows, xr);
    rows = xr;
  }
  if (rows < 0) rows = 0;
  check_scratch(ctx, {rows, total});
  std::vector<double> out(static_cast<size_t>(rows * total), 0.0);
  int64_t base = 0;
  for (size_t k = 0; k < widths.size(); ++k) {
    const Tensor& x = ctx.input(k);
    const int64_t cols = x.rank() == 1 ? 1 : x.dim(1);
    const std::vector<double> xd = ctl::to_doubles(x);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < std::min(cols, widths[k]); ++j)
        out[static_cast<size_t>(r * total + base + j)] = xd[static_cast<size_t>(r * cols + j)];
    base += widths[k];
  }
  ctx.set_output(0, float_tensor({rows, total}, out));
}

// ---- LinearRegressor / LinearClassifier: scores = X W^T + b ----

// Scores [rows, targets] for the [rows, cols] input.
std::vector<double> linear_scores(const KernelContext& ctx, const Tensor& x, int64_t rows,
                                  int64_t cols, int64_t targets) {
  const std::vector<float> coef = ctx.attr_floats("coefficients");
  const std::vector<float> bias = ctx.attr_floats("intercepts", {});
  ctx.check(static_cast<int64_t>(coef.size()) == targets * cols,
            "coefficients has {} values, expected {} targets x {} features", coef.size(), targets,
            cols);
  ctx.check(bias.empty() || static_cast<int64_t>(bias.size()) == targets,
            "intercepts has {} values for {} targets", bias.size(), targets);
  check_scratch(ctx, {rows, targets});
  const std::vector<double> xd = ctl::to_doubles(x);
  std::vector<double> s(static_cast<size_t>(rows * targets));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t t = 0; t < targets; ++t) {
      double acc = bias.empty() ? 0.0 : bias[static_cast<size_t>(t)];
      for (int64_t j = 0; j < cols; ++j)
        acc += xd[static_cast<size_t>(r * cols + j)] * coef[static_cast<size_t>(t * cols + j)];
      s[static_cast<size_t>(r * targets + t)] = acc;
    }
  return s;
}

void linear_regressor(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  require_ml_real(ctx, x, "X");
  const auto [rows, cols] = rows_cols(ctx, x);
  const int64_t targets = ctx.attr_int("targets", 1);
  ctx.check(targets > 0, "targets must be positive, got {}", targets);
  std::vector<double> s = linear_scores(ctx, x, rows, cols, targets);
  const auto post = ml::post_transform_from_string(ctx, ctx.attr_string("post_transform", "NONE"));
  for (int64_t r = 0; r < rows; ++r)
    ml::apply_post_transform(post, s.data() + r * targets, targets);
  ctx.set_output(0, float_tensor({rows, targets}, s));
}

void infer_linear_regressor(InferContext& ctx) {
  const TypeInfo* x = ctx.input_type(0);
  std::optional<Shape> shape;
  const Dim t(ctx.attr_int("targets", 1));
  if (x && x->shape && x->shape->rank() == 2) shape = Shape({(*x->shape)[0], t});
  if (x && x->shape && x->shape->rank() == 1) shape = Shape({Dim(1), t});
  ctx.set_output_type(0, TypeInfo::tensor(DataType::Float32, shape));
}

void linear_classifier(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  require_ml_real(ctx, x, "X");
  const auto [rows, cols] = rows_cols(ctx, x);
  const bool has_ints = ctx.has_attr("classlabels_ints");
  const bool has_strs = ctx.has_attr("classlabels_strings");
  ctx.check(has_ints != has_strs, "exactly one of classlabels_ints/classlabels_strings is needed");
  const std::vector<int64_t> int_labels = ctx.attr_ints("classlabels_ints", {});
  const std::vector<std::string> str_labels = ctx.attr_strings("classlabels_strings", {});
  const int64_t n_classes = static_cast<int64_t>(has_ints ? int_labels.size() : str_labels.size());
  const size_t n_coef = ctx.attr_floats("coefficients").size();
  ctx.check(cols > 0 && n_coef % static_cast<size_t>(cols) == 0,
            "{} coefficients do not divide into rows of {} features", n_coef, cols);
  const int64_t targets = static_cast<int64_t>(n_coef) / cols;
  std::vector<double> s = linear_scores(ctx, x, rows, cols, targets);
  // One score for two classes: the first class scores its negation.
  const bool binary = targets == 1 && n_classes == 2;
  const int64_t width = binary ? 2 : targets;
  if (binary) {
    std::vector<double> two(static_cast<size_t>(rows * 2));
    for (int64_t r = 0; r < rows; ++r)
      two[static_cast<size_t>(2 * r)] = -s[static_cast<size_t>(r)],
                                  two[static_cast<size_t>(2 * r + 1)] = s[static_cast<size_t>(r)];
    s = std::move(two);
  }
  const auto post = ml::post_transform_from_string(ctx, ctx.attr_string("post_transform", "NONE"));
  for (int64_t r = 0; r < rows; ++r) ml::apply_post_transform(post, s.data() + r * width, width);
  Tensor labels(has_strs ? DataType::String : DataType::Int64, {rows});
  for (int64_t r = 0; r < rows; ++r) {
    const double* row = s.data() + r * width;
    int64_t cls;
    if (width > 1) {
      // numpy's argmax: the first maximum, or the first NaN.
      cls = 0;
      for (int64_t j = 0; j < width && !std::isnan(row[cls]); ++j)
        if (std::isnan(row[j]) || row[j] > row[cls]) cls = j;
      ctx.check(cls < n_classes, "class {} has no label ({} labels)", cls, n_classes);
    } else {
      // A single score for one class: above the threshold means that class, else 0 / "".
      const double threshold = post == ml::PostTransform::None ? 0.0 : 0.5;
      cls = row[0] >= threshold ? 0 : -1;
      ctx.check(n_classes >= 1, "classifier has no labels");
    }
    if (has_strs) {
      labels.data<std::string>()[r] = cls >= 0 ? str_labels[static_cast<size_t>(cls)] : "";
    } else if (width > 1 || cls >= 0) {
      labels.data<int64_t>()[r] = int_labels[static_cast<size_t>(std::max<int64_t>(cls, 0))];
    } else {
      labels.data<int64_t>()[r] = 0;
    }
  }
  ctx.set_output(0, std::move(labels));
  if (ctx.wants_output(1)) ctx.set_output(1, float_tensor({rows, width}, s));
}

void infer_linear_classifier(InferContext& ctx) {
  const TypeInfo* x = ctx.input_type(0);
  std::optional<Shape> label_shape;
  if (x && x->shape && x->shape->rank() == 2) label_shape = Shape({(*x->shape)[0]});
  ctx.set_output_type(
      0, TypeInfo::tensor(ctx.has_attr("classlabels_strings") ? DataType::String : DataType::Int64,
                          label_shape));
  if (ctx.output_count() > 1) {
    std::optional<Shape> score_shape;
    if (label_shape) score_shape = Shape({(*label_shape)[0], Dim()});
    ctx.set_output_type(1, TypeInfo::tensor(DataType::Float32, score_shape));
  }
}

KILN_REGISTER_OP(
    {.domain = kMl, .op_type = "Scaler", .kernel = scaler, .infer = infer_float_same_shape});
KILN_REGISTER_OP({.domain = kMl,
                  .op_type = "Normalizer",
                  .kernel = normalizer,
                  .infer = infer_float_same_shape});
KILN_REGISTER_OP(
    {.domain = kMl, .op_type = "Imputer", .kernel = imputer, .infer = infer_same_as_input0});
KILN_REGISTER_OP({.domain = kMl,
                  .op_type = "OneHotEncoder",
                  .kernel = one_hot_encoder,
                  .infer = infer_one_hot_encoder});
KILN_REGISTER_OP({.domain = kMl,
                  .op_type = "CategoryMapper",
                  .kernel = category_mapper,
                  .infer = infer_category_mapper});
KILN_REGISTER_OP({.domain = kMl, .op_type = "FeatureVectorizer", .kernel = feature_vectorizer});
KILN_REGISTER_OP({.domain = kMl,
                  .op_type = "LinearRegressor",
                  .kernel = linear_regressor,
                  .infer = infer_linear_regressor});
KILN_REGISTER_OP({.domain = kMl,
                  .op_type = "LinearClassifier",
                  .kernel = linear_classifier,
                  .infer = infer_linear_classifier});

}  // namespace
}  // namespace kiln::ops
