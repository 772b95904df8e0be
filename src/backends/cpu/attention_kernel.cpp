// ai.kiln ScaledDotProductAttention on the CPU, float32: softmax(Q K^T * scale + mask) V as two
// batched oneDNN matmuls around its softmax. Q K^T reads K transposed through strides, the
// scale is the first matmul's output scale and the additive mask a broadcast binary post-op
// (a [N, 1, 1, Sk] padding mask against [N, H, Sq, Sk] scores included); the scores live in a
// buffer of the kernel, normalized in place. Q, K and V must have the same batch dims
// (multi-head attention as the fusion writes it); other broadcasts stay on the reference.
#include <algorithm>
#include <cmath>
#include <limits>

#include "backends/cpu/cpu_backend.hpp"
#include "backends/cpu/onednn_common.hpp"
#include "backends/cpu/work_threads.hpp"
#include "backends/kernel_table.hpp"
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

std::string check_attention(const ir::Node& node) {
  // bsnh's [.., S, N, H] operands are the GPU's (fold_attention_transposes); the reference
  // kernel takes them elsewhere.
  if (const ir::Attribute* a = node.attribute("bsnh")) {
    const int64_t* bsnh = std::get_if<int64_t>(&a->storage());
    if (!bsnh || *bsnh != 0) return "bsnh ([.., S, N, H]) operands";
  }
  for (size_t i = 0; i < 3; ++i) {
    if (std::string why = check_f32_input(node, i, 2, 6); !why.empty()) return why;
  }
  if (std::string why = check_f32_input(node, 3, 0, 6, true); !why.empty()) return why;
  const Shape& q = *node.input(0)->type().shape;
  if (!same_batch(q, *node.input(1)->type().shape) ||
      !same_batch(q, *node.input(2)->type().shape)) {
    return "Q, K and V batch dims differ or are unnamed";
  }
  if (node.input(3) && node.input(3)->type().shape->rank() > q.rank()) {
    return "mask of higher rank than Q";
  }
  return check_f32_outputs(node);
}

class AttentionKernel final : public Kernel {
 public:
  explicit AttentionKernel(const ir::Node& node) : node_(node) {}
  std::string_view name() const override { return "cpu.attention"; }

