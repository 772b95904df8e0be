// ai.onnx.ml ops: LabelEncoder (1-4), ArrayFeatureExtractor, Binarizer and TreeEnsemble (5).
// Registered with domain "ai.onnx.ml", so ctx.opset() is the ai.onnx.ml version.
#include <cmath>
#include <limits>
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

// ---- LabelEncoder ----

// The keys (or values) attribute of a LabelEncoder: *_tensor, or one of the typed lists.
Tensor label_list(const AttrReader& ctx, const std::string& prefix) {
  std::vector<Tensor> found;
  if (ctx.has_attr(prefix + "_tensor")) found.push_back(ctx.attr_tensor(prefix + "_tensor"));
  if (ctx.has_attr(prefix + "_floats")) {
    auto v = ctx.attr_floats(prefix + "_floats");
    found.push_back(Tensor::from_vector<float>({static_cast<int64_t>(v.size())}, v));
  }
  if (ctx.has_attr(prefix + "_int64s")) {
    auto v = ctx.attr_ints(prefix + "_int64s");
    found.push_back(Tensor::from_vector<int64_t>({static_cast<int64_t>(v.size())}, v));
  }
  if (ctx.has_attr(prefix + "_strings")) {
    auto v = ctx.attr_strings(prefix + "_strings");
    found.push_back(Tensor::from_vector<std::string>({static_cast<int64_t>(v.size())}, v));
  }
  ctx.check(found.size() == 1, "exactly one {}_* attribute must be set, found {}", prefix,
            found.size());
  return found[0];
}

// The value written for keys not found: default_tensor, else the typed default_* attribute.
Tensor label_default(const AttrReader& ctx, DataType type) {
  if (ctx.has_attr("default_tensor")) {
    Tensor d = ctx.attr_tensor("default_tensor");
    ctx.check(d.numel() == 1 && d.dtype() == type,
              "default_tensor must hold one {} element, got {}", dtype_name(type), d.describe());
    return d.reshaped({});
  }
  if (type == DataType::String) return Tensor::scalar(ctx.attr_string("default_string", "_Unused"));
  if (type == DataType::Float32) return Tensor::scalar(ctx.attr_float("default_float", -0.0f));
  if (type == DataType::Float64)
    return Tensor::scalar(static_cast<double>(ctx.attr_float("default_float", -0.0f)));
  const int64_t d = ctx.attr_int("default_int64", -1);
  return dispatch_dtype<DTypeSet::Integer>(type, "LabelEncoder default", [&](auto tag) {
    using T = typename decltype(tag)::type;
    return Tensor::scalar(static_cast<T>(d));
  });
}

// Index of each input element in `keys` (last occurrence wins), or -1.
std::vector<int64_t> label_lookup(const KernelContext& ctx, const Tensor& x, const Tensor& keys) {
  ctx.check(x.dtype() == keys.dtype(), "input type {} differs from the keys' type {}",
            dtype_name(x.dtype()), dtype_name(keys.dtype()));
  std::vector<int64_t> idx(static_cast<size_t>(x.numel()), -1);
  if (x.dtype() == DataType::String) {
    std::map<std::string, int64_t> m;
    for (int64_t i = 0; i < keys.numel(); ++i) m[keys.data<std::string>()[i]] = i;
    for (int64_t i = 0; i < x.numel(); ++i) {
      auto it = m.find(x.data<std::string>()[i]);
      if (it != m.end()) idx[static_cast<size_t>(i)] = it->second;
    }
  } else if (dtype_is_integer(x.dtype())) {
    std::map<int64_t, int64_t> m;
    for (int64_t i = 0; i < keys.numel(); ++i) m[keys.int_at(i)] = i;
    for (int64_t i = 0; i < x.numel(); ++i) {
      auto it = m.find(x.int_at(i));
      if (it != m.end()) idx[static_cast<size_t>(i)] = it->second;
    }
  } else if (x.dtype() == DataType::Float32 || x.dtype() == DataType::Float64) {
    // NaN keys match any NaN input, whatever its bits.
    std::map<double, int64_t> m;
    int64_t nan_index = -1;
    for (int64_t i = 0; i < keys.numel(); ++i) {
      const double k = keys.double_at(i);
      if (std::isnan(k)) {
        nan_index = i;
      } else {
        m[k] = i;
      }
    }
    for (int64_t i = 0; i < x.numel(); ++i) {
      const double v = x.double_at(i);
      if (std::isnan(v)) {
        idx[static_cast<size_t>(i)] = nan_index;
      } else if (auto it = m.find(v); it != m.end()) {
        idx[static_cast<size_t>(i)] = it->second;
      }
    }
  } else {
    ctx.fail("input type {} is not string, integer, float or double", dtype_name(x.dtype()));
  }
  return idx;
}

