#include "ops/shape_values.hpp"

#include <algorithm>
#include <limits>

#include <fmt/format.h>

#include "ops/movement_utils.hpp"

namespace kiln::ops {
namespace {

// Longest value list worth tracking; shape tensors are tiny.
constexpr size_t kMaxValues = 4096;

// Walks producers of `v`; `budget` bounds the work per query (the graph is a DAG, but shared
// sub-expressions would otherwise be revisited).
class Evaluator {
 public:
  std::optional<SymValues> eval(const ir::Value* v) {
    if (!v || --budget_ < 0) return std::nullopt;
    if (v->is_constant()) return from_tensor(v->constant());
    const ir::Node* p = v->producer();
    if (!p || !p->domain().empty() || p->outputs().empty() || p->output(0) != v) {
      return std::nullopt;
    }
    AttrReader attrs(*p);
    const std::string& op = p->op_type();
    if (op == "Constant") return constant(attrs);
    if (op == "Shape") return shape(*p, attrs);
    if (op == "Identity") return eval(p->input(0));
    if (op == "Cast") {
      int64_t to = attrs.attr_int("to", 0);
      if (to != static_cast<int64_t>(DataType::Int64) &&
          to != static_cast<int64_t>(DataType::Int32)) {
        return std::nullopt;
      }
      return eval(p->input(0));
    }
    if (op == "Unsqueeze" || op == "Squeeze") {
      // Only the scalar <-> [1] case keeps values flat and at most 1-D.
      auto in = eval(p->input(0));
      if (!in || in->size() != 1) return std::nullopt;
      return in;
    }
    if (op == "Reshape") {
      // Exporters reshape shape tensors to [-1] (torch's expand does): to one dim or to a
      // scalar, a 0-D or 1-D tensor keeps its values in order.
      auto target = eval(p->input(1));
      if (!target || target->size() > 1) return std::nullopt;
      return eval(p->input(0));
    }
    if (op == "Concat") return concat(*p, attrs);
    if (op == "Gather") return gather(*p, attrs);
    if (op == "Slice") return slice(*p, attrs);
    if (op == "Add" || op == "Sub" || op == "Mul" || op == "Div" || op == "Equal") {
      return arithmetic(*p, op);
    }
    if (op == "Where") return where(*p);
    if (op == "ConstantOfShape") return constant_of_shape(*p, attrs);
    return std::nullopt;
  }

 private:
  static std::optional<SymValues> from_numbers(const std::vector<int64_t>& v) {
    if (v.size() > kMaxValues) return std::nullopt;
    SymValues out;
    for (int64_t x : v) out.push_back(SymValue::of(x));
    return out;
  }

  static std::optional<SymValues> from_tensor(const Tensor& t) {
    if (t.rank() > 1 || !dtype_is_integer(t.dtype())) return std::nullopt;
    if (static_cast<size_t>(t.numel()) > kMaxValues) return std::nullopt;
    return from_numbers(t.to_int64_vector());
  }

  static std::optional<SymValues> constant(const AttrReader& attrs) {
    if (attrs.node().attributes().size() != 1) return std::nullopt;
    if (attrs.has_attr("value")) return from_tensor(attrs.attr_tensor("value"));
    if (attrs.has_attr("value_ints")) return from_numbers(attrs.attr_ints("value_ints"));
    if (attrs.has_attr("value_int")) return from_numbers({attrs.attr_int("value_int")});
    return std::nullopt;
  }

  static std::optional<SymValues> shape(const ir::Node& p, const AttrReader& attrs) {
    const ir::Value* in = p.input(0);
    if (!in || !in->type().is_tensor() || !in->type().shape) return std::nullopt;
    const Shape& s = *in->type().shape;
    const int64_t rank = static_cast<int64_t>(s.rank());
    auto clamp = [rank](int64_t v) { return std::clamp(v < 0 ? v + rank : v, int64_t{0}, rank); };
    int64_t start = clamp(attrs.attr_int("start", 0));
    int64_t end = clamp(attrs.has_attr("end") ? attrs.attr_int("end") : rank);
    SymValues out;
    for (int64_t i = start; i < end; ++i)
      out.push_back(SymValue::of_dim(s[static_cast<size_t>(i)]));
    return out;
  }

