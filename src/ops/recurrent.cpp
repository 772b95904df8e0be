// RNN, GRU and LSTM: one reference loop over directions, batch entries and time steps, computed
// in double. Gate layouts follow ONNX: GRU W/R/B hold z, r, h; LSTM holds i, o, f, c.
#include <algorithm>
#include <cmath>

#include "ops/control_real_io.hpp"
#include "ops/op_utils.hpp"
#include "ops/recurrent_activations.hpp"
#include "ops/registry.hpp"

namespace kiln::ops {
namespace {

using ctl::from_doubles;
using ctl::to_doubles;

enum class Cell { Rnn, Gru, Lstm };

struct Activation : RecurrentActivation {
  double operator()(double x) const {
    if (name == "sigmoid") return 1.0 / (1.0 + std::exp(-x));
    if (name == "tanh") return std::tanh(x);
    if (name == "relu") return std::max(x, 0.0);
    if (name == "affine") return alpha * x + beta;
    if (name == "leakyrelu") return x >= 0 ? x : alpha * x;
    if (name == "thresholdedrelu") return x > alpha ? x : 0.0;
    if (name == "scaledtanh") return alpha * std::tanh(beta * x);
    if (name == "hardsigmoid") return std::clamp(alpha * x + beta, 0.0, 1.0);
    if (name == "elu") return x >= 0 ? x : alpha * (std::exp(x) - 1);
    if (name == "softsign") return x / (1 + std::fabs(x));
    if (name == "softplus") return std::log1p(std::exp(x));
    return x;
  }
};

void recurrent(KernelContext& ctx, Cell cell) {
  const int gates = cell == Cell::Rnn ? 1 : cell == Cell::Gru ? 3 : 4;
  const Tensor& xt = ctx.input(0);
  const Tensor& wt = ctx.input(1);
  const Tensor& rt = ctx.input(2);
  const DataType dtype = xt.dtype();
  dispatch_dtype<DTypeSet::Float>(dtype, ctx.node().op_type(), [](auto) { return 0; });
  const int64_t layout = ctx.opset() >= 14 ? ctx.attr_int("layout", 0) : 0;
  ctx.check(layout == 0 || layout == 1, "layout must be 0 or 1, got {}", layout);
  const std::string direction = ctx.attr_string("direction", "forward");
  ctx.check(direction == "forward" || direction == "reverse" || direction == "bidirectional",
            "unknown direction '{}'", direction);
  const int64_t dirs = direction == "bidirectional" ? 2 : 1;
  ctx.check(xt.rank() == 3, "X must be 3-D, got {}", xt.describe());
  const int64_t seq = layout ? xt.dim(1) : xt.dim(0);
  const int64_t batch = layout ? xt.dim(0) : xt.dim(1);
  const int64_t in_size = xt.dim(2);
  ctx.check(rt.rank() == 3 && rt.dim(0) == dirs, "R must be [{}, G*hidden, hidden], got {}", dirs,
            rt.describe());
  const int64_t hidden = ctx.attr_int("hidden_size", rt.dim(2));
  ctx.check(hidden > 0, "hidden_size must be positive");
  const int64_t gh = gates * hidden;
  ctx.check(wt.rank() == 3 && wt.dim(0) == dirs && wt.dim(1) == gh && wt.dim(2) == in_size,
            "W must be [{}, {}, {}], got {}", dirs, gh, in_size, wt.describe());
  ctx.check(rt.dim(1) == gh && rt.dim(2) == hidden, "R must be [{}, {}, {}], got {}", dirs, gh,
            hidden, rt.describe());
  for (size_t i = 1; i < ctx.input_count(); ++i) {
    if (ctx.has_input(i) && i != 4) {
      ctx.check(ctx.input(i).dtype() == dtype, "input {} has type {}, X has {}", i,
                dtype_name(ctx.input(i).dtype()), dtype_name(dtype));
    }
  }
  std::vector<double> x = to_doubles(xt), w = to_doubles(wt), r = to_doubles(rt);
  std::vector<double> bias(static_cast<size_t>(dirs * 2 * gh), 0.0);
  if (ctx.has_input(3)) {
    const Tensor& b = ctx.input(3);
    ctx.check(b.rank() == 2 && b.dim(0) == dirs && b.dim(1) == 2 * gh, "B must be [{}, {}], got {}",
              dirs, 2 * gh, b.describe());
    bias = to_doubles(b);
  }
  std::vector<int64_t> lens(static_cast<size_t>(batch), seq);
  if (ctx.has_input(4)) {
    const Tensor& sl = ctx.input(4);
    ctx.check(sl.numel() == batch && dtype_is_integer(sl.dtype()),
              "sequence_lens must be {} integers, got {}", batch, sl.describe());
    for (int64_t b = 0; b < batch; ++b) {
      lens[static_cast<size_t>(b)] = sl.int_at(b);
      ctx.check(sl.int_at(b) >= 0 && sl.int_at(b) <= seq,
                "sequence_lens[{}] = {} is out of [0, {}]", b, sl.int_at(b), seq);
    }
  }
  // Initial states are [dirs, batch, hidden] (layout 0) or [batch, dirs, hidden] (layout 1).
  auto state_index = [&](int64_t d, int64_t b, int64_t h) {
    return layout ? (b * dirs + d) * hidden + h : (d * batch + b) * hidden + h;
  };
  auto read_state = [&](size_t i) {
    std::vector<double> s(static_cast<size_t>(dirs * batch * hidden), 0.0);
    if (!ctx.has_input(i)) return s;
    const Tensor& t = ctx.input(i);
    ctx.check(t.numel() == dirs * batch * hidden && t.rank() == 3,
              "initial state {} must have {} elements in 3 dims, got {}", i, dirs * batch * hidden,
              t.describe());
    return to_doubles(t);
  };
  std::vector<double> h0 = read_state(5);
  std::vector<double> c0, peep;
  bool input_forget = false;
  if (cell == Cell::Lstm) {
    c0 = read_state(6);
    peep.assign(static_cast<size_t>(dirs * 3 * hidden), 0.0);
    if (ctx.has_input(7)) {
      const Tensor& p = ctx.input(7);
      ctx.check(p.numel() == dirs * 3 * hidden, "P must be [{}, {}], got {}", dirs, 3 * hidden,
                p.describe());
      peep = to_doubles(p);
    }
    input_forget = ctx.attr_int("input_forget", 0) != 0;
  }
  const bool has_clip = ctx.has_attr("clip");
  const double clip = has_clip ? ctx.attr_float("clip") : 0.0;
  auto clipped = [&](double v) { return has_clip ? std::clamp(v, -clip, clip) : v; };
  const bool lbr = cell == Cell::Gru && ctx.attr_int("linear_before_reset", 0) != 0;
  std::vector<std::string> default_acts = cell == Cell::Rnn ? std::vector<std::string>{"Tanh"}
                                          : cell == Cell::Gru
                                              ? std::vector<std::string>{"Sigmoid", "Tanh"}
                                              : std::vector<std::string>{"Sigmoid", "Tanh", "Tanh"};
  std::vector<Activation> acts;
  for (RecurrentActivation& a :
       read_recurrent_activations(ctx, default_acts, static_cast<int>(dirs))) {
    acts.push_back({std::move(a)});
  }
  const size_t per_dir = default_acts.size();

  std::vector<double> y(static_cast<size_t>(seq * dirs * batch * hidden), 0.0);
  std::vector<double> yh(static_cast<size_t>(dirs * batch * hidden), 0.0), yc = yh;
  auto y_index = [&](int64_t t, int64_t d, int64_t b, int64_t h) {
    return layout ? ((b * seq + t) * dirs + d) * hidden + h
                  : ((t * dirs + d) * batch + b) * hidden + h;
  };
  std::vector<double> hprev(static_cast<size_t>(hidden)), cprev(static_cast<size_t>(hidden));
  std::vector<double> xw(static_cast<size_t>(gh)), hr(static_cast<size_t>(gh));
  std::vector<double> hnew(static_cast<size_t>(hidden)), cnew(static_cast<size_t>(hidden));
  std::vector<double> reset(static_cast<size_t>(hidden));
  for (int64_t d = 0; d < dirs; ++d) {
    const bool reverse = direction == "reverse" || d == 1;
    const Activation& f = acts[static_cast<size_t>(d) * per_dir];
    const Activation& g = acts[static_cast<size_t>(d) * per_dir + (per_dir > 1 ? 1 : 0)];
    const Activation& hact = acts[static_cast<size_t>(d) * per_dir + (per_dir > 2 ? 2 : 0)];
    const double* wd = w.data() + d * gh * in_size;
    const double* rd = r.data() + d * gh * hidden;
    const double* wb = bias.data() + d * 2 * gh;
    const double* rb = wb + gh;
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t h = 0; h < hidden; ++h) {
        hprev[h] = h0[state_index(d, b, h)];
        if (cell == Cell::Lstm) cprev[h] = c0[state_index(d, b, h)];
      }
      const int64_t len = lens[static_cast<size_t>(b)];
      for (int64_t step = 0; step < len; ++step) {
        const int64_t t = reverse ? len - 1 - step : step;
        const double* xv = x.data() + (layout ? (b * seq + t) : (t * batch + b)) * in_size;
        for (int64_t j = 0; j < gh; ++j) {
          double s = wb[j];
          for (int64_t k = 0; k < in_size; ++k) s += xv[k] * wd[j * in_size + k];
          xw[j] = s;
          double s2 = rb[j];
          for (int64_t k = 0; k < hidden; ++k) s2 += hprev[k] * rd[j * hidden + k];
          hr[j] = s2;
        }
        if (cell == Cell::Gru) {
          for (int64_t h = 0; h < hidden; ++h) {
            reset[h] = f(clipped(xw[hidden + h] + hr[hidden + h]));
          }
        }
        for (int64_t h = 0; h < hidden; ++h) {
          if (cell == Cell::Rnn) {
            hnew[h] = f(clipped(xw[h] + hr[h]));
          } else if (cell == Cell::Gru) {
            const double z = f(clipped(xw[h] + hr[h]));
            const double rr = reset[h];
            double pre;
            if (lbr) {
              pre = xw[2 * hidden + h] + rr * hr[2 * hidden + h];
            } else {
              // (r * h_prev) R_h + Rb_h: the reset applies before the recurrent product.
              double s = rb[2 * hidden + h];
              for (int64_t k = 0; k < hidden; ++k) {
                s += reset[k] * hprev[k] * rd[(2 * hidden + h) * hidden + k];
              }
              pre = xw[2 * hidden + h] + s;
            }
            const double hh = g(clipped(pre));
            hnew[h] = (1 - z) * hh + z * hprev[h];
          } else {
            const double* pd = peep.data() + d * 3 * hidden;
            const double ig = f(clipped(xw[h] + hr[h] + pd[h] * cprev[h]));
            double fg =
                f(clipped(xw[2 * hidden + h] + hr[2 * hidden + h] + pd[2 * hidden + h] * cprev[h]));
            if (input_forget) fg = 1 - ig;
            const double cc = g(clipped(xw[3 * hidden + h] + hr[3 * hidden + h]));
            cnew[h] = fg * cprev[h] + ig * cc;
            const double og =
                f(clipped(xw[hidden + h] + hr[hidden + h] + pd[hidden + h] * cnew[h]));
            hnew[h] = og * hact(cnew[h]);
          }
        }
        for (int64_t h = 0; h < hidden; ++h) {
          hprev[h] = hnew[h];
          if (cell == Cell::Lstm) cprev[h] = cnew[h];
          y[y_index(t, d, b, h)] = hnew[h];
        }
      }
      for (int64_t h = 0; h < hidden; ++h) {
        yh[state_index(d, b, h)] = hprev[h];
        if (cell == Cell::Lstm) yc[state_index(d, b, h)] = cprev[h];
      }
    }
  }
  const std::string& op = ctx.node().op_type();
  std::vector<int64_t> ydims = layout ? std::vector<int64_t>{batch, seq, dirs, hidden}
                                      : std::vector<int64_t>{seq, dirs, batch, hidden};
  std::vector<int64_t> sdims = layout ? std::vector<int64_t>{batch, dirs, hidden}
                                      : std::vector<int64_t>{dirs, batch, hidden};
  if (ctx.wants_output(0)) ctx.set_output(0, from_doubles(dtype, ydims, y, op));
  if (ctx.wants_output(1)) ctx.set_output(1, from_doubles(dtype, sdims, yh, op));
  if (cell == Cell::Lstm && ctx.wants_output(2))
    ctx.set_output(2, from_doubles(dtype, sdims, yc, op));
}

