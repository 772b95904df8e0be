// Attention (opset 23/24) and RotaryEmbedding, computed in double. Ordering follows the ONNX
// reference: scaled Q K^T, softcap, + bias (mask, causal, padding), softmax, times V.
#include <cmath>
#include <limits>

#include "ops/control_real_io.hpp"
#include "ops/op_utils.hpp"
#include "ops/registry.hpp"

namespace kiln::ops {
namespace {

using ctl::from_doubles;
using ctl::to_doubles;

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// A [B, heads, S, D] view of a 4-D tensor, or of a 3-D [B, S, heads * D] one.
struct HeadView {
  std::vector<double> data;
  int64_t batch = 0, heads = 0, seq = 0, dim = 0;
  bool packed = false;  // 3-D input
  double at(int64_t b, int64_t h, int64_t s, int64_t d) const {
    const int64_t i =
        packed ? ((b * seq + s) * heads + h) * dim + d : ((b * heads + h) * seq + s) * dim + d;
    return data[static_cast<size_t>(i)];
  }
};

HeadView head_view(const KernelContext& ctx, const Tensor& t, int64_t heads_attr,
                   const char* what) {
  HeadView v;
  v.data = to_doubles(t);
  if (t.rank() == 4) {
    v.batch = t.dim(0), v.heads = t.dim(1), v.seq = t.dim(2), v.dim = t.dim(3);
  } else {
    ctx.check(t.rank() == 3, "{} must be 3-D or 4-D, got {}", what, t.describe());
    ctx.check(heads_attr > 0, "3-D {} needs the num_heads attributes", what);
    ctx.check(t.dim(2) % heads_attr == 0, "{} hidden size {} is not a multiple of {} heads", what,
              t.dim(2), heads_attr);
    v.batch = t.dim(0), v.seq = t.dim(1), v.heads = heads_attr, v.dim = t.dim(2) / heads_attr;
    v.packed = true;
  }
  return v;
}

// past (4-D, may be absent) followed by the new keys/values along the sequence axis.
HeadView concat_past(const KernelContext& ctx, const HeadView& cur, size_t past_input) {
  if (!ctx.has_input(past_input)) {
    HeadView v = cur;
    if (v.packed) {  // repack as [B, heads, S, D]
      v.packed = false;
      for (int64_t b = 0; b < v.batch; ++b)
        for (int64_t h = 0; h < v.heads; ++h)
          for (int64_t s = 0; s < v.seq; ++s)
            for (int64_t d = 0; d < v.dim; ++d)
              v.data[static_cast<size_t>(((b * v.heads + h) * v.seq + s) * v.dim + d)] =
                  cur.at(b, h, s, d);
    }
    return v;
  }
  const Tensor& p = ctx.input(past_input);
  ctx.check(p.rank() == 4 && p.dim(0) == cur.batch && p.dim(1) == cur.heads && p.dim(3) == cur.dim,
            "past input {} must be [{}, {}, past, {}], got {}", past_input, cur.batch, cur.heads,
            cur.dim, p.describe());
  HeadView pv{to_doubles(p), p.dim(0), p.dim(1), p.dim(2), p.dim(3), false};
  HeadView v{{}, cur.batch, cur.heads, pv.seq + cur.seq, cur.dim, false};
  v.data.resize(static_cast<size_t>(v.batch * v.heads * v.seq * v.dim));
  for (int64_t b = 0; b < v.batch; ++b)
    for (int64_t h = 0; h < v.heads; ++h)
      for (int64_t s = 0; s < v.seq; ++s)
        for (int64_t d = 0; d < v.dim; ++d)
          v.data[static_cast<size_t>(((b * v.heads + h) * v.seq + s) * v.dim + d)] =
              s < pv.seq ? pv.at(b, h, s, d) : cur.at(b, h, s - pv.seq, d);
  return v;
}

void attention(KernelContext& ctx) {
  const Tensor& qt = ctx.input(0);
  const DataType dtype = qt.dtype();
  dispatch_dtype<DTypeSet::Float>(dtype, "Attention", [](auto) { return 0; });
  ctx.check(ctx.input(1).rank() == qt.rank() && ctx.input(2).rank() == qt.rank(),
            "Q, K and V must have the same rank");
  const HeadView q = head_view(ctx, qt, ctx.attr_int("q_num_heads", 0), "Q");
  const int64_t kv_heads_attr = ctx.attr_int("kv_num_heads", 0);
  const HeadView k_new = head_view(ctx, ctx.input(1), kv_heads_attr, "K");
  const HeadView v_new = head_view(ctx, ctx.input(2), kv_heads_attr, "V");
  ctx.check(k_new.batch == q.batch && v_new.batch == q.batch, "batch sizes differ");
  ctx.check(k_new.dim == q.dim, "Q head size {} differs from K head size {}", q.dim, k_new.dim);
  ctx.check(k_new.heads == v_new.heads && k_new.seq == v_new.seq,
            "K and V must agree on heads and sequence length");
  ctx.check(q.heads > 0 && k_new.heads > 0, "head counts must be positive");
  ctx.check(q.heads % k_new.heads == 0, "q heads {} not a multiple of kv heads {}", q.heads,
            k_new.heads);
  ctx.check(ctx.has_input(4) == ctx.has_input(5), "past_key and past_value go together");
  const int64_t past = ctx.has_input(4) ? ctx.input(4).dim(2) : 0;
  const HeadView k = concat_past(ctx, k_new, 4);
  const HeadView v = concat_past(ctx, v_new, 5);
  const int64_t B = q.batch, H = q.heads, S = q.seq, T = k.seq, D = q.dim, DV = v.dim;
  const int64_t reps = H / k.heads;
  const double scale =
      ctx.has_attr("scale") ? ctx.attr_float("scale") : 1.0 / std::sqrt(static_cast<double>(D));
  const double softcap = ctx.attr_float("softcap", 0.0f);
  const bool causal = ctx.attr_int("is_causal", 0) != 0;
  const int64_t mode = ctx.attr_int("qk_matmul_output_mode", 0);
  ctx.check(mode >= 0 && mode <= 3, "qk_matmul_output_mode {} is out of [0, 3]", mode);

  // Mask broadcast to [B, H, S, T]; a shorter last dim is padded with "masked".
  bool has_mask = ctx.has_input(3);
  std::vector<double> mask;
  bool mask_bool = false;
  std::vector<int64_t> mstrides(4, 0);
  int64_t mask_len = 0;
  if (has_mask) {
    const Tensor& m = ctx.input(3);
    ctx.check(m.rank() >= 1 && m.rank() <= 4, "attn_mask must have rank 1 to 4, got {}",
              m.describe());
    mask_bool = m.dtype() == DataType::Bool;
    ctx.check(mask_bool || m.dtype() == dtype, "attn_mask must be bool or {}, got {}",
              dtype_name(dtype), dtype_name(m.dtype()));
    mask = to_doubles(m);
    std::vector<int64_t> dims = m.dims();
    while (dims.size() < 4) dims.insert(dims.begin(), 1);
    mask_len = dims[3];
    ctx.check(mask_len <= T, "attn_mask last dim {} exceeds the total sequence length {}", mask_len,
              T);
    const std::vector<int64_t> full = {B, H, S, T};
    for (size_t i = 0; i < 3; ++i) {
      ctx.check(dims[i] == 1 || dims[i] == full[i],
                "attn_mask {} does not broadcast to [{}, {}, {}, {}]", m.describe(), B, H, S, T);
    }
    std::vector<int64_t> st = row_major_strides(dims);
    for (size_t i = 0; i < 3; ++i) mstrides[i] = dims[i] == 1 ? 0 : st[i];
    mstrides[3] = 1;
  }
  std::vector<int64_t> nonpad;
  if (ctx.has_input(6)) {
    const Tensor& n = ctx.input(6);
    ctx.check(n.numel() == B, "nonpad_kv_seqlen must have {} entries, got {}", B, n.describe());
    nonpad = n.to_int64_vector();
  }
  auto bias = [&](int64_t b, int64_t h, int64_t i, int64_t j) {
    double out = 0;
    if (has_mask) {
      if (j >= mask_len) return kNegInf;
      const double m =
          mask[static_cast<size_t>(b * mstrides[0] + h * mstrides[1] + i * mstrides[2] + j)];
      out += mask_bool ? (m != 0 ? 0.0 : kNegInf) : m;
    }
    if (causal && j > i + past) out += kNegInf;
    if (!nonpad.empty() && j >= nonpad[static_cast<size_t>(b)]) out += kNegInf;
    return out;
  };

  std::vector<double> y(static_cast<size_t>(B * H * S * DV), 0.0);
  std::vector<double> qk_out(static_cast<size_t>(B * H * S * T), 0.0);
  std::vector<double> row(static_cast<size_t>(T));
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      const int64_t kh = h / reps;
      for (int64_t i = 0; i < S; ++i) {
        double mx = kNegInf;
        for (int64_t j = 0; j < T; ++j) {
          double s = 0;
          for (int64_t d = 0; d < D; ++d) s += q.at(b, h, i, d) * k.at(b, kh, j, d);
          s *= scale;
          if (softcap > 0) s = softcap * std::tanh(s / softcap);
          const double biased = s + bias(b, h, i, j);
          const size_t o = static_cast<size_t>(((b * H + h) * S + i) * T + j);
          qk_out[o] = mode == 2 ? biased : s;
          row[static_cast<size_t>(j)] = biased;
          mx = std::max(mx, biased);
        }
        double sum = 0;
        for (double& r : row) {
          r = std::exp(r - mx);
          sum += r;
        }
        for (int64_t j = 0; j < T; ++j) {
          double p = row[static_cast<size_t>(j)] / sum;
          row[static_cast<size_t>(j)] = p;
          if (mode == 3) qk_out[static_cast<size_t>(((b * H + h) * S + i) * T + j)] = p;
        }
        for (int64_t d = 0; d < DV; ++d) {
          double s = 0;
          for (int64_t j = 0; j < T; ++j) s += row[static_cast<size_t>(j)] * v.at(b, kh, j, d);
          // 3-D inputs give [B, S, H * DV]; 4-D give [B, H, S, DV].
          const int64_t o =
              q.packed ? ((b * S + i) * H + h) * DV + d : ((b * H + h) * S + i) * DV + d;
          y[static_cast<size_t>(o)] = s;
        }
      }
    }
  }
  std::vector<int64_t> ydims =
      q.packed ? std::vector<int64_t>{B, S, H * DV} : std::vector<int64_t>{B, H, S, DV};
  ctx.set_output(0, from_doubles(dtype, ydims, y, "Attention"));
  if (ctx.wants_output(1))
    ctx.set_output(1, from_doubles(dtype, {B, k.heads, T, D}, k.data, "Attention"));
  if (ctx.wants_output(2))
    ctx.set_output(2, from_doubles(dtype, {B, v.heads, T, DV}, v.data, "Attention"));
  if (ctx.wants_output(3))
    ctx.set_output(3, from_doubles(dtype, {B, H, S, T}, qk_out, "Attention"));
}

