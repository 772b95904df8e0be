#include <filesystem>
#include <memory>
#include <optional>

#include <onnx/onnx-data.pb.h>
#include <onnx/onnx-ml.pb.h>

#include "core/regular_file.hpp"
#include "onnx/onnx_io.hpp"

namespace kiln::onnx_io {
namespace fs = std::filesystem;
namespace {

// Where an external tensor's bytes are: the keys of TensorProto.external_data.
struct ExternalRef {
  std::string location;
  int64_t offset = 0;
  std::optional<int64_t> length;  // absent: the tensor's own size
};

ExternalRef external_ref(const onnx::TensorProto& p, std::string_view context) {
  ExternalRef ref;
  for (const auto& kv : p.external_data()) {
    if (kv.key() == "location") {
      ref.location = kv.value();
    } else if (kv.key() == "offset" || kv.key() == "length") {
      int64_t v = -1;
      size_t used = 0;
      try {
        v = std::stoll(kv.value(), &used);
      } catch (const std::exception&) {
        used = 0;
      }
      KILN_CHECK_ARG(used > 0 && used == kv.value().size() && v >= 0,
                     "{}: external data {} '{}' is not a non-negative number", context, kv.key(),
                     kv.value());
      if (kv.key() == "offset")
        ref.offset = v;
      else
        ref.length = v;
    }
  }
  return ref;
}

// Resolves `location` relative to base_dir, refusing paths that leave it (absolute, "..", or a
// symlink pointing outside).
fs::path resolve_external(const std::string& base_dir, const std::string& location,
                          std::string_view context) {
  KILN_CHECK_ARG(!base_dir.empty(), "{}: external data '{}' but the model was not read from a file",
                 context, location);
  fs::path rel(location);
  KILN_CHECK_ARG(!rel.empty() && rel.is_relative(),
                 "{}: external data location '{}' must be a relative path", context, location);
  for (const auto& part : rel) {
    KILN_CHECK_ARG(part != "..", "{}: external data location '{}' leaves the model directory",
                   context, location);
  }
  std::error_code ec;
  fs::path base = fs::weakly_canonical(fs::path(base_dir), ec);
  fs::path full = fs::weakly_canonical(base / rel, ec);
  KILN_CHECK(!ec && fs::exists(full), ErrorCode::NotFound, "{}: external data file '{}' not found",
             context, location);
  auto [b, f] = std::mismatch(base.begin(), base.end(), full.begin(), full.end());
  KILN_CHECK_ARG(b == base.end(), "{}: external data location '{}' resolves outside '{}'", context,
                 location, base.string());
  return full;
}

// Opens the external data of a tensor whose stored form takes `want` bytes and checks, before
// anything is allocated or read, that it is a regular file holding those bytes where the tensor
// says. Only those bytes are read later: a longer file is not read to its end.
std::unique_ptr<RegularFile> open_external(const ExternalRef& ref, const std::string& base_dir,
                                           size_t want, std::string_view context) {
  fs::path full = resolve_external(base_dir, ref.location, context);
  auto file = std::make_unique<RegularFile>(
      full.string(), fmt::format("{}: external data location '{}',", context, ref.location));
  const uint64_t size = file->size();
  KILN_CHECK_ARG(static_cast<uint64_t>(ref.offset) <= size,
                 "{}: offset {} is past the end of '{}' ({} bytes)", context, ref.offset,
                 ref.location, size);
  KILN_CHECK_ARG(!ref.length || static_cast<uint64_t>(*ref.length) == want,
                 "{}: external data length {} in '{}' does not match the {} bytes the tensor "
                 "declares",
                 context, ref.length.value_or(0), ref.location, want);
  KILN_CHECK_ARG(want <= size - static_cast<uint64_t>(ref.offset),
                 "{}: needs {} bytes at offset {} of '{}', which has {} bytes", context, want,
                 ref.offset, ref.location, size);
  return file;
}

// The repeated field of TensorProto that holds `dtype`'s values when there is no raw_data, and
// how many values it holds.
struct TypedField {
  const char* name;
  int64_t size;
};

TypedField typed_field(const onnx::TensorProto& p, DataType dtype, std::string_view context) {
  if (dtype_is_low_precision(dtype)) return {"int32_data", p.int32_data_size()};
  switch (dtype) {
    case DataType::Float32:
      return {"float_data", p.float_data_size()};
    case DataType::Float64:
      return {"double_data", p.double_data_size()};
    case DataType::Int64:
      return {"int64_data", p.int64_data_size()};
    case DataType::UInt32:
    case DataType::UInt64:
      return {"uint64_data", p.uint64_data_size()};
    case DataType::Int32:
    case DataType::Int16:
    case DataType::Int8:
    case DataType::UInt16:
    case DataType::UInt8:
    case DataType::Bool:
    case DataType::Float16:
    case DataType::BFloat16:
      return {"int32_data", p.int32_data_size()};
    case DataType::String:
      return {"string_data", p.string_data_size()};
    default:
      fail(ErrorCode::Unsupported, "{}: element type {} is not supported", context,
           dtype_name(dtype));
  }
}

// The field's size was checked against the tensor's before the tensor was allocated.
template <typename T, typename Field>
void copy_field(Tensor& t, const Field& field) {
  T* out = t.data<T>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    if constexpr (std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>) {
      out[i] = T::from_bits(static_cast<uint16_t>(field[static_cast<int>(i)]));
    } else {
      out[i] = static_cast<T>(field[static_cast<int>(i)]);
    }
  }
}

// Bytes a packed sub-byte tensor of n elements takes (the last byte may be partly used).
size_t packed_bytes(int64_t n, int bits) {
  const int64_t per_byte = 8 / bits;
  return static_cast<size_t>((n + per_byte - 1) / per_byte);
}

// Unpacks `n` elements of `bits` bits (element 0 in the least significant bits of byte 0) into
// one byte each: sign-extended for int4/int2, the bare field for uint4/uint2/float4e2m1.
void unpack_sub_byte(Tensor& t, const uint8_t* packed) {
  const int bits = dtype_packed_bits(t.dtype());
  const int per_byte = 8 / bits;
  const uint8_t mask = static_cast<uint8_t>((1u << bits) - 1u);
  const bool sign_extend = t.dtype() == DataType::Int4 || t.dtype() == DataType::Int2;
  auto* out = static_cast<uint8_t*>(t.raw_data());
  for (int64_t i = 0; i < t.numel(); ++i) {
    uint8_t field = (packed[i / per_byte] >> ((i % per_byte) * bits)) & mask;
    if (sign_extend && (field >> (bits - 1))) field = static_cast<uint8_t>(field | ~mask);
    out[i] = field;
  }
}

std::string pack_sub_byte(const Tensor& t) {
  const int bits = dtype_packed_bits(t.dtype());
  const int per_byte = 8 / bits;
  const uint8_t mask = static_cast<uint8_t>((1u << bits) - 1u);
  std::string packed(packed_bytes(t.numel(), bits), '\0');
  const auto* in = static_cast<const uint8_t*>(t.raw_data());
  for (int64_t i = 0; i < t.numel(); ++i) {
    packed[i / per_byte] = static_cast<char>(static_cast<uint8_t>(packed[i / per_byte]) |
                                             ((in[i] & mask) << ((i % per_byte) * bits)));
  }
  return packed;
}

}  // namespace

