#pragma once
// A node attribute: one of ONNX's attribute kinds, held by value. Graph attributes (If/Loop/Scan
// bodies) are shared pointers so nodes stay cheap to copy.
#include <cstdint>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "core/tensor.hpp"
#include "core/type_info.hpp"

namespace kiln::ir {

class Graph;
using GraphPtr = std::shared_ptr<Graph>;

enum class AttrKind {
  Float,
  Int,
  String,
  Tensor,
  Graph,
  Type,
  Floats,
  Ints,
  Strings,
  Tensors,
  Graphs
};
std::string_view attr_kind_name(AttrKind kind);

class Attribute {
 public:
  using Storage = std::variant<float, int64_t, std::string, Tensor, GraphPtr, TypeInfo,
                               std::vector<float>, std::vector<int64_t>, std::vector<std::string>,
                               std::vector<Tensor>, std::vector<GraphPtr>>;

  Attribute() = default;
  template <typename T>
  Attribute(T value) : value_(std::move(value)) {}  // NOLINT

  AttrKind kind() const { return static_cast<AttrKind>(value_.index()); }
  const Storage& storage() const { return value_; }

  // Typed access; a kind mismatch throws InvalidArgument naming the attribute (set by callers).
  template <typename T>
  const T& get(std::string_view name) const {
    if (const T* p = std::get_if<T>(&value_)) return *p;
    fail(ErrorCode::InvalidArgument, "attribute '{}' has kind {}, expected another kind", name,
         attr_kind_name(kind()));
  }
  std::string to_string() const;

 private:
  Storage value_;
};

}  // namespace kiln::ir
