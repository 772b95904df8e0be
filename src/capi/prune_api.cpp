// The C ABI's pruning entry points (kiln.h, "Pruner"), over kiln::compiler::prune_model.
#include <memory>
#include <string>
#include <vector>

#include "capi/capi_internal.hpp"
#include "compiler/prune.hpp"
#include "core/closest_name.hpp"

struct KilnPruneOptions {
  kiln::compiler::PruneOptions options;
  bool op_types_given = false;  // the first op_type replaces the default list
};

struct KilnPruneResult {
  kiln::compiler::PruneResult result;
  std::string report;
};

namespace kiln::capi {
namespace {

constexpr const char* kSetConfig = "kiln_prune_options_set_config";

double parse_number(const char* key, const std::string& v) {
  return parse_config_number(kSetConfig, key, v, -1e300);
}

int parse_count(const char* key, const std::string& v) {
  const double n = parse_number(key, v);
  KILN_CHECK_ARG(n >= 0 && n == static_cast<int>(n), "{}: '{}' takes a whole number >= 0",
                 kSetConfig, key);
  return static_cast<int>(n);
}

void set_config(KilnPruneOptions& p, const char* key, const std::string& v) {
  compiler::PruneOptions& o = p.options;
  const std::string k = key;
  if (k == "method") {
    KILN_CHECK_ARG(v == "channels" || v == "magnitude" || v == "2:4",
                   "{}: 'method' takes \"channels\", \"magnitude\" or \"2:4\", got \"{}\"",
                   kSetConfig, v);
    o.method = v == "magnitude" ? compiler::PruneMethod::Magnitude
               : v == "2:4"     ? compiler::PruneMethod::TwoFour
                                : compiler::PruneMethod::Channels;
  } else if (k == "criterion") {
    KILN_CHECK_ARG(v == "l1" || v == "l2" || v == "bn-gamma" || v == "contribution",
                   "{}: 'criterion' takes \"l1\", \"l2\", \"bn-gamma\" or \"contribution\", "
                   "got \"{}\"",
                   kSetConfig, v);
    o.criterion = v == "l2"             ? compiler::ChannelCriterion::L2
                  : v == "bn-gamma"     ? compiler::ChannelCriterion::BatchNormGamma
                  : v == "contribution" ? compiler::ChannelCriterion::Contribution
                                        : compiler::ChannelCriterion::L1;
  } else if (k == "ratio") {
    o.ratio = parse_number(key, v);
  } else if (k == "layer_ratio") {  // NAME=RATIO
    const size_t eq = v.rfind('=');
    KILN_CHECK_ARG(eq != std::string::npos && eq > 0,
                   "{}: 'layer_ratio' takes NAME=RATIO, got \"{}\"", kSetConfig, v);
    o.layer_ratios[v.substr(0, eq)] = parse_number(key, v.substr(eq + 1));
  } else if (k == "global") {
    o.global = parse_config_flag(kSetConfig, key, v);
  } else if (k == "bias_compensation") {
    o.bias_compensation = parse_config_flag(kSetConfig, key, v);
  } else if (k == "residual_groups") {
    o.residual_groups = parse_config_flag(kSetConfig, key, v);
  } else if (k == "search") {
    o.search = parse_config_flag(kSetConfig, key, v);
  } else if (k == "allow_drift") {
    o.allow_drift = parse_config_flag(kSetConfig, key, v);
  } else if (k == "search_steps") {
    o.search_steps = parse_count(key, v);
  } else if (k == "channel_multiple") {
    o.channel_multiple = parse_count(key, v);
  } else if (k == "min_cosine") {
    o.min_cosine = parse_number(key, v);
  } else if (k == "min_top1") {
    o.min_top1 = parse_number(key, v);
  } else if (k == "threads") {
    o.threads = parse_count(key, v);
  } else if (k == "seed") {
    o.calibration.seed = static_cast<uint64_t>(parse_count(key, v));
  } else if (k == "calibration_dir") {
    o.calibration.calibration_dir = v;
  } else if (k == "calibration_npz") {
    KILN_CHECK_ARG(!v.empty(), "{}: 'calibration_npz' is empty", kSetConfig);
    o.calibration.calibration_npz.push_back(v);
  } else if (k == "exclude_node") {
    o.exclude_nodes.push_back(v);
  } else if (k == "op_type") {
    KILN_CHECK_ARG(!v.empty(), "{}: 'op_type' is empty", kSetConfig);
    if (!p.op_types_given) o.op_types.clear();
    p.op_types_given = true;
    o.op_types.push_back(v);
  } else {
    static const std::vector<std::string> keys = {
        "method",         "criterion",       "ratio",
        "layer_ratio",    "global",          "search",
        "allow_drift",    "search_steps",    "channel_multiple",
        "min_cosine",     "min_top1",        "threads",
        "seed",           "calibration_dir", "calibration_npz",
        "exclude_node",   "op_type",         "bias_compensation",
        "residual_groups"};
    fail(ErrorCode::InvalidArgument, "{}: unknown key '{}'{} (keys: {})", kSetConfig, k,
         did_you_mean(k, keys), quoted_list(keys));
  }
}

}  // namespace
}  // namespace kiln::capi

