// The C ABI's compiler entry points (kiln.h, "Compiler"), over kiln::compiler::compile_model.
#include <cstdlib>
#include <string>
#include <vector>

#include "capi/capi_internal.hpp"
#include "compiler/compile.hpp"
#include "compiler/shape_spec.hpp"
#include "core/closest_name.hpp"

struct KilnCompileOptions {
  kiln::compiler::CompileOptions options;
  KilnMessageCallback callback = nullptr;
  void* user_data = nullptr;
};

struct KilnCompileResult {
  kiln::compiler::CompileResult result;
};

namespace kiln::capi {
namespace {

constexpr const char* kSetConfig = "kiln_compile_options_set_config";

bool parse_flag(const char* key, const std::string& v) {
  return parse_config_flag(kSetConfig, key, v);
}

double parse_number(const char* key, const std::string& v) {
  return parse_config_number(kSetConfig, key, v, 0);
}

// "NAME=VALUE" -> (NAME, VALUE).
std::pair<std::string, std::string> parse_pair(const char* key, const std::string& v,
                                               const char* form) {
  auto eq = v.find('=');
  KILN_CHECK_ARG(eq != std::string::npos && eq > 0 && eq + 1 < v.size(),
                 "kiln_compile_options_set_config: '{}' takes \"{}\", got \"{}\"", key, form, v);
  return {v.substr(0, eq), v.substr(eq + 1)};
}

void set_config(compiler::CompileOptions& o, const char* key, const std::string& v) {
  const std::string k = key;
  if (k == "optimize") {
    o.optimize = parse_flag(key, v);
  } else if (k == "allow_drift") {
    o.allow_drift = parse_flag(key, v);
  } else if (k == "precision") {
    // The engine's compute precision: what kiln_compile_options_set_fp16 sets, or bfloat16.
    if (v == "fp32" || v == "float32") {
      o.fp16.enabled = o.fp16.bfloat16 = false;
    } else if (v == "fp16" || v == "float16") {
      o.fp16.enabled = true, o.fp16.bfloat16 = false;
    } else if (v == "bf16" || v == "bfloat16") {
      o.fp16.enabled = o.fp16.bfloat16 = true;
    } else {
      fail(ErrorCode::InvalidArgument,
           "kiln_compile_options_set_config: 'precision' takes fp32, fp16 or bf16, got \"{}\"", v);
    }
  } else if (k == "fp16_io") {
    o.fp16.io_fp16 = parse_flag(key, v);
  } else if (k == "fp16_range_check") {
    o.fp16.range_check = parse_flag(key, v);
  } else if (k == "trace_passes") {
    o.trace_passes = parse_flag(key, v);
  } else if (k == "target") {
    o.target = v;
  } else if (k == "dump_after") {
    o.dump_after = v;
  } else if (k == "calibration_dir") {
    o.inputs.calibration_dir = v;
  } else if (k == "calibration_npz") {
    KILN_CHECK_ARG(!v.empty(), "kiln_compile_options_set_config: 'calibration_npz' is empty");
    o.inputs.calibration_npz.push_back(v);
  } else if (k == "rtol") {
    o.rtol = parse_number(key, v);
  } else if (k == "atol") {
    o.atol = parse_number(key, v);
  } else if (k == "seed") {
    double seed = parse_number(key, v);
    KILN_CHECK_ARG(seed == static_cast<double>(static_cast<uint64_t>(seed)),
                   "kiln_compile_options_set_config: 'seed' takes a whole number, got \"{}\"", v);
    o.inputs.seed = static_cast<uint64_t>(seed);
  } else if (k == "dim") {
    auto [name, text] = parse_pair(key, v, "NAME=N");
    char* end = nullptr;
    long long n = std::strtoll(text.c_str(), &end, 10);
    KILN_CHECK_ARG(end == text.c_str() + text.size() && n >= 0,
                   "kiln_compile_options_set_config: 'dim' takes \"NAME=N\" with N >= 0, got "
                   "\"{}\"",
                   v);
    o.inputs.dims[name] = n;
  } else if (k == "input") {
    auto [name, path] = parse_pair(key, v, "NAME=FILE.pb");
    o.inputs.files[name] = path;
  } else if (k == "fp16_keep_op") {
    KILN_CHECK_ARG(!v.empty(), "kiln_compile_options_set_config: 'fp16_keep_op' is empty");
    o.fp16.keep_ops.push_back(v);
  } else {
    static const std::vector<std::string> keys = {"optimize",
                                                  "allow_drift",
                                                  "precision",
                                                  "fp16_io",
                                                  "trace_passes",
                                                  "target",
                                                  "dump_after",
                                                  "calibration_dir",
                                                  "calibration_npz",
                                                  "rtol",
                                                  "atol",
                                                  "seed",
                                                  "dim",
                                                  "input",
                                                  "fp16_keep_op",
                                                  "fp16_range_check"};
    fail(ErrorCode::InvalidArgument,
         "kiln_compile_options_set_config: unknown key '{}'{} (keys: {})", k, did_you_mean(k, keys),
         quoted_list(keys));
  }
}

// A copy that owns its memory: a KILN_MEMORY_BORROW value may be destroyed before the compile.
RtValue owned_copy(const RtValue& v) {
  if (v.is_tensor()) return v.tensor().clone();
  if (v.is_sequence()) {
    std::vector<Tensor> items;
    for (const Tensor& t : v.sequence()) items.push_back(t.clone());
    return RtValue::sequence(std::move(items));
  }
  return v;
}

const compiler::CompileResult& result_of(const KilnCompileResult* r, const char* function) {
  KILN_CAPI_REQUIRE(r, function);
  return r->result;
}

}  // namespace
}  // namespace kiln::capi

