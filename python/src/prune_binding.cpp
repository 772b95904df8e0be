// kiln._kiln._prune: the compiler library's prune_model for kiln.prune (kiln/prune.py), which
// checks and converts the keyword arguments into the dict this reads. The pruning releases the
// GIL; the report callback takes it again for each line.
#include <nanobind/nanobind.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <map>
#include <string>

#include "compiler/prune.hpp"
#include "feeds.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace kiln::python {
namespace {

compiler::PruneOptions options_from_dict(const nb::dict& d) {
  compiler::PruneOptions o;
  o.model_path = dict_get<std::string>(d, "model_path").value_or("");
  o.output_path = dict_get<std::string>(d, "output_path").value_or("");
  const std::string method = dict_get<std::string>(d, "method").value_or("channels");
  o.method = method == "magnitude" ? compiler::PruneMethod::Magnitude
             : method == "2:4"     ? compiler::PruneMethod::TwoFour
                                   : compiler::PruneMethod::Channels;
  o.ratio = dict_get<double>(d, "ratio").value_or(0.5);
  o.global = dict_get<bool>(d, "global").value_or(false);
  const std::string criterion = dict_get<std::string>(d, "criterion").value_or("l1");
  o.criterion = criterion == "l2"         ? compiler::ChannelCriterion::L2
                : criterion == "bn-gamma" ? compiler::ChannelCriterion::BatchNormGamma

                : criterion == "contribution" ? compiler::ChannelCriterion::Contribution
                                              : compiler::ChannelCriterion::L1;
  o.channel_multiple = dict_get<int64_t>(d, "channel_multiple").value_or(1);
  o.bias_compensation = dict_get<bool>(d, "bias_compensation").value_or(true);
  o.residual_groups = dict_get<bool>(d, "residual_groups").value_or(true);
  o.layer_ratios =
      dict_get<std::map<std::string, double>>(d, "layer_ratios").value_or(o.layer_ratios);
  if (auto ops = dict_get<std::vector<std::string>>(d, "op_types")) o.op_types = *ops;
  o.exclude_nodes =
      dict_get<std::vector<std::string>>(d, "exclude_nodes").value_or(std::vector<std::string>{});
  o.search = dict_get<bool>(d, "search").value_or(false);
  o.search_steps = dict_get<int>(d, "search_steps").value_or(4);
  o.min_cosine = dict_get<double>(d, "min_cosine").value_or(0.99);
  o.min_top1 = dict_get<double>(d, "min_top1");
  o.allow_drift = dict_get<bool>(d, "allow_drift").value_or(false);
  o.threads = dict_get<int>(d, "threads").value_or(0);
  o.calibration.calibration_dir = dict_get<std::string>(d, "calibration_dir").value_or("");
  o.calibration.seed = dict_get<uint64_t>(d, "seed").value_or(0);
  o.calibration.calibration = calibration_sets(d);
  return o;
}

nb::dict stats_to_dict(const compiler::ModelStats& s) {
  nb::dict d;
  d["parameters"] = s.parameters;
  d["zeros"] = s.zeros;
  d["flops"] = s.flops;
  d["file_bytes"] = s.file_bytes;
  return d;
}

nb::dict result_to_dict(const compiler::PruneResult& r) {
  nb::dict d;
  nb::list layers;
  for (const compiler::LayerPrune& l : r.layers) {
    nb::dict e;
    e["name"] = l.name;
    e["op_type"] = l.op_type;
    e["joined"] = l.joined;
    e["ratio"] = l.ratio;
    e["parameters_before"] = l.parameters_before;
    e["parameters_after"] = l.parameters_after;
    e["zeros"] = l.zeros;
    e["channels_before"] = l.channels_before;
    e["channels_after"] = l.channels_after;
    layers.append(e);
  }
  d["layers"] = layers;
  nb::list left;
  for (const auto& [name, why] : r.left_alone) left.append(nb::make_tuple(name, why));
  d["left_alone"] = left;
  d["before"] = stats_to_dict(r.before);
  d["after"] = stats_to_dict(r.after);
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
  d["input_sets"] = r.input_sets;
  return d;
}

}  // namespace

void bind_prune(nb::module_& m) {
  m.def(
      "_prune",
      [](const nb::dict& options, nb::object log) {
        compiler::PruneOptions o = options_from_dict(options);
        std::string report;
        o.on_report = [&report, log](std::string_view line) {
          report += line;
          if (log.is_none()) return;
          nb::gil_scoped_acquire gil;
          log("report", nb::str(line.data(), line.size()));
        };
        compiler::PruneResult r;
        {
          nb::gil_scoped_release release;
          r = compiler::prune_model(o);
        }
        nb::dict d = result_to_dict(r);
        d["report"] = report;
        return d;
      },
      "options"_a, "log"_a = nb::none());
}

}  // namespace kiln::python
