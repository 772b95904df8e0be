// ai.kiln ScaledDotProductAttention on the CPU, in float32, or in bfloat16 for a `--bf16` engine
// on a CPU with bfloat16 instructions: softmax(Q K^T * scale + mask) V as two batched oneDNN
// matmuls around Kiln's own softmax loop (attention_softmax.hpp), which applies the scale and the
// additive mask as it reads each row of scores. Q K^T reads K transposed through strides and
// writes float32 scores into a buffer of the kernel; the softmax normalizes them in place, and in
// bfloat16 rounds them into a second buffer that P V reads (both products on oneDNN's bfloat16
// kernels with float32 accumulation: about 1.8x faster than float32 on BERT-base's shapes). The
// mask, of Q's type, broadcasts to the scores [.., Sq, Sk] in any dim (a [N, 1, 1, Sk]
// padding mask included). Q, K and V must have the same batch dims (multi-head attention as the
// fusion writes it); other broadcasts stay on the reference. With bsnh (passes/
// fold_attention_transposes) Q, K, V and the output are [.., S, N, H] in memory: the products
// read and write them through strides (oneDNN's brgemm matmul takes them at 2-5 % over dense
// operands), so the head split and merge Transposes around the attention do not run.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "backends/cpu/attention_softmax.hpp"
#include "backends/cpu/cpu_backend.hpp"
#include "backends/cpu/onednn_common.hpp"
#include "backends/cpu/work_threads.hpp"
#include "backends/kernel_table.hpp"
#include "core/half_convert.hpp"
#include "ops/kernel_context.hpp"
#include "ops/op_utils.hpp"

namespace kiln::backends::cpu {
namespace {

using dnnl::memory;

// The same batch dims (all but the last two), each a number or a named symbol.
bool same_batch(const Shape& a, const Shape& b) {
  if (a.rank() != b.rank() || a.rank() < 2) return false;
  const Shape batch(std::vector<Dim>(a.dims().begin(), a.dims().end() - 2));
  return known_dims(batch) &&
         std::equal(batch.dims().begin(), batch.dims().end(), b.dims().begin());
}

// bsnh's [.., S, N, H] <-> [.., N, S, H]: axes -3 and -2 swapped.
template <typename Dims>
Dims swap_seq_heads(Dims d) {
  std::swap(d[d.size() - 3], d[d.size() - 2]);
  return d;
}

bool bsnh_of(const ir::Node& node) {
  const ir::Attribute* a = node.attribute("bsnh");
  const int64_t* v = a ? std::get_if<int64_t>(&a->storage()) : nullptr;
  return v && *v != 0;
}

std::string check_attention(const ir::Node& node) {
  if (const ir::Attribute* a = node.attribute("bsnh")) {
    const int64_t* bsnh = std::get_if<int64_t>(&a->storage());
    if (!bsnh || (*bsnh != 0 && *bsnh != 1)) return "bsnh is not 0 or 1";
  }
  const bool bsnh = bsnh_of(node);
  const std::optional<DataType> type = compute_type(node);
  if (!type) return "Q is not float32, or bfloat16 on a CPU with bfloat16 instructions";
  for (size_t i = 0; i < 3; ++i) {
    if (std::string why = check_float_input(node, i, *type, bsnh ? 3 : 2, 6); !why.empty()) {
      return why;
    }
  }
  if (std::string why = check_float_input(node, 3, *type, 0, 6, true); !why.empty()) return why;
  // The products' operands: [.., N, S, H] (bsnh's swapped into that form).
  auto logical = [&](size_t i) {
    const Shape& s = *node.input(i)->type().shape;
    return bsnh ? Shape(swap_seq_heads(s.dims())) : s;
  };
  const Shape q = logical(0);
  if (!same_batch(q, logical(1)) || !same_batch(q, logical(2))) {
    return "Q, K and V batch dims differ or are unnamed";
  }
  if (node.input(3) && node.input(3)->type().shape->rank() > q.rank()) {
    return "mask of higher rank than Q";
  }
  return check_float_outputs(node, *type);
}

class AttentionKernel final : public Kernel {
 public:
  explicit AttentionKernel(const ir::Node& node) : node_(node) {}
  std::string_view name() const override { return "cpu.attention"; }

