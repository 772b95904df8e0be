#pragma once
// The decomposed forms torch.onnx and Hugging Face models export for LayerNorm, Gelu and
// attention, built node for node (checked against torch 1.13's exports at opset 13/14).
#include <cmath>
#include <numbers>

#include "graph_builder.hpp"

namespace kiln::testing {

struct LayerNormForm {
  bool pow = true;          // Pow(d, 2) rather than Mul(d, d)
  bool axes_input = false;  // ReduceMean axes as an input (opset 18)
  bool gamma = true, beta = true;
};

// mean = ReduceMean(x); d = x - mean; var = ReduceMean(d^2); (d / sqrt(var + eps)) * g + b.
inline ir::Value* decomposed_layer_norm(GraphBuilder& b, ir::Value* x, int64_t hidden,
                                        LayerNormForm f = {}) {
  auto mean = [&](ir::Value* v) {
    if (f.axes_input) return b.op("ReduceMean", {v, b.ints({-1})});
    return b.op("ReduceMean", {v}, {{"axes", ir::Attribute(std::vector<int64_t>{-1})}});
  };
  ir::Value* d = b.op("Sub", {x, mean(x)});
  ir::Value* sq = f.pow ? b.op("Pow", {d, b.scalar(2.0f)}) : b.op("Mul", {d, d});
  ir::Value* denom = b.op("Sqrt", {b.op("Add", {mean(sq), b.scalar(1e-5f)})});
  ir::Value* y = b.op("Div", {d, denom});
  if (f.gamma) y = b.op("Mul", {y, b.random({hidden}, 0.5f, 1.5f)});
  if (f.beta) y = b.op("Add", {y, b.random({hidden})});
  return y;
}

// torch's nn.GELU(): x * 0.5 * (1 + erf(x / sqrt 2)), as Div, Erf, Add, Mul(x, .), Mul(., 0.5).
inline ir::Value* erf_gelu(GraphBuilder& b, ir::Value* x, int order = 0) {
  ir::Value* scaled = order == 1
                          ? b.op("Mul", {x, b.scalar(static_cast<float>(1 / std::numbers::sqrt2))})
                          : b.op("Div", {x, b.scalar(static_cast<float>(std::numbers::sqrt2))});
  ir::Value* gate = b.op("Add", {b.op("Erf", {scaled}), b.scalar(1.0f)});
  switch (order) {
    case 0:
      return b.op("Mul", {b.op("Mul", {x, gate}), b.scalar(0.5f)});
    case 1:
      return b.op("Mul", {b.op("Mul", {x, b.scalar(0.5f)}), gate});
    default:
      return b.op("Mul", {gate, b.op("Mul", {b.scalar(0.5f), x})});
  }
}

// Hugging Face gelu_new: 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3))).
inline ir::Value* tanh_gelu(GraphBuilder& b, ir::Value* x, bool pow = true) {
  ir::Value* half_x = b.op("Mul", {x, b.scalar(0.5f)});
  ir::Value* cube = pow ? b.op("Pow", {x, b.scalar(3.0f)}) : b.op("Mul", {x, b.op("Mul", {x, x})});
  ir::Value* inner = b.op("Add", {x, b.op("Mul", {cube, b.scalar(0.044715f)})});
  ir::Value* arg =
      b.op("Mul", {inner, b.scalar(static_cast<float>(std::sqrt(2 / std::numbers::pi)))});
  ir::Value* gate = b.op("Add", {b.op("Tanh", {arg}), b.scalar(1.0f)});
  return b.op("Mul", {half_x, gate});
}

// softmax(q kt / sqrt(d) + mask) v with kt given (already transposed).
inline ir::Value* attention_core(GraphBuilder& b, ir::Value* q, ir::Value* kt, ir::Value* v,
                                 ir::Value* mask, int64_t head_dim) {
  ir::Value* s = b.op("MatMul", {q, kt});
  s = b.op("Div", {s, b.scalar(std::sqrt(static_cast<float>(head_dim)))});
  if (mask) s = b.op("Add", {s, mask});
  ir::Value* p = b.op("Softmax", {s}, {{"axis", ir::Attribute(int64_t{-1})}});
  return b.op("MatMul", {p, v});
}

// One BERT encoder layer (post-norm) on x [batch, seq, hidden] with an additive mask
// [batch, 1, 1, seq], as torch exports it at opset 13 with constant reshape shapes.
inline ir::Value* encoder_layer(GraphBuilder& b, ir::Value* x, ir::Value* mask, int64_t hidden,
                                int64_t heads) {
  const int64_t d = hidden / heads;
  auto linear = [&](ir::Value* in, int64_t out) {
    return b.op("Add",
                {b.op("MatMul", {in, b.random({hidden, out}, -0.5f, 0.5f)}), b.random({out})});
  };
  auto split_heads = [&](ir::Value* t, std::vector<int64_t> perm) {
    ir::Value* r = b.op("Reshape", {t, b.ints({0, 0, heads, d})});
    return b.op("Transpose", {r}, {{"perm", ir::Attribute(perm)}});
  };
  ir::Value* q = split_heads(linear(x, hidden), {0, 2, 1, 3});
  ir::Value* kt = split_heads(linear(x, hidden), {0, 2, 3, 1});
  ir::Value* v = split_heads(linear(x, hidden), {0, 2, 1, 3});
  ir::Value* ctx = attention_core(b, q, kt, v, mask, d);
  ctx = b.op("Transpose", {ctx}, {{"perm", ir::Attribute(std::vector<int64_t>{0, 2, 1, 3})}});
  ctx = b.op("Reshape", {ctx, b.ints({0, 0, hidden})});
  ir::Value* h1 = decomposed_layer_norm(b, b.op("Add", {linear(ctx, hidden), x}), hidden);
  auto ff_linear = [&](ir::Value* in, int64_t k, int64_t n) {
    return b.op("Add", {b.op("MatMul", {in, b.random({k, n}, -0.5f, 0.5f)}), b.random({n})});
  };
  ir::Value* ff = ff_linear(erf_gelu(b, ff_linear(h1, hidden, 2 * hidden)), 2 * hidden, hidden);
  return decomposed_layer_norm(b, b.op("Add", {ff, h1}), hidden);
}

}  // namespace kiln::testing
