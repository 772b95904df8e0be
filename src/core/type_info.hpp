#pragma once
// The static type of a graph value: a tensor (element type + maybe-known shape), a sequence of
// some type, or an optional of some type.
#include <memory>
#include <optional>
#include <string>

#include "core/dtype.hpp"
#include "core/shape.hpp"

namespace kiln {

struct TypeInfo {
  enum class Kind { Unknown, Tensor, Sequence, Optional };

  Kind kind = Kind::Unknown;
  DataType dtype = DataType::Undefined;  // tensors only
  std::optional<Shape> shape;            // tensors only; nullopt when the rank is unknown
  std::shared_ptr<const TypeInfo> elem;  // sequences and optionals

  static TypeInfo tensor(DataType dtype, std::optional<Shape> shape = std::nullopt) {
    TypeInfo t;
    t.kind = Kind::Tensor;
    t.dtype = dtype;
    t.shape = std::move(shape);
    return t;
  }
  static TypeInfo wrap(Kind kind, TypeInfo elem) {
    TypeInfo t;
    t.kind = kind;
    t.elem = std::make_shared<const TypeInfo>(std::move(elem));
    return t;
  }
  bool is_tensor() const { return kind == Kind::Tensor; }
  std::string to_string() const;
};

}  // namespace kiln
