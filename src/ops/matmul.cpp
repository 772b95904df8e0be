// MatMul (numpy semantics: 1-D promotion, broadcast batch dims), Gemm, Einsum and Det.
// Float products accumulate in double and round once; integer products wrap like hardware.
#include <algorithm>
#include <array>
#include <cmath>
#include <map>

#include "ops/infer_utils.hpp"
#include "ops/op_flops.hpp"
#include "ops/op_utils.hpp"
#include "ops/reduce_utils.hpp"
#include "ops/registry.hpp"

namespace kiln::ops {
namespace {

using namespace reduction;  // NOLINT: this family's own helpers

// Exact wrap-around accumulator for integers, double for floats.
// (Unsigned 64-bit arithmetic gives the low bits of the signed product too.)
template <typename T>
using DotAcc = std::conditional_t<std::is_integral_v<T>, uint64_t, double>;

template <typename T>
DotAcc<T> acc_of(const T& v) {
  if constexpr (std::is_integral_v<T>) {
    return static_cast<uint64_t>(static_cast<int64_t>(v));
  } else {
    return to_double(v);
  }
}

template <typename T>
T acc_to(DotAcc<T> a) {
  if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(a);
  } else {
    return from_double<T>(a);
  }
}

// acc[i*n+j] = sum over p of A(i,p) * B(p,j), where A(i,p) = a[i*as0 + p*as1] and
// B(p,j) = b[p*bs0 + j*bs1]. The (i, p, j) loop order keeps the inner loop streaming over a row;
// every sum still runs p = 0..k-1 in order.
template <typename T>
void matmul_acc(const T* a, int64_t as0, int64_t as1, const T* b, int64_t bs0, int64_t bs1,
                int64_t m, int64_t k, int64_t n, DotAcc<T>* acc) {
  for (int64_t i = 0; i < m; ++i) {
    DotAcc<T>* row = acc + i * n;
    std::fill_n(row, n, DotAcc<T>{});
    for (int64_t p = 0; p < k; ++p) {
      const DotAcc<T> av = acc_of(a[i * as0 + p * as1]);
      const T* brow = b + p * bs0;
      for (int64_t j = 0; j < n; ++j) row[j] += av * acc_of(brow[j * bs1]);
    }
  }
}

void matmul(KernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  ctx.check(a.dtype() == b.dtype(), "operand types differ: {} vs {}", dtype_name(a.dtype()),
            dtype_name(b.dtype()));
  ctx.check(a.rank() >= 1 && b.rank() >= 1, "operands must have rank >= 1, got {} and {}",
            a.describe(), b.describe());
  std::vector<int64_t> ad = a.dims(), bd = b.dims();
  const bool a_vec = ad.size() == 1, b_vec = bd.size() == 1;
  if (a_vec) ad.insert(ad.begin(), 1);
  if (b_vec) bd.push_back(1);
  const int64_t m = ad[ad.size() - 2], k = ad.back(), n = bd.back();
  ctx.check(bd[bd.size() - 2] == k, "inner dimensions differ: {} vs {}", a.describe(),
            b.describe());
  std::vector<int64_t> a_batch(ad.begin(), ad.end() - 2), b_batch(bd.begin(), bd.end() - 2);
  std::vector<int64_t> batch = broadcast_dims(ctx, {a_batch, b_batch});
  std::vector<int64_t> out_dims = batch;
  if (!a_vec) out_dims.push_back(m);
  if (!b_vec) out_dims.push_back(n);
  std::array<std::vector<int64_t>, 2> strides = {broadcast_strides(a_batch, batch),
                                                 broadcast_strides(b_batch, batch)};
  ctx.set_output(0, dispatch_dtype<DTypeSet::Numeric>(a.dtype(), "MatMul", [&](auto tag) {
                   using T = typename decltype(tag)::type;
                   Tensor out(a.dtype(), out_dims);
                   const T* pa = a.data<T>();
                   const T* pb = b.data<T>();
                   T* po = out.data<T>();
                   if (out.numel() == 0) return out;
                   std::vector<DotAcc<T>> acc(static_cast<size_t>(m * n));
                   for_each_broadcast<2>(batch, strides,
                                         [&](int64_t bi, const std::array<int64_t, 2>& off) {
                                           const T* ma = pa + off[0] * m * k;
                                           const T* mb = pb + off[1] * k * n;
                                           T* mo = po + bi * m * n;
                                           matmul_acc(ma, k, 1, mb, n, 1, m, k, n, acc.data());
                                           for (int64_t i = 0; i < m * n; ++i)
                                             mo[i] = acc_to<T>(acc[i]);
                                         });
                   return out;
                 }));
}

void infer_matmul(InferContext& ctx) {
  const TypeInfo* a = ctx.input_type(0);
  const TypeInfo* b = ctx.input_type(1);
  if (!a || !a->is_tensor()) return;
  if (!a->shape || !b || !b->is_tensor() || !b->shape || a->shape->rank() == 0 ||
      b->shape->rank() == 0) {
    ctx.set_output_type(0, TypeInfo::tensor(a->dtype));
    return;
  }
  std::vector<Dim> ad = a->shape->dims(), bd = b->shape->dims();
  const bool a_vec = ad.size() == 1, b_vec = bd.size() == 1;
  if (a_vec) ad.insert(ad.begin(), Dim(1));
  if (b_vec) bd.push_back(Dim(1));
  const Dim& ka = ad.back();
  const Dim& kb = bd[bd.size() - 2];
  if (ka.is_static() && kb.is_static() && ka.value() != kb.value()) {
    ctx.fail("inner dimensions differ: {} vs {}", a->shape->to_string(), b->shape->to_string());
  }
  Dim m = ad[ad.size() - 2], n = bd.back();
  ad.resize(ad.size() - 2);
  bd.resize(bd.size() - 2);
  std::optional<Shape> batch = broadcast_shapes(ctx, Shape(ad), Shape(bd));
  std::vector<Dim> out = batch->dims();
  if (!a_vec) out.push_back(m);
  if (!b_vec) out.push_back(n);
  ctx.set_output_type(0, TypeInfo::tensor(a->dtype, Shape(std::move(out))));
}

void gemm(KernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  ctx.check(a.rank() == 2 && b.rank() == 2, "A and B must be 2-D, got {} and {}", a.describe(),
            b.describe());
  ctx.check(a.dtype() == b.dtype(), "operand types differ: {} vs {}", dtype_name(a.dtype()),
            dtype_name(b.dtype()));
  const bool ta = ctx.attr_int("transA", 0) != 0, tb = ctx.attr_int("transB", 0) != 0;
  const double alpha = ctx.attr_float("alpha", 1.0f), beta = ctx.attr_float("beta", 1.0f);
  const int64_t m = ta ? a.dim(1) : a.dim(0), k = ta ? a.dim(0) : a.dim(1);
  const int64_t kb = tb ? b.dim(1) : b.dim(0), n = tb ? b.dim(0) : b.dim(1);
  ctx.check(k == kb, "inner dimensions differ: A {} (transA={}) vs B {} (transB={})", a.describe(),
            ta, b.describe(), tb);
  const bool has_c = ctx.has_input(2);
  std::vector<int64_t> c_strides = {0, 0};
  if (has_c) {
    const Tensor& c = ctx.input(2);
    ctx.check(c.dtype() == a.dtype(), "C has type {}, A has {}", dtype_name(c.dtype()),
              dtype_name(a.dtype()));
    ctx.check(c.rank() <= 2, "C must have rank <= 2, got {}", c.describe());
    std::vector<int64_t> out = broadcast_dims(ctx, {c.dims(), {m, n}});
    ctx.check(out == std::vector<int64_t>{m, n}, "C {} does not broadcast to [{},{}]", c.describe(),
              m, n);
    c_strides = broadcast_strides(c.dims(), {m, n});
  }
  ctx.set_output(
      0, dispatch_dtype<DTypeSet::Numeric>(a.dtype(), "Gemm", [&](auto tag) {
        using T = typename decltype(tag)::type;
        Tensor out(a.dtype(), {m, n});
        const T* pa = a.data<T>();
        const T* pb = b.data<T>();
        const T* pc = has_c ? ctx.input(2).data<T>() : nullptr;
        T* po = out.data<T>();
        const bool exact_int = std::is_integral_v<T> && alpha == 1.0 && (beta == 1.0 || !has_c);
        std::vector<DotAcc<T>> dots(static_cast<size_t>(m * n));
        matmul_acc(pa, ta ? 1 : k, ta ? m : 1, pb, tb ? 1 : n, tb ? k : 1, m, k, n, dots.data());
        for (int64_t i = 0; i < m; ++i) {
          for (int64_t j = 0; j < n; ++j) {
            DotAcc<T> acc = dots[static_cast<size_t>(i * n + j)];
            const T* cv = has_c ? pc + i * c_strides[0] + j * c_strides[1] : nullptr;
            if constexpr (std::is_integral_v<T>) {
              if (exact_int) {
                if (cv) acc += acc_of(*cv);
                po[i * n + j] = acc_to<T>(acc);
                continue;
              }
              double r = alpha * static_cast<double>(static_cast<T>(acc));
              if (cv) r += beta * static_cast<double>(*cv);
              po[i * n + j] = from_double<T>(r);
            } else {
              double r = alpha * acc;
              if (cv) r += beta * to_double(*cv);
              po[i * n + j] = from_double<T>(r);
            }
          }
        }
        return out;
      }));
}

void infer_gemm(InferContext& ctx) {
  const TypeInfo* a = ctx.input_type(0);
  const TypeInfo* b = ctx.input_type(1);
  if (!a || !a->is_tensor()) return;
  std::optional<Shape> shape;
  if (a->shape && a->shape->rank() == 2 && b && b->is_tensor() && b->shape &&
      b->shape->rank() == 2) {
    const bool ta = ctx.attr_int("transA", 0) != 0, tb = ctx.attr_int("transB", 0) != 0;
    shape = Shape({(*a->shape)[ta ? 1 : 0], (*b->shape)[tb ? 0 : 1]});
  }
  ctx.set_output_type(0, TypeInfo::tensor(a->dtype, shape));
}

// ---- Einsum ------------------------------------------------------------------------------
// Labels: 'a'-'z' -> 0-25, 'A'-'Z' -> 26-51, ellipsis dims -> 52 + i.
constexpr int kEllipsisBase = 52;

struct EinsumTerm {
  std::vector<int> labels;  // letters in order; -1 marks where the ellipsis sits
  bool has_ellipsis = false;
};

int label_of(const AttrReader& ctx, char c) {
  if (c >= 'a' && c <= 'z') return c - 'a';
  if (c >= 'A' && c <= 'Z') return 26 + (c - 'A');
  ctx.fail("invalid character '{}' in equation", c);
}

EinsumTerm parse_term(const AttrReader& ctx, const std::string& s) {
  EinsumTerm t;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (c == ' ') continue;
    if (c == '.') {
      ctx.check(i + 2 < s.size() + 0 && s.compare(i, 3, "...") == 0 && !t.has_ellipsis,
                "malformed ellipsis in term '{}'", s);
      t.has_ellipsis = true;
      t.labels.push_back(-1);
      i += 2;
      continue;
    }
    t.labels.push_back(label_of(ctx, c));
  }
  return t;
}

