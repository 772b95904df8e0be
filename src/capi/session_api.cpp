// The C ABI's library, options, session and profile entry points (kiln.h), over kiln::Session.
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>

#include "capi/capi_internal.hpp"
#include "runtime/model_loader.hpp"

namespace kiln::capi {
namespace {

thread_local std::string t_last_error;

const kiln::SessionOptions& options_or_default(const KilnSessionOptions* options) {
  static const kiln::SessionOptions defaults;
  return options ? options->options : defaults;
}

const IoInfo& io_info(const KilnSession* session, KilnIo io, size_t index, const char* function) {
  KILN_CAPI_REQUIRE(session, function);
  KILN_CHECK_ARG(io == KILN_IO_INPUT || io == KILN_IO_OUTPUT,
                 "{}: io must be KILN_IO_INPUT or KILN_IO_OUTPUT, got {}", function,
                 static_cast<int>(io));
  const auto& list = io == KILN_IO_INPUT ? session->session->inputs() : session->session->outputs();
  const char* what = io == KILN_IO_INPUT ? "input" : "output";
  KILN_CHECK_ARG(index < list.size(), "{}: {} index {} is out of range (the model has {} {}s)",
                 function, what, index, list.size(), what);
  return list[index];
}

// The tensor type inside sequences and optionals (null when there is none).
const TypeInfo* innermost_tensor(const TypeInfo& type) {
  const TypeInfo* t = &type;
  while (t && !t->is_tensor()) t = t->elem.get();
  return t;
}

bool overlaps(const void* data, size_t bytes,
              const std::vector<std::pair<const void*, size_t>>& ranges) {
  auto begin = reinterpret_cast<uintptr_t>(data);
  for (const auto& [p, n] : ranges) {
    auto r = reinterpret_cast<uintptr_t>(p);
    if (begin < r + n && r < begin + std::max<size_t>(bytes, 1)) return true;
  }
  return false;
}

// An output that shares memory with a borrowed input is copied, so outputs never outlive the
// caller's buffers (Identity-like graphs hand their feeds straight back).
Tensor detach(const Tensor& t, const std::vector<std::pair<const void*, size_t>>& borrowed) {
  if (t.defined() && t.dtype() != DataType::String && overlaps(t.raw_data(), t.nbytes(), borrowed))
    return t.clone();
  return t;
}

}  // namespace

KilnStatus set_error(KilnStatus status, const char* message) noexcept {
  try {
    t_last_error = message;
  } catch (...) {
    t_last_error.clear();  // no memory for the message: an empty one beats none
  }
  return status;
}

bool parse_config_flag(const char* function, const char* key, const std::string& v) {
  if (v == "1" || v == "true") return true;
  if (v == "0" || v == "false") return false;
  fail(ErrorCode::InvalidArgument, "{}: '{}' takes \"0\" or \"1\", got \"{}\"", function, key, v);
}

double parse_config_number(const char* function, const char* key, const std::string& v,
                           double minimum) {
  char* end = nullptr;
  const double d = std::strtod(v.c_str(), &end);
  KILN_CHECK_ARG(!v.empty() && end == v.c_str() + v.size() && d >= minimum,
                 "{}: '{}' takes a number{}, got \"{}\"", function, key,
                 minimum > -1e300 ? fmt::format(" >= {}", minimum) : "", v);
  return d;
}

KilnStatus status_of(ErrorCode code) noexcept {
  switch (code) {
    case ErrorCode::InvalidArgument:
      return KILN_INVALID_ARGUMENT;
    case ErrorCode::NotFound:
      return KILN_NOT_FOUND;
    case ErrorCode::Unsupported:
      return KILN_UNSUPPORTED;
    case ErrorCode::Unavailable:
      return KILN_UNAVAILABLE;
    case ErrorCode::Internal:
      return KILN_INTERNAL;
  }
  return KILN_INTERNAL;
}

}  // namespace kiln::capi

using kiln::capi::guarded;

