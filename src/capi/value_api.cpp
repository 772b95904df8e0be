// The C ABI's value entry points (kiln.h): tensors made from caller buffers (copied or borrowed),
// string tensors, sequences, and read-only accessors.
#include <cstring>

#include "capi/capi_internal.hpp"

static_assert(static_cast<int>(kiln::DataType::Int2) == KILN_DTYPE_INT2 &&
                  static_cast<int>(kiln::DataType::BFloat16) == KILN_DTYPE_BFLOAT16 &&
                  static_cast<int>(kiln::DataType::String) == KILN_DTYPE_STRING,
              "KilnDataType follows kiln::DataType (ONNX numbering)");
static_assert(static_cast<int>(kiln::TypeInfo::Kind::Optional) == KILN_TYPE_OPTIONAL &&
                  static_cast<int>(kiln::TypeInfo::Kind::Sequence) == KILN_TYPE_SEQUENCE,
              "KilnTypeKind follows kiln::TypeInfo::Kind");
static_assert(static_cast<int>(kiln::RtValue::Kind::Sequence) == KILN_VALUE_SEQUENCE &&
                  static_cast<int>(kiln::RtValue::Kind::None) == KILN_VALUE_NONE,
              "KilnValueKind follows kiln::RtValue::Kind");

namespace kiln::capi {
namespace {

// A code from the caller, checked: any int can arrive through a C enum.
DataType checked_dtype(KilnDataType dtype, const char* function) {
  int code = static_cast<int>(dtype);
  KILN_CHECK_ARG(code > 0 && code <= KILN_DTYPE_INT2, "{}: {} is not a KilnDataType", function,
                 code);
  return static_cast<DataType>(code);
}

std::vector<int64_t> checked_dims(const int64_t* dims, size_t rank, const char* function) {
  KILN_CHECK_ARG(dims || rank == 0, "{}: argument 'dims' is NULL but rank is {}", function, rank);
  std::vector<int64_t> out(dims, dims + rank);
  for (size_t i = 0; i < rank; ++i) {
    KILN_CHECK_ARG(out[i] >= 0, "{}: dim {} is {}; dims must not be negative", function, i, out[i]);
  }
  shape_numel(out);  // refuses an element count that overflows
  return out;
}

const Tensor& tensor_of(const KilnValue* value, const char* function) {
  KILN_CAPI_REQUIRE(value, function);
  KILN_CHECK_ARG(value->value.is_tensor(), "{}: the value is {}, not a tensor", function,
                 value->value.describe());
  return value->value.tensor();
}

}  // namespace
}  // namespace kiln::capi

using kiln::capi::guarded;

