#pragma once
// What flows between nodes at run time: a tensor, a sequence of tensors, or nothing (an absent
// optional input/output or an empty ONNX optional).
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.hpp"

namespace kiln {

class RtValue {
 public:
  enum class Kind { None, Tensor, Sequence };

  RtValue() = default;
  RtValue(Tensor t) : kind_(Kind::Tensor), tensor_(std::move(t)) {}  // NOLINT
  static RtValue sequence(std::vector<Tensor> items) {
    RtValue v;
    v.kind_ = Kind::Sequence;
    v.sequence_ = std::move(items);
    return v;
  }

  Kind kind() const { return kind_; }
  bool is_none() const { return kind_ == Kind::None; }
  bool is_tensor() const { return kind_ == Kind::Tensor; }
  bool is_sequence() const { return kind_ == Kind::Sequence; }
  const Tensor& tensor() const;
  Tensor& tensor();
  const std::vector<Tensor>& sequence() const;
  std::vector<Tensor>& sequence();
  std::string describe() const;
  // Bytes of the data: the tensor's, the sum of a sequence's tensors, 0 for none.
  size_t nbytes() const;

 private:
  Kind kind_ = Kind::None;
  Tensor tensor_;
  std::vector<Tensor> sequence_;
};

}  // namespace kiln