Tensor tensor_from_proto(const onnx::TensorProto& p, const std::string& base_dir,
                         std::string_view context_in) {
  std::string context =
      p.name().empty() ? std::string(context_in) : fmt::format("{} '{}'", context_in, p.name());
  KILN_CHECK(!p.has_segment(), ErrorCode::Unsupported, "{}: segmented tensors are not supported",
             context);
  DataType dtype = dtype_from_onnx(p.data_type(), context);
  dtype_require_supported(dtype, context);
  std::vector<int64_t> dims(p.dims().begin(), p.dims().end());
  for (int64_t d : dims) KILN_CHECK_ARG(d >= 0, "{}: negative dimension {}", context, d);
  const std::string declared = fmt::format("{}{}", dtype_name(dtype), dims_to_string(dims));

  // Sizes are checked against the bytes the proto (or its external file) really holds before the
  // tensor is allocated: a few bytes of model must not make Kiln allocate and touch gigabytes
  // before it refuses them.
  int64_t numel = 1;
  for (int64_t d : dims) {
    KILN_CHECK_ARG(!__builtin_mul_overflow(numel, d, &numel), "{}: element count of {} overflows",
                   context, declared);
  }
  KILN_CHECK_ARG(static_cast<size_t>(numel) <= Tensor::max_bytes() / dtype_size(dtype),
                 "{}: {} is larger than the tensor limit of {} bytes", context, declared,
                 Tensor::max_bytes());
  const int bits = dtype_packed_bits(dtype);
  // Bytes of the stored form (packed for sub-byte types); cannot overflow after the limit check.
  const size_t want =
      bits < 8 ? packed_bytes(numel, bits) : static_cast<size_t>(numel) * dtype_size(dtype);

  const bool external = p.data_location() == onnx::TensorProto::EXTERNAL;
  if (external || p.has_raw_data()) {
    KILN_CHECK_ARG(dtype != DataType::String, "{}: string tensors cannot use raw_data", context);
    std::unique_ptr<RegularFile> file;
    uint64_t offset = 0;
    if (external) {
      ExternalRef ref = external_ref(p, context);
      file = open_external(ref, base_dir, want, context);
      offset = static_cast<uint64_t>(ref.offset);
    } else {
      KILN_CHECK_ARG(p.raw_data().size() == want, "{}: {} bytes of data for {} ({} bytes expected)",
                     context, p.raw_data().size(), declared, want);
    }
    Tensor t(dtype, dims);
    if (bits < 8) {
      std::string packed;
      if (file) {
        packed.resize(want);
        file->read_at(offset, packed.data(), want);
      }
      const std::string& src = file ? packed : p.raw_data();
      unpack_sub_byte(t, reinterpret_cast<const uint8_t*>(src.data()));
    } else if (want && file) {
      file->read_at(offset, t.raw_data(), want);  // straight into the tensor: no staging copy
    } else if (want) {
      std::memcpy(t.raw_data(), p.raw_data().data(), want);
    }
    if (dtype == DataType::Bool) {  // normalize to 0/1 so kernels can trust bool bytes
      auto* b = static_cast<uint8_t*>(t.raw_data());
      for (int64_t i = 0; i < t.numel(); ++i) b[i] = b[i] != 0;
    }
    return t;
  }
  if (numel == 0) return Tensor(dtype, dims);
  const TypedField field = typed_field(p, dtype, context);
  // int32_data of float8 / 4-bit / 2-bit types holds one stored byte per entry.
  const int64_t field_want = dtype_is_low_precision(dtype) ? static_cast<int64_t>(want) : numel;
  KILN_CHECK_ARG(field.size != 0,
                 "{}: declares {} ({} bytes) but holds no data (no raw_data, {} or external data)",
                 context, declared, want, field.name);
  KILN_CHECK_ARG(field.size == field_want, "{}: {} holds {} values for {} ({} expected)", context,
                 field.name, field.size, declared, field_want);
  Tensor t(dtype, dims);
  if (dtype_is_low_precision(dtype)) {
    std::vector<uint8_t> bytes(want);
    for (size_t i = 0; i < want; ++i) {
      const int32_t v = p.int32_data(static_cast<int>(i));
      KILN_CHECK_ARG(v >= 0 && v <= 255, "{}: int32_data value {} is not a byte", context, v);
      bytes[i] = static_cast<uint8_t>(v);
    }
    if (bits < 8) {
      unpack_sub_byte(t, bytes.data());
    } else {
      std::memcpy(t.raw_data(), bytes.data(), want);
    }
    return t;
  }
  switch (dtype) {
    case DataType::Float32:
      copy_field<float>(t, p.float_data());
      break;
    case DataType::Float64:
      copy_field<double>(t, p.double_data());
      break;
    case DataType::Int64:
      copy_field<int64_t>(t, p.int64_data());
      break;
    case DataType::UInt32:
      copy_field<uint32_t>(t, p.uint64_data());
      break;
    case DataType::UInt64:
      copy_field<uint64_t>(t, p.uint64_data());
      break;
    case DataType::Int32:
      copy_field<int32_t>(t, p.int32_data());
      break;
    case DataType::Int16:
      copy_field<int16_t>(t, p.int32_data());
      break;
    case DataType::Int8:
      copy_field<int8_t>(t, p.int32_data());
      break;
    case DataType::UInt16:
      copy_field<uint16_t>(t, p.int32_data());
      break;
    case DataType::UInt8:
      copy_field<uint8_t>(t, p.int32_data());
      break;
    case DataType::Bool:
      copy_field<bool>(t, p.int32_data());
      break;
    case DataType::Float16:
      copy_field<Float16>(t, p.int32_data());
      break;
    case DataType::BFloat16:
      copy_field<BFloat16>(t, p.int32_data());
      break;
    case DataType::String: {
      std::string* out = t.data<std::string>();
      for (int64_t i = 0; i < t.numel(); ++i) out[i] = p.string_data(static_cast<int>(i));
      break;
    }
    default:
      fail(ErrorCode::Unsupported, "{}: element type {} is not supported", context,
           dtype_name(dtype));
  }
  return t;
}