void rnn(KernelContext& ctx) {
  recurrent(ctx, Cell::Rnn);
}
void gru(KernelContext& ctx) {
  recurrent(ctx, Cell::Gru);
}
void lstm(KernelContext& ctx) {
  recurrent(ctx, Cell::Lstm);
}

void infer_recurrent(InferContext& ctx) {
  const TypeInfo* x = ctx.input_type(0);
  if (!x || !x->is_tensor()) return;
  const int64_t layout = ctx.opset() >= 14 ? ctx.attr_int("layout", 0) : 0;
  const int64_t dirs = ctx.attr_string("direction", "forward") == "bidirectional" ? 2 : 1;
  Dim hidden = ctx.has_attr("hidden_size") ? Dim(ctx.attr_int("hidden_size")) : Dim();
  Dim seq, batch;
  if (x->shape && x->shape->rank() == 3) {
    seq = (*x->shape)[layout ? 1 : 0];
    batch = (*x->shape)[layout ? 0 : 1];
  }
  Shape y =
      layout ? Shape({batch, seq, Dim(dirs), hidden}) : Shape({seq, Dim(dirs), batch, hidden});
  Shape s = layout ? Shape({batch, Dim(dirs), hidden}) : Shape({Dim(dirs), batch, hidden});
  for (size_t i = 0; i < ctx.output_count(); ++i) {
    ctx.set_output_type(i, TypeInfo::tensor(x->dtype, i == 0 ? y : s));
  }
}

KILN_REGISTER_OP({.op_type = "RNN", .kernel = rnn, .infer = infer_recurrent});
KILN_REGISTER_OP({.op_type = "GRU", .kernel = gru, .infer = infer_recurrent});
KILN_REGISTER_OP({.op_type = "LSTM", .kernel = lstm, .infer = infer_recurrent});

}  // namespace
}  // namespace kiln::ops
