#include <cmath>

#include "passes/pass.hpp"
#include "passes/passes.hpp"

namespace kiln::passes {
namespace {

bool is_constant_float(const ir::Value* v, DataType type) {
  return v && v->is_constant() && v->constant().dtype() == type;
}

int64_t int_attr(const ir::Node& n, const char* name, int64_t fallback) {
  const ir::Attribute* a = n.attribute(name);
  return a && std::holds_alternative<int64_t>(a->storage()) ? std::get<int64_t>(a->storage())
                                                            : fallback;
}

// Folds BatchNormalization (inference form) into the Conv that feeds it:
//   W' = W * s,  B' = (B - mean) * s + beta,  s = gamma / sqrt(var + eps), per output channel.
template <typename T>
bool try_fuse(ir::Graph& g, ir::Node& conv, ir::Node& bn) {
  const DataType type = dtype_of<T>;
  const ir::Value* w = conv.input(1);
  const ir::Value* b = conv.input(2);
  if (!is_constant_float(w, type) || (b && !is_constant_float(b, type))) return false;
  for (size_t i = 1; i < 5; ++i) {
    if (!is_constant_float(bn.input(i), type)) return false;
  }
  const Tensor& weights = w->constant();
  if (weights.rank() < 3) return false;
  const int64_t m = weights.dim(0);
  for (size_t i = 1; i < 5; ++i) {
    if (bn.input(i)->constant().numel() != m) return false;
  }
  if (b && b->constant().numel() != m) return false;
  const ir::Attribute* eps_attr = bn.attribute("epsilon");
  double eps = eps_attr && std::holds_alternative<float>(eps_attr->storage())
                   ? std::get<float>(eps_attr->storage())
                   : 1e-5;
  const T* gamma = bn.input(1)->constant().data<T>();
  const T* beta = bn.input(2)->constant().data<T>();
  const T* mean = bn.input(3)->constant().data<T>();
  const T* var = bn.input(4)->constant().data<T>();

  Tensor new_w(type, weights.dims());
  Tensor new_b(type, {m});
  const int64_t per_channel = weights.numel() / std::max<int64_t>(m, 1);
  for (int64_t c = 0; c < m; ++c) {
    double s = static_cast<double>(gamma[c]) / std::sqrt(static_cast<double>(var[c]) + eps);
    for (int64_t i = 0; i < per_channel; ++i) {
      int64_t k = c * per_channel + i;
      new_w.data<T>()[k] = static_cast<T>(static_cast<double>(weights.data<T>()[k]) * s);
    }
    double bias = b ? static_cast<double>(b->constant().data<T>()[c]) : 0.0;
    new_b.data<T>()[c] =
        static_cast<T>((bias - static_cast<double>(mean[c])) * s + static_cast<double>(beta[c]));
  }
  ir::Value* w_value = g.add_initializer(g.unique_name(w->name() + "_bn_folded"), std::move(new_w));
  ir::Value* b_value =
      g.add_initializer(g.unique_name(conv.output(0)->name() + "_bn_bias"), std::move(new_b));
  ir::Value* conv_out = conv.output(0);
  ir::Value* bn_out = bn.output(0);
  if (!g.replace_uses(bn_out, conv_out)) {
    g.remove_value(w_value);
    g.remove_value(b_value);
    return false;
  }
  conv_out->set_type(bn_out->type());
  conv.set_input(1, w_value);
  conv.set_input(2, b_value);
  g.remove_node(&bn);
  return true;
}

}  // namespace

bool FuseConvBatchNorm::apply(ir::Graph& root) const {
  return apply_recursively(root, [](ir::Graph& g) {
    bool changed = false;
    auto uses = g.compute_uses();
    for (ir::Node* bn : g.nodes()) {
      if (bn->op_type() != "BatchNormalization" || !bn->domain().empty()) continue;
      // Only the inference form: one output, no training mode, spatial (pre-opset-9) on.
      if (bn->outputs().size() != 1 || int_attr(*bn, "training_mode", 0) != 0 ||
          int_attr(*bn, "spatial", 1) != 1 || bn->inputs().size() != 5) {
        continue;
      }
      ir::Value* x = bn->input(0);
      ir::Node* conv = x ? x->producer() : nullptr;
      if (!conv || conv->op_type() != "Conv" || !conv->domain().empty() || g.is_output(x) ||
          uses[x].size() != 1 || conv->owner() != &g) {
        continue;
      }
      const ir::Value* bn_out = bn->output(0);  // the key its readers are listed under
      bool fused = false;
      if (x->type().is_tensor() && x->type().dtype == DataType::Float32) {
        fused = try_fuse<float>(g, *conv, *bn);
      } else if (x->type().is_tensor() && x->type().dtype == DataType::Float64) {
        fused = try_fuse<double>(g, *conv, *bn);
      }
      if (fused) {
        // The BatchNormalization's readers now read the Conv output, its only reader gone.
        ir::Value* out = conv->output(0);
        auto moved = uses.find(bn_out);
        uses[out] = moved != uses.end() ? moved->second : std::vector<ir::Node*>{};
        if (moved != uses.end()) uses.erase(moved);
        changed = true;
      }
    }
    return changed;
  });
}

}  // namespace kiln::passes