extern "C" {

const char* kiln_dtype_name(KilnDataType dtype) {
  int code = static_cast<int>(dtype);
  if (code < 0 || code > KILN_DTYPE_INT2) return "undefined";
  return kiln::dtype_name(static_cast<kiln::DataType>(code)).data();
}

size_t kiln_dtype_size(KilnDataType dtype) {
  int code = static_cast<int>(dtype);
  if (code <= 0 || code > KILN_DTYPE_INT2 || dtype == KILN_DTYPE_STRING) return 0;
  return kiln::dtype_size(static_cast<kiln::DataType>(code));
}

KilnStatus kiln_value_create_tensor(KilnDataType dtype, const int64_t* dims, size_t rank,
                                    const void* data, size_t data_size, KilnMemoryMode mode,
                                    KilnValue** out) {
  if (out) *out = nullptr;
  return guarded([&] {
    constexpr const char* fn = "kiln_value_create_tensor";
    KILN_CAPI_REQUIRE(out, fn);
    kiln::DataType type = kiln::capi::checked_dtype(dtype, fn);
    KILN_CHECK_ARG(type != kiln::DataType::String,
                   "{}: string tensors are made with kiln_value_create_string_tensor", fn);
    kiln::dtype_require_supported(type, fn);
    KILN_CHECK_ARG(mode == KILN_MEMORY_COPY || mode == KILN_MEMORY_BORROW,
                   "{}: mode must be KILN_MEMORY_COPY or KILN_MEMORY_BORROW, got {}", fn,
                   static_cast<int>(mode));
    std::vector<int64_t> shape = kiln::capi::checked_dims(dims, rank, fn);
    const size_t elem = kiln::dtype_size(type);
    const size_t need = static_cast<size_t>(kiln::shape_numel(shape)) * elem;
    KILN_CHECK_ARG(data_size == need, "{}: data_size is {} bytes but {}{} needs {}", fn, data_size,
                   kiln::dtype_name(type), kiln::dims_to_string(shape), need);
    KILN_CHECK_ARG(data || need == 0, "{}: argument 'data' is NULL", fn);
    if (type == kiln::DataType::Bool) {
      // Any other byte would be an invalid C++ bool inside the kernels.
      const auto* bytes = static_cast<const unsigned char*>(data);
      for (size_t i = 0; i < need; ++i) {
        KILN_CHECK_ARG(bytes[i] <= 1, "{}: bool element {} is {}; bools must be 0 or 1", fn, i,
                       static_cast<int>(bytes[i]));
      }
    }
    auto v = std::make_unique<KilnValue>();
    if (mode == KILN_MEMORY_COPY) {
      kiln::Tensor t(type, std::move(shape));
      if (need) std::memcpy(t.raw_data(), data, need);
      v->value = std::move(t);
    } else {
      KILN_CHECK_ARG(reinterpret_cast<uintptr_t>(data) % elem == 0,
                     "{}: borrowed data at {} is not aligned to its {}-byte elements", fn, data,
                     elem);
      // Kiln never writes into feeds; the const_cast only fits Tensor's one pointer type.
      v->value = kiln::Tensor::view(type, std::move(shape), const_cast<void*>(data), nullptr);
      if (need) v->borrowed.emplace_back(data, need);
    }
    *out = v.release();
  });
}

KilnStatus kiln_value_create_string_tensor(const int64_t* dims, size_t rank,
                                           const char* const* strings, const size_t* lengths,
                                           KilnValue** out) {
  if (out) *out = nullptr;
  return guarded([&] {
    constexpr const char* fn = "kiln_value_create_string_tensor";
    KILN_CAPI_REQUIRE(out, fn);
    kiln::Tensor t(kiln::DataType::String, kiln::capi::checked_dims(dims, rank, fn));
    KILN_CHECK_ARG(strings || t.numel() == 0, "{}: argument 'strings' is NULL", fn);
    std::string* dst = t.data<std::string>();
    for (int64_t i = 0; i < t.numel(); ++i) {
      KILN_CHECK_ARG(strings[i], "{}: strings[{}] is NULL", fn, i);
      dst[i] = lengths ? std::string(strings[i], lengths[i]) : std::string(strings[i]);
    }
    auto v = std::make_unique<KilnValue>();
    v->value = std::move(t);
    *out = v.release();
  });
}

KilnStatus kiln_value_create_sequence(const KilnValue* const* items, size_t count,
                                      KilnValue** out) {
  if (out) *out = nullptr;
  return guarded([&] {
    constexpr const char* fn = "kiln_value_create_sequence";
    KILN_CAPI_REQUIRE(out, fn);
    KILN_CHECK_ARG(items || count == 0, "{}: argument 'items' is NULL but count is {}", fn, count);
    auto v = std::make_unique<KilnValue>();
    std::vector<kiln::Tensor> tensors;
    for (size_t i = 0; i < count; ++i) {
      KILN_CHECK_ARG(items[i], "{}: items[{}] is NULL", fn, i);
      KILN_CHECK_ARG(items[i]->value.is_tensor(), "{}: items[{}] is {}, not a tensor", fn, i,
                     items[i]->value.describe());
      const kiln::Tensor& t = items[i]->value.tensor();
      KILN_CHECK_ARG(tensors.empty() || tensors[0].dtype() == t.dtype(),
                     "{}: items[{}] is {} but items[0] is {}; a sequence holds one element type",
                     fn, i, t.describe(), tensors[0].describe());
      tensors.push_back(t);
      v->borrowed.insert(v->borrowed.end(), items[i]->borrowed.begin(), items[i]->borrowed.end());
    }
    v->value = kiln::RtValue::sequence(std::move(tensors));
    *out = v.release();
  });
}

void kiln_value_destroy(KilnValue* value) {
  delete value;
}

KilnStatus kiln_value_kind(const KilnValue* value, KilnValueKind* kind) {
  return guarded([&] {
    KILN_CAPI_REQUIRE(value, "kiln_value_kind");
    KILN_CAPI_REQUIRE(kind, "kiln_value_kind");
    *kind = static_cast<KilnValueKind>(value->value.kind());
  });
}

KilnStatus kiln_value_dtype(const KilnValue* value, KilnDataType* dtype) {
  return guarded([&] {
    KILN_CAPI_REQUIRE(dtype, "kiln_value_dtype");
    *dtype = static_cast<KilnDataType>(kiln::capi::tensor_of(value, "kiln_value_dtype").dtype());
  });
}

KilnStatus kiln_value_rank(const KilnValue* value, size_t* rank) {
  return guarded([&] {
    KILN_CAPI_REQUIRE(rank, "kiln_value_rank");
    *rank = kiln::capi::tensor_of(value, "kiln_value_rank").rank();
  });
}

KilnStatus kiln_value_dims(const KilnValue* value, int64_t* dims, size_t capacity) {
  return guarded([&] {
    constexpr const char* fn = "kiln_value_dims";
    const kiln::Tensor& t = kiln::capi::tensor_of(value, fn);
    KILN_CHECK_ARG(capacity >= t.rank(), "{}: capacity {} is less than the rank {} of {}", fn,
                   capacity, t.rank(), t.describe());
    KILN_CHECK_ARG(dims || t.rank() == 0, "{}: argument 'dims' is NULL", fn);
    std::copy(t.dims().begin(), t.dims().end(), dims);
  });
}

KilnStatus kiln_value_numel(const KilnValue* value, int64_t* numel) {
  return guarded([&] {
    KILN_CAPI_REQUIRE(numel, "kiln_value_numel");
    *numel = kiln::capi::tensor_of(value, "kiln_value_numel").numel();
  });
}

KilnStatus kiln_value_data(const KilnValue* value, const void** data, size_t* size) {
  return guarded([&] {
    constexpr const char* fn = "kiln_value_data";
    KILN_CAPI_REQUIRE(data, fn);
    const kiln::Tensor& t = kiln::capi::tensor_of(value, fn);
    KILN_CHECK_ARG(t.dtype() != kiln::DataType::String,
                   "{}: {} is a string tensor; read it with kiln_value_string", fn, t.describe());
    *data = t.raw_data();
    if (size) *size = t.nbytes();
  });
}

KilnStatus kiln_value_string(const KilnValue* value, int64_t index, const char** data,
                             size_t* length) {
  return guarded([&] {
    constexpr const char* fn = "kiln_value_string";
    KILN_CAPI_REQUIRE(data, fn);
    KILN_CAPI_REQUIRE(length, fn);
    const kiln::Tensor& t = kiln::capi::tensor_of(value, fn);
    KILN_CHECK_ARG(t.dtype() == kiln::DataType::String, "{}: {} is not a string tensor", fn,
                   t.describe());
    KILN_CHECK_ARG(index >= 0 && index < t.numel(), "{}: index {} is out of range for {}", fn,
                   index, t.describe());
    const std::string& s = t.data<std::string>()[index];
    *data = s.data();
    *length = s.size();
  });
}

KilnStatus kiln_value_sequence_length(const KilnValue* value, size_t* length) {
  return guarded([&] {
    constexpr const char* fn = "kiln_value_sequence_length";
    KILN_CAPI_REQUIRE(value, fn);
    KILN_CAPI_REQUIRE(length, fn);
    KILN_CHECK_ARG(value->value.is_sequence(), "{}: the value is {}, not a sequence", fn,
                   value->value.describe());
    *length = value->value.sequence().size();
  });
}

KilnStatus kiln_value_sequence_item(const KilnValue* value, size_t index, KilnValue** item) {
  if (item) *item = nullptr;
  return guarded([&] {
    constexpr const char* fn = "kiln_value_sequence_item";
    KILN_CAPI_REQUIRE(value, fn);
    KILN_CAPI_REQUIRE(item, fn);
    KILN_CHECK_ARG(value->value.is_sequence(), "{}: the value is {}, not a sequence", fn,
                   value->value.describe());
    const auto& items = value->value.sequence();
    KILN_CHECK_ARG(index < items.size(), "{}: index {} is out of range (the sequence has {} items)",
                   fn, index, items.size());
    auto v = std::make_unique<KilnValue>();
    v->value = items[index];  // shares the buffer, like the sequence itself
    v->borrowed = value->borrowed;
    *item = v.release();
  });
}

}  // extern "C"