using kiln::capi::guarded;

extern "C" {

KilnStatus kiln_compile_options_create(KilnCompileOptions** out) {
  return guarded([&] {
    KILN_CAPI_REQUIRE(out, "kiln_compile_options_create");
    *out = new KilnCompileOptions();
  });
}

void kiln_compile_options_destroy(KilnCompileOptions* options) {
  delete options;
}

KilnStatus kiln_compile_options_add_shape(KilnCompileOptions* options, const char* spec) {
  return guarded([&] {
    KILN_CAPI_REQUIRE(options, "kiln_compile_options_add_shape");
    KILN_CAPI_REQUIRE(spec, "kiln_compile_options_add_shape");
    kiln::compiler::parse_shape_spec(spec);  // refused here, where the caller can tell which
    options->options.shapes.emplace_back(spec);
  });
}

KilnStatus kiln_compile_options_set_fp16(KilnCompileOptions* options, int enable) {
  return guarded([&] {
    KILN_CAPI_REQUIRE(options, "kiln_compile_options_set_fp16");
    options->options.fp16.enabled = enable != 0;
  });
}

KilnStatus kiln_compile_options_set_prepack(KilnCompileOptions* options, int enable) {
  return guarded([&] {
    KILN_CAPI_REQUIRE(options, "kiln_compile_options_set_prepack");
    options->options.prepack = enable != 0;
  });
}

KilnStatus kiln_compile_options_set_verify(KilnCompileOptions* options, int enable) {
  return guarded([&] {
    KILN_CAPI_REQUIRE(options, "kiln_compile_options_set_verify");
    options->options.verify = enable != 0;
  });
}

KilnStatus kiln_compile_options_set_verify_full(KilnCompileOptions* options, int enable) {
  return guarded([&] {
    KILN_CAPI_REQUIRE(options, "kiln_compile_options_set_verify_full");
    options->options.verify_full = enable != 0;
  });
}

KilnStatus kiln_compile_options_set_device(KilnCompileOptions* options, const char* device) {
  return guarded([&] {
    KILN_CAPI_REQUIRE(options, "kiln_compile_options_set_device");
    KILN_CHECK_ARG(device && *device, "kiln_compile_options_set_device: the device name is empty");
    options->options.device = device;
  });
}

KilnStatus kiln_compile_options_set_max_rel_l2(KilnCompileOptions* options, double max_rel_l2) {
  return guarded([&] {
    KILN_CAPI_REQUIRE(options, "kiln_compile_options_set_max_rel_l2");
    KILN_CHECK_ARG(max_rel_l2 >= 0,
                   "kiln_compile_options_set_max_rel_l2: the limit must be >= 0, got {}",
                   max_rel_l2);
    options->options.max_rel_l2 = max_rel_l2;
  });
}

KilnStatus kiln_compile_options_set_verify_timeout(KilnCompileOptions* options, double seconds) {
  return guarded([&] {
    KILN_CAPI_REQUIRE(options, "kiln_compile_options_set_verify_timeout");
    KILN_CHECK_ARG(seconds >= 0,
                   "kiln_compile_options_set_verify_timeout: seconds must be >= 0 (0: no limit), "
                   "got {}",
                   seconds);
    options->options.verify_timeout_seconds = seconds;
  });
}

KilnStatus kiln_compile_options_set_threads(KilnCompileOptions* options, int threads) {
  return guarded([&] {
    KILN_CAPI_REQUIRE(options, "kiln_compile_options_set_threads");
    KILN_CHECK_ARG(threads >= 0,
                   "kiln_compile_options_set_threads: threads must be 0 (one per core) or more, "
                   "got {}",
                   threads);
    options->options.threads = threads;
  });
}

KilnStatus kiln_compile_options_add_calibration_set(KilnCompileOptions* options,
                                                    const char* const* names,
                                                    const KilnValue* const* values, size_t count) {
  return guarded([&] {
    const char* fn = "kiln_compile_options_add_calibration_set";
    KILN_CAPI_REQUIRE(options, fn);
    KILN_CHECK_ARG(count > 0, "{}: an input set needs at least one value", fn);
    KILN_CAPI_REQUIRE(names, fn);
    KILN_CAPI_REQUIRE(values, fn);
    kiln::runtime::Feeds set;
    for (size_t i = 0; i < count; ++i) {
      KILN_CHECK_ARG(names[i] && values[i], "{}: names[{}] or values[{}] is NULL", fn, i, i);
      KILN_CHECK_ARG(set.emplace(names[i], kiln::capi::owned_copy(values[i]->value)).second,
                     "{}: input '{}' is given twice", fn, names[i]);
    }
    options->options.inputs.calibration.push_back(std::move(set));
  });
}

KilnStatus kiln_compile_options_set_message_callback(KilnCompileOptions* options,
                                                     KilnMessageCallback callback,
                                                     void* user_data) {
  return guarded([&] {
    KILN_CAPI_REQUIRE(options, "kiln_compile_options_set_message_callback");
    options->callback = callback;
    options->user_data = user_data;
  });
}

KilnStatus kiln_compile_options_set_config(KilnCompileOptions* options, const char* key,
                                           const char* value) {
  return guarded([&] {
    KILN_CAPI_REQUIRE(options, "kiln_compile_options_set_config");
    KILN_CAPI_REQUIRE(key, "kiln_compile_options_set_config");
    KILN_CAPI_REQUIRE(value, "kiln_compile_options_set_config");
    kiln::capi::set_config(options->options, key, value);
  });
}

KilnStatus kiln_compile(const char* model_path, const char* output_path,
                        const KilnCompileOptions* options, KilnCompileResult** result) {
  if (result) *result = nullptr;
  return guarded([&] {
    KILN_CAPI_REQUIRE(model_path, "kiln_compile");
    KILN_CHECK_ARG(*model_path, "kiln_compile: the model path is empty");
    kiln::compiler::CompileOptions o =
        options ? options->options : kiln::compiler::CompileOptions{};
    o.model_path = model_path;
    o.output_path = output_path ? output_path : "";
    if (options && options->callback) {
      KilnMessageCallback cb = options->callback;
      void* user = options->user_data;
      o.on_message = [cb, user](kiln::compiler::MessageKind kind, std::string_view text) {
        std::string line(text);  // NUL-terminated for C
        cb(user, static_cast<KilnMessageKind>(kind), line.c_str());
      };
    }
    auto r = std::make_unique<KilnCompileResult>();
    r->result = kiln::compiler::compile_model(o);
    if (result) *result = r.release();
  });
}

void kiln_compile_result_destroy(KilnCompileResult* result) {
  delete result;
}

KilnStatus kiln_compile_result_engine_path(const KilnCompileResult* result, const char** path) {
  return guarded([&] {
    const auto& r = kiln::capi::result_of(result, "kiln_compile_result_engine_path");
    KILN_CAPI_REQUIRE(path, "kiln_compile_result_engine_path");
    *path = r.engine_path.c_str();
  });
}

KilnStatus kiln_compile_result_report(const KilnCompileResult* result, const char** text) {
  return guarded([&] {
    const auto& r = kiln::capi::result_of(result, "kiln_compile_result_report");
    KILN_CAPI_REQUIRE(text, "kiln_compile_result_report");
    *text = r.report.c_str();
  });
}

KilnStatus kiln_compile_result_gate(const KilnCompileResult* result, int* ran, int* passed,
                                    const char** failure) {
  return guarded([&] {
    const auto& r = kiln::capi::result_of(result, "kiln_compile_result_gate");
    if (ran) *ran = r.gate.ran ? 1 : 0;
    if (passed) *passed = r.gate.pass ? 1 : 0;
    if (failure) *failure = r.gate.failure.c_str();
  });
}

KilnStatus kiln_compile_result_fallbacks(const KilnCompileResult* result, size_t* nodes,
                                         double* flop_share) {
  return guarded([&] {
    const auto& r = kiln::capi::result_of(result, "kiln_compile_result_fallbacks");
    if (nodes) *nodes = r.plan.fallbacks.size();
    if (flop_share) *flop_share = r.fallback_flop_share();
  });
}

KilnStatus kiln_compile_result_stats(const KilnCompileResult* result, uint64_t* engine_bytes,
                                     double* milliseconds) {
  return guarded([&] {
    const auto& r = kiln::capi::result_of(result, "kiln_compile_result_stats");
    if (engine_bytes) *engine_bytes = r.engine_bytes;
    if (milliseconds) *milliseconds = r.timings.total;
  });
}

}  // extern "C"