// LabelEncoder-1: strings <-> their index in classes_strings.
void label_encoder_v1(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const std::vector<std::string> classes = ctx.attr_strings("classes_strings", {});
  if (x.dtype() == DataType::String) {
    const int64_t def = ctx.attr_int("default_int64", -1);
    Tensor keys = Tensor::from_vector<std::string>({static_cast<int64_t>(classes.size())}, classes);
    std::vector<int64_t> idx = label_lookup(ctx, x, keys);
    Tensor out(DataType::Int64, x.dims());
    for (int64_t i = 0; i < x.numel(); ++i)
      out.data<int64_t>()[i] = idx[static_cast<size_t>(i)] >= 0 ? idx[static_cast<size_t>(i)] : def;
    ctx.set_output(0, std::move(out));
    return;
  }
  ctx.check(x.dtype() == DataType::Int64, "input must be string or int64, got {}",
            dtype_name(x.dtype()));
  const std::string def = ctx.attr_string("default_string", "_Unused");
  Tensor out(DataType::String, x.dims());
  for (int64_t i = 0; i < x.numel(); ++i) {
    const int64_t v = x.data<int64_t>()[i];
    out.data<std::string>()[i] =
        v >= 0 && v < static_cast<int64_t>(classes.size()) ? classes[static_cast<size_t>(v)] : def;
  }
  ctx.set_output(0, std::move(out));
}

void label_encoder(KernelContext& ctx) {
  if (ctx.opset() < 2) return label_encoder_v1(ctx);
  const Tensor& x = ctx.input(0);
  const Tensor keys = label_list(ctx, "keys");
  const Tensor values = label_list(ctx, "values");
  ctx.check(keys.numel() == values.numel(), "{} keys but {} values", keys.numel(), values.numel());
  const Tensor def = label_default(ctx, values.dtype());
  const std::vector<int64_t> idx = label_lookup(ctx, x, keys);
  Tensor out(values.dtype(), x.dims());
  dispatch_dtype(values.dtype(), "LabelEncoder values", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* v = values.data<T>();
    T* o = out.data<T>();
    for (int64_t i = 0; i < x.numel(); ++i) {
      const int64_t k = idx[static_cast<size_t>(i)];
      o[i] = k >= 0 ? v[k] : def.data<T>()[0];
    }
  });
  ctx.set_output(0, std::move(out));
}

void infer_label_encoder(InferContext& ctx) {
  const TypeInfo* x = ctx.input_type(0);
  if (!x || x->kind != TypeInfo::Kind::Tensor) return;
  DataType out;
  if (ctx.opset() < 2) {
    out = x->dtype == DataType::String ? DataType::Int64 : DataType::String;
  } else {
    out = label_list(ctx, "values").dtype();
  }
  ctx.set_output_type(0, TypeInfo::tensor(out, x->shape));
}

// ---- ArrayFeatureExtractor ----

void array_feature_extractor(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& ind = ctx.input(1);
  ctx.check(x.rank() >= 1, "input must have rank >= 1, got {}", x.describe());
  ctx.check(ind.dtype() == DataType::Int64, "indices must be int64, got {}", ind.describe());
  const int64_t last = x.dims().back();
  const std::vector<int64_t> index = ind.to_int64_vector();
  for (int64_t i : index)
    ctx.check(i >= 0 && i < last, "index {} is out of range [0, {})", i, last);
  const int64_t n = static_cast<int64_t>(index.size());
  std::vector<int64_t> dims = x.dims();
  if (dims.size() == 1) dims.insert(dims.begin(), 1);  // a vector reads as one row
  dims.back() = n;
  Tensor out(x.dtype(), dims);
  const int64_t rows = last == 0 ? 0 : x.numel() / last;
  dispatch_dtype(x.dtype(), "ArrayFeatureExtractor", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* src = x.data<T>();
    T* dst = out.data<T>();
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < n; ++j)
        dst[r * n + j] = src[r * last + index[static_cast<size_t>(j)]];
  });
  ctx.set_output(0, std::move(out));
}

void infer_array_feature_extractor(InferContext& ctx) {
  const TypeInfo* x = ctx.input_type(0);
  const TypeInfo* ind = ctx.input_type(1);
  if (!x || x->kind != TypeInfo::Kind::Tensor) return;
  std::optional<Shape> shape;
  if (x->shape && x->shape->rank() >= 1 && ind && ind->shape && ind->shape->is_static()) {
    std::vector<Dim> dims = x->shape->dims();
    if (dims.size() == 1) dims.insert(dims.begin(), Dim(1));
    dims.back() = Dim(shape_numel(ind->shape->values()));
    shape = Shape(dims);
  }
  ctx.set_output_type(0, TypeInfo::tensor(x->dtype, shape));
}