using kiln::capi::guarded;

extern "C" {

KilnStatus kiln_prune_options_create(KilnPruneOptions** out) {
  return guarded([&] {
    KILN_CAPI_REQUIRE(out, "kiln_prune_options_create");
    *out = new KilnPruneOptions();
  });
}

void kiln_prune_options_destroy(KilnPruneOptions* options) {
  delete options;
}

KilnStatus kiln_prune_options_set_config(KilnPruneOptions* options, const char* key,
                                         const char* value) {
  return guarded([&] {
    KILN_CAPI_REQUIRE(options, "kiln_prune_options_set_config");
    KILN_CAPI_REQUIRE(key, "kiln_prune_options_set_config");
    KILN_CAPI_REQUIRE(value, "kiln_prune_options_set_config");
    kiln::capi::set_config(*options, key, value);
  });
}

KilnStatus kiln_prune(const char* model_path, const char* output_path,
                      const KilnPruneOptions* options, KilnPruneResult** result) {
  return guarded([&] {
    KILN_CAPI_REQUIRE(model_path, "kiln_prune");
    KILN_CAPI_REQUIRE(output_path, "kiln_prune");
    kiln::compiler::PruneOptions o = options ? options->options : kiln::compiler::PruneOptions{};
    o.model_path = model_path;
    o.output_path = output_path;
    auto r = std::make_unique<KilnPruneResult>();
    o.on_report = [&r](std::string_view line) { r->report += line; };
    r->result = kiln::compiler::prune_model(o);
    if (result) *result = r.release();
  });
}

void kiln_prune_result_destroy(KilnPruneResult* result) {
  delete result;
}

KilnStatus kiln_prune_result_report(const KilnPruneResult* result, const char** text) {
  return guarded([&] {
    KILN_CAPI_REQUIRE(result, "kiln_prune_result_report");
    KILN_CAPI_REQUIRE(text, "kiln_prune_result_report");
    *text = result->report.c_str();
  });
}

KilnStatus kiln_prune_result_gate(const KilnPruneResult* result, int* passed, const char** failure,
                                  size_t* pruned_layers) {
  return guarded([&] {
    KILN_CAPI_REQUIRE(result, "kiln_prune_result_gate");
    if (passed) *passed = result->result.pass ? 1 : 0;
    if (failure) *failure = result->result.failure.c_str();
    if (pruned_layers) *pruned_layers = result->result.layers.size();
  });
}

KilnStatus kiln_prune_result_sizes(const KilnPruneResult* result, int64_t* parameters_before,
                                   int64_t* parameters_after, double* flops_before,
                                   double* flops_after) {
  return guarded([&] {
    KILN_CAPI_REQUIRE(result, "kiln_prune_result_sizes");
    const auto& r = result->result;
    if (parameters_before) *parameters_before = r.before.parameters;
    if (parameters_after) *parameters_after = r.after.parameters;
    if (flops_before) *flops_before = r.before.flops;
    if (flops_after) *flops_after = r.after.flops;
  });
}

}  // extern "C"
