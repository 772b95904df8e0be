#include "server/tensor_wire.hpp"

#include <cstring>

#include "core/shape.hpp"
#include "server/infer_types.hpp"
#include "server/request_errors.hpp"

namespace kiln::server {

DataType wire_datatype(std::string_view name, const std::string& input) {
  std::optional<DataType> dt = datatype_from_name(name);
  KILN_CHECK_ARG(dt.has_value(), "invalid datatype for input {}", input);
  return *dt;
}

void check_wire_shape(const std::vector<int64_t>& shape, size_t max_rank,
                      const std::string& input) {
  KILN_CHECK_ARG(shape.size() <= max_rank, "input '{}': rank {} is more than {}", input,
                 shape.size(), max_rank);
  for (int64_t d : shape) {
    KILN_CHECK_ARG(d >= 0, "input '{}': 'shape' must hold non-negative integers", input);
  }
  shape_numel(shape);  // throws on overflow
}

Tensor decode_raw_tensor(std::string_view bytes, DataType dtype, const std::vector<int64_t>& shape,
                         const std::string& input, const InferRequest& request) {
  const int64_t numel = shape_numel(shape);
  if (dtype == DataType::String) {
    // Count the elements before allocating: a tiny body cannot claim a huge tensor.
    size_t pos = 0;
    int64_t count = 0;
    while (pos < bytes.size()) {
      KILN_CHECK_ARG(bytes.size() - pos >= 4,
                     "input '{}': BYTES element {} is cut short in its length prefix", input,
                     count);
      uint32_t len = 0;
      std::memcpy(&len, bytes.data() + pos, 4);
      pos += 4;
      KILN_CHECK_ARG(len <= bytes.size() - pos, "input '{}': BYTES element {} claims {} bytes",
                     input, count, len);
      pos += len;
      ++count;
    }
    KILN_CHECK_ARG(count == numel, "input '{}': {} BYTES elements for shape {} ({} elements)",
                   input, count, dims_to_string(shape), numel);
    Tensor t(dtype, shape);
    std::string* out = t.data<std::string>();
    pos = 0;
    for (int64_t i = 0; i < numel; ++i) {
      uint32_t len = 0;
      std::memcpy(&len, bytes.data() + pos, 4);
      out[i].assign(bytes.data() + pos + 4, len);
      pos += 4 + len;
    }
    return t;
  }
  const size_t elem = datatype_wire_size(dtype);
  KILN_CHECK_ARG(elem > 0, "input '{}': {} has no raw form", input, dtype_name(dtype));
  const uint64_t count = static_cast<uint64_t>(numel);
  const uint64_t needed = count <= UINT64_MAX / elem ? count * elem : UINT64_MAX;
  KILN_CHECK_ARG(needed == bytes.size(),
                 "{}input byte size mismatch for input '{}' for model '{}'. Expected {}, got {}",
                 request_id_prefix(request), input, request.model_name, needed, bytes.size());
  Tensor t(dtype, shape);
  if (dtype == DataType::Bool) {
    bool* out = t.data<bool>();
    for (int64_t i = 0; i < numel; ++i) out[i] = bytes[static_cast<size_t>(i)] != 0;
  } else if (!bytes.empty()) {
    std::memcpy(t.raw_data(), bytes.data(), bytes.size());
  }
  return t;
}

size_t raw_tensor_size(const Tensor& t) {
  if (t.dtype() != DataType::String) return t.nbytes();
  size_t n = 0;
  for (const std::string& s : t.values<std::string>()) n += 4 + s.size();
  return n;
}

void append_raw_tensor(std::string& out, const Tensor& t) {
  if (t.dtype() == DataType::String) {
    for (const std::string& s : t.values<std::string>()) {
      KILN_CHECK(s.size() <= UINT32_MAX, ErrorCode::InvalidArgument,
                 "a BYTES element of {} bytes does not fit its 4-byte length prefix", s.size());
      const uint32_t len = static_cast<uint32_t>(s.size());
      out.append(reinterpret_cast<const char*>(&len), 4);
      out.append(s);
    }
    return;
  }
  out.append(static_cast<const char*>(t.raw_data()), t.nbytes());
}

}  // namespace kiln::server