void infer_attention(InferContext& ctx) {
  const TypeInfo* q = ctx.input_type(0);
  if (!q || !q->is_tensor()) return;
  for (size_t i = 0; i < ctx.output_count(); ++i) {
    std::optional<Shape> s;
    if (q->shape) s = Shape(std::vector<Dim>(i == 0 ? q->shape->rank() : 4));
    ctx.set_output_type(i, TypeInfo::tensor(q->dtype, s));
  }
}

// ---- RotaryEmbedding ----

void rotary_embedding(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const DataType dtype = x.dtype();
  dispatch_dtype<DTypeSet::Float>(dtype, "RotaryEmbedding", [](auto) { return 0; });
  const bool interleaved = ctx.attr_int("interleaved", 0) != 0;
  const int64_t num_heads = ctx.attr_int("num_heads", 0);
  int64_t B, S, H, D;
  const bool packed = x.rank() == 3;
  if (packed) {
    ctx.check(num_heads > 0, "3-D input needs num_heads");
    B = x.dim(0), S = x.dim(1), H = num_heads;
    ctx.check(x.dim(2) % H == 0, "hidden size {} is not a multiple of {} heads", x.dim(2), H);
    D = x.dim(2) / H;
  } else {
    ctx.check(x.rank() == 4, "input must be 3-D or 4-D, got {}", x.describe());
    B = x.dim(0), H = x.dim(1), S = x.dim(2), D = x.dim(3);
  }
  int64_t rd = ctx.attr_int("rotary_embedding_dim", 0);
  if (rd == 0) rd = D;
  ctx.check(rd > 0 && rd <= D && rd % 2 == 0, "rotary_embedding_dim {} must be even and <= {}", rd,
            D);
  const int64_t half = rd / 2;
  const Tensor& cos_t = ctx.input(1);
  const Tensor& sin_t = ctx.input(2);
  ctx.check(cos_t.dims() == sin_t.dims(), "cos_cache {} and sin_cache {} differ", cos_t.describe(),
            sin_t.describe());
  ctx.check(cos_t.rank() >= 1 && cos_t.dim(cos_t.rank() - 1) == half,
            "cache last dim must be rotary_embedding_dim / 2 = {}, got {}", half, cos_t.describe());
  const std::vector<double> cs = to_doubles(cos_t), sn = to_doubles(sin_t);
  std::vector<int64_t> pos;
  if (ctx.has_input(3)) {
    const Tensor& p = ctx.input(3);
    ctx.check(p.numel() == B * S && cos_t.rank() == 2,
              "position_ids must be [{}, {}] with a 2-D "
              "cache, got {} and {}",
              B, S, p.describe(), cos_t.describe());
    pos = p.to_int64_vector();
    for (int64_t v : pos) {
      ctx.check(v >= 0 && v < cos_t.dim(0), "position id {} is outside the cache of {}", v,
                cos_t.dim(0));
    }
  } else {
    ctx.check(cos_t.rank() == 3 && cos_t.dim(0) == B && cos_t.dim(1) == S,
              "without position_ids the cache must be [{}, {}, {}], got {}", B, S, half,
              cos_t.describe());
  }
  const std::vector<double> in = to_doubles(x);
  std::vector<double> out = in;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t s = 0; s < S; ++s) {
      const int64_t row = pos.empty() ? b * S + s : pos[static_cast<size_t>(b * S + s)];
      for (int64_t h = 0; h < H; ++h) {
        const int64_t base = packed ? ((b * S + s) * H + h) * D : ((b * H + h) * S + s) * D;
        for (int64_t i = 0; i < half; ++i) {
          const int64_t i1 = interleaved ? 2 * i : i, i2 = interleaved ? 2 * i + 1 : i + half;
          const double x1 = in[static_cast<size_t>(base + i1)],
                       x2 = in[static_cast<size_t>(base + i2)];
          const double c = cs[static_cast<size_t>(row * half + i)],
                       sv = sn[static_cast<size_t>(row * half + i)];
          out[static_cast<size_t>(base + i1)] = c * x1 - sv * x2;
          out[static_cast<size_t>(base + i2)] = sv * x1 + c * x2;
        }
      }
    }
  }
  ctx.set_output(0, from_doubles(dtype, x.dims(), out, "RotaryEmbedding"));
}

void infer_same(InferContext& ctx) {
  if (const TypeInfo* t = ctx.input_type(0)) ctx.set_output_type(0, *t);
}

KILN_REGISTER_OP({.op_type = "Attention", .kernel = attention, .infer = infer_attention});
KILN_REGISTER_OP({.op_type = "RotaryEmbedding", .kernel = rotary_embedding, .infer = infer_same});

}  // namespace
}  // namespace kiln::ops
