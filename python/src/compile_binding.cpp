// kiln._kiln._compile: the compiler library's compile_model for kiln.compile (kiln/compiler.py),
// which checks and converts the keyword arguments into the dict this reads. The compile releases
// the GIL; the log callback takes it again for each message.
#include <nanobind/nanobind.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <optional>
#include <string>

#include "compiler/compile.hpp"
#include "feeds.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace kiln::python {
namespace {

const char* kind_name(compiler::MessageKind kind) {
  switch (kind) {
    case compiler::MessageKind::Report:
      return "report";
    case compiler::MessageKind::Trace:
      return "trace";
    case compiler::MessageKind::Note:
      return "note";
    case compiler::MessageKind::Warning:
      return "warning";
  }
  return "report";
}

compiler::CompileOptions options_from_dict(const nb::dict& d) {
  compiler::CompileOptions o;
  o.model_path = dict_get<std::string>(d, "model_path").value_or("");
  if (auto bytes = dict_get<nb::bytes>(d, "model_bytes"))
    o.model_bytes.emplace(bytes->c_str(), bytes->size());
  o.output_path = dict_get<std::string>(d, "output_path").value_or("");
  o.shapes = dict_get<std::vector<std::string>>(d, "shapes").value_or(std::vector<std::string>{});
  o.optimize = dict_get<bool>(d, "optimize").value_or(true);
  o.dump_after = dict_get<std::string>(d, "dump_after").value_or("");
  o.trace_passes = dict_get<bool>(d, "trace_passes").value_or(false);
  o.fp16.enabled = dict_get<bool>(d, "fp16").value_or(false);
  o.fp16.bfloat16 = dict_get<bool>(d, "bf16").value_or(false);
  if (o.fp16.bfloat16) o.fp16.enabled = true;
  o.fp16.io_fp16 = dict_get<bool>(d, "fp16_io").value_or(false);
  o.fp16.range_check = dict_get<bool>(d, "fp16_range_check").value_or(true);
  o.fp16.keep_ops =
      dict_get<std::vector<std::string>>(d, "fp16_keep_ops").value_or(std::vector<std::string>{});
  o.prepack = dict_get<bool>(d, "prepack").value_or(true);
  o.target = dict_get<std::string>(d, "target").value_or("");
  o.verify = dict_get<bool>(d, "verify").value_or(true);
  o.verify_full = dict_get<bool>(d, "verify_full").value_or(false);
  o.device = dict_get<std::string>(d, "device").value_or("cpu");
  o.allow_drift = dict_get<bool>(d, "allow_drift").value_or(false);
  o.max_rel_l2 = dict_get<double>(d, "max_rel_l2");
  o.rtol = dict_get<double>(d, "rtol");
  o.atol = dict_get<double>(d, "atol");
  o.verify_timeout_seconds = dict_get<double>(d, "verify_timeout").value_or(60.0);
  o.inputs.calibration_dir = dict_get<std::string>(d, "calibration_dir").value_or("");
  o.inputs.files = dict_get<std::map<std::string, std::string>>(d, "inputs")
                       .value_or(std::map<std::string, std::string>{});
  o.inputs.dims = dict_get<std::map<std::string, int64_t>>(d, "dims").value_or(
      std::map<std::string, int64_t>{});
  o.inputs.seed = dict_get<uint64_t>(d, "seed").value_or(0);
  o.threads = dict_get<int>(d, "threads").value_or(0);
  o.inputs.calibration = calibration_sets(d);
  return o;
}

nb::dict result_to_dict(const compiler::CompileResult& r) {
  nb::dict d;
  d["engine_path"] = r.engine_path;
  d["engine_bytes"] = r.engine_bytes;
  d["weight_bytes"] = r.weight_bytes;
  d["nodes_before"] = r.nodes_before;
  d["nodes_after"] = r.nodes_after;
  d["kernels"] = r.plan.kernels;
  nb::list fallbacks;
  for (const compiler::FallbackNode& f : r.plan.fallbacks)
    fallbacks.append(nb::make_tuple(f.op_type, f.name, f.flops, f.reason));
  d["fallbacks"] = fallbacks;
  d["total_flops"] = r.plan.total_flops;
  d["fallback_flops"] = r.plan.fallback_flops;
  d["packed_weights"] = r.packed_weights;
  d["packed_bytes"] = r.packed_bytes;
  d["fp16_summary"] = r.fp16_summary;
  nb::dict gate;
  gate["ran"] = r.gate.ran;
  gate["passed"] = r.gate.pass;
  gate["failure"] = r.gate.failure;
  gate["source"] = r.gate.source;
  gate["input_sets"] = r.gate.input_sets;
  nb::dict worst;
  for (const auto& [name, v] : r.gate.worst_rel_l2) worst[nb::str(name.c_str())] = v;
  gate["worst_rel_l2"] = worst;
  gate["skipped"] = r.gate.skipped;
  d["gate"] = gate;
  const compiler::CompileTimings& t = r.timings;
  nb::dict ms;
  ms["import"] = t.import;
  ms["optimize"] = t.optimize;
  ms["fp16"] = t.fp16;
  ms["plan"] = t.plan;
  ms["pack"] = t.pack;
  ms["write"] = t.write;
  ms["read_back"] = t.read_back;
  ms["gate"] = t.gate;
  ms["total"] = t.total;
  d["timings_ms"] = ms;
  d["report"] = r.report;
  return d;
}

}  // namespace

std::vector<runtime::Feeds> calibration_sets(const nb::dict& d) {
  std::vector<runtime::Feeds> sets;
  if (!d.contains("calibration")) return sets;
  for (nb::handle set : nb::cast<nb::list>(d["calibration"])) {
    runtime::Feeds feeds;
    for (nb::handle item : nb::cast<nb::list>(set)) {
      nb::tuple pair = nb::cast<nb::tuple>(item);
      std::string name = nb::cast<std::string>(pair[0]);
      feeds[name] = value_from_feed(pair[1], fmt::format("calibration input '{}'", name));
    }
    sets.push_back(std::move(feeds));
  }
  return sets;
}

void bind_compile(nb::module_& m) {
  m.def(
      "_compile",
      [](const nb::dict& options, nb::object log) {
        compiler::CompileOptions o = options_from_dict(options);
        if (!log.is_none()) {
          o.on_message = [log](compiler::MessageKind kind, std::string_view text) {
            nb::gil_scoped_acquire gil;
            log(kind_name(kind), nb::str(text.data(), text.size()));
          };
        }
        compiler::CompileResult r;
        {
          nb::gil_scoped_release release;
          r = compiler::compile_model(o);
        }
        return result_to_dict(r);
      },
      "options"_a, "log"_a = nb::none());
}

}  // namespace kiln::python