  void run(std::span<const DeviceTensor> in, KernelOutputs& out, Stream& stream) override {
    const DeviceTensor& q_in = in[0];
    const DeviceTensor& k_in = in[1];
    const DeviceTensor& v_in = in[2];
    const DeviceTensor* mask = in.size() > 3 && in[3].defined() ? &in[3] : nullptr;
    ops::AttrReader attrs(node_);
    attrs.check(k_in.dims.size() == q_in.dims.size() && v_in.dims.size() == q_in.dims.size() &&
                    q_in.dims.size() >= (bsnh_ ? 3 : 2),
                "Q {}, K {} and V {} must have one rank{}", dims_to_string(q_in.dims),
                dims_to_string(k_in.dims), dims_to_string(v_in.dims), bsnh_ ? " of 3 or more" : "");
    // A 3-D bsnh attention ([S, B*N, H]: torch's nn.MultiheadAttention) runs as 4-D with a batch
    // of 1: oneDNN 2.6 takes 3-D operands of these strides only on its slow gemm matmul.
    const bool lift = bsnh_ && q_in.dims.size() == 3;
    auto lifted = [&](std::vector<int64_t> d) {
      if (lift) d.insert(d.begin(), 1);
      return d;
    };
    const size_t rank = q_in.dims.size() + (lift ? 1 : 0);
    // The products' [.., N, S, H] dims (bsnh's read through strides).
    auto logical = [&](const std::vector<int64_t>& d) { return bsnh_ ? swap_seq_heads(d) : d; };
    const std::vector<int64_t> qd = logical(lifted(q_in.dims)), kd = logical(lifted(k_in.dims)),
                               vd = logical(lifted(v_in.dims));
    attrs.check(std::equal(qd.begin(), qd.end() - 2, kd.begin()) &&
                    std::equal(qd.begin(), qd.end() - 2, vd.begin()),
                "Q {}, K {} and V {} must share their batch dims", dims_to_string(q_in.dims),
                dims_to_string(k_in.dims), dims_to_string(v_in.dims));
    const int64_t sq = qd[rank - 2], d = qd[rank - 1];
    const int64_t sk = kd[rank - 2], dv = vd[rank - 1];
    attrs.check(kd[rank - 1] == d && vd[rank - 2] == sk, "K {} and V {} do not fit Q {}",
                dims_to_string(k_in.dims), dims_to_string(v_in.dims), dims_to_string(q_in.dims));
    const DataType type = q_in.dtype;
    std::vector<int64_t> mask_dims;
    if (mask) {
      attrs.check(mask->dims.size() <= rank, "mask {} has a higher rank than Q {}",
                  dims_to_string(mask->dims), dims_to_string(qd));
      mask_dims.assign(rank - mask->dims.size(), 1);
      mask_dims.insert(mask_dims.end(), mask->dims.begin(), mask->dims.end());
      for (size_t i = 0; i < rank; ++i) {
        const int64_t full = i + 2 < rank ? qd[i] : (i + 2 == rank ? sq : sk);
        attrs.check(mask_dims[i] == 1 || mask_dims[i] == full,
                    "mask {} does not broadcast to the scores of Q {} and K {}",
                    dims_to_string(mask->dims), dims_to_string(qd), dims_to_string(kd));
      }
    }
    std::vector<int64_t> out_dims(qd.begin(), qd.end() - 1);
    out_dims.push_back(dv);
    std::vector<int64_t> y_dims = logical(out_dims);
    if (lift) y_dims.erase(y_dims.begin());
    DeviceTensor y = out.allocate(0, type, y_dims);
    if (y.numel() == 0) return;
    if (sk == 0) {
      // A softmax over no keys is 0 / 0, as the reference computes it (a sum of no terms, 0,
      // when NaN probabilities count as 0).
      const float fill = zero_nan_probs_ ? 0.f : std::numeric_limits<float>::quiet_NaN();
      if (type == DataType::BFloat16) {
        auto* py = static_cast<uint16_t*>(y.data);
        std::fill(py, py + y.numel(), float_to_bfloat16_bits(fill));
      } else {
        auto* py = static_cast<float*>(y.data);
        std::fill(py, py + y.numel(), fill);
      }
      return;
    }
    KILN_CHECK(d > 0, ErrorCode::Unsupported,
               "node {}: attention with a head size of 0 (Q {}) is not supported on the CPU "
               "kernel",
               node_.label(), dims_to_string(qd));
    const Plan& p = plan(type, qd, kd, vd, mask_dims);
    ThreadLimit limit(p.threads);
    dnnl::stream& s = dnnl_stream(stream);
    memory scores(p.scores_md, engine(), scores_.data());
    p.qk_prim.execute(s, {{DNNL_ARG_SRC, wrap(p.qk.src_desc(), q_in.data)},
                          {DNNL_ARG_WEIGHTS, wrap(p.qk.weights_desc(), k_in.data)},
                          {DNNL_ARG_DST, scores},
                          {DNNL_ARG_SCRATCHPAD, p.qk_scratch}});
    s.wait();
    softmax(p, mask);
    const void* probs = type == DataType::BFloat16 ? static_cast<const void*>(probs_.data())
                                                   : static_cast<const void*>(scores_.data());
    p.pv_prim.execute(s, {{DNNL_ARG_SRC, wrap(p.pv.src_desc(), probs)},
                          {DNNL_ARG_WEIGHTS, wrap(p.pv.weights_desc(), v_in.data)},
                          {DNNL_ARG_DST, wrap(p.pv.dst_desc(), y.data)},
                          {DNNL_ARG_SCRATCHPAD, p.pv_scratch}});
  }

