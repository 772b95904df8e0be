// com.microsoft DynamicQuantizeLSTM (onnxruntime's contrib op, what its `quantize_dynamic` and
// `kiln quantize --dynamic` write for LSTM): an ONNX LSTM (layout 0) whose W and R are 8-bit,
// stored transposed as [dirs, input, 4 hidden] and [dirs, hidden, 4 hidden] (gates i, o, f, c
// along the last dim), each with a scale and zero point per direction ([dirs]) or per gate row
// ([dirs, 4 hidden]). Inputs: X, W, R, B?, sequence_lens?, initial_h?, initial_c?, P?, W_scale,
// W_zero_point, R_scale, R_zero_point.
//
// The products are integer, with the activations quantized at run time as onnxruntime's kernel
// does (ops/dynamic_u8.hpp), so that a file scores the same in both: X as one uint8 block (every
// time step and batch entry at once), and at each step the previous hidden state of each batch
// entry as its own block. (onnxruntime quantizes h in blocks of ceil(batch / threads) rows where
// it splits the batch over its threads, else the whole batch at once, so its own results move
// with its thread count; per entry is what it does at batch 1 or with a thread per entry, and
// keeps one sequence's result independent of the others' hidden states.) Each product is its int32
// sum times (activation scale * weight scale) in float; the cell (biases, peepholes, clip, gates)
// runs in double as the float LSTM's reference does. Refused: activations other than the defaults,
// and sequence_lens shorter than the sequence.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <span>

#include "ops/control_real_io.hpp"
#include "ops/dynamic_quantize_lstm_slots.hpp"
#include "ops/dynamic_u8.hpp"
#include "ops/matmul_nbits_layout.hpp"
#include "ops/op_utils.hpp"
#include "ops/registry.hpp"