onnx::TensorProto tensor_to_proto(const Tensor& t, const std::string& name) {
  onnx::TensorProto p;
  p.set_name(name);
  p.set_data_type(static_cast<int32_t>(t.dtype()));
  for (int64_t d : t.dims()) p.add_dims(d);
  if (t.dtype() == DataType::String) {
    for (const std::string& s : t.values<std::string>()) p.add_string_data(s);
  } else if (dtype_packed_bits(t.dtype()) < 8) {
    p.set_raw_data(pack_sub_byte(t));
  } else {
    p.set_raw_data(t.raw_data(), t.nbytes());
  }
  return p;
}

TypeInfo type_from_proto(const onnx::TypeProto& p, std::string_view context) {
  switch (p.value_case()) {
    case onnx::TypeProto::kTensorType: {
      const auto& tt = p.tensor_type();
      DataType dtype =
          tt.elem_type() == 0 ? DataType::Undefined : dtype_from_onnx(tt.elem_type(), context);
      if (!tt.has_shape()) return TypeInfo::tensor(dtype);
      std::vector<Dim> dims;
      for (const auto& d : tt.shape().dim()) {
        if (d.has_dim_value() && d.dim_value() == -1) {
          // paddle2onnx and older exporters mark a dynamic dim with -1, as onnxruntime reads it.
          dims.emplace_back();
        } else if (d.has_dim_value()) {
          KILN_CHECK_ARG(d.dim_value() >= 0, "{}: dimension {} is neither a size nor -1 (dynamic)",
                         context, d.dim_value());
          dims.emplace_back(d.dim_value());
        } else if (d.has_dim_param() && !d.dim_param().empty()) {
          dims.push_back(Dim::symbol(d.dim_param()));
        } else {
          dims.emplace_back();
        }
      }
      return TypeInfo::tensor(dtype, Shape(std::move(dims)));
    }
    case onnx::TypeProto::kSequenceType:
      return TypeInfo::wrap(TypeInfo::Kind::Sequence,
                            p.sequence_type().has_elem_type()
                                ? type_from_proto(p.sequence_type().elem_type(), context)
                                : TypeInfo{});
    case onnx::TypeProto::kOptionalType:
      return TypeInfo::wrap(TypeInfo::Kind::Optional,
                            p.optional_type().has_elem_type()
                                ? type_from_proto(p.optional_type().elem_type(), context)
                                : TypeInfo{});
    case onnx::TypeProto::kMapType:
      fail(ErrorCode::Unsupported, "{}: map types are not supported", context);
    case onnx::TypeProto::kSparseTensorType:
      fail(ErrorCode::Unsupported, "{}: sparse tensor types are not supported", context);
    default:
      return {};
  }
}