 private:
  struct Plan {
    DataType type = DataType::Float32;
    std::vector<int64_t> q, k, v, mask;
    int threads = 1;    // threads_for_work of both products, held when creating and running them
    float scale = 1.f;  // of the scores, applied by the softmax
    int64_t rows = 0, row_len = 0, rows_per_batch = 0;
    // Where each batch entry's mask starts, the step between its rows (0 when broadcast) and
    // within a row (0 when one value serves the row).
    std::vector<int64_t> mask_batch_offset;
    int64_t mask_row_step = 0, mask_step = 0;
    memory::desc scores_md;
    dnnl::matmul::primitive_desc qk, pv;
    dnnl::matmul qk_prim, pv_prim;
    // The products' scratchpads, owned here (scratchpad_mode::user): oneDNN 2.6's per-thread
    // library scratchpad breaks a primitive run on another thread than its first.
    memory qk_scratch, pv_scratch;
  };

  // Scale, mask and normalize every row of scores_ (rows over the plan's threads); bfloat16
  // plans round the probabilities into probs_ as each row is done, while it is in the cache.
  void softmax(const Plan& p, const DeviceTensor* mask) {
    const float* mask_data = nullptr;
    if (mask) {
      if (mask->dtype == DataType::BFloat16) {  // Q's type
        mask_f32_.resize(static_cast<size_t>(mask->numel()));
        bfloat16s_to_floats(static_cast<const uint16_t*>(mask->data), mask_f32_.data(),
                            mask_f32_.size());
        mask_data = mask_f32_.data();
      } else {
        mask_data = static_cast<const float*>(mask->data);
      }
    }
    const bool bf16 = p.type == DataType::BFloat16;
#pragma omp parallel for schedule(static) if (p.threads > 1)
    for (int64_t r = 0; r < p.rows; ++r) {
      float* row = scores_.data() + r * p.row_len;
      const float* mask_row =
          mask_data ? mask_data + p.mask_batch_offset[static_cast<size_t>(r / p.rows_per_batch)] +
                          (r % p.rows_per_batch) * p.mask_row_step
                    : nullptr;
      uint16_t* out = bf16 ? probs_.data() + r * p.row_len : nullptr;
      scaled_masked_softmax_row(row, p.row_len, p.scale, mask_row, p.mask_step, out);
      // A row is all NaN or has none (the sum divides every term): its first term tells.
      if (zero_nan_probs_ && std::isnan(bf16 ? bfloat16_bits_to_float(out[0]) : row[0])) {
        if (bf16) {
          std::fill(out, out + p.row_len, uint16_t{0});
        } else {
          std::fill(row, row + p.row_len, 0.f);
        }
      }
    }
  }