namespace kiln::ops {
namespace {

using enum dynamic_lstm::Slot;

// One 8-bit weight [dirs, rows (K), cols (4 hidden)] with its scales and zero points, widened to
// int32 codes minus the zero point, per direction and column.
struct QuantWeight {
  int64_t k = 0, cols = 0;
  std::vector<int32_t> centred;  // [dirs][k][cols]
  std::vector<float> scale;      // [dirs][cols]
};

QuantWeight read_weight(const KernelContext& ctx, size_t w_slot, size_t s_slot, size_t z_slot,
                        const char* name, int64_t dirs, int64_t k, int64_t cols) {
  const Tensor& w = ctx.input(w_slot);
  ctx.check(w.rank() == 3 && w.dim(0) == dirs && w.dim(1) == k && w.dim(2) == cols,
            "{} must be [{}, {}, {}] (8-bit, transposed: the gates along the last dim), got {}",
            name, dirs, k, cols, w.describe());
  ctx.check(w.dtype() == DataType::Int8 || w.dtype() == DataType::UInt8,
            "{} must be int8 or uint8, got {}", name, dtype_name(w.dtype()));
  const Tensor& s = ctx.input(s_slot);
  const Tensor& z = ctx.input(z_slot);
  const bool per_row = s.numel() == dirs * cols && s.numel() != dirs;
  ctx.check(s.dtype() == DataType::Float32 && (s.numel() == dirs || per_row),
            "{}_scale must be float32 [{}] (per direction) or [{}, {}] (per gate row), got {}",
            name, dirs, dirs, cols, s.describe());
  ctx.check(z.dtype() == w.dtype() && z.numel() == s.numel(),
            "{}_zero_point must be {} with {}_scale's {} values, got {}", name,
            dtype_name(w.dtype()), name, s.numel(), z.describe());
  QuantWeight q;
  q.k = k;
  q.cols = cols;
  q.scale.resize(static_cast<size_t>(dirs * cols));
  std::vector<int32_t> zero(static_cast<size_t>(dirs * cols));
  for (int64_t d = 0; d < dirs; ++d) {
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t src = per_row ? d * cols + c : d;
      q.scale[static_cast<size_t>(d * cols + c)] = s.data<float>()[src];
      zero[static_cast<size_t>(d * cols + c)] = static_cast<int32_t>(z.int_at(src));
    }
  }
  q.centred.resize(static_cast<size_t>(w.numel()));
  for (int64_t i = 0; i < w.numel(); ++i) {
    const int64_t d = i / (k * cols), c = i % cols;
    q.centred[static_cast<size_t>(i)] =
        static_cast<int32_t>(w.int_at(i)) - zero[static_cast<size_t>(d * cols + c)];
  }
  return q;
}

// out[r][c] = sum_k (a_code[r][k] - a_zero) * w[d][k][c], times a_scale * w_scale[d][c].
void integer_product(const std::vector<uint8_t>& a, const DynamicU8& aq, int64_t rows,
                     const QuantWeight& w, int64_t d, std::vector<double>& out) {
  const int64_t k = w.k, cols = w.cols;
  std::vector<int32_t> acc(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    std::fill(acc.begin(), acc.end(), 0);
    for (int64_t j = 0; j < k; ++j) {
      const int32_t av = static_cast<int32_t>(a[static_cast<size_t>(r * k + j)]) - aq.zero_point;
      if (av == 0) continue;
      const int32_t* wr = w.centred.data() + (d * k + j) * cols;
      for (int64_t c = 0; c < cols; ++c) acc[static_cast<size_t>(c)] += av * wr[c];
    }
    for (int64_t c = 0; c < cols; ++c) {
      const float scale = aq.scale * w.scale[static_cast<size_t>(d * cols + c)];
      out[static_cast<size_t>(r * cols + c)] =
          static_cast<double>(static_cast<float>(acc[static_cast<size_t>(c)]) * scale);
    }
  }
}

std::vector<uint8_t> quantize_block(std::span<const float> values, DynamicU8& q) {
  q = DynamicU8::of(values);
  std::vector<uint8_t> codes(values.size());
  for (size_t i = 0; i < values.size(); ++i) codes[i] = q.code(values[i]);
  return codes;
}

void check_form(const AttrReader& ctx) {
  ctx.check(ctx.attr_int("layout", 0) == 0, "layout 1 is not part of DynamicQuantizeLSTM");
  if (ctx.has_attr("activations")) {
    const std::vector<std::string> acts = ctx.attr_strings("activations");
    for (size_t i = 0; i < acts.size(); ++i) {
      std::string a = acts[i];
      std::transform(a.begin(), a.end(), a.begin(),
                     [](unsigned char ch) { return std::tolower(ch); });
      if (a != (i % 3 == 0 ? "sigmoid" : "tanh")) {
        ctx.unsupported("activation '{}' (only the defaults Sigmoid, Tanh, Tanh are supported)",
                        acts[i]);
      }
    }
  }
}

void dynamic_quantize_lstm(KernelContext& ctx) {
  check_form(ctx);
  ctx.check(ctx.input_count() == kSlots,
            "DynamicQuantizeLSTM takes 12 inputs (X, W, R, B, sequence_lens, initial_h, "
            "initial_c, P, W_scale, W_zero_point, R_scale, R_zero_point), got {}",
            ctx.input_count());
  const Tensor& xt = ctx.input(kX);
  ctx.check(xt.dtype() == DataType::Float32 && xt.rank() == 3, "X must be float32 3-D, got {}",
            xt.describe());
  const std::string direction = ctx.attr_string("direction", "forward");
  ctx.check(direction == "forward" || direction == "reverse" || direction == "bidirectional",
            "unknown direction '{}'", direction);
  const int64_t dirs = direction == "bidirectional" ? 2 : 1;
  const int64_t seq = xt.dim(0), batch = xt.dim(1), in_size = xt.dim(2);
  const Tensor& rt = ctx.input(kR);
  ctx.check(rt.rank() == 3, "R must be 3-D, got {}", rt.describe());
  const int64_t hidden = ctx.attr_int("hidden_size", rt.dim(1));
  ctx.check(hidden > 0, "hidden_size must be positive");
  const int64_t gh = 4 * hidden;
  const QuantWeight w = read_weight(ctx, kW, kWScale, kWZero, "W", dirs, in_size, gh);
  const QuantWeight r = read_weight(ctx, kR, kRScale, kRZero, "R", dirs, hidden, gh);
  auto floats = [&](size_t slot, int64_t count, const char* name) {
    std::vector<double> v(static_cast<size_t>(count), 0.0);
    if (!ctx.has_input(slot)) return v;
    const Tensor& t = ctx.input(slot);
    ctx.check(t.dtype() == DataType::Float32 && t.numel() == count,
              "{} must be float32 with {} values, got {}", name, count, t.describe());
    return ctl::to_doubles(t);
  };
  const std::vector<double> bias = floats(kB, dirs * 2 * gh, "B");
  const std::vector<double> h0 = floats(kInitH, dirs * batch * hidden, "initial_h");
  const std::vector<double> c0 = floats(kInitC, dirs * batch * hidden, "initial_c");
  const std::vector<double> peep = floats(kP, dirs * 3 * hidden, "P");
  if (ctx.has_input(kSeqLens)) {
    const Tensor& sl = ctx.input(kSeqLens);
    ctx.check(sl.numel() == batch, "sequence_lens must hold {} values, got {}", batch,
              sl.describe());
    for (int64_t b = 0; b < batch; ++b) {
      if (sl.int_at(b) != seq) {
        ctx.unsupported(
            "sequence_lens[{}] = {} shorter than the sequence ({}): only full "
            "sequences are supported",
            b, sl.int_at(b), seq);
      }
    }
  }
  const bool has_clip = ctx.has_attr("clip");
  const double clip = has_clip ? ctx.attr_float("clip") : 0.0;
  auto clipped = [&](double v) { return has_clip ? std::clamp(v, -clip, clip) : v; };
  auto sigmoid = [](double v) { return 1.0 / (1.0 + std::exp(-v)); };
  const bool input_forget = ctx.attr_int("input_forget", 0) != 0;

  // X is one block for the whole sequence (onnxruntime's input projection is one product).
  DynamicU8 xq;
  const std::vector<uint8_t> x_codes = quantize_block(xt.values<float>(), xq);
  std::vector<double> proj(static_cast<size_t>(seq * batch * gh));
  std::vector<double> y(static_cast<size_t>(seq * dirs * batch * hidden), 0.0);
  std::vector<double> yh(static_cast<size_t>(dirs * batch * hidden)), yc = yh;
  std::vector<double> rec(static_cast<size_t>(batch * gh));
  std::vector<float> h_row(static_cast<size_t>(hidden));
  std::vector<double> rec_row(static_cast<size_t>(gh));
  for (int64_t d = 0; d < dirs; ++d) {
    const bool reverse = direction == "reverse" || d == 1;
    integer_product(x_codes, xq, seq * batch, w, d, proj);
    const double* wb = bias.data() + d * 2 * gh;
    const double* rb = wb + gh;
    const double* pd = peep.data() + d * 3 * hidden;
    std::vector<double> h(h0.begin() + d * batch * hidden, h0.begin() + (d + 1) * batch * hidden);
    std::vector<double> c(c0.begin() + d * batch * hidden, c0.begin() + (d + 1) * batch * hidden);
    for (int64_t step = 0; step < seq; ++step) {
      const int64_t t = reverse ? seq - 1 - step : step;
      for (int64_t b = 0; b < batch; ++b) {
        const auto hb = std::span<const double>(h).subspan(static_cast<size_t>(b * hidden),
                                                           static_cast<size_t>(hidden));
        std::transform(hb.begin(), hb.end(), h_row.begin(),
                       [](double v) { return static_cast<float>(v); });
        DynamicU8 hq;
        const std::vector<uint8_t> h_codes = quantize_block(h_row, hq);
        integer_product(h_codes, hq, 1, r, d, rec_row);
        std::copy(rec_row.begin(), rec_row.end(), rec.begin() + b * gh);
      }
      for (int64_t b = 0; b < batch; ++b) {
        const double* xp = proj.data() + (t * batch + b) * gh;
        const double* hp = rec.data() + b * gh;
        auto pre = [&](int64_t gate, int64_t j) {
          const int64_t g = gate * hidden + j;
          return xp[g] + hp[g] + wb[g] + rb[g];
        };
        for (int64_t j = 0; j < hidden; ++j) {
          double& cj = c[static_cast<size_t>(b * hidden + j)];
          const double ig = sigmoid(clipped(pre(0, j) + pd[j] * cj));
          const double fg =
              input_forget ? 1 - ig : sigmoid(clipped(pre(2, j) + pd[2 * hidden + j] * cj));
          const double cc = std::tanh(clipped(pre(3, j)));
          cj = fg * cj + ig * cc;
          const double og = sigmoid(clipped(pre(1, j) + pd[hidden + j] * cj));
          const double hj = og * std::tanh(cj);
          h[static_cast<size_t>(b * hidden + j)] = hj;
          y[static_cast<size_t>(((t * dirs + d) * batch + b) * hidden + j)] = hj;
        }
      }
    }
    std::copy(h.begin(), h.end(), yh.begin() + d * batch * hidden);
    std::copy(c.begin(), c.end(), yc.begin() + d * batch * hidden);
  }
  const char* op = "DynamicQuantizeLSTM";
  if (ctx.wants_output(0)) {
    ctx.set_output(0, ctl::from_doubles(DataType::Float32, {seq, dirs, batch, hidden}, y, op));
  }
  if (ctx.wants_output(1)) {
    ctx.set_output(1, ctl::from_doubles(DataType::Float32, {dirs, batch, hidden}, yh, op));
  }
  if (ctx.wants_output(2)) {
    ctx.set_output(2, ctl::from_doubles(DataType::Float32, {dirs, batch, hidden}, yc, op));
  }
}

void infer_dynamic_quantize_lstm(InferContext& ctx) {
  check_form(ctx);
  const TypeInfo* x = ctx.input_type(kX);
  if (!x || !x->is_tensor()) return;
  const int64_t dirs = ctx.attr_string("direction", "forward") == "bidirectional" ? 2 : 1;
  Dim hidden = ctx.has_attr("hidden_size") ? Dim(ctx.attr_int("hidden_size")) : Dim();
  if (!ctx.has_attr("hidden_size")) {
    const TypeInfo* r = ctx.input_type(kR);
    if (r && r->shape && r->shape->rank() == 3) hidden = (*r->shape)[1];
  }
  Dim seq, batch;
  if (x->shape && x->shape->rank() == 3) {
    seq = (*x->shape)[0];
    batch = (*x->shape)[1];
  }
  for (size_t i = 0; i < ctx.output_count(); ++i) {
    Shape s = i == 0 ? Shape({seq, Dim(dirs), batch, hidden}) : Shape({Dim(dirs), batch, hidden});
    ctx.set_output_type(i, TypeInfo::tensor(DataType::Float32, s));
  }
}

KILN_REGISTER_OP({.domain = kMicrosoftDomain,
                  .op_type = "DynamicQuantizeLSTM",
                  .kernel = dynamic_quantize_lstm,
                  .infer = infer_dynamic_quantize_lstm});

}  // namespace
}  // namespace kiln::ops