  std::optional<SymValues> concat(const ir::Node& p, const AttrReader& attrs) {
    int64_t axis = attrs.attr_int("axis", 0);
    if (axis != 0 && axis != -1) return std::nullopt;
    SymValues out;
    for (const ir::Value* in : p.inputs()) {
      auto v = eval(in);
      if (!v || out.size() + v->size() > kMaxValues) return std::nullopt;
      // A scalar input would make Concat invalid; refuse rather than guess.
      if (!in->type().is_tensor() || !in->type().shape || in->type().shape->rank() != 1) {
        return std::nullopt;
      }
      out.insert(out.end(), v->begin(), v->end());
    }
    return out;
  }

  std::optional<SymValues> gather(const ir::Node& p, const AttrReader& attrs) {
    int64_t axis = attrs.attr_int("axis", 0);
    if (axis != 0 && axis != -1) return std::nullopt;
    auto data = eval(p.input(0));
    auto idx = eval(p.input(1));
    if (!data || !idx) return std::nullopt;
    const int64_t n = static_cast<int64_t>(data->size());
    SymValues out;
    for (const SymValue& i : *idx) {
      if (!i.number || *i.number < -n || *i.number >= n) return std::nullopt;
      out.push_back((*data)[static_cast<size_t>(*i.number < 0 ? *i.number + n : *i.number)]);
    }
    return out;
  }

  std::optional<SymValues> slice(const ir::Node& p, const AttrReader& attrs) {
    auto data = eval(p.input(0));
    if (!data) return std::nullopt;
    std::vector<int64_t> starts, ends, axes{0}, steps{1};
    if (p.opset() < 10) {
      starts = attrs.attr_ints("starts");
      ends = attrs.attr_ints("ends");
      axes = attrs.attr_ints("axes", {0});
    } else {
      auto numbers = [&](size_t i, std::vector<int64_t>& out) {
        if (!p.input(i)) return true;  // absent: keep the default
        auto v = eval(p.input(i));
        if (!v) return false;
        out.clear();
        for (const SymValue& x : *v) {
          if (!x.number) return false;
          out.push_back(*x.number);
        }
        return true;
      };
      if (!numbers(1, starts) || !numbers(2, ends) || !numbers(3, axes) || !numbers(4, steps)) {
        return std::nullopt;
      }
    }
    if (starts.size() != 1 || ends.size() != 1 || axes.size() != 1 || steps.size() != 1 ||
        (axes[0] != 0 && axes[0] != -1) || steps[0] == 0) {
      return std::nullopt;
    }
    const int64_t n = static_cast<int64_t>(data->size());
    int64_t start = starts[0], end = ends[0], step = steps[0];
    if (start < 0) start += n;
    if (end < 0) end += n;
    SymValues out;
    if (step > 0) {
      start = std::clamp<int64_t>(start, 0, n);
      end = std::clamp<int64_t>(end, 0, n);
      for (int64_t i = start; i < end; i += step) out.push_back((*data)[static_cast<size_t>(i)]);
    } else if (n > 0) {
      start = std::clamp<int64_t>(start, 0, n - 1);
      end = std::clamp<int64_t>(end, -1, n - 1);
      for (int64_t i = start; i > end; i += step) out.push_back((*data)[static_cast<size_t>(i)]);
    }
    return out;
  }

  std::optional<SymValues> arithmetic(const ir::Node& p, const std::string& op) {
    auto a = eval(p.input(0));
    auto b = eval(p.input(1));
    if (!a || !b) return std::nullopt;
    // An empty operand only broadcasts with another empty one (found by the importer fuzzer).
    if (a->empty() || b->empty())
      return a->empty() && b->empty() ? std::optional(SymValues{}) : std::nullopt;
    if (a->size() != b->size() && a->size() != 1 && b->size() != 1) return std::nullopt;
    const size_t n = std::max(a->size(), b->size());
    SymValues out;
    for (size_t i = 0; i < n; ++i) {
      const SymValue& x = (*a)[a->size() == 1 ? 0 : i];
      const SymValue& y = (*b)[b->size() == 1 ? 0 : i];
      out.push_back(combine(op, x, y));
    }
    return out;
  }

