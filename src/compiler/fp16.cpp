#include "compiler/fp16.hpp"

#include <map>
#include <set>

#include <fmt/format.h>

#include "passes/pass_manager.hpp"
#include "passes/passes.hpp"

namespace kiln::compiler {

std::string convert_model_to_fp16(ir::Model& model, const Fp16Options& o) {
  passes::Fp16Summary summary;
  passes::ConvertToFloat16 convert;
  convert.half_type = o.bfloat16 ? DataType::BFloat16 : DataType::Float16;
  convert.keep_io_types = !o.io_fp16;
  convert.keep_ops = std::set<std::string>(o.keep_ops.begin(), o.keep_ops.end());
  convert.keep_values = o.keep_values;
  convert.summary = &summary;
  passes::PassManagerOptions pm_options = passes::PassManagerOptions::from_env();
  pm_options.max_iterations = 1;  // the conversion runs once; the cleanup needs one round
  // KILN_DISABLE_PASSES names passes of the default pipeline: keep those this one runs too.
  std::set<std::string> disabled;
  for (const char* name :
       {"fold_constants", "eliminate_common_subexpressions", "eliminate_dead_code"}) {
    if (pm_options.disabled.count(name)) disabled.insert(name);
  }
  pm_options.disabled = disabled;
  passes::PassManager pm(pm_options);
  pm.add(convert)
      .add(passes::FoldConstants{})
      .add(passes::EliminateCommonSubexpressions{})
      .add(passes::EliminateDeadCode{});
  pm.run(*model.graph);
  const char* type = o.bfloat16 ? "bfloat16" : "float16";
  model.metadata[kPrecisionMetadataKey] = type;
  return fmt::format(
      "{}: {} of {} float nodes compute in {}, {} Casts at precision boundaries, {:.1f} MiB "
      "of float32 weights stored as {}{}{}\n",
      o.bfloat16 ? "bf16" : "fp16", summary.converted_nodes, summary.float_nodes, type,
      summary.casts, static_cast<double>(summary.weight_bytes_converted) / (1 << 20), type,
      summary.clamped.empty()
          ? ""
          : fmt::format(", {} initializers clamped to +-65504", summary.clamped.size()),
      summary.kept_for_range == 0
          ? ""
          : fmt::format(", {} nodes kept float32 for their range", summary.kept_for_range));
}

double default_max_rel_l2_of_precision(const std::string& precision) {
  if (precision == "float16") return kFp16DefaultMaxRelL2;
  if (precision == "bfloat16") return kBf16DefaultMaxRelL2;
  return 0;
}

std::string describe_precision(const ir::Graph& g) {
  size_t float_nodes = 0, half_nodes = 0;
  DataType half_type = DataType::Float16;
  for (const ir::Node* n : g.nodes()) {
    if (n->op_type() == "Cast" && n->domain().empty()) continue;
    bool half = false, any_float = false;
    for (const ir::Value* v : n->outputs()) {
      if (!v || !v->type().is_tensor() || !dtype_is_float(v->type().dtype)) continue;
      any_float = true;
      const DataType t = v->type().dtype;
      if (t == DataType::Float16 || t == DataType::BFloat16) half = true, half_type = t;
    }
    float_nodes += any_float;
    half_nodes += half;
  }
  std::map<DataType, size_t> weight_bytes;
  for (const auto& v : g.values()) {
    if (v->is_constant() && dtype_is_float(v->constant().dtype()))
      weight_bytes[v->constant().dtype()] += v->constant().nbytes();
  }
  const std::string half_name = half_type == DataType::BFloat16 ? "bfloat16" : "float16";
  std::string kind = half_nodes == 0             ? "float32"
                     : half_nodes == float_nodes ? half_name
                                                 : "mixed " + half_name + "/float32";
  std::string weights;
  for (const auto& [dtype, bytes] : weight_bytes) {
    const double b = static_cast<double>(bytes);
    std::string size = bytes >= (1 << 20) ? fmt::format("{:.2f} MiB", b / (1 << 20))
                                          : fmt::format("{:.1f} KiB", b / 1024);
    weights += fmt::format("{}{} {}", weights.empty() ? "" : ", ", size,
                           dtype == DataType::Float32 ? "float32" : dtype_name(dtype));
  }
  return fmt::format("precision: {} ({} of {} float nodes compute in {}{}{})\n", kind, half_nodes,
                     float_nodes, half_nodes ? half_name : "float16",
                     weights.empty() ? "" : "; float weights: ", weights);
}

}  // namespace kiln::compiler
