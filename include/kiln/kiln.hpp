// Kiln C++ API: a thin header-only layer over the C ABI (kiln.h) with RAII handles and exceptions.
// Link with libkiln.so. Needs C++17.
//
//   kiln::compile("model.onnx", "model.kiln", kiln::CompileOptions().add_shape("x:1..8x3"));
//
//   kiln::Session session("model.onnx", kiln::SessionOptions().set_threads(4));
//   std::vector<float> image(1 * 3 * 224 * 224);
//   std::map<std::string, kiln::Value> feeds;
//   feeds.emplace("input", kiln::Value::tensor<float>({1, 3, 224, 224}, image));
//   std::vector<kiln::Value> out = session.run({"logits"}, feeds);
//   const float* logits = out[0].data<float>();
//
// The classes live in an inline namespace so that their symbols never collide with Kiln's own
// C++ internals (which also use namespace kiln) inside one program.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kiln/kiln.h"

namespace kiln {
inline namespace capi_v1 {

// A failed call: its status and Kiln's message.
class Exception : public std::runtime_error {
 public:
  Exception(KilnStatus status, const std::string& message)
      : std::runtime_error(std::string("[") + kiln_status_name(status) + "] " + message),
        status_(status),
        message_(message) {}
  KilnStatus status() const noexcept { return status_; }
  // The message without the "[Status] " prefix that what() carries.
  const std::string& message() const noexcept { return message_; }

 private:
  KilnStatus status_;
  std::string message_;
};

inline void check(KilnStatus status) {
  if (status != KILN_OK) throw Exception(status, kiln_last_error_message());
}

inline std::string version() {
  return kiln_version();
}

namespace detail {

template <typename T, void (*Destroy)(T*)>
struct Deleter {
  void operator()(T* p) const noexcept { Destroy(p); }
};

template <typename T>
struct DataTypeOf;
#define KILN_HPP_DTYPE(cpp, code)                            \
  template <>                                                \
  struct DataTypeOf<cpp> {                                   \
    static constexpr KilnDataType value = KILN_DTYPE_##code; \
  };
KILN_HPP_DTYPE(float, FLOAT32)
KILN_HPP_DTYPE(double, FLOAT64)
KILN_HPP_DTYPE(int8_t, INT8)
KILN_HPP_DTYPE(int16_t, INT16)
KILN_HPP_DTYPE(int32_t, INT32)
KILN_HPP_DTYPE(int64_t, INT64)
KILN_HPP_DTYPE(uint8_t, UINT8)
KILN_HPP_DTYPE(uint16_t, UINT16)
KILN_HPP_DTYPE(uint32_t, UINT32)
KILN_HPP_DTYPE(uint64_t, UINT64)
KILN_HPP_DTYPE(bool, BOOL)
#undef KILN_HPP_DTYPE

}  // namespace detail

// The element type code of a C++ type (float -> KILN_DTYPE_FLOAT32, ...).
template <typename T>
inline constexpr KilnDataType dtype_of = detail::DataTypeOf<T>::value;

class SessionOptions {
 public:
  SessionOptions() {
    KilnSessionOptions* p = nullptr;
    check(kiln_options_create(&p));
    handle_.reset(p);
  }
  SessionOptions& set_threads(int threads) {
    check(kiln_options_set_threads(handle_.get(), threads));
    return *this;
  }
  SessionOptions& set_profiling(bool enable) {
    check(kiln_options_set_profiling(handle_.get(), enable ? 1 : 0));
    return *this;
  }
  SessionOptions& set_device(const std::string& device) {
    check(kiln_options_set_device(handle_.get(), device.c_str()));
    return *this;
  }
  SessionOptions& set_optimize(bool enable) {
    check(kiln_options_set_optimize(handle_.get(), enable ? 1 : 0));
    return *this;
  }
  SessionOptions& set_config(const std::string& key, const std::string& value) {
    check(kiln_options_set_config(handle_.get(), key.c_str(), value.c_str()));
    return *this;
  }
  const KilnSessionOptions* get() const noexcept { return handle_.get(); }

 private:
  std::unique_ptr<KilnSessionOptions, detail::Deleter<KilnSessionOptions, kiln_options_destroy>>
      handle_;
};

// A tensor, a sequence of tensors, or nothing (an absent optional). Move-only; owns its handle.
class Value {
 public:
  Value() = default;
  // Takes ownership of a handle from the C ABI.
  explicit Value(KilnValue* handle) noexcept : handle_(handle) {}

  // A tensor over `bytes` bytes at `data`, copied or borrowed (see KilnMemoryMode).
  static Value tensor(KilnDataType dtype, const std::vector<int64_t>& dims, const void* data,
                      size_t bytes, KilnMemoryMode mode = KILN_MEMORY_COPY) {
    KilnValue* v = nullptr;
    check(kiln_value_create_tensor(dtype, dims.data(), dims.size(), data, bytes, mode, &v));
    return Value(v);
  }
  template <typename T>
  static Value tensor(const std::vector<int64_t>& dims, const T* data, size_t count,
                      KilnMemoryMode mode = KILN_MEMORY_COPY) {
    return tensor(dtype_of<T>, dims, data, count * sizeof(T), mode);
  }
  template <typename T>
  static Value tensor(const std::vector<int64_t>& dims, const std::vector<T>& values,
                      KilnMemoryMode mode = KILN_MEMORY_COPY) {
    static_assert(!std::is_same_v<T, bool>, "std::vector<bool> is packed: pass a bool pointer");
    return tensor(dtype_of<T>, dims, values.data(), values.size() * sizeof(T), mode);
  }
  static Value strings(const std::vector<int64_t>& dims, const std::vector<std::string>& values) {
    std::vector<const char*> ptrs;
    std::vector<size_t> lengths;
    for (const std::string& s : values) {
      ptrs.push_back(s.data());
      lengths.push_back(s.size());
    }
    // The library reads exactly one string per element.
    if (values.size() != element_count(dims)) {
      throw Exception(KILN_INVALID_ARGUMENT, std::to_string(values.size()) +
                                                 " strings for a tensor of " +
                                                 std::to_string(element_count(dims)) + " elements");
    }
    KilnValue* v = nullptr;
    check(
        kiln_value_create_string_tensor(dims.data(), dims.size(), ptrs.data(), lengths.data(), &v));
    return Value(v);
  }
  static Value sequence(const std::vector<const Value*>& items) {
    std::vector<const KilnValue*> handles;
    for (const Value* item : items) handles.push_back(item ? item->get() : nullptr);
    KilnValue* v = nullptr;
    check(kiln_value_create_sequence(handles.data(), handles.size(), &v));
    return Value(v);
  }

  KilnValueKind kind() const {
    KilnValueKind k;
    check(kiln_value_kind(handle_.get(), &k));
    return k;
  }
  KilnDataType dtype() const {
    KilnDataType t;
    check(kiln_value_dtype(handle_.get(), &t));
    return t;
  }
  std::vector<int64_t> dims() const {
    size_t rank = 0;
    check(kiln_value_rank(handle_.get(), &rank));
    std::vector<int64_t> out(rank);
    check(kiln_value_dims(handle_.get(), out.data(), out.size()));
    return out;
  }
  int64_t numel() const {
    int64_t n = 0;
    check(kiln_value_numel(handle_.get(), &n));
    return n;
  }
  // The elements as T; throws when T is not the tensor's element type.
  template <typename T>
  const T* data() const {
    KilnDataType t = dtype();
    if (t != dtype_of<T>) {
      throw Exception(KILN_INVALID_ARGUMENT, std::string("the tensor holds ") + kiln_dtype_name(t) +
                                                 ", not " + kiln_dtype_name(dtype_of<T>));
    }
    const void* p = nullptr;
    check(kiln_value_data(handle_.get(), &p, nullptr));
    return static_cast<const T*>(p);
  }
  template <typename T>
  std::vector<T> to_vector() const {
    static_assert(!std::is_same_v<T, bool>, "std::vector<bool> is packed: use data<bool>()");
    const T* p = data<T>();
    return std::vector<T>(p, p + numel());
  }
  std::string string_at(int64_t index) const {
    const char* p = nullptr;
    size_t n = 0;
    check(kiln_value_string(handle_.get(), index, &p, &n));
    return std::string(p, n);
  }
  std::vector<std::string> strings() const {
    std::vector<std::string> out;
    for (int64_t i = 0, n = numel(); i < n; ++i) out.push_back(string_at(i));
    return out;
  }
  size_t sequence_length() const {
    size_t n = 0;
    check(kiln_value_sequence_length(handle_.get(), &n));
    return n;
  }
  Value sequence_item(size_t index) const {
    KilnValue* v = nullptr;
    check(kiln_value_sequence_item(handle_.get(), index, &v));
    return Value(v);
  }

  KilnValue* get() const noexcept { return handle_.get(); }
  KilnValue* release() noexcept { return handle_.release(); }
  explicit operator bool() const noexcept { return handle_ != nullptr; }

 private:
  static size_t element_count(const std::vector<int64_t>& dims) {
    size_t n = 1;
    for (int64_t d : dims) n *= d > 0 ? static_cast<size_t>(d) : 0;
    return n;
  }

  std::unique_ptr<KilnValue, detail::Deleter<KilnValue, kiln_value_destroy>> handle_;
};

struct Dim {
  int64_t value;       // -1 unless static
  std::string symbol;  // "" unless symbolic
  int64_t min, max;    // the declared range
};

struct IoInfo {
  std::string name;
  KilnTypeKind kind;
  KilnDataType dtype;  // of the tensors inside, for sequences and optionals
  int64_t rank;        // -1 when unknown
  std::vector<Dim> dims;
};

struct ProfileEntry {
  std::string node_name, op_type;
  double microseconds;
};

class Session {
 public:
  explicit Session(const std::string& path, const SessionOptions& options = SessionOptions()) {
    KilnSession* s = nullptr;
    check(kiln_session_open(path.c_str(), options.get(), &s));
    handle_.reset(s);
  }
  // From an ONNX model or engine in memory; the bytes are not kept.
  static Session from_memory(const void* data, size_t size,
                             const SessionOptions& options = SessionOptions()) {
    KilnSession* s = nullptr;
    check(kiln_session_open_from_memory(data, size, options.get(), &s));
    return Session(s);
  }

  size_t input_count() const {
    size_t n = 0;
    check(kiln_session_input_count(handle_.get(), &n));
    return n;
  }
  size_t output_count() const {
    size_t n = 0;
    check(kiln_session_output_count(handle_.get(), &n));
    return n;
  }
  IoInfo io_info(KilnIo io, size_t index) const {
    IoInfo info;
    const char* name = nullptr;
    check(kiln_session_io_name(handle_.get(), io, index, &name));
    info.name = name;
    check(kiln_session_io_type(handle_.get(), io, index, &info.kind, &info.dtype));
    check(kiln_session_io_rank(handle_.get(), io, index, &info.rank));
    for (int64_t axis = 0; axis < info.rank; ++axis) {
      KilnDim d;
      check(kiln_session_io_dim(handle_.get(), io, index, static_cast<size_t>(axis), &d));
      info.dims.push_back({d.value, d.symbol, d.min, d.max});
    }
    return info;
  }
  std::vector<IoInfo> inputs() const { return io_infos(KILN_IO_INPUT, input_count()); }
  std::vector<IoInfo> outputs() const { return io_infos(KILN_IO_OUTPUT, output_count()); }

  // Runs with feeds by name; returns the named outputs in order (all of them when empty).
  std::vector<Value> run(const std::vector<std::string>& output_names,
                         const std::map<std::string, Value>& feeds) {
    std::vector<const char*> in_names;
    std::vector<const KilnValue*> in_values;
    for (const auto& feed : feeds) {
      in_names.push_back(feed.first.c_str());
      in_values.push_back(feed.second.get());
    }
    std::vector<const char*> out_names;
    for (const std::string& n : output_names) out_names.push_back(n.c_str());
    size_t count = output_names.empty() ? output_count() : output_names.size();
    std::vector<KilnValue*> raw(count, nullptr);
    check(kiln_session_run(handle_.get(), in_names.data(), in_values.data(), in_names.size(),
                           output_names.empty() ? nullptr : out_names.data(), count, raw.data()));
    std::vector<Value> out;
    for (KilnValue* v : raw) out.emplace_back(v);
    return out;
  }

  std::vector<ProfileEntry> profile() const {
    KilnProfile* p = nullptr;
    check(kiln_session_profile(handle_.get(), &p));
    std::unique_ptr<KilnProfile, detail::Deleter<KilnProfile, kiln_profile_destroy>> owned(p);
    size_t n = 0;
    check(kiln_profile_count(p, &n));
    std::vector<ProfileEntry> out;
    for (size_t i = 0; i < n; ++i) {
      const char* node = nullptr;
      const char* op = nullptr;
      double us = 0;
      check(kiln_profile_entry(p, i, &node, &op, &us));
      out.push_back({node, op, us});
    }
    return out;
  }

  KilnSession* get() const noexcept { return handle_.get(); }

 private:
  explicit Session(KilnSession* handle) : handle_(handle) {}
  std::vector<IoInfo> io_infos(KilnIo io, size_t count) const {
    std::vector<IoInfo> out;
    for (size_t i = 0; i < count; ++i) out.push_back(io_info(io, i));
    return out;
  }

  std::unique_ptr<KilnSession, detail::Deleter<KilnSession, kiln_session_destroy>> handle_;
};

// Options of kiln::compile (kiln_compile_options_*), chainable like SessionOptions.
class CompileOptions {
 public:
  CompileOptions() {
    KilnCompileOptions* p = nullptr;
    check(kiln_compile_options_create(&p));
    handle_.reset(p);
  }
  // "NAME:1x3x224x224" or "NAME:1..64x3x224x224"; one call per input.
  CompileOptions& add_shape(const std::string& spec) {
    check(kiln_compile_options_add_shape(handle_.get(), spec.c_str()));
    return *this;
  }
  CompileOptions& set_fp16(bool enable) {
    check(kiln_compile_options_set_fp16(handle_.get(), enable ? 1 : 0));
    return *this;
  }
  CompileOptions& set_prepack(bool enable) {
    check(kiln_compile_options_set_prepack(handle_.get(), enable ? 1 : 0));
    return *this;
  }
  CompileOptions& set_verify(bool enable) {
    check(kiln_compile_options_set_verify(handle_.get(), enable ? 1 : 0));
    return *this;
  }
  CompileOptions& set_verify_full(bool enable) {
    check(kiln_compile_options_set_verify_full(handle_.get(), enable ? 1 : 0));
    return *this;
  }
  CompileOptions& set_device(const std::string& device) {
    check(kiln_compile_options_set_device(handle_.get(), device.c_str()));
    return *this;
  }
  CompileOptions& set_max_rel_l2(double limit) {
    check(kiln_compile_options_set_max_rel_l2(handle_.get(), limit));
    return *this;
  }
  CompileOptions& set_verify_timeout(double seconds) {
    check(kiln_compile_options_set_verify_timeout(handle_.get(), seconds));
    return *this;
  }
  CompileOptions& set_threads(int threads) {
    check(kiln_compile_options_set_threads(handle_.get(), threads));
    return *this;
  }
  // One calibration input set: name -> value (copied).
  CompileOptions& add_calibration_set(const std::map<std::string, Value>& set) {
    std::vector<const char*> names;
    std::vector<const KilnValue*> values;
    for (const auto& [name, value] : set) {
      names.push_back(name.c_str());
      values.push_back(value.get());
    }
    check(kiln_compile_options_add_calibration_set(handle_.get(), names.data(), values.data(),
                                                   names.size()));
    return *this;
  }
  CompileOptions& set_message_callback(KilnMessageCallback callback, void* user_data) {
    check(kiln_compile_options_set_message_callback(handle_.get(), callback, user_data));
    return *this;
  }
  CompileOptions& set_config(const std::string& key, const std::string& value) {
    check(kiln_compile_options_set_config(handle_.get(), key.c_str(), value.c_str()));
    return *this;
  }
  const KilnCompileOptions* get() const noexcept { return handle_.get(); }

 private:
  std::unique_ptr<KilnCompileOptions,
                  detail::Deleter<KilnCompileOptions, kiln_compile_options_destroy>>
      handle_;
};

// What kiln::compile wrote and found.
struct CompileResult {
  std::string engine_path;
  std::string report;  // the text `kiln compile` prints
  bool gate_ran = false, gate_passed = false;
  std::string gate_failure;
  size_t fallback_nodes = 0;       // nodes left on reference kernels
  double fallback_flop_share = 0;  // their share of the FLOPs, 0..1
  uint64_t engine_bytes = 0;
  double milliseconds = 0;
};

// Compiles the ONNX model at `model_path` into `output_path` ("" for the model's path with .kiln),
// as `kiln compile` does. Throws Exception (an engine the precision gate refuses is not written).
inline CompileResult compile(const std::string& model_path, const std::string& output_path = "",
                             const CompileOptions& options = CompileOptions()) {
  KilnCompileResult* p = nullptr;
  check(kiln_compile(model_path.c_str(), output_path.empty() ? nullptr : output_path.c_str(),
                     options.get(), &p));
  std::unique_ptr<KilnCompileResult,
                  detail::Deleter<KilnCompileResult, kiln_compile_result_destroy>>
      owned(p);
  CompileResult r;
  const char* text = nullptr;
  check(kiln_compile_result_engine_path(p, &text));
  r.engine_path = text;
  check(kiln_compile_result_report(p, &text));
  r.report = text;
  int ran = 0, passed = 0;
  check(kiln_compile_result_gate(p, &ran, &passed, &text));
  r.gate_ran = ran != 0;
  r.gate_passed = passed != 0;
  r.gate_failure = text;
  check(kiln_compile_result_fallbacks(p, &r.fallback_nodes, &r.fallback_flop_share));
  check(kiln_compile_result_stats(p, &r.engine_bytes, &r.milliseconds));
  return r;
}

}  // namespace capi_v1
}  // namespace kiln
