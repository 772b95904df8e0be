// ai.onnx.ml TreeEnsembleRegressor and TreeEnsembleClassifier (opsets 1 and 3; 3 adds the
// double-precision *_as_tensor attributes). Trees are given as flat node lists keyed by
// (tree id, node id); leaves contribute weights to targets or classes. Semantics follow the ONNX
// reference, including its binary-classifier conventions.
#include <cmath>
#include <limits>
#include <map>

#include "ops/control_real_io.hpp"
#include "ops/ml_post.hpp"
#include "ops/op_utils.hpp"
#include "ops/registry.hpp"
#include "ops/scratch_guard.hpp"

namespace kiln::ops {
namespace {

constexpr const char* kMl = "ai.onnx.ml";

enum class Rule { Leq, Lt, Gte, Gt, Eq, Neq, Leaf };

Rule parse_rule(const AttrReader& ctx, const std::string& s) {
  if (s == "BRANCH_LEQ") return Rule::Leq;
  if (s == "BRANCH_LT") return Rule::Lt;
  if (s == "BRANCH_GTE") return Rule::Gte;
  if (s == "BRANCH_GT") return Rule::Gt;
  if (s == "BRANCH_EQ") return Rule::Eq;
  if (s == "BRANCH_NEQ") return Rule::Neq;
  if (s == "LEAF") return Rule::Leaf;
  ctx.fail("unknown node mode '{}'", s);
}

// A float attribute list, or its double-precision *_as_tensor twin (opset 3).
std::vector<double> real_list(const AttrReader& ctx, const std::string& name) {
  const bool has_list = ctx.has_attr(name), has_tensor = ctx.has_attr(name + "_as_tensor");
  ctx.check(!(has_list && has_tensor), "only one of {} and {}_as_tensor may be set", name, name);
  if (has_tensor) return ctl::to_doubles(ctx.attr_tensor(name + "_as_tensor"));
  std::vector<double> out;
  for (float v : ctx.attr_floats(name, {})) out.push_back(v);
  return out;
}

struct Forest {
  std::vector<Rule> rule;
  std::vector<double> value;
  std::vector<int64_t> feature, true_index, false_index;
  std::vector<bool> missing_true;
  std::vector<int64_t> roots;  // node index of each tree's root, by ascending tree id
  std::map<std::pair<int64_t, int64_t>, int64_t> index;  // (tree, node) -> node index
};

Forest read_forest(const AttrReader& ctx, int64_t features) {
  Forest f;
  const auto tree_ids = ctx.attr_ints("nodes_treeids");
  const auto node_ids = ctx.attr_ints("nodes_nodeids");
  const auto feats = ctx.attr_ints("nodes_featureids");
  const auto modes = ctx.attr_strings("nodes_modes");
  const auto trues = ctx.attr_ints("nodes_truenodeids");
  const auto falses = ctx.attr_ints("nodes_falsenodeids");
  const auto missing = ctx.attr_ints("nodes_missing_value_tracks_true", {});
  f.value = real_list(ctx, "nodes_values");
  const size_t n = tree_ids.size();
  ctx.check(node_ids.size() == n && feats.size() == n && modes.size() == n && trues.size() == n &&
                falses.size() == n && f.value.size() == n &&
                (missing.empty() || missing.size() == n),
            "the nodes_* attributes must all have {} entries", n);
  std::map<int64_t, int64_t> root_of;
  for (size_t i = 0; i < n; ++i) {
    const auto key = std::make_pair(tree_ids[i], node_ids[i]);
    ctx.check(f.index.emplace(key, static_cast<int64_t>(i)).second,
              "node ({}, {}) is defined twice", tree_ids[i], node_ids[i]);
    root_of.emplace(tree_ids[i], static_cast<int64_t>(i));  // first node of a tree is its root
    f.rule.push_back(parse_rule(ctx, modes[i]));
    f.missing_true.push_back(!missing.empty() && missing[i] != 0);
    f.feature.push_back(feats[i]);
    if (f.rule.back() != Rule::Leaf)
      ctx.check(feats[i] >= 0 && feats[i] < features, "node {} reads feature {} of {}", i, feats[i],
                features);
  }
  for (size_t i = 0; i < n; ++i) {
    int64_t t = -1, e = -1;
    if (f.rule[i] != Rule::Leaf) {
      auto it = f.index.find({tree_ids[i], trues[i]});
      auto jt = f.index.find({tree_ids[i], falses[i]});
      ctx.check(it != f.index.end() && jt != f.index.end(),
                "node ({}, {}) branches to a node that does not exist", tree_ids[i], node_ids[i]);
      t = it->second, e = jt->second;
    }
    f.true_index.push_back(t);
    f.false_index.push_back(e);
  }
  for (const auto& [tree, root] : root_of) f.roots.push_back(root);
  return f;
}

// Node index of the leaf `row` reaches from `root`.
int64_t find_leaf(const AttrReader& ctx, const Forest& f, int64_t root, const double* row) {
  int64_t i = root;
  for (size_t steps = 0; steps <= f.rule.size(); ++steps) {
    const auto k = static_cast<size_t>(i);
    if (f.rule[k] == Rule::Leaf) return i;
    const double x = row[f.feature[k]], th = f.value[k];
    bool r;
    if (std::isnan(x)) {
      r = f.missing_true[k];
    } else {
      switch (f.rule[k]) {
        case Rule::Leq:
          r = x <= th;
          break;
        case Rule::Lt:
          r = x < th;
          break;
        case Rule::Gte:
          r = x >= th;
          break;
        case Rule::Gt:
          r = x > th;
          break;
        case Rule::Eq:
          r = x == th;
          break;
        default:
          r = x != th;
          break;
      }
    }
    i = r ? f.true_index[k] : f.false_index[k];
  }
  ctx.fail("the tree rooted at node {} has a cycle", root);
}

// Leaf contributions: for each node index, the (output column, weight) pairs it adds.
std::vector<std::vector<std::pair<int64_t, double>>> read_leaves(const AttrReader& ctx,
                                                                 const Forest& f,
                                                                 const std::string& prefix,
                                                                 int64_t columns) {
  const auto tids = ctx.attr_ints(prefix + "_treeids");
  const auto nids = ctx.attr_ints(prefix + "_nodeids");
  const auto ids = ctx.attr_ints(prefix + "_ids");
  const auto weights = real_list(ctx, prefix + "_weights");
  ctx.check(
      nids.size() == tids.size() && ids.size() == tids.size() && weights.size() == tids.size(),
      "the {}_* attributes must all have {} entries", prefix, tids.size());
  std::vector<std::vector<std::pair<int64_t, double>>> leaves(f.rule.size());
  for (size_t i = 0; i < tids.size(); ++i) {
    auto it = f.index.find({tids[i], nids[i]});
    ctx.check(it != f.index.end(), "{} entry {} names node ({}, {}) that does not exist", prefix, i,
              tids[i], nids[i]);
    ctx.check(ids[i] >= 0 && ids[i] < columns, "{}_ids entry {} is {}, outside [0, {})", prefix, i,
              ids[i], columns);
    leaves[static_cast<size_t>(it->second)].emplace_back(ids[i], weights[i]);
  }
  return leaves;
}

void tree_regressor(KernelContext& ctx) {
  int64_t rows, cols;
  const std::vector<double> x = ml::read_features(ctx, rows, cols);
  const int64_t targets = ctx.attr_int("n_targets");
  ctx.check(targets > 0, "n_targets must be positive, got {}", targets);
  const Forest f = read_forest(ctx, cols);
  const auto leaves = read_leaves(ctx, f, "target", targets);
  const std::string agg = ctx.attr_string("aggregate_function", "SUM");
  if (agg != "SUM" && agg != "AVERAGE" && agg != "MIN" && agg != "MAX")
    ctx.fail("unknown aggregate_function '{}'", agg);
  const std::vector<double> base = real_list(ctx, "base_values");
  ctx.check(base.empty() || static_cast<int64_t>(base.size()) == targets,
            "base_values has {} entries for {} targets", base.size(), targets);
  const auto post = ml::post_transform_from_string(ctx, ctx.attr_string("post_transform", "NONE"));
  check_scratch(ctx, {rows, targets});
  const double big = std::numeric_limits<float>::max();
  std::vector<double> out(static_cast<size_t>(rows * targets));
  for (int64_t r = 0; r < rows; ++r) {
    double* o = out.data() + r * targets;
    for (int64_t t = 0; t < targets; ++t) o[t] = agg == "MIN" ? big : agg == "MAX" ? -big : 0.0;
    for (int64_t root : f.roots)
      for (const auto& [t, w] :
           leaves[static_cast<size_t>(find_leaf(ctx, f, root, x.data() + r * cols))]) {
        if (agg == "MIN") {
          o[t] = std::min(o[t], w);
        } else if (agg == "MAX") {
          o[t] = std::max(o[t], w);
        } else {
          o[t] += w;
        }
      }
    for (int64_t t = 0; t < targets; ++t) {
      if (agg == "AVERAGE") o[t] /= static_cast<double>(f.roots.size());
      if (!base.empty()) o[t] += base[static_cast<size_t>(t)];
    }
    ml::apply_post_transform(post, o, targets);
  }
  ctx.set_output(0, ctl::from_doubles(DataType::Float32, {rows, targets}, out, "TreeEnsemble"));
}

void tree_classifier(KernelContext& ctx) {
  int64_t rows, cols;
  const std::vector<double> x = ml::read_features(ctx, rows, cols);
  const bool has_ints = ctx.has_attr("classlabels_int64s");
  const bool has_strs = ctx.has_attr("classlabels_strings");
  ctx.check(has_ints != has_strs, "exactly one of classlabels_int64s/_strings is needed");
  const auto int_labels = ctx.attr_ints("classlabels_int64s", {});
  const auto str_labels = ctx.attr_strings("classlabels_strings", {});
  const auto n_classes = static_cast<int64_t>(has_ints ? int_labels.size() : str_labels.size());
  ctx.check(n_classes > 0, "the classifier has no class labels");
  if (n_classes == 1 && (has_strs || int_labels[0] != 1))
    ctx.unsupported("a single class label other than the integer 1 is not supported");
  const Forest f = read_forest(ctx, cols);
  const auto leaves = read_leaves(ctx, f, "class", n_classes);
  const std::vector<double> base = real_list(ctx, "base_values");
  ctx.check(base.empty() || static_cast<int64_t>(base.size()) == n_classes,
            "base_values has {} entries for {} classes", base.size(), n_classes);
  const std::string post_name = ctx.attr_string("post_transform", "NONE");
  const auto post = ml::post_transform_from_string(ctx, post_name);
  // Every leaf voting for one class id makes a binary classifier scored on two columns.
  const auto class_ids = ctx.attr_ints("class_ids");
  bool binary = !class_ids.empty();
  for (int64_t id : class_ids) binary = binary && id == class_ids[0];
  const int64_t width = binary && n_classes == 1 ? 2 : n_classes;
  check_scratch(ctx, {rows, width});
  std::vector<double> scores(static_cast<size_t>(rows * width));
  Tensor labels(has_strs ? DataType::String : DataType::Int64, {rows});
  for (int64_t r = 0; r < rows; ++r) {
    double* s = scores.data() + r * width;
    for (int64_t c = 0; c < n_classes; ++c)
      s[c] = base.empty() ? 0.0 : base[static_cast<size_t>(c)];
    for (int64_t root : f.roots)
      for (const auto& [c, w] :
           leaves[static_cast<size_t>(find_leaf(ctx, f, root, x.data() + r * cols))])
        s[c] += w;
    if (binary) {
      s[1] = s[0];
      s[0] =
          post == ml::PostTransform::None || post == ml::PostTransform::Probit ? 1 - s[1] : -s[1];
    }
    ml::apply_post_transform(post, s, width);
    int64_t best = 0;  // numpy argmax: the first maximum, or the first NaN
    for (int64_t c = 0; c < width && !std::isnan(s[best]); ++c)
      if (std::isnan(s[c]) || s[c] > s[best]) best = c;
    if (has_strs) {
      labels.data<std::string>()[r] = str_labels[static_cast<size_t>(best)];
    } else if (n_classes == 1) {
      labels.data<int64_t>()[r] = best == 1 ? 1 : 0;
    } else {
      labels.data<int64_t>()[r] = int_labels[static_cast<size_t>(best)];
    }
  }
  ctx.set_output(0, std::move(labels));
  if (ctx.wants_output(1))
    ctx.set_output(1, ctl::from_doubles(DataType::Float32, {rows, width}, scores, "TreeEnsemble"));
}

void infer_tree_regressor(InferContext& ctx) {
  const TypeInfo* x = ctx.input_type(0);
  std::optional<Shape> shape;
  if (x && x->shape && x->shape->rank() == 2)
    shape = Shape({(*x->shape)[0], Dim(ctx.attr_int("n_targets"))});
  ctx.set_output_type(0, TypeInfo::tensor(DataType::Float32, shape));
}

void infer_tree_classifier(InferContext& ctx) {
  const TypeInfo* x = ctx.input_type(0);
  std::optional<Shape> shape;
  if (x && x->shape && x->shape->rank() == 2) shape = Shape({(*x->shape)[0]});
  ctx.set_output_type(
      0, TypeInfo::tensor(ctx.has_attr("classlabels_strings") ? DataType::String : DataType::Int64,
                          shape));
  if (ctx.output_count() > 1)
    ctx.set_output_type(
        1,
        TypeInfo::tensor(DataType::Float32,
                         shape ? std::optional<Shape>(Shape({(*shape)[0], Dim()})) : std::nullopt));
}

KILN_REGISTER_OP({.domain = kMl,
                  .op_type = "TreeEnsembleRegressor",
                  .kernel = tree_regressor,
                  .infer = infer_tree_regressor});
KILN_REGISTER_OP({.domain = kMl,
                  .op_type = "TreeEnsembleClassifier",
                  .kernel = tree_classifier,
                  .infer = infer_tree_classifier});

}  // namespace
}  // namespace kiln::ops