  void run(std::span<const DeviceTensor> in, KernelOutputs& out, Stream& stream) override {
    const DeviceTensor& q = in[0];
    const DeviceTensor& k = in[1];
    const DeviceTensor& v = in[2];
    const DeviceTensor* mask = in.size() > 3 && in[3].defined() ? &in[3] : nullptr;
    const size_t rank = q.dims.size();
    ops::AttrReader attrs(node_);
    attrs.check(k.dims.size() == rank && v.dims.size() == rank &&
                    std::equal(q.dims.begin(), q.dims.end() - 2, k.dims.begin()) &&
                    std::equal(q.dims.begin(), q.dims.end() - 2, v.dims.begin()),
                "Q {}, K {} and V {} must share their batch dims", dims_to_string(q.dims),
                dims_to_string(k.dims), dims_to_string(v.dims));
    const int64_t sq = q.dims[rank - 2], d = q.dims[rank - 1];
    const int64_t sk = k.dims[rank - 2], dv = v.dims[rank - 1];
    attrs.check(k.dims[rank - 1] == d && v.dims[rank - 2] == sk, "K {} and V {} do not fit Q {}",
                dims_to_string(k.dims), dims_to_string(v.dims), dims_to_string(q.dims));
    std::vector<int64_t> mask_dims;
    if (mask) {
      attrs.check(mask->dims.size() <= rank, "mask {} has a higher rank than Q {}",
                  dims_to_string(mask->dims), dims_to_string(q.dims));
      mask_dims.assign(rank - mask->dims.size(), 1);
      mask_dims.insert(mask_dims.end(), mask->dims.begin(), mask->dims.end());
      for (size_t i = 0; i < rank; ++i) {
        const int64_t full = i + 2 < rank ? q.dims[i] : (i + 2 == rank ? sq : sk);
        attrs.check(mask_dims[i] == 1 || mask_dims[i] == full,
                    "mask {} does not broadcast to the scores of Q {} and K {}",
                    dims_to_string(mask->dims), dims_to_string(q.dims), dims_to_string(k.dims));
      }
    }
    std::vector<int64_t> out_dims(q.dims.begin(), q.dims.end() - 1);
    out_dims.push_back(dv);
    DeviceTensor y = out.allocate(0, DataType::Float32, out_dims);
    if (y.numel() == 0) return;
    if (sk == 0) {
      // A softmax over no keys is 0 / 0, as the reference computes it (a sum of no terms, 0,
      // when NaN probabilities count as 0).
      auto* py = static_cast<float*>(y.data);
      std::fill(py, py + y.numel(),
                zero_nan_probs_ ? 0.f : std::numeric_limits<float>::quiet_NaN());
      return;
    }
    KILN_CHECK(d > 0, ErrorCode::Unsupported,
               "node {}: attention with a head size of 0 (Q {}) is not supported on the CPU "
               "kernel",
               node_.label(), dims_to_string(q.dims));
    const Plan& p = plan(q.dims, k.dims, v.dims, mask_dims);
    ThreadLimit limit(p.threads);
    dnnl::stream& s = dnnl_stream(stream);
    memory scores(p.scores_md, engine(), scores_.data());
    std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, wrap(p.qk.src_desc(), q.data)},
                                            {DNNL_ARG_WEIGHTS, wrap(p.qk.weights_desc(), k.data)},
                                            {DNNL_ARG_DST, scores}};
    if (mask) {
      args[DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1] = wrap(p.mask_md, mask->data);
    }
    args[DNNL_ARG_SCRATCHPAD] = p.qk_scratch;
    p.qk_prim.execute(s, args);
    p.softmax.execute(s, {{DNNL_ARG_SRC, scores}, {DNNL_ARG_DST, scores}});
    if (zero_nan_probs_) {
      s.wait();
      for (float& x : scores_) x = std::isnan(x) ? 0.f : x;
    }
    p.pv_prim.execute(s, {{DNNL_ARG_SRC, scores},
                          {DNNL_ARG_WEIGHTS, wrap(p.pv.weights_desc(), v.data)},
                          {DNNL_ARG_DST, wrap(p.pv.dst_desc(), y.data)},
                          {DNNL_ARG_SCRATCHPAD, p.pv_scratch}});
  }

 private:
  struct Plan {
    std::vector<int64_t> q, k, v, mask;
    int threads = 1;  // threads_for_work of both products, held when creating and running them
    memory::desc scores_md, mask_md;
    dnnl::matmul::primitive_desc qk, pv;
    dnnl::matmul qk_prim, pv_prim;
    dnnl::softmax_forward softmax;
    // The products' scratchpads, owned here (scratchpad_mode::user): oneDNN 2.6's per-thread
    // library scratchpad breaks a primitive run on another thread than its first.
    memory qk_scratch, pv_scratch;
  };

  const Plan& plan(const std::vector<int64_t>& q, const std::vector<int64_t>& k,
                   const std::vector<int64_t>& v, const std::vector<int64_t>& mask) {
    if (plan_ && plan_->q == q && plan_->k == k && plan_->v == v && plan_->mask == mask) {
      return *plan_;
    }
    const size_t rank = q.size();
    const int64_t d = q[rank - 1], sk = k[rank - 2];
    std::vector<int64_t> kt = k, scores = q;
    std::swap(kt[rank - 2], kt[rank - 1]);
    scores.back() = sk;
    // K^T as a view of K: its last two dims swapped in the strides.
    memory::dims kt_strides = ops::row_major_strides(k);
    std::swap(kt_strides[rank - 2], kt_strides[rank - 1]);
    const memory::desc kt_md(memory::dims(kt), memory::data_type::f32, kt_strides);
    auto p = std::make_unique<Plan>();
    p->q = q;
    p->k = k;
    p->v = v;
    p->mask = mask;
    p->scores_md = plain_desc(scores);
    ops::AttrReader attrs(node_);
    const float scale =
        attrs.attr_float("scale", static_cast<float>(1.0 / std::sqrt(static_cast<double>(d))));
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
    qk_attr.set_output_scales(0, {scale});
    if (!mask.empty()) {
      p->mask_md = plain_desc(mask);
      dnnl::post_ops post;
      post.append_binary(dnnl::algorithm::binary_add, p->mask_md);
      qk_attr.set_post_ops(post);
    }
    try {
      p->qk = dnnl::matmul::primitive_desc(dnnl::matmul::desc(plain_desc(q), kt_md, p->scores_md),
                                           qk_attr, engine());
      p->qk_prim = dnnl::matmul(p->qk);
      p->qk_scratch = memory(p->qk.scratchpad_desc(), engine());
      p->softmax = dnnl::softmax_forward(dnnl::softmax_forward::primitive_desc(
          dnnl::softmax_forward::desc(dnnl::prop_kind::forward_inference, p->scores_md,
                                      static_cast<int>(rank - 1)),
          engine()));
      std::vector<int64_t> o = q;
      o.back() = v[rank - 1];
      p->pv = dnnl::matmul::primitive_desc(
          dnnl::matmul::desc(p->scores_md, plain_desc(v), plain_desc(o)), pv_attr, engine());
      p->pv_prim = dnnl::matmul(p->pv);
      p->pv_scratch = memory(p->pv.scratchpad_desc(), engine());
    } catch (const dnnl::error& err) {
      fail(ErrorCode::Unsupported, "node {}: oneDNN has no attention for Q {} K {} V {}: {}",
           node_.label(), dims_to_string(q), dims_to_string(k), dims_to_string(v), err.what());
    }
    note_implementation(node_, p->qk.impl_info_str());
    scores_.assign(static_cast<size_t>(shape_numel(scores)), 0.f);
    plan_ = std::move(p);
    return *plan_;
  }

  const ir::Node& node_;
  const bool zero_nan_probs_ = ops::AttrReader(node_).attr_int("zero_nan_probs", 0) != 0;
  std::unique_ptr<Plan> plan_;
  std::vector<float> scores_;
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
