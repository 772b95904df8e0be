// The C ABI's quantizer entry points (kiln.h, "Quantizer"), over kiln::compiler::quantize_model.
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "capi/capi_internal.hpp"
#include "compiler/quantize.hpp"
#include "core/closest_name.hpp"

struct KilnQuantizeOptions {
  kiln::compiler::QuantizeOptions options;
  bool op_types_given = false;  // the first op_type replaces the default list
};

struct KilnQuantizeResult {
  kiln::compiler::QuantizeResult result;
  std::string report;
};

namespace kiln::capi {
namespace {

constexpr const char* kSetConfig = "kiln_quantize_options_set_config";

bool parse_flag(const char* key, const std::string& v) {
  return parse_config_flag(kSetConfig, key, v);
}

double parse_number(const char* key, const std::string& v) {
  return parse_config_number(kSetConfig, key, v, -1e300);
}

void set_config(KilnQuantizeOptions& q, const char* key, const std::string& v) {
  compiler::QuantizeOptions& o = q.options;
  const std::string k = key;
  if (k == "method") {
    KILN_CHECK_ARG(v == "minmax" || v == "percentile" || v == "entropy",
                   "{}: 'method' takes \"minmax\", \"percentile\" or \"entropy\", got \"{}\"",
                   kSetConfig, v);
    o.method = v == "percentile" ? compiler::CalibrationMethod::Percentile
               : v == "entropy"  ? compiler::CalibrationMethod::Entropy
                                 : compiler::CalibrationMethod::MinMax;
  } else if (k == "calibration_cache") {
    o.calibration_cache = v;
  } else if (k == "metric") {
    const double timeout = o.metric.timeout_seconds;
    o.metric = compiler::parse_task_metric(v);
    o.metric.timeout_seconds = timeout;
  } else if (k == "metric_timeout") {
    o.metric.timeout_seconds = parse_number(key, v);
  } else if (k == "max_drop") {
    o.max_drop = parse_number(key, v);
  } else if (k == "sensitivity_report") {
    o.sensitivity_report = v;
  } else if (k == "per_channel") {
    o.per_channel = parse_flag(key, v);
  } else if (k == "quantized_residuals") {
    o.quantized_residuals = parse_flag(key, v);
  } else if (k == "dynamic") {
    o.dynamic = parse_flag(key, v);
  } else if (k == "int4") {
    o.int4 = parse_flag(key, v);
  } else if (k == "symmetric") {
    o.symmetric = parse_flag(key, v);
  } else if (k == "block_size") {
    const double b = parse_number(key, v);
    KILN_CHECK_ARG(b == 16 || b == 32 || b == 64 || b == 128 || b == 256,
                   "{}: 'block_size' takes 16, 32, 64, 128 or 256, got \"{}\"", kSetConfig, v);
    o.block_size = static_cast<int64_t>(b);
  } else if (k == "int4_method") {
    KILN_CHECK_ARG(v == "rtn" || v == "gptq",
                   "{}: 'int4_method' takes \"rtn\" or \"gptq\", got \"{}\"", kSetConfig, v);
    o.int4_method = v == "gptq" ? compiler::Int4Method::Gptq : compiler::Int4Method::Rtn;
  } else if (k == "gptq_damp") {
    o.gptq_damp = parse_number(key, v);
  } else if (k == "allow_drift") {
    o.allow_drift = parse_flag(key, v);
  } else if (k == "percentile") {
    o.percentile = parse_number(key, v);
  } else if (k == "min_cosine") {
    o.min_cosine = parse_number(key, v);
  } else if (k == "min_top1") {
    o.min_top1 = parse_number(key, v);
  } else if (k == "threads") {
    const double t = parse_number(key, v);
    KILN_CHECK_ARG(t >= 0 && t == static_cast<int>(t), "{}: 'threads' takes a whole number >= 0",
                   kSetConfig);
    o.threads = static_cast<int>(t);
  } else if (k == "seed") {
    const double s = parse_number(key, v);
    KILN_CHECK_ARG(s >= 0 && s == static_cast<double>(static_cast<uint64_t>(s)),
                   "{}: 'seed' takes a whole number >= 0", kSetConfig);
    o.calibration.seed = static_cast<uint64_t>(s);
  } else if (k == "calibration_dir") {
    o.calibration.calibration_dir = v;
  } else if (k == "calibration_npz") {
    KILN_CHECK_ARG(!v.empty(), "{}: 'calibration_npz' is empty", kSetConfig);
    o.calibration.calibration_npz.push_back(v);
  } else if (k == "fallback_nodes") {
    const double n = parse_number(key, v);
    KILN_CHECK_ARG(n >= 0 && n == static_cast<int>(n),
                   "{}: 'fallback_nodes' takes a whole number >= 0", kSetConfig);
    o.fallback_nodes = static_cast<int>(n);
  } else if (k == "max_collapsed") {
    const double share = parse_number(key, v);
    KILN_CHECK_ARG(share >= 0 && share <= 1, "{}: 'max_collapsed' takes a number in [0, 1]",
                   kSetConfig);
    o.max_collapsed = share;
  } else if (k == "exclude_node") {
    o.exclude_nodes.push_back(v);
  } else if (k == "op_type") {
    KILN_CHECK_ARG(!v.empty(), "{}: 'op_type' is empty", kSetConfig);
    if (!q.op_types_given) o.op_types.clear();
    q.op_types_given = true;
    o.op_types.push_back(v);
  } else {
    static const std::vector<std::string> keys = {"method",
                                                  "per_channel",
                                                  "dynamic",
                                                  "allow_drift",
                                                  "percentile",
                                                  "min_cosine",
                                                  "min_top1",
                                                  "threads",
                                                  "seed",
                                                  "calibration_dir",
                                                  "calibration_npz",
                                                  "exclude_node",
                                                  "op_type",
                                                  "fallback_nodes",
                                                  "int4",
                                                  "symmetric",
                                                  "block_size",
                                                  "int4_method",
                                                  "gptq_damp",
                                                  "calibration_cache",
                                                  "metric",
                                                  "metric_timeout",
                                                  "max_drop",
                                                  "sensitivity_report",
                                                  "max_collapsed",
                                                  "quantized_residuals"};
    fail(ErrorCode::InvalidArgument, "{}: unknown key '{}'{} (keys: {})", kSetConfig, k,
         did_you_mean(k, keys), quoted_list(keys));
  }
}

}  // namespace
}  // namespace kiln::capi