void type_to_proto(const TypeInfo& type, onnx::TypeProto* p) {
  switch (type.kind) {
    case TypeInfo::Kind::Tensor: {
      auto* tt = p->mutable_tensor_type();
      tt->set_elem_type(static_cast<int32_t>(type.dtype));
      if (type.shape) {
        auto* shape = tt->mutable_shape();
        for (const Dim& d : type.shape->dims()) {
          auto* dim = shape->add_dim();
          if (d.is_static())
            dim->set_dim_value(d.value());
          else if (d.is_symbolic())
            dim->set_dim_param(d.symbol_name());
        }
      }
      break;
    }
    case TypeInfo::Kind::Sequence:
      type_to_proto(type.elem ? *type.elem : TypeInfo{},
                    p->mutable_sequence_type()->mutable_elem_type());
      break;
    case TypeInfo::Kind::Optional:
      type_to_proto(type.elem ? *type.elem : TypeInfo{},
                    p->mutable_optional_type()->mutable_elem_type());
      break;
    case TypeInfo::Kind::Unknown:
      break;
  }
}

namespace {

// Protobuf parses at most 2 GiB.
std::string read_file(const std::string& path) {
  return RegularFile(path, "value file").read_all(INT32_MAX);
}

RtValue value_from_sequence(const onnx::SequenceProto& s, const std::string& path) {
  KILN_CHECK(s.elem_type() == onnx::SequenceProto::TENSOR || s.tensor_values_size() > 0 ||
                 s.elem_type() == onnx::SequenceProto::UNDEFINED,
             ErrorCode::Unsupported, "'{}': only sequences of tensors are supported", path);
  std::vector<Tensor> items;
  for (const auto& t : s.tensor_values()) items.push_back(tensor_from_proto(t, "", path));
  return RtValue::sequence(std::move(items));
}

}  // namespace

RtValue read_value_file(const std::string& path, const TypeInfo& expected) {
  std::string bytes = read_file(path);
  if (expected.kind == TypeInfo::Kind::Sequence) {
    onnx::SequenceProto s;
    KILN_CHECK_ARG(s.ParseFromString(bytes), "'{}' is not a SequenceProto", path);
    return value_from_sequence(s, path);
  }
  if (expected.kind == TypeInfo::Kind::Optional) {
    onnx::OptionalProto o;
    KILN_CHECK_ARG(o.ParseFromString(bytes), "'{}' is not an OptionalProto", path);
    if (o.has_tensor_value()) return tensor_from_proto(o.tensor_value(), "", path);
    if (o.has_sequence_value()) return value_from_sequence(o.sequence_value(), path);
    return RtValue();
  }
  onnx::TensorProto t;
  KILN_CHECK_ARG(t.ParseFromString(bytes), "'{}' is not a TensorProto", path);
  return tensor_from_proto(t, "", path);
}

}  // namespace kiln::onnx_io
