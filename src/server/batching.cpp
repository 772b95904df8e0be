#include "server/batching.hpp"

#include <cstring>

namespace kiln::server {
namespace {

// `pattern` with at most one -1 resolved so the element count is `numel`.
std::vector<int64_t> resolve(std::vector<int64_t> pattern, int64_t numel, const std::string& model,
                             const std::string& tensor) {
  int64_t known = 1;
  int wild = -1;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] < 0) {
      KILN_CHECK(wild < 0, ErrorCode::Unsupported,
                 "model '{}': '{}' has more than one variable dim to reshape", model, tensor);
      wild = static_cast<int>(i);
    } else {
      known *= pattern[i];
    }
  }
  if (wild >= 0) {
    KILN_CHECK_ARG(known > 0 && numel % known == 0,
                   "model '{}': '{}' with {} elements cannot take shape {}", model, tensor, numel,
                   dims_to_string(pattern));
    pattern[wild] = numel / known;
  }
  KILN_CHECK_ARG(shape_numel(pattern) == numel,
                 "model '{}': '{}' with {} elements cannot take shape {}", model, tensor, numel,
                 dims_to_string(pattern));
  return pattern;
}

}  // namespace

Tensor concat_rows(const std::vector<const Tensor*>& parts) {
  KILN_CHECK(!parts.empty(), ErrorCode::Internal, "concat_rows of nothing");
  if (parts.size() == 1) return *parts.front();
  std::vector<int64_t> dims = parts.front()->dims();
  KILN_CHECK(!dims.empty(), ErrorCode::Internal, "concat_rows of a scalar");
  dims[0] = 0;
  for (const Tensor* t : parts) dims[0] += t->dim(0);
  Tensor out(parts.front()->dtype(), dims);
  if (out.dtype() == DataType::String) {
    std::string* dst = out.data<std::string>();
    for (const Tensor* t : parts) {
      for (const std::string& s : t->values<std::string>()) *dst++ = s;
    }
    return out;
  }
  char* dst = static_cast<char*>(out.raw_data());
  for (const Tensor* t : parts) {
    if (t->nbytes() == 0) continue;
    std::memcpy(dst, t->raw_data(), t->nbytes());
    dst += t->nbytes();
  }
  return out;
}

Tensor slice_rows(const Tensor& t, int64_t offset, int64_t rows) {
  KILN_CHECK(t.rank() >= 1 && offset >= 0 && offset + rows <= t.dim(0), ErrorCode::Internal,
             "slice_rows [{}, {}) of {}", offset, offset + rows, t.describe());
  std::vector<int64_t> dims = t.dims();
  dims[0] = rows;
  Tensor out(t.dtype(), dims);
  const int64_t row_elems = t.dim(0) == 0 ? 0 : t.numel() / t.dim(0);
  if (t.dtype() == DataType::String) {
    const std::string* src = t.data<std::string>() + offset * row_elems;
    std::copy(src, src + rows * row_elems, out.data<std::string>());
    return out;
  }
  const size_t elem = dtype_size(t.dtype());
  if (out.nbytes() > 0) {
    std::memcpy(out.raw_data(), static_cast<const char*>(t.raw_data()) + offset * row_elems * elem,
                out.nbytes());
  }
  return out;
}

Tensor to_model_shape(const Tensor& t, const TensorSpec& spec, bool batched,
                      const std::string& model) {
  if (!spec.has_reshape) return t;
  std::vector<int64_t> pattern;
  int64_t rows = 1;
  if (batched) {
    rows = t.dim(0);
    pattern.push_back(rows);
  }
  const int64_t per_row = rows == 0 ? 0 : t.numel() / rows;
  std::vector<int64_t> inner = resolve(spec.reshape, per_row, model, spec.name);
  pattern.insert(pattern.end(), inner.begin(), inner.end());
  return t.reshaped(pattern);
}

Tensor from_model_shape(const Tensor& t, const TensorSpec& spec, bool batched, int64_t rows,
                        const std::string& model) {
  if (batched) {
    KILN_CHECK(t.rank() >= 1 && t.dim(0) == rows, ErrorCode::Internal,
               "model '{}' output '{}' has shape {} but the batch has {} rows", model, spec.name,
               dims_to_string(t.dims()), rows);
  }
  if (!spec.has_reshape) return t;
  std::vector<int64_t> pattern;
  if (batched) pattern.push_back(rows);
  const int64_t per_row = batched ? (rows == 0 ? 0 : t.numel() / rows) : t.numel();
  std::vector<int64_t> inner = resolve(spec.dims, per_row, model, spec.name);
  pattern.insert(pattern.end(), inner.begin(), inner.end());
  return t.reshaped(pattern);
}

}  // namespace kiln::server