// ---- Binarizer ----

void binarizer(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const double th = ctx.attr_float("threshold", 0.0f);
  ctx.set_output(0, dispatch_dtype<DTypeSet::Numeric>(x.dtype(), "Binarizer", [&](auto tag) {
                   using T = typename decltype(tag)::type;
                   return map_unary<T, T>(x, [&](T v) {
                     return convert_element<double>(v) > th ? convert_element<T>(1)
                                                            : convert_element<T>(0);
                   });
                 }));
}

// ---- TreeEnsemble ----

enum class Branch { Leq, Lt, Gte, Gt, Eq, Neq, Member };

struct TreeNode {
  Branch mode;
  double split;
  int64_t feature;
  bool missing_true;
  int64_t true_id, false_id;
  bool true_leaf, false_leaf;
  std::vector<double> members;
};

bool branch_taken(const TreeNode& n, double v) {
  if (std::isnan(v) && n.missing_true) return true;
  switch (n.mode) {
    case Branch::Leq:
      return v <= n.split;
    case Branch::Lt:
      return v < n.split;
    case Branch::Gte:
      return v >= n.split;
    case Branch::Gt:
      return v > n.split;
    case Branch::Eq:
      return v == n.split;
    case Branch::Neq:
      return v != n.split;
    case Branch::Member:
      for (double m : n.members)
        if (m == v) return true;
      return false;
  }
  return false;
}

std::vector<double> doubles_attr(const AttrReader& ctx, const char* name) {
  return ctl::to_doubles(ctx.attr_tensor(name));
}