  // Exporters build Expand shapes as Where(Equal(s, -1), ones, s): a dim is never negative, so
  // comparing one with a negative number is known even when the dim is symbolic.
  std::optional<SymValues> where(const ir::Node& p) {
    auto c = eval(p.input(0));
    auto x = eval(p.input(1));
    auto y = eval(p.input(2));
    if (!c || !x || !y || c->empty() || x->empty() || y->empty()) return std::nullopt;
    const size_t n = std::max({c->size(), x->size(), y->size()});
    for (size_t k : {c->size(), x->size(), y->size()}) {
      if (k != n && k != 1) return std::nullopt;
    }
    SymValues out;
    for (size_t i = 0; i < n; ++i) {
      const SymValue& ci = (*c)[c->size() == 1 ? 0 : i];
      if (!ci.number) return std::nullopt;
      const SymValues& pick = *ci.number ? *x : *y;
      out.push_back(pick[pick.size() == 1 ? 0 : i]);
    }
    return out;
  }

  std::optional<SymValues> constant_of_shape(const ir::Node& p, const AttrReader& attrs) {
    auto shape = eval(p.input(0));
    if (!shape || shape->size() != 1 || !(*shape)[0].number) return std::nullopt;
    const int64_t n = *(*shape)[0].number;
    if (n < 0 || static_cast<size_t>(n) > kMaxValues) return std::nullopt;
    if (!attrs.has_attr("value")) return std::nullopt;  // the default fill is float
    const Tensor& v = attrs.attr_tensor("value");
    if (v.numel() != 1 || !dtype_is_integer(v.dtype())) return std::nullopt;
    return SymValues(static_cast<size_t>(n), SymValue::of(v.int_at(0)));
  }

  static SymValue combine(const std::string& op, const SymValue& x, const SymValue& y) {
    if (op == "Equal") {
      if (x.number && y.number) return SymValue::of(*x.number == *y.number ? 1 : 0);
      if ((x.number && *x.number < 0) || (y.number && *y.number < 0)) return SymValue::of(0);
      if (!x.number && !y.number && x.dim.is_symbolic() && x.dim == y.dim) return SymValue::of(1);
      return {};
    }
    if (x.number && y.number) {
      int64_t r = 0;
      bool overflow = false;
      if (op == "Add") overflow = __builtin_add_overflow(*x.number, *y.number, &r);
      if (op == "Sub") overflow = __builtin_sub_overflow(*x.number, *y.number, &r);
      if (op == "Mul") overflow = __builtin_mul_overflow(*x.number, *y.number, &r);
      if (op == "Div") {
        if (*y.number == 0 || (*y.number == -1 && *x.number == INT64_MIN)) return {};
        r = *x.number / *y.number;
      }
      return overflow ? SymValue{} : SymValue::of(r);
    }
    // Identities keep a symbolic operand: d + 0, d - 0, d * 1, d / 1.
    bool keep_x = y.number && ((*y.number == 0 && (op == "Add" || op == "Sub")) ||
                               (*y.number == 1 && (op == "Mul" || op == "Div")));
    if (keep_x) return x;
    if (x.number && *x.number == 0 && op == "Add") return y;
    if (x.number && *x.number == 1 && op == "Mul") return y;
    if (op == "Mul" && x.number && !y.number) return scaled(y.dim, *x.number);
    if (op == "Mul" && y.number && !x.number) return scaled(x.dim, *y.number);
    return {};
  }

  // A symbolic dim times a positive number (batch * heads in attention reshapes) stays a symbol,
  // named by the product so equal products are equal dims, with its range scaled: memory for it
  // can then be planned from the declared maximum.
  static SymValue scaled(const Dim& d, int64_t k) {
    if (!d.is_symbolic() || k <= 0) return {};
    int64_t lo = 0, hi = 0;
    if (__builtin_mul_overflow(d.min(), k, &lo)) return {};
    if (d.max() == std::numeric_limits<int64_t>::max() || __builtin_mul_overflow(d.max(), k, &hi)) {
      hi = std::numeric_limits<int64_t>::max();
    }
    return SymValue::of_dim(Dim::symbol(fmt::format("{}*{}", d.symbol_name(), k), lo, hi));
  }

  int budget_ = 256;
};

}  // namespace

std::optional<SymValues> input_sym_values(const InferContext& ctx, size_t i) {
  if (!ctx.has_input(i)) return std::nullopt;
  try {
    return Evaluator().eval(ctx.node().input(i));
  } catch (const Error&) {
    return std::nullopt;  // a malformed producer is that node's problem, not this one's
  }
}

}  // namespace kiln::ops