extern "C" {

const char* kiln_version(void) {
  return KILN_VERSION;
}

int kiln_api_version(void) {
  return KILN_API_VERSION;
}

const char* kiln_status_name(KilnStatus status) {
  switch (status) {
    case KILN_OK:
      return "OK";
    case KILN_INVALID_ARGUMENT:
      return "InvalidArgument";
    case KILN_NOT_FOUND:
      return "NotFound";
    case KILN_UNSUPPORTED:
      return "Unsupported";
    case KILN_UNAVAILABLE:
      return "Unavailable";
    case KILN_INTERNAL:
      return "Internal";
  }
  return "Unknown";
}

const char* kiln_last_error_message(void) {
  return kiln::capi::t_last_error.c_str();
}

// ---- Session options ----

KilnStatus kiln_options_create(KilnSessionOptions** out) {
  return guarded([&] {
    KILN_CAPI_REQUIRE(out, "kiln_options_create");
    *out = new KilnSessionOptions();
  });
}

void kiln_options_destroy(KilnSessionOptions* options) {
  delete options;
}

KilnStatus kiln_options_set_threads(KilnSessionOptions* options, int threads) {
  return guarded([&] {
    KILN_CAPI_REQUIRE(options, "kiln_options_set_threads");
    KILN_CHECK_ARG(threads >= 0,
                   "kiln_options_set_threads: threads must be 0 (one per core) or more, got {}",
                   threads);
    options->options.threads = threads;
  });
}

KilnStatus kiln_options_set_profiling(KilnSessionOptions* options, int enable) {
  return guarded([&] {
    KILN_CAPI_REQUIRE(options, "kiln_options_set_profiling");
    options->options.profiling = enable != 0;
  });
}

KilnStatus kiln_options_set_device(KilnSessionOptions* options, const char* device) {
  return guarded([&] {
    KILN_CAPI_REQUIRE(options, "kiln_options_set_device");
    KILN_CAPI_REQUIRE(device, "kiln_options_set_device");
    KILN_CHECK_ARG(*device, "kiln_options_set_device: the device name is empty");
    options->options.device = device;
  });
}

KilnStatus kiln_options_set_optimize(KilnSessionOptions* options, int enable) {
  return guarded([&] {
    KILN_CAPI_REQUIRE(options, "kiln_options_set_optimize");
    options->options.optimize = enable != 0;
  });
}

KilnStatus kiln_options_set_config(KilnSessionOptions* options, const char* key,
                                   const char* value) {
  return guarded([&] {
    KILN_CAPI_REQUIRE(options, "kiln_options_set_config");
    KILN_CAPI_REQUIRE(key, "kiln_options_set_config");
    KILN_CAPI_REQUIRE(value, "kiln_options_set_config");
    KILN_CHECK_ARG(*key, "kiln_options_set_config: the key is empty");
    options->options.config[key] = value;
  });
}

// ---- Session ----

KilnStatus kiln_session_open(const char* path, const KilnSessionOptions* options,
                             KilnSession** out) {
  if (out) *out = nullptr;
  return guarded([&] {
    KILN_CAPI_REQUIRE(path, "kiln_session_open");
    KILN_CAPI_REQUIRE(out, "kiln_session_open");
    KILN_CHECK_ARG(*path, "kiln_session_open: the path is empty");
    auto s = std::make_unique<KilnSession>();
    s->session = std::make_unique<kiln::Session>(path, kiln::capi::options_or_default(options));
    *out = s.release();
  });
}

KilnStatus kiln_session_open_from_memory(const void* data, size_t size,
                                         const KilnSessionOptions* options, KilnSession** out) {
  if (out) *out = nullptr;
  return guarded([&] {
    KILN_CAPI_REQUIRE(data, "kiln_session_open_from_memory");
    KILN_CAPI_REQUIRE(out, "kiln_session_open_from_memory");
    auto s = std::make_unique<KilnSession>();
    s->session = std::make_unique<kiln::Session>(
        kiln::runtime::load_model_bytes(std::string_view(static_cast<const char*>(data), size)),
        kiln::capi::options_or_default(options));
    *out = s.release();
  });
}

void kiln_session_destroy(KilnSession* session) {
  delete session;
}

KilnStatus kiln_session_input_count(const KilnSession* session, size_t* count) {
  return guarded([&] {
    KILN_CAPI_REQUIRE(session, "kiln_session_input_count");
    KILN_CAPI_REQUIRE(count, "kiln_session_input_count");
    *count = session->session->inputs().size();
  });
}

KilnStatus kiln_session_output_count(const KilnSession* session, size_t* count) {
  return guarded([&] {
    KILN_CAPI_REQUIRE(session, "kiln_session_output_count");
    KILN_CAPI_REQUIRE(count, "kiln_session_output_count");
    *count = session->session->outputs().size();
  });
}

KilnStatus kiln_session_io_name(const KilnSession* session, KilnIo io, size_t index,
                                const char** name) {
  return guarded([&] {
    KILN_CAPI_REQUIRE(name, "kiln_session_io_name");
    *name = kiln::capi::io_info(session, io, index, "kiln_session_io_name").name.c_str();
  });
}

KilnStatus kiln_session_io_type(const KilnSession* session, KilnIo io, size_t index,
                                KilnTypeKind* kind, KilnDataType* dtype) {
  return guarded([&] {
    const kiln::TypeInfo& type =
        kiln::capi::io_info(session, io, index, "kiln_session_io_type").type;
    if (kind) *kind = static_cast<KilnTypeKind>(type.kind);
    if (dtype) {
      const kiln::TypeInfo* t = kiln::capi::innermost_tensor(type);
      *dtype = static_cast<KilnDataType>(t ? t->dtype : kiln::DataType::Undefined);
    }
  });
}

KilnStatus kiln_session_io_rank(const KilnSession* session, KilnIo io, size_t index,
                                int64_t* rank) {
  return guarded([&] {
    KILN_CAPI_REQUIRE(rank, "kiln_session_io_rank");
    const kiln::TypeInfo& type =
        kiln::capi::io_info(session, io, index, "kiln_session_io_rank").type;
    *rank = type.is_tensor() && type.shape ? static_cast<int64_t>(type.shape->rank()) : -1;
  });
}

KilnStatus kiln_session_io_dims(const KilnSession* session, KilnIo io, size_t index, int64_t* dims,
                                size_t capacity) {
  return guarded([&] {
    constexpr const char* fn = "kiln_session_io_dims";
    const kiln::IoInfo& info = kiln::capi::io_info(session, io, index, fn);
    KILN_CHECK_ARG(info.type.is_tensor() && info.type.shape, "{}: '{}' has no known rank", fn,
                   info.name);
    const kiln::Shape& shape = *info.type.shape;
    KILN_CHECK_ARG(capacity >= shape.rank(), "{}: capacity {} is less than the rank {} of '{}'", fn,
                   capacity, shape.rank(), info.name);
    KILN_CHECK_ARG(dims || shape.rank() == 0, "{}: argument 'dims' is NULL", fn);
    for (size_t i = 0; i < shape.rank(); ++i)
      dims[i] = shape[i].is_static() ? shape[i].value() : -1;
  });
}

KilnStatus kiln_session_io_dim(const KilnSession* session, KilnIo io, size_t index, size_t axis,
                               KilnDim* dim) {
  return guarded([&] {
    constexpr const char* fn = "kiln_session_io_dim";
    KILN_CAPI_REQUIRE(dim, fn);
    const kiln::IoInfo& info = kiln::capi::io_info(session, io, index, fn);
    KILN_CHECK_ARG(info.type.is_tensor() && info.type.shape, "{}: '{}' has no known rank", fn,
                   info.name);
    KILN_CHECK_ARG(axis < info.type.shape->rank(),
                   "{}: axis {} is out of range for '{}' of rank {}", fn, axis, info.name,
                   info.type.shape->rank());
    const kiln::Dim& d = (*info.type.shape)[axis];
    dim->value = d.is_static() ? d.value() : -1;
    dim->symbol = d.symbol_name().c_str();
    dim->min = d.min();
    dim->max = d.max();
  });
}

KilnStatus kiln_session_run(KilnSession* session, const char* const* input_names,
                            const KilnValue* const* inputs, size_t input_count,
                            const char* const* output_names, size_t output_count,
                            KilnValue** outputs) {
  if (outputs) {
    for (size_t i = 0; i < output_count; ++i) outputs[i] = nullptr;
  }
  return guarded([&] {
    constexpr const char* fn = "kiln_session_run";
    KILN_CAPI_REQUIRE(session, fn);
    KILN_CHECK_ARG(input_count == 0 || (input_names && inputs),
                   "{}: input_names and inputs must not be NULL when input_count is {}", fn,
                   input_count);
    KILN_CHECK_ARG(output_count == 0 || outputs,
                   "{}: outputs must not be NULL when output_count is {}", fn, output_count);
    std::map<std::string, kiln::RtValue> feeds;
    std::vector<std::pair<const void*, size_t>> borrowed;
    for (size_t i = 0; i < input_count; ++i) {
      KILN_CHECK_ARG(input_names[i], "{}: input_names[{}] is NULL", fn, i);
      KILN_CHECK_ARG(inputs[i], "{}: inputs[{}] (for input '{}') is NULL", fn, i, input_names[i]);
      bool inserted = feeds.emplace(input_names[i], inputs[i]->value).second;
      KILN_CHECK_ARG(inserted, "{}: input '{}' is given twice", fn, input_names[i]);
      borrowed.insert(borrowed.end(), inputs[i]->borrowed.begin(), inputs[i]->borrowed.end());
    }
    std::vector<std::string> names;
    const size_t model_outputs = session->session->outputs().size();
    if (output_names) {
      for (size_t i = 0; i < output_count; ++i) {
        KILN_CHECK_ARG(output_names[i], "{}: output_names[{}] is NULL", fn, i);
        names.emplace_back(output_names[i]);
      }
    } else {
      KILN_CHECK_ARG(output_count == model_outputs,
                     "{}: output_names is NULL, so output_count must be the model's output count "
                     "{}, got {}",
                     fn, model_outputs, output_count);
    }
    if (output_names && output_count == 0) {
      // Nothing asked for: the run still checks the feeds (and profiles, when enabled).
      session->session->run({}, feeds);
      return;
    }
    std::vector<kiln::RtValue> results = session->session->run(names, feeds);
    std::vector<std::unique_ptr<KilnValue>> made;
    for (kiln::RtValue& r : results) {
      auto v = std::make_unique<KilnValue>();
      if (r.is_tensor()) {
        v->value = kiln::capi::detach(r.tensor(), borrowed);
      } else if (r.is_sequence()) {
        std::vector<kiln::Tensor> items;
        for (const kiln::Tensor& t : r.sequence()) items.push_back(kiln::capi::detach(t, borrowed));
        v->value = kiln::RtValue::sequence(std::move(items));
      }
      made.push_back(std::move(v));
    }
    KILN_CHECK(made.size() == output_count, kiln::ErrorCode::Internal,
               "{}: the run returned {} outputs for {} asked", fn, made.size(), output_count);
    for (size_t i = 0; i < output_count; ++i) outputs[i] = made[i].release();
  });
}

// ---- Profile ----

KilnStatus kiln_session_profile(const KilnSession* session, KilnProfile** out) {
  if (out) *out = nullptr;
  return guarded([&] {
    KILN_CAPI_REQUIRE(session, "kiln_session_profile");
    KILN_CAPI_REQUIRE(out, "kiln_session_profile");
    auto p = std::make_unique<KilnProfile>();
    for (const kiln::runtime::NodeTiming& t : session->session->last_profile()) {
      p->entries.push_back({t.node ? t.node->name() : std::string(),
                            t.node ? t.node->op_type() : std::string(), t.microseconds});
    }
    *out = p.release();
  });
}

void kiln_profile_destroy(KilnProfile* profile) {
  delete profile;
}

KilnStatus kiln_profile_count(const KilnProfile* profile, size_t* count) {
  return guarded([&] {
    KILN_CAPI_REQUIRE(profile, "kiln_profile_count");
    KILN_CAPI_REQUIRE(count, "kiln_profile_count");
    *count = profile->entries.size();
  });
}

KilnStatus kiln_profile_entry(const KilnProfile* profile, size_t index, const char** node_name,
                              const char** op_type, double* microseconds) {
  return guarded([&] {
    KILN_CAPI_REQUIRE(profile, "kiln_profile_entry");
    KILN_CHECK_ARG(index < profile->entries.size(),
                   "kiln_profile_entry: index {} is out of range (the profile has {} entries)",
                   index, profile->entries.size());
    const KilnProfile::Entry& e = profile->entries[index];
    if (node_name) *node_name = e.node_name.c_str();
    if (op_type) *op_type = e.op_type.c_str();
    if (microseconds) *microseconds = e.microseconds;
  });
}

}  // extern "C"