void tree_ensemble(KernelContext& ctx) {
  const Tensor& xt = ctx.input(0);
  ctx.check(xt.dtype() == DataType::Float32 || xt.dtype() == DataType::Float64 ||
                xt.dtype() == DataType::Float16,
            "X must be float, double or float16, got {}", dtype_name(xt.dtype()));
  ctx.check(xt.rank() == 2, "X must be [N, F], got {}", xt.describe());
  const int64_t rows = xt.dim(0), feats = xt.dim(1);
  const std::vector<double> x = ctl::to_doubles(xt);

  const std::vector<double> splits = doubles_attr(ctx, "nodes_splits");
  const std::vector<int64_t> featureids = ctx.attr_ints("nodes_featureids");
  const Tensor modes_t = ctx.attr_tensor("nodes_modes");
  const std::vector<int64_t> true_ids = ctx.attr_ints("nodes_truenodeids");
  const std::vector<int64_t> false_ids = ctx.attr_ints("nodes_falsenodeids");
  const std::vector<int64_t> true_leafs = ctx.attr_ints("nodes_trueleafs");
  const std::vector<int64_t> false_leafs = ctx.attr_ints("nodes_falseleafs");
  const std::vector<int64_t> missing =
      ctx.attr_ints("nodes_missing_value_tracks_true", std::vector<int64_t>{});
  const std::vector<int64_t> leaf_targets = ctx.attr_ints("leaf_targetids");
  const std::vector<double> leaf_weights = doubles_attr(ctx, "leaf_weights");
  const std::vector<int64_t> roots = ctx.attr_ints("tree_roots");
  const int64_t n_targets = ctx.attr_int("n_targets");
  const int64_t aggregate = ctx.attr_int("aggregate_function", 1);
  const ml::PostTransform post =
      ml::post_transform_from_int(ctx, ctx.attr_int("post_transform", 0));

  const size_t n_nodes = splits.size();
  ctx.check(featureids.size() == n_nodes && static_cast<size_t>(modes_t.numel()) == n_nodes &&
                true_ids.size() == n_nodes && false_ids.size() == n_nodes &&
                true_leafs.size() == n_nodes && false_leafs.size() == n_nodes &&
                (missing.empty() || missing.size() == n_nodes),
            "the nodes_* attributes must all have {} entries", n_nodes);
  ctx.check(leaf_targets.size() == leaf_weights.size(),
            "leaf_targetids and leaf_weights differ in length");
  ctx.check(n_targets > 0, "n_targets must be positive, got {}", n_targets);
  for (int64_t t : leaf_targets)
    ctx.check(t >= 0 && t < n_targets, "leaf target {} is out of range [0, {})", t, n_targets);

  std::vector<double> members;
  if (ctx.has_attr("membership_values")) members = doubles_attr(ctx, "membership_values");
  size_t member_pos = 0;
  std::vector<TreeNode> nodes(n_nodes);
  const auto n_leaves = static_cast<int64_t>(leaf_weights.size());
  for (size_t i = 0; i < n_nodes; ++i) {
    TreeNode& n = nodes[i];
    const int64_t mode = modes_t.int_at(static_cast<int64_t>(i));
    ctx.check(mode >= 0 && mode <= 6, "node {} has unknown mode {}", i, mode);
    n.mode = static_cast<Branch>(mode);
    n.split = splits[i];
    n.feature = featureids[i];
    ctx.check(n.feature >= 0 && n.feature < feats, "node {} reads feature {} of {}", i, n.feature,
              feats);
    n.missing_true = !missing.empty() && missing[i] != 0;
    n.true_id = true_ids[i], n.false_id = false_ids[i];
    n.true_leaf = true_leafs[i] != 0, n.false_leaf = false_leafs[i] != 0;
    ctx.check(
        n.true_id >= 0 && n.true_id < (n.true_leaf ? n_leaves : static_cast<int64_t>(n_nodes)),
        "node {} true branch {} is out of range", i, n.true_id);
    ctx.check(
        n.false_id >= 0 && n.false_id < (n.false_leaf ? n_leaves : static_cast<int64_t>(n_nodes)),
        "node {} false branch {} is out of range", i, n.false_id);
    if (n.mode == Branch::Member) {
      // Each member node takes the next NaN-terminated run of membership_values.
      ctx.check(member_pos < members.size(), "membership_values has no set for node {}", i);
      while (member_pos < members.size() && !std::isnan(members[member_pos]))
        n.members.push_back(members[member_pos++]);
      ++member_pos;
    }
  }
  for (int64_t r : roots)
    ctx.check(r >= 0 && r < static_cast<int64_t>(n_nodes), "tree root {} is out of range", r);
  ctx.check(aggregate >= 0 && aggregate <= 3, "unknown aggregate_function {}", aggregate);

  const double big = xt.dtype() == DataType::Float64   ? std::numeric_limits<double>::max()
                     : xt.dtype() == DataType::Float32 ? std::numeric_limits<float>::max()
                                                       : 65504.0;
  check_scratch(ctx, {rows, n_targets});
  std::vector<double> out(static_cast<size_t>(rows * n_targets));
  for (int64_t b = 0; b < rows; ++b) {
    double* o = out.data() + b * n_targets;
    const double init = aggregate == 2 ? big : aggregate == 3 ? -big : 0.0;
    for (int64_t t = 0; t < n_targets; ++t) o[t] = init;
    const double* row = x.data() + b * feats;
    for (int64_t root : roots) {
      int64_t id = root;
      int64_t leaf = -1;
      // A well-formed tree reaches a leaf in fewer steps than it has nodes; more means a cycle.
      for (size_t steps = 0; steps <= n_nodes; ++steps) {
        const TreeNode& n = nodes[static_cast<size_t>(id)];
        const bool taken = branch_taken(n, row[n.feature]);
        const bool to_leaf = taken ? n.true_leaf : n.false_leaf;
        id = taken ? n.true_id : n.false_id;
        if (to_leaf) {
          leaf = id;
          break;
        }
      }
      ctx.check(leaf >= 0, "tree rooted at node {} has a cycle", root);
      const double w = leaf_weights[static_cast<size_t>(leaf)];
      double& acc = o[leaf_targets[static_cast<size_t>(leaf)]];
      if (aggregate == 0) {
        acc += w / static_cast<double>(roots.size());
      } else if (aggregate == 1) {
        acc += w;
      } else if (aggregate == 2) {
        acc = std::min(acc, w);
      } else {
        acc = std::max(acc, w);
      }
    }
    ml::apply_post_transform(post, o, n_targets);
  }
  ctx.set_output(0, ctl::from_doubles(xt.dtype(), {rows, n_targets}, out, "TreeEnsemble"));
}

void infer_tree_ensemble(InferContext& ctx) {
  const TypeInfo* x = ctx.input_type(0);
  if (!x || x->kind != TypeInfo::Kind::Tensor) return;
  std::optional<Shape> shape;
  if (x->shape && x->shape->rank() == 2)
    shape = Shape({(*x->shape)[0], Dim(ctx.attr_int("n_targets"))});
  ctx.set_output_type(0, TypeInfo::tensor(x->dtype, shape));
}

KILN_REGISTER_OP({.domain = kMl,
                  .op_type = "LabelEncoder",
                  .kernel = label_encoder,
                  .infer = infer_label_encoder});
KILN_REGISTER_OP({.domain = kMl,
                  .op_type = "ArrayFeatureExtractor",
                  .kernel = array_feature_extractor,
                  .infer = infer_array_feature_extractor});
KILN_REGISTER_OP(
    {.domain = kMl, .op_type = "Binarizer", .kernel = binarizer, .infer = infer_same_as_input0});
KILN_REGISTER_OP({.domain = kMl,
                  .op_type = "TreeEnsemble",
                  .kernel = tree_ensemble,
                  .infer = infer_tree_ensemble,
                  .since_opset = 5});

}  // namespace
}  // namespace kiln::ops
