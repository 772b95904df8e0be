#include "backends/gpu/runtime/attention_layout.hpp"

#include "backends/gpu/runtime/strided_shape.hpp"
#include "core/error.hpp"
#include "core/shape.hpp"

namespace kiln::backends::gpu {
namespace {

// One operand as batch entries of [rows, cols] matrices.
struct Matrices {
  std::vector<int64_t> batch;    // batch dims
  std::vector<int64_t> strides;  // element strides of the batch dims
  int64_t rows = 0, cols = 0, row_stride = 0;
};

Matrices matrices_of(std::vector<int64_t> dims, bool bsnh) {
  while (dims.size() < 2) dims.insert(dims.begin(), 1);
  const std::vector<int64_t> st = row_major_strides(dims);
  const size_t r = dims.size();
  Matrices m;
  m.cols = dims[r - 1];
  if (!bsnh) {
    m.batch.assign(dims.begin(), dims.end() - 2);
    m.strides.assign(st.begin(), st.end() - 2);
    m.rows = dims[r - 2];
    m.row_stride = st[r - 2];
  } else {
    // [.., S, N, H]: batch [.., N], rows S.
    m.batch.assign(dims.begin(), dims.end() - 3);
    m.strides.assign(st.begin(), st.end() - 3);
    m.batch.push_back(dims[r - 2]);
    m.strides.push_back(st[r - 2]);
    m.rows = dims[r - 3];
    m.row_stride = st[r - 3];
  }
  return m;
}

// The operand's element strides over the broadcast batch (0 where it is broadcast).
std::vector<int64_t> strides_over(const Matrices& m, const std::vector<int64_t>& batch) {
  std::vector<int64_t> out(batch.size(), 0);
  const size_t lead = batch.size() - m.batch.size();
  for (size_t i = 0; i < m.batch.size(); ++i) {
    if (m.batch[i] != 1) out[lead + i] = m.strides[i];
  }
  return out;
}

}  // namespace

std::vector<int64_t> plan_attention(const std::vector<int64_t>& q, const std::vector<int64_t>& k,
                                    const std::vector<int64_t>& v, const std::vector<int64_t>* mask,
                                    bool bsnh, kernels::AttentionArgs& a, const char* what) {
  const size_t min_rank = bsnh ? 3 : 2;
  KILN_CHECK_ARG(q.size() >= min_rank && k.size() >= min_rank && v.size() >= min_rank,
                 "{}: Q, K and V must have rank >= {}, got {}, {} and {}", what, min_rank,
                 dims_to_string(q), dims_to_string(k), dims_to_string(v));
  const Matrices mq = matrices_of(q, bsnh), mk = matrices_of(k, bsnh), mv = matrices_of(v, bsnh);
  a.sq = mq.rows;
  a.d = mq.cols;
  a.sk = mk.rows;
  a.dv = mv.cols;
  KILN_CHECK_ARG(mk.cols == a.d && mv.rows == a.sk, "{}: Q {}, K {} and V {} do not fit{}", what,
                 dims_to_string(q), dims_to_string(k), dims_to_string(v),
                 bsnh ? " (bsnh: [.., S, N, H])" : "");
  a.q_row = mq.row_stride;
  a.k_row = mk.row_stride;
  a.v_row = mv.row_stride;
  std::vector<std::vector<int64_t>> batches = {mq.batch, mk.batch, mv.batch};
  Matrices mm;
  if (mask) {
    mm = matrices_of(*mask, false);
    a.msq = mm.rows;
    a.msk = mm.cols;
    KILN_CHECK_ARG((a.msq == 1 || a.msq == a.sq) && (a.msk == 1 || a.msk == a.sk),
                   "{}: mask {} does not broadcast to [{}, {}]", what, dims_to_string(*mask), a.sq,
                   a.sk);
    batches.push_back(mm.batch);
  } else {
    a.msq = a.msk = 1;
  }
  std::vector<int64_t> batch;
  KILN_CHECK_ARG(broadcast_dims(batches, batch), "{}: batch dims of Q {}, K {}, V {} differ", what,
                 dims_to_string(q), dims_to_string(k), dims_to_string(v));
  std::vector<std::vector<int64_t>> strides = {strides_over(mq, batch), strides_over(mk, batch),
                                               strides_over(mv, batch)};
  strides.push_back(mask ? strides_over(mm, batch) : std::vector<int64_t>(batch.size(), 0));
  a.batch = make_strided_shape(batch, strides, what);
  a.batches = shape_numel(batch);
  std::vector<int64_t> out(batch.begin(), batch.end());
  if (!bsnh) {
    out.push_back(a.sq);
    out.push_back(a.dv);
    a.out_heads = 1;
    a.o_row = a.dv;
  } else {
    // [.., N] batch: the output is [.., S, N, Dv].
    a.out_heads = batch.back();
    out.back() = a.sq;
    out.push_back(a.out_heads);
    out.push_back(a.dv);
    a.o_row = a.out_heads * a.dv;
  }
  return out;
}

}  // namespace kiln::backends::gpu
