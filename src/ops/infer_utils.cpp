#include "ops/infer_utils.hpp"

#include <algorithm>
#include <string>

namespace kiln::ops {

void infer_same_as_input0(InferContext& ctx) {
  if (const TypeInfo* t = ctx.input_type(0)) ctx.set_output_type(0, *t);
}

namespace {

std::string clamped_name(const std::string& symbol, int64_t n) {
  return "min(" + symbol + "," + std::to_string(n) + ")";
}

// `m` is clamped_symbol(s, n) for some n.
bool is_clamped(const Dim& m, const Dim& s) {
  if (!m.is_symbolic() || !s.is_symbolic()) return false;
  const std::string& name = m.symbol_name();
  return m.max() >= 2 && name == clamped_name(s.symbol_name(), m.max());
}

}  // namespace

Dim clamped_symbol(const Dim& s, int64_t n) {
  if (!s.is_symbolic() || n < 2) return Dim();
  return Dim::symbol(clamped_name(s.symbol_name(), n), std::min(s.min(), n), n);
}

std::optional<Shape> broadcast_shapes(const AttrReader& ctx, const std::optional<Shape>& a,
                                      const std::optional<Shape>& b) {
  if (!a || !b) return std::nullopt;
  size_t rank = std::max(a->rank(), b->rank());
  std::vector<Dim> out(rank);
  for (size_t i = 0; i < rank; ++i) {
    std::optional<Dim> da, db;
    if (i + a->rank() >= rank) da = (*a)[i + a->rank() - rank];
    if (i + b->rank() >= rank) db = (*b)[i + b->rank() - rank];
    if (!da) {
      out[i] = *db;
    } else if (!db) {
      out[i] = *da;
    } else if (*da == *db) {
      out[i] = *da;
    } else if (is_clamped(*db, *da)) {
      out[i] = *da;
    } else if (is_clamped(*da, *db)) {
      out[i] = *db;
    } else if (da->is_static() && da->value() == 1) {
      out[i] = *db;
    } else if (db->is_static() && db->value() == 1) {
      out[i] = *da;
    } else if (da->is_static() && db->is_static()) {
      ctx.fail("shapes {} and {} cannot be broadcast together", a->to_string(), b->to_string());
    } else {
      out[i] = da->is_static() ? *da : db->is_static() ? *db : Dim();
    }
  }
  return Shape(std::move(out));
}

namespace {
void infer_broadcast_as(InferContext& ctx, std::optional<DataType> dtype) {
  std::optional<Shape> shape;
  DataType type = DataType::Undefined;
  bool first = true;
  for (size_t i = 0; i < ctx.input_count(); ++i) {
    const TypeInfo* t = ctx.input_type(i);
    if (!t || !t->is_tensor()) return;
    if (first) {
      shape = t->shape;
      type = t->dtype;
      first = false;
    } else {
      shape = broadcast_shapes(ctx, shape, t->shape);
    }
  }
  if (first) return;
  ctx.set_output_type(0, TypeInfo::tensor(dtype.value_or(type), shape));
}
}  // namespace

void infer_broadcast(InferContext& ctx) {
  infer_broadcast_as(ctx, std::nullopt);
}
void infer_broadcast_bool(InferContext& ctx) {
  infer_broadcast_as(ctx, DataType::Bool);
}

}  // namespace kiln::ops