using kiln::capi::guarded;

extern "C" {

KilnStatus kiln_quantize_options_create(KilnQuantizeOptions** out) {
  return guarded([&] {
    KILN_CAPI_REQUIRE(out, "kiln_quantize_options_create");
    *out = new KilnQuantizeOptions();
  });
}

void kiln_quantize_options_destroy(KilnQuantizeOptions* options) {
  delete options;
}

KilnStatus kiln_quantize_options_set_config(KilnQuantizeOptions* options, const char* key,
                                            const char* value) {
  return guarded([&] {
    KILN_CAPI_REQUIRE(options, "kiln_quantize_options_set_config");
    KILN_CAPI_REQUIRE(key, "kiln_quantize_options_set_config");
    KILN_CAPI_REQUIRE(value, "kiln_quantize_options_set_config");
    kiln::capi::set_config(*options, key, value);
  });
}

KilnStatus kiln_quantize(const char* model_path, const char* output_path,
                         const KilnQuantizeOptions* options, KilnQuantizeResult** result) {
  return guarded([&] {
    KILN_CAPI_REQUIRE(model_path, "kiln_quantize");
    KILN_CAPI_REQUIRE(output_path, "kiln_quantize");
    kiln::compiler::QuantizeOptions o =
        options ? options->options : kiln::compiler::QuantizeOptions{};
    o.model_path = model_path;
    o.output_path = output_path;
    auto r = std::make_unique<KilnQuantizeResult>();
    o.on_report = [&r](std::string_view line) { r->report += line; };
    r->result = kiln::compiler::quantize_model(o);
    if (result) *result = r.release();
  });
}

void kiln_quantize_result_destroy(KilnQuantizeResult* result) {
  delete result;
}

KilnStatus kiln_quantize_result_report(const KilnQuantizeResult* result, const char** text) {
  return guarded([&] {
    KILN_CAPI_REQUIRE(result, "kiln_quantize_result_report");
    KILN_CAPI_REQUIRE(text, "kiln_quantize_result_report");
    *text = result->report.c_str();
  });
}

KilnStatus kiln_quantize_result_gate(const KilnQuantizeResult* result, int* passed,
                                     const char** failure, size_t* quantized_nodes) {
  return guarded([&] {
    KILN_CAPI_REQUIRE(result, "kiln_quantize_result_gate");
    if (passed) *passed = result->result.pass ? 1 : 0;
    if (failure) *failure = result->result.failure.c_str();
    if (quantized_nodes) *quantized_nodes = result->result.quantized_nodes;
  });
}

}  // extern "C"
