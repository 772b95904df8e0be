// kiln._kiln._quantize: the compiler library's quantize_model for kiln.quantize
// (kiln/quantize.py), which checks and converts the keyword arguments into the dict this reads.
// The quantization releases the GIL; the report callback takes it again for each line.
#include <nanobind/nanobind.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <optional>
#include <string>

#include "compiler/quantize.hpp"
#include "feeds.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace kiln::python {
namespace {

compiler::QuantizeOptions options_from_dict(const nb::dict& d) {
  compiler::QuantizeOptions o;
  o.model_path = dict_get<std::string>(d, "model_path").value_or("");
  o.output_path = dict_get<std::string>(d, "output_path").value_or("");
  const std::string method = dict_get<std::string>(d, "method").value_or("minmax");
  o.method = method == "percentile" ? compiler::CalibrationMethod::Percentile
             : method == "entropy"  ? compiler::CalibrationMethod::Entropy
                                    : compiler::CalibrationMethod::MinMax;
  o.calibration_cache = dict_get<std::string>(d, "calibration_cache").value_or("");
  o.metric = compiler::parse_task_metric(dict_get<std::string>(d, "metric").value_or("cosine"));
  o.metric.timeout_seconds = dict_get<double>(d, "metric_timeout").value_or(120);
  o.max_drop = dict_get<double>(d, "max_drop");
  o.sensitivity_report = dict_get<std::string>(d, "sensitivity_report").value_or("");
  o.percentile = dict_get<double>(d, "percentile").value_or(99.999);
  o.per_channel = dict_get<bool>(d, "per_channel").value_or(true);
  o.quantized_residuals = dict_get<bool>(d, "quantized_residuals").value_or(true);
  o.dynamic = dict_get<bool>(d, "dynamic").value_or(false);
  o.int4 = dict_get<bool>(d, "int4").value_or(false);
  o.block_size = dict_get<int64_t>(d, "block_size").value_or(32);
  o.symmetric = dict_get<bool>(d, "symmetric").value_or(false);
  o.int4_method = dict_get<std::string>(d, "int4_method").value_or("rtn") == "gptq"
                      ? compiler::Int4Method::Gptq
                      : compiler::Int4Method::Rtn;
  o.gptq_damp = dict_get<double>(d, "gptq_damp").value_or(0.01);
  if (auto ops = dict_get<std::vector<std::string>>(d, "op_types")) o.op_types = *ops;
  o.exclude_nodes =
      dict_get<std::vector<std::string>>(d, "exclude_nodes").value_or(std::vector<std::string>{});
  o.min_cosine = dict_get<double>(d, "min_cosine").value_or(0.99);
  o.fallback_nodes = dict_get<int>(d, "fallback_nodes").value_or(4);
  o.max_collapsed = dict_get<double>(d, "max_collapsed").value_or(0.5);
  o.min_top1 = dict_get<double>(d, "min_top1");
  o.allow_drift = dict_get<bool>(d, "allow_drift").value_or(false);
  o.threads = dict_get<int>(d, "threads").value_or(0);
  o.calibration.calibration_dir = dict_get<std::string>(d, "calibration_dir").value_or("");
  o.calibration.seed = dict_get<uint64_t>(d, "seed").value_or(0);
  o.calibration.calibration = calibration_sets(d);
  return o;
}

nb::dict result_to_dict(const compiler::QuantizeResult& r) {
  nb::dict d;
  d["quantized_nodes"] = r.quantized_nodes;
  d["activations"] = r.activations;
  d["quantized_residuals"] = r.quantized_residuals;
  d["weights"] = r.weights;
  d["calibration_sets"] = r.calibration_sets;
  d["calibration_cached"] = r.calibration_cached;
  auto optional = [](const std::optional<double>& v) { return v ? nb::cast(*v) : nb::none(); };
  d["metric_reference"] = optional(r.metric_reference);
  d["metric_score"] = optional(r.metric_score);
  d["metric_drop"] = optional(r.metric_drop);
  nb::list sensitivity;
  for (const auto& [node, drop] : r.sensitivity) sensitivity.append(nb::make_tuple(node, drop));
  d["sensitivity"] = sensitivity;
  nb::list outputs;
  for (const compiler::OutputScore& s : r.outputs) {
    outputs.append(nb::make_tuple(s.name, s.cosine, s.top1 ? nb::cast(*s.top1) : nb::none()));
  }
  d["outputs"] = outputs;
  nb::list worst;
  for (const auto& [name, c] : r.worst_nodes) worst.append(nb::make_tuple(name, c));
  d["worst_nodes"] = worst;
  d["passed"] = r.pass;
  d["failure"] = r.failure;
  d["kept_float"] = r.kept_float;
  nb::list collapsed;
  for (const auto& [name, share] : r.collapsed) collapsed.append(nb::make_tuple(name, share));
  d["collapsed"] = collapsed;
  d["float_weight_bytes"] = r.float_weight_bytes;
  d["int8_weight_bytes"] = r.int8_weight_bytes;
  d["int4_weight_bytes"] = r.int4_weight_bytes;
  d["gptq_weights"] = r.gptq_weights;
  return d;
}

}  // namespace

void bind_quantize(nb::module_& m) {
  m.def(
      "_quantize",
      [](const nb::dict& options, nb::object log) {
        compiler::QuantizeOptions o = options_from_dict(options);
        std::string report;
        o.on_report = [&report, log](std::string_view line) {
          report += line;
          if (log.is_none()) return;
          nb::gil_scoped_acquire gil;
          log("report", nb::str(line.data(), line.size()));
        };
        compiler::QuantizeResult r;
        {
          nb::gil_scoped_release release;
          r = compiler::quantize_model(o);
        }
        nb::dict d = result_to_dict(r);
        d["report"] = report;
        return d;
      },
      "options"_a, "log"_a = nb::none());
}

}  // namespace kiln::python
