// ai.onnx.ml SVMRegressor and SVMClassifier (libsvm / liblinear models). Semantics, including the
// binary-label and score-layout conventions, follow the ONNX reference implementation.
#include <cmath>

#include "ops/control_real_io.hpp"
#include "ops/ml_post.hpp"
#include "ops/op_utils.hpp"
#include "ops/registry.hpp"
#include "ops/scratch_guard.hpp"

namespace kiln::ops {
namespace {

constexpr const char* kMl = "ai.onnx.ml";

struct Kernel {
  enum Type { Linear, Poly, Rbf, Sigmoid } type = Linear;
  double gamma = 0, coef0 = 0;
  int64_t degree = 0;

  double operator()(const double* a, const double* b, int64_t n) const {
    if (type == Rbf) {
      double s = 0;
      for (int64_t i = 0; i < n; ++i) s += (a[i] - b[i]) * (a[i] - b[i]);
      return std::exp(-gamma * s);
    }
    double dot = 0;
    for (int64_t i = 0; i < n; ++i) dot += a[i] * b[i];
    if (type == Poly) return std::pow(dot * gamma + coef0, static_cast<double>(degree));
    if (type == Sigmoid) return std::tanh(dot * gamma + coef0);
    return dot;
  }
};

Kernel read_kernel(const AttrReader& ctx) {
  Kernel k;
  const std::string t = ctx.attr_string("kernel_type", "LINEAR");
  if (t == "LINEAR") {
    k.type = Kernel::Linear;
  } else if (t == "POLY") {
    k.type = Kernel::Poly;
  } else if (t == "RBF") {
    k.type = Kernel::Rbf;
  } else if (t == "SIGMOID") {
    k.type = Kernel::Sigmoid;
  } else {
    ctx.fail("unknown kernel_type '{}'", t);
  }
  const std::vector<float> p = ctx.attr_floats("kernel_params", {});
  if (!p.empty()) {
    ctx.check(p.size() == 3, "kernel_params must be [gamma, coef0, degree], got {} values",
              p.size());
    k.gamma = p[0], k.coef0 = p[1], k.degree = static_cast<int64_t>(p[2]);
  }
  return k;
}

std::vector<double> floats(const AttrReader& ctx, const char* name) {
  std::vector<double> out;
  for (float v : ctx.attr_floats(name, {})) out.push_back(v);
  return out;
}

void svm_regressor(KernelContext& ctx) {
  int64_t rows, cols;
  const std::vector<double> x = ml::read_features(ctx, rows, cols);
  const Kernel kernel = read_kernel(ctx);
  const std::vector<double> coef = floats(ctx, "coefficients");
  const std::vector<double> rho = floats(ctx, "rho");
  const std::vector<double> sv = floats(ctx, "support_vectors");
  const int64_t n_sv = ctx.attr_int("n_supports", 0);
  const bool one_class = ctx.attr_int("one_class", 0) != 0;
  ctx.check(!rho.empty(), "rho must not be empty");
  if (n_sv > 0) {
    ctx.check(
        static_cast<int64_t>(coef.size()) >= n_sv && static_cast<int64_t>(sv.size()) == n_sv * cols,
        "{} support vectors need {} coefficients and {} vector values, got {} and {}", n_sv, n_sv,
        n_sv * cols, coef.size(), sv.size());
  } else {
    ctx.check(static_cast<int64_t>(coef.size()) == cols,
              "a linear SVM needs {} coefficients, got {}", cols, coef.size());
  }
  const auto post = ml::post_transform_from_string(ctx, ctx.attr_string("post_transform", "NONE"));
  std::vector<double> out(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    const double* row = x.data() + r * cols;
    double s = 0;
    if (n_sv > 0) {
      for (int64_t j = 0; j < n_sv; ++j)
        s += coef[static_cast<size_t>(j)] * kernel(row, sv.data() + j * cols, cols);
    } else {
      s = Kernel{}(row, coef.data(), cols);
    }
    s += rho[0];
    out[static_cast<size_t>(r)] = one_class ? (s > 0 ? 1.0 : -1.0) : s;
    ml::apply_post_transform(post, &out[static_cast<size_t>(r)], 1);
  }
  ctx.set_output(0, ctl::from_doubles(DataType::Float32, {rows, 1}, out, "SVMRegressor"));
}

// libsvm's pairwise-coupling estimate of class probabilities from the pairwise matrix r. (The
// ONNX reference fills the off-diagonal of Q with one dot product; libsvm, which scikit-learn and
// onnxruntime follow, uses -r[j][t] * r[t][j] per entry, as here.)
std::vector<double> multiclass_probability(int64_t k, const std::vector<double>& r) {
  auto R = [&](int64_t i, int64_t j) { return r[static_cast<size_t>(i * k + j)]; };
  std::vector<double> q(static_cast<size_t>(k * k)), qp(static_cast<size_t>(k)),
      p(static_cast<size_t>(k), 1.0 / static_cast<double>(k));
  auto Q = [&](int64_t i, int64_t j) -> double& { return q[static_cast<size_t>(i * k + j)]; };
  for (int64_t t = 0; t < k; ++t) {
    Q(t, t) = 0;
    for (int64_t j = 0; j < t; ++j) {
      Q(t, t) += R(j, t) * R(j, t);
      Q(t, j) = Q(j, t);
    }
    for (int64_t j = t + 1; j < k; ++j) {
      Q(t, t) += R(j, t) * R(j, t);
      Q(t, j) = -R(j, t) * R(t, j);
    }
  }
  const double eps = 0.005 / static_cast<double>(k);
  for (int64_t iter = 0; iter < std::max<int64_t>(100, k); ++iter) {
    double pqp = 0;
    for (int64_t t = 0; t < k; ++t) {
      qp[static_cast<size_t>(t)] = 0;
      for (int64_t j = 0; j < k; ++j)
        qp[static_cast<size_t>(t)] += Q(t, j) * p[static_cast<size_t>(j)];
      pqp += p[static_cast<size_t>(t)] * qp[static_cast<size_t>(t)];
    }
    double max_error = 0;
    for (int64_t t = 0; t < k; ++t)
      max_error = std::max(max_error, std::abs(qp[static_cast<size_t>(t)] - pqp));
    if (max_error < eps) break;
    for (int64_t t = 0; t < k; ++t) {
      const double diff = (-qp[static_cast<size_t>(t)] + pqp) / Q(t, t);
      p[static_cast<size_t>(t)] += diff;
      pqp = (pqp + diff * (diff * Q(t, t) + 2 * qp[static_cast<size_t>(t)])) /
            ((1 + diff) * (1 + diff));
      for (int64_t j = 0; j < k; ++j) {
        p[static_cast<size_t>(j)] /= 1 + diff;
        qp[static_cast<size_t>(j)] = (qp[static_cast<size_t>(j)] + diff * Q(t, j)) / (1 + diff);
      }
    }
  }
  return p;
}

void svm_classifier(KernelContext& ctx) {
  int64_t rows, cols;
  const std::vector<double> x = ml::read_features(ctx, rows, cols);
  const bool has_ints = ctx.has_attr("classlabels_ints");
  const bool has_strs = ctx.has_attr("classlabels_strings");
  ctx.check(has_ints != has_strs, "exactly one of classlabels_ints/_strings is needed");
  const auto int_labels = ctx.attr_ints("classlabels_ints", {});
  const auto str_labels = ctx.attr_strings("classlabels_strings", {});
  const int64_t n_labels = static_cast<int64_t>(has_ints ? int_labels.size() : str_labels.size());
  const int64_t classes = std::max<int64_t>(n_labels, 1);
  const Kernel svc_kernel = read_kernel(ctx);
  const std::vector<double> coef = floats(ctx, "coefficients");
  const std::vector<double> rho = floats(ctx, "rho");
  const std::vector<double> sv = floats(ctx, "support_vectors");
  const std::vector<double> prob_a = floats(ctx, "prob_a"), prob_b = floats(ctx, "prob_b");
  const std::vector<int64_t> per_class = ctx.attr_ints("vectors_per_class", {});
  ctx.check(!rho.empty() && !coef.empty(), "rho and coefficients must not be empty");
  std::vector<int64_t> start;
  int64_t n_sv = 0;
  for (int64_t c : per_class) {
    ctx.check(c >= 0, "vectors_per_class holds {}", c);
    start.push_back(n_sv);
    n_sv += c;
  }
  const bool svc = n_sv > 0;
  const int64_t pairs = classes * (classes - 1) / 2;
  if (svc) {
    ctx.check(static_cast<int64_t>(per_class.size()) == classes,
              "vectors_per_class has {} entries for {} classes", per_class.size(), classes);
    ctx.check(static_cast<int64_t>(sv.size()) == n_sv * cols,
              "support_vectors has {} values, expected {} x {}", sv.size(), n_sv, cols);
    ctx.check(static_cast<int64_t>(coef.size()) == (classes - 1) * n_sv,
              "coefficients has {} values, expected {} x {}", coef.size(), classes - 1, n_sv);
    ctx.check(static_cast<int64_t>(rho.size()) >= pairs, "rho has {} values for {} class pairs",
              rho.size(), pairs);
  } else {
    ctx.check(static_cast<int64_t>(coef.size()) == classes * cols,
              "coefficients has {} values, expected {} x {}", coef.size(), classes, cols);
  }
  const bool has_proba = svc && !prob_a.empty();
  if (has_proba)
    ctx.check(static_cast<int64_t>(prob_a.size()) >= pairs &&
                  static_cast<int64_t>(prob_b.size()) >= pairs,
              "prob_a/prob_b need {} values", pairs);
  bool all_positive = true;
  for (double c : coef) all_positive = all_positive && c >= 0;
  const auto post = ml::post_transform_from_string(ctx, ctx.attr_string("post_transform", "NONE"));

  std::vector<std::vector<double>> all_scores(static_cast<size_t>(rows));
  std::vector<int64_t> label_values(static_cast<size_t>(rows));
  std::vector<double> kern(static_cast<size_t>(n_sv));
  for (int64_t r = 0; r < rows; ++r) {
    const double* row = x.data() + r * cols;
    std::vector<double> scores, votes;
    if (svc) {
      for (int64_t j = 0; j < n_sv; ++j)
        kern[static_cast<size_t>(j)] = svc_kernel(row, sv.data() + j * cols, cols);
      votes.assign(static_cast<size_t>(classes), 0.0);
      int64_t e = 0;
      for (int64_t i = 0; i < classes; ++i)
        for (int64_t j = i + 1; j < classes; ++j, ++e) {
          double s = rho[static_cast<size_t>(e)];
          for (int64_t v = 0; v < per_class[static_cast<size_t>(i)]; ++v)
            s += coef[static_cast<size_t>((j - 1) * n_sv + start[static_cast<size_t>(i)] + v)] *
                 kern[static_cast<size_t>(start[static_cast<size_t>(i)] + v)];
          for (int64_t v = 0; v < per_class[static_cast<size_t>(j)]; ++v)
            s += coef[static_cast<size_t>(i * n_sv + start[static_cast<size_t>(j)] + v)] *
                 kern[static_cast<size_t>(start[static_cast<size_t>(j)] + v)];
          scores.push_back(s);
          votes[static_cast<size_t>(s > 0 ? i : j)] += 1;
        }
    } else {
      for (int64_t j = 0; j < classes; ++j)
        scores.push_back(rho[0] + Kernel{}(row, coef.data() + j * cols, cols));
    }
    if (has_proba) {
      std::vector<double> pr(static_cast<size_t>(classes * classes), 0.0);
      int64_t e = 0;
      for (int64_t i = 0; i < classes; ++i)
        for (int64_t j = i + 1; j < classes; ++j, ++e) {
          const double val = scores[static_cast<size_t>(e)] * prob_a[static_cast<size_t>(e)] +
                             prob_b[static_cast<size_t>(e)];
          double p = 1.0 - 1.0 / (1.0 + std::exp(-val));
          p = std::min(std::max(p, 1e-7), 1 - 1e-7);
          pr[static_cast<size_t>(i * classes + j)] = p;
          pr[static_cast<size_t>(j * classes + i)] = 1 - p;
        }
      scores = multiclass_probability(classes, pr);
    }
    const std::vector<double>& w = svc ? votes : scores;
    int64_t best = 0;
    for (int64_t c = 1; c < static_cast<int64_t>(w.size()); ++c)
      if (w[static_cast<size_t>(c)] > w[static_cast<size_t>(best)]) best = c;
    const double max_weight = w.empty() ? 0.0 : w[static_cast<size_t>(best)];
    // Labels are indices into the label list (ints or strings); -1 marks "posclass/negclass"
    // results, which are the label values 1 and 0 themselves.
    int second = -1;  // how a single score becomes two (the reference's add_second_class)
    int64_t label;
    bool label_is_value = false;
    if (rho.size() == 1) {
      if (n_labels == 2) {
        second = 2;
        label = (!has_proba && all_positive && max_weight >= 0.5) ? 1 : best;
      } else {
        label = max_weight > 0 ? 1 : 0;
        label_is_value = true;
      }
    } else {
      label = best;
    }
    if (has_strs) {
      ctx.check(label >= 0 && label < n_labels, "class index {} has no label", label);
      label_values[static_cast<size_t>(r)] = label;
    } else if (label_is_value) {
      label_values[static_cast<size_t>(r)] = label;
    } else {
      ctx.check(label >= 0 && label < n_labels, "class index {} has no label", label);
      label_values[static_cast<size_t>(r)] = int_labels[static_cast<size_t>(label)];
    }
    // Score layout.
    const auto n = static_cast<int64_t>(scores.size());
    if (n >= 2) {
      ml::apply_post_transform(post, scores.data(), n);
    } else if (n == 1) {
      const double s = scores[0];
      if (post == ml::PostTransform::Probit) {
        scores = {ml::probit(s)};
      } else if (second == 2) {
        scores = {-s, s};
        if (post != ml::PostTransform::None) ml::apply_post_transform(post, scores.data(), 2);
      }
    }
    all_scores[static_cast<size_t>(r)] = std::move(scores);
  }
  Tensor labels(has_strs ? DataType::String : DataType::Int64, {rows});
  for (int64_t r = 0; r < rows; ++r) {
    if (has_strs) {
      labels.data<std::string>()[r] =
          str_labels[static_cast<size_t>(label_values[static_cast<size_t>(r)])];
    } else {
      labels.data<int64_t>()[r] = label_values[static_cast<size_t>(r)];
    }
  }
  ctx.set_output(0, std::move(labels));
  if (ctx.wants_output(1)) {
    const int64_t width = rows > 0 ? static_cast<int64_t>(all_scores[0].size()) : 0;
    check_scratch(ctx, {rows, width});
    std::vector<double> flat;
    for (const auto& s : all_scores) flat.insert(flat.end(), s.begin(), s.end());
    ctx.set_output(1, ctl::from_doubles(DataType::Float32, {rows, width}, flat, "SVMClassifier"));
  }
}

void infer_svm_regressor(InferContext& ctx) {
  const TypeInfo* x = ctx.input_type(0);
  std::optional<Shape> shape;
  if (x && x->shape && x->shape->rank() == 2) shape = Shape({(*x->shape)[0], Dim(1)});
  ctx.set_output_type(0, TypeInfo::tensor(DataType::Float32, shape));
}

void infer_svm_classifier(InferContext& ctx) {
  ctx.set_output_type(0, TypeInfo::tensor(ctx.has_attr("classlabels_strings") ? DataType::String
                                                                              : DataType::Int64));
  if (ctx.output_count() > 1) ctx.set_output_type(1, TypeInfo::tensor(DataType::Float32));
}

KILN_REGISTER_OP({.domain = kMl,
                  .op_type = "SVMRegressor",
                  .kernel = svm_regressor,
                  .infer = infer_svm_regressor});
KILN_REGISTER_OP({.domain = kMl,
                  .op_type = "SVMClassifier",
                  .kernel = svm_classifier,
                  .infer = infer_svm_classifier});

}  // namespace
}  // namespace kiln::ops