// Which label each input dim carries and which labels the output keeps, from the equation and
// the input ranks alone (so shape inference can use it too).
struct EinsumPlan {
  std::vector<std::vector<int>> dim_labels;  // per input, one label per dim
  std::vector<int> out_labels;
};

EinsumPlan plan_einsum(const AttrReader& ctx, const std::vector<int64_t>& ranks) {
  std::string eq = ctx.attr_string("equation");
  std::string lhs = eq, rhs;
  const bool explicit_out = eq.find("->") != std::string::npos;
  if (explicit_out) {
    lhs = eq.substr(0, eq.find("->"));
    rhs = eq.substr(eq.find("->") + 2);
  }
  std::vector<EinsumTerm> terms;
  size_t start = 0;
  for (;;) {
    size_t comma = lhs.find(',', start);
    terms.push_back(parse_term(ctx, lhs.substr(start, comma - start)));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  const size_t n_in = ranks.size();
  ctx.check(terms.size() == n_in, "equation has {} terms for {} inputs", terms.size(), n_in);
  int64_t ellipsis_rank = 0;
  for (size_t i = 0; i < n_in; ++i) {
    int64_t letters =
        static_cast<int64_t>(terms[i].labels.size()) - (terms[i].has_ellipsis ? 1 : 0);
    ctx.check(terms[i].has_ellipsis ? ranks[i] >= letters : ranks[i] == letters,
              "term {} does not match the rank {} of input {}", i, ranks[i], i);
    if (terms[i].has_ellipsis) ellipsis_rank = std::max(ellipsis_rank, ranks[i] - letters);
  }
  EinsumPlan plan;
  plan.dim_labels.resize(n_in);
  std::map<int, int> count;
  for (size_t i = 0; i < n_in; ++i) {
    // Ellipsis dims are right-aligned across inputs, numpy-style.
    int64_t e =
        ranks[i] - (static_cast<int64_t>(terms[i].labels.size()) - (terms[i].has_ellipsis ? 1 : 0));
    for (int l : terms[i].labels) {
      if (l >= 0) {
        plan.dim_labels[i].push_back(l);
        continue;
      }
      for (int64_t j = 0; j < e; ++j) {
        plan.dim_labels[i].push_back(kEllipsisBase + static_cast<int>(ellipsis_rank - e + j));
      }
    }
    // A label repeated within one term ('ii') counts twice and is summed over, like numpy.
    for (int l : plan.dim_labels[i]) ++count[l];
  }
  std::vector<int>& out = plan.out_labels;
  if (explicit_out) {
    EinsumTerm o = parse_term(ctx, rhs);
    for (int l : o.labels) {
      if (l < 0) {
        for (int64_t j = 0; j < ellipsis_rank; ++j)
          out.push_back(kEllipsisBase + static_cast<int>(j));
        continue;
      }
      ctx.check(count.count(l) > 0, "output subscript does not appear in the inputs");
      ctx.check(std::find(out.begin(), out.end(), l) == out.end(), "output subscript repeated");
      out.push_back(l);
    }
  } else {
    // Implicit output: the ellipsis dims, then labels used once in ASCII order (upper first).
    for (int64_t j = 0; j < ellipsis_rank; ++j) out.push_back(kEllipsisBase + static_cast<int>(j));
    for (int l = 26; l < 52; ++l) {
      if (count.count(l) && count[l] == 1) out.push_back(l);
    }
    for (int l = 0; l < 26; ++l) {
      if (count.count(l) && count[l] == 1) out.push_back(l);
    }
  }
  return plan;
}

void einsum(KernelContext& ctx) {
  const size_t n_in = ctx.input_count();
  ctx.check(n_in >= 1, "needs at least one input");
  const DataType dtype = ctx.input(0).dtype();
  std::vector<int64_t> ranks;
  for (size_t i = 0; i < n_in; ++i) {
    ctx.check(ctx.input(i).dtype() == dtype, "inputs have different types");
    ranks.push_back(static_cast<int64_t>(ctx.input(i).rank()));
  }
  const EinsumPlan plan = plan_einsum(ctx, ranks);
  const std::vector<std::vector<int>>& dim_labels = plan.dim_labels;
  const std::vector<int>& out_labels = plan.out_labels;
  std::map<int, int64_t> size;
  for (size_t i = 0; i < n_in; ++i) {
    for (size_t d = 0; d < dim_labels[i].size(); ++d) {
      int l = dim_labels[i][d];
      int64_t n = ctx.input(i).dim(d);
      auto it = size.find(l);
      if (it == size.end()) {
        size[l] = n;
      } else if (it->second != n) {
        // Ellipsis dims broadcast numpy-style; letters must agree exactly.
        ctx.check(l >= kEllipsisBase && (it->second == 1 || n == 1),
                  "size mismatch for a subscript: {} vs {}", it->second, n);
        if (it->second == 1) it->second = n;
      }
    }
  }
  std::vector<int> all = out_labels;
  for (const auto& [l, n] : size) {
    if (std::find(all.begin(), all.end(), l) == all.end()) all.push_back(l);
  }
  std::vector<int64_t> all_dims;
  for (int l : all) all_dims.push_back(size[l]);
  std::vector<int64_t> out_dims(all_dims.begin(), all_dims.begin() + out_labels.size());
  // strides[i][j]: how far input i moves when label all[j] advances (0 when absent/broadcast).
  std::vector<std::vector<int64_t>> strides(n_in, std::vector<int64_t>(all.size(), 0));
  for (size_t i = 0; i < n_in; ++i) {
    std::vector<int64_t> rs = row_major_strides(ctx.input(i).dims());
    for (size_t d = 0; d < dim_labels[i].size(); ++d) {
      if (ctx.input(i).dim(d) == 1) continue;
      size_t j =
          static_cast<size_t>(std::find(all.begin(), all.end(), dim_labels[i][d]) - all.begin());
      strides[i][j] += rs[d];
    }
  }
  ctx.set_output(0, dispatch_dtype<DTypeSet::Numeric>(dtype, "Einsum", [&](auto tag) {
                   using T = typename decltype(tag)::type;
                   Tensor out(dtype, out_dims);
                   T* po = out.data<T>();
                   const int64_t out_n = out.numel();
                   std::vector<DotAcc<T>> acc(static_cast<size_t>(out_n), DotAcc<T>{});
                   int64_t total = 1;
                   for (int64_t d : all_dims) {
                     if (__builtin_mul_overflow(total, d, &total)) {
                       ctx.unsupported("the einsum iteration space overflows int64");
                     }
                   }
                   std::vector<const T*> ptr(n_in);
                   for (size_t i = 0; i < n_in; ++i) ptr[i] = ctx.input(i).data<T>();
                   std::vector<int64_t> index(all.size(), 0), off(n_in, 0);
                   const int64_t inner = total == 0 ? 0 : total / std::max<int64_t>(out_n, 1);
                   for (int64_t it = 0; it < total; ++it) {
                     DotAcc<T> prod = acc_of(ptr[0][off[0]]);
                     for (size_t i = 1; i < n_in; ++i) prod *= acc_of(ptr[i][off[i]]);
                     acc[static_cast<size_t>(it / inner)] += prod;
                     for (size_t ax = all.size(); ax-- > 0;) {
                       if (++index[ax] < all_dims[ax]) {
                         for (size_t i = 0; i < n_in; ++i) off[i] += strides[i][ax];
                         break;
                       }
                       for (size_t i = 0; i < n_in; ++i)
                         off[i] -= strides[i][ax] * (all_dims[ax] - 1);
                       index[ax] = 0;
                     }
                   }
                   for (int64_t o = 0; o < out_n; ++o)
                     po[o] = acc_to<T>(acc[static_cast<size_t>(o)]);
                   return out;
                 }));
}

// The dim of a label seen with dims o and n: a static size > 1 wins (1 broadcasts), equal dims
// stay, anything else is unknown.
Dim merge_label_dim(const AttrReader& ctx, const Dim& o, const Dim& n) {
  if (o == n) return o;
  auto big = [](const Dim& d) { return d.is_static() && d.value() != 1; };
  auto one = [](const Dim& d) { return d.is_static() && d.value() == 1; };
  if (big(o) && big(n)) ctx.fail("size mismatch for a subscript: {} vs {}", o.value(), n.value());
  if (big(o) || one(n)) return o;
  if (big(n) || one(o)) return n;
  return Dim();
}

void infer_einsum(InferContext& ctx) {
  const TypeInfo* a = ctx.input_type(0);
  if (!a || !a->is_tensor()) return;
  std::vector<int64_t> ranks;
  for (size_t i = 0; i < ctx.input_count(); ++i) {
    const TypeInfo* t = ctx.input_type(i);
    if (!t || !t->is_tensor() || !t->shape) {
      ctx.set_output_type(0, TypeInfo::tensor(a->dtype));
      return;
    }
    ranks.push_back(static_cast<int64_t>(t->shape->rank()));
  }
  const EinsumPlan plan = plan_einsum(ctx, ranks);
  std::map<int, Dim> dim_of;
  for (size_t i = 0; i < ranks.size(); ++i) {
    const Shape& shape = *ctx.input_type(i)->shape;
    for (size_t d = 0; d < plan.dim_labels[i].size(); ++d) {
      const int l = plan.dim_labels[i][d];
      auto it = dim_of.find(l);
      if (it == dim_of.end()) {
        dim_of[l] = shape[d];
      } else {
        it->second = merge_label_dim(ctx, it->second, shape[d]);
      }
    }
  }
  std::vector<Dim> out;
  for (int l : plan.out_labels) out.push_back(dim_of[l]);
  ctx.set_output_type(0, TypeInfo::tensor(a->dtype, Shape(std::move(out))));
}

// Determinant by LU decomposition with partial pivoting, in double.
void det(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  ctx.check(x.rank() >= 2 && x.dim(x.rank() - 1) == x.dim(x.rank() - 2),
            "input must be [*, M, M], got {}", x.describe());
  const int64_t m = x.dim(x.rank() - 1);
  std::vector<int64_t> out_dims(x.dims().begin(), x.dims().end() - 2);
  ctx.set_output(0, dispatch_dtype<DTypeSet::Float>(x.dtype(), "Det", [&](auto tag) {
                   using T = typename decltype(tag)::type;
                   Tensor out(x.dtype(), out_dims);
                   const T* px = x.data<T>();
                   T* po = out.data<T>();
                   std::vector<double> lu(static_cast<size_t>(m * m));
                   for (int64_t b = 0; b < out.numel(); ++b) {
                     for (int64_t i = 0; i < m * m; ++i)
                       lu[static_cast<size_t>(i)] = to_double(px[b * m * m + i]);
                     double d = 1;
                     for (int64_t c = 0; c < m && d != 0; ++c) {
                       int64_t piv = c;
                       for (int64_t r = c + 1; r < m; ++r) {
                         if (std::fabs(lu[r * m + c]) > std::fabs(lu[piv * m + c])) piv = r;
                       }
                       if (lu[piv * m + c] == 0) {
                         d = 0;
                         break;
                       }
                       if (piv != c) {
                         for (int64_t j = 0; j < m; ++j) std::swap(lu[c * m + j], lu[piv * m + j]);
                         d = -d;
                       }
                       d *= lu[c * m + c];
                       for (int64_t r = c + 1; r < m; ++r) {
                         double f = lu[r * m + c] / lu[c * m + c];
                         for (int64_t j = c; j < m; ++j) lu[r * m + j] -= f * lu[c * m + j];
                       }
                     }
                     po[b] = from_double<T>(d);
                   }
                   return out;
                 }));
}

void infer_det(InferContext& ctx) {
  const TypeInfo* a = ctx.input_type(0);
  if (!a || !a->is_tensor()) return;
  std::optional<Shape> shape;
  if (a->shape && a->shape->rank() >= 2) {
    shape = Shape(std::vector<Dim>(a->shape->dims().begin(), a->shape->dims().end() - 2));
  }
  ctx.set_output_type(0, TypeInfo::tensor(a->dtype, shape));
}

KILN_REGISTER_OP({.op_type = "MatMul",
                  .kernel = matmul,
                  .infer = infer_matmul,
                  .traits = {.fp16 = {.safe = true}, .flops = flops_matmul}});
KILN_REGISTER_OP({.op_type = "Gemm",
                  .kernel = gemm,
                  .infer = infer_gemm,
                  .traits = {.fp16 = {.safe = true}, .flops = flops_gemm}});
KILN_REGISTER_OP({.op_type = "Einsum", .kernel = einsum, .infer = infer_einsum});
KILN_REGISTER_OP({.op_type = "Det", .kernel = det, .infer = infer_det});

}  // namespace
}  // namespace kiln::ops
