#include "core/rt_value.hpp"

namespace kiln {

const Tensor& RtValue::tensor() const {
  KILN_CHECK_ARG(kind_ == Kind::Tensor, "expected a tensor, got {}", describe());
  return tensor_;
}
Tensor& RtValue::tensor() {
  KILN_CHECK_ARG(kind_ == Kind::Tensor, "expected a tensor, got {}", describe());
  return tensor_;
}
const std::vector<Tensor>& RtValue::sequence() const {
  KILN_CHECK_ARG(kind_ == Kind::Sequence, "expected a sequence, got {}", describe());
  return sequence_;
}
std::vector<Tensor>& RtValue::sequence() {
  KILN_CHECK_ARG(kind_ == Kind::Sequence, "expected a sequence, got {}", describe());
  return sequence_;
}

size_t RtValue::nbytes() const {
  if (is_tensor()) return tensor_.nbytes();
  size_t n = 0;
  for (const Tensor& t : sequence_) n += t.nbytes();
  return n;
}

std::string RtValue::describe() const {
  switch (kind_) {
    case Kind::None:
      return "none";
    case Kind::Tensor:
      return tensor_.describe();
    case Kind::Sequence:
      return fmt::format("sequence of {} tensors", sequence_.size());
  }
  return "?";
}

}  // namespace kiln