  const Plan& plan(DataType type, const std::vector<int64_t>& q, const std::vector<int64_t>& k,
                   const std::vector<int64_t>& v, const std::vector<int64_t>& mask) {
    if (plan_ && plan_->type == type && plan_->q == q && plan_->k == k && plan_->v == v &&
        plan_->mask == mask) {
      return *plan_;
    }
    const size_t rank = q.size();
    const int64_t d = q[rank - 1], sk = k[rank - 2];
    std::vector<int64_t> kt = k, scores = q;
    std::swap(kt[rank - 2], kt[rank - 1]);
    scores.back() = sk;
    const memory::data_type dt = dnnl_type(type);
    // An operand of these [.., N, S, H] dims as it lies in memory: row-major, or for bsnh
    // row-major [.., S, N, H] with the two axes' strides swapped.
    auto strides_of = [&](const std::vector<int64_t>& dims) {
      if (!bsnh_) return memory::dims(ops::row_major_strides(dims));
      return swap_seq_heads(memory::dims(ops::row_major_strides(swap_seq_heads(dims))));
    };
    // K^T as a view of K: its last two dims swapped in the strides.
    memory::dims kt_strides = strides_of(k);
    std::swap(kt_strides[rank - 2], kt_strides[rank - 1]);
    const memory::desc kt_md(memory::dims(kt), dt, kt_strides);
    auto p = std::make_unique<Plan>();
    p->type = type;
    p->q = q;
    p->k = k;
    p->v = v;
    p->mask = mask;
    p->scores_md = plain_desc(scores);
    p->scale = ops::AttrReader(node_).attr_float(
        "scale", static_cast<float>(1.0 / std::sqrt(static_cast<double>(d))));
    p->row_len = sk;
    p->rows_per_batch = q[rank - 2];
    p->rows = shape_numel(scores) / sk;
    if (!mask.empty()) {
      // Row-major strides of the mask, 0 along its broadcast dims.
      std::vector<int64_t> strides = ops::row_major_strides(mask);
      for (size_t i = 0; i < rank; ++i) {
        if (mask[i] == 1) strides[i] = 0;
      }
      p->mask_row_step = strides[rank - 2];
      p->mask_step = strides[rank - 1];
      const int64_t batches = p->rows / p->rows_per_batch;
      p->mask_batch_offset.resize(static_cast<size_t>(batches));
      for (int64_t b = 0; b < batches; ++b) {
        int64_t rest = b, offset = 0;
        for (size_t i = rank - 2; i-- > 0;) {
          offset += (rest % q[i]) * strides[i];
          rest /= q[i];
        }
        p->mask_batch_offset[static_cast<size_t>(b)] = offset;
      }
    }
    // Q K^T and P V: 2 (d + dv) multiply-adds per score, plus the softmax's ten operations.
    const double score_count = static_cast<double>(shape_numel(scores));
    const double dv = static_cast<double>(v[rank - 1]);
    p->threads = threads_for_work(
        score_count * (2.0 * (static_cast<double>(d) + dv) + 10.0),
        4.0 * (static_cast<double>(shape_numel(q) + shape_numel(k) + shape_numel(v)) +
               2.0 * score_count));
    ThreadLimit limit(p->threads);
    dnnl::primitive_attr qk_attr, pv_attr;
    qk_attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    pv_attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    try {
      p->qk = dnnl::matmul::primitive_desc(
          dnnl::matmul::desc(memory::desc(memory::dims(q), dt, strides_of(q)), kt_md, p->scores_md),
          qk_attr, engine());
      p->qk_prim = dnnl::matmul(p->qk);
      p->qk_scratch = memory(p->qk.scratchpad_desc(), engine());
      std::vector<int64_t> o = q;
      o.back() = v[rank - 1];
      p->pv = dnnl::matmul::primitive_desc(
          dnnl::matmul::desc(plain_desc(scores, dt),
                             memory::desc(memory::dims(v), dt, strides_of(v)),
                             memory::desc(memory::dims(o), dt, strides_of(o))),
          pv_attr, engine());
      p->pv_prim = dnnl::matmul(p->pv);
      p->pv_scratch = memory(p->pv.scratchpad_desc(), engine());
    } catch (const dnnl::error& err) {
      fail(ErrorCode::Unsupported, "node {}: oneDNN has no attention for Q {} K {} V {}: {}",
           node_.label(), dims_to_string(q), dims_to_string(k), dims_to_string(v), err.what());
    }
    note_implementation(node_, p->qk.impl_info_str());
    note_implementation(node_, p->pv.impl_info_str());
    scores_.assign(static_cast<size_t>(shape_numel(scores)), 0.f);
    probs_.assign(type == DataType::BFloat16 ? scores_.size() : 0, 0);
    plan_ = std::move(p);
    return *plan_;
  }

  const ir::Node& node_;
  const bool bsnh_ = bsnh_of(node_);  // Q, K, V and the output are [.., S, N, H]
  const bool zero_nan_probs_ = ops::AttrReader(node_).attr_int("zero_nan_probs", 0) != 0;
  std::unique_ptr<Plan> plan_;
  std::vector<float> scores_;
  std::vector<uint16_t> probs_;  // bfloat16 probabilities, for P V of bfloat16 plans
  std::vector<float> mask_f32_;  // a bfloat16 mask widened
};

std::unique_ptr<Kernel> create_attention(const ir::Node& node) {
  return std::make_unique<AttentionKernel>(node);
}

}  // namespace

KILN_REGISTER_KERNEL({.backend = "cpu",
                      .domain = "ai.kiln",
                      .op_type = "ScaledDotProductAttention",
                      .name = "cpu.attention",
                      .check = check_attention,
                      .create = create_attention});

}  // namespace kiln::backends::cpu
