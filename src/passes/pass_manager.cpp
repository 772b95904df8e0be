#include "passes/pass_manager.hpp"

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <ostream>
#include <sstream>

#include "passes/passes.hpp"

namespace kiln::passes {

PassManagerOptions PassManagerOptions::from_env() {
  PassManagerOptions o;
  if (const char* env = std::getenv("KILN_DISABLE_PASSES")) {
    std::stringstream ss(env);
    for (std::string name; std::getline(ss, name, ',');) {
      if (!name.empty()) o.disabled.insert(name);
    }
  }
  return o;
}

PassManager& PassManager::add(Pass pass) {
  passes_.push_back(std::move(pass));
  return *this;
}

std::vector<PassStat> PassManager::run(ir::Graph& graph) const {
  std::set<std::string> known;
  for (const Pass& p : passes_) known.insert(std::string(p.name()));
  for (const std::string& name : options_.disabled) {
    KILN_CHECK_ARG(known.count(name), "cannot disable unknown pass '{}'", name);
  }
  KILN_CHECK_ARG(options_.dump_after.empty() || known.count(options_.dump_after),
                 "cannot dump after unknown pass '{}'", options_.dump_after);

  std::vector<PassStat> stats(passes_.size());
  for (int iteration = 0; iteration < options_.max_iterations; ++iteration) {
    bool changed_any = false;
    for (size_t i = 0; i < passes_.size(); ++i) {
      const Pass& pass = passes_[i];
      PassStat& stat = stats[i];
      stat.name = std::string(pass.name());
      if (options_.disabled.count(stat.name)) continue;
      auto start = std::chrono::steady_clock::now();
      bool changed = false;
      try {
        changed = pass.apply(graph);
        if (options_.validate) ir::validate_graph(graph);
      } catch (const Error& e) {
        std::string dump = (std::filesystem::temp_directory_path() /
                            fmt::format("kiln_pass_{}_failed.txt", stat.name))
                               .string();
        std::ofstream(dump) << ir::print_graph(graph);
        throw Error(e.code(), fmt::format("pass '{}' failed: {} (graph dumped to {})", stat.name,
                                          e.message(), dump));
      }
      double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
              .count();
      ++stat.runs;
      stat.changes += changed;
      stat.milliseconds += ms;
      changed_any |= changed;
      if (options_.trace) {
        *options_.trace << fmt::format("pass {:<28} iteration {} {:>8.2f} ms {}\n", stat.name,
                                       iteration, ms, changed ? "changed" : "");
      }
      if (options_.dump && stat.name == options_.dump_after && iteration == 0) {
        *options_.dump << "# graph after " << stat.name << "\n" << ir::print_graph(graph);
      }
    }
    if (!changed_any) break;
  }
  return stats;
}

namespace {

// The first device of a list ("gpu,cpu") is the one the fusions are for; "" is the CPU.
bool fuses_for_cpu(std::string_view device) {
  const std::string_view first = device.substr(0, device.find(','));
  return first == "cpu" || first.empty();
}

// A GPU target ("gpu", "cuda:sm_90", "hip:gfx90a"): where ai.kiln PointChain has a kernel.
bool targets_gpu(std::string_view device) {
  const std::string_view first = device.substr(0, device.find(','));
  return first == "gpu" || first.starts_with("cuda") || first.starts_with("hip");
}

}  // namespace

PassManager& add_default_passes(PassManager& pm, std::string_view device, bool float16_follows) {
  // On the GPU, torch's NaN-guarded attention fuses only in float16, which the matrix-tile
  // kernel (attention_tiles.hip) computes: in float32 gpu.attention (plain FMA, a query per
  // wavefront) ran BERT-base's at 47.8 us a layer at batch 1 and 675 at batch 32 on the H200,
  // where cuBLASLt's two products and the small kernels between took about 55 and 150 (the
  // whole model 0.80 vs 1.06 ms, 6.3 vs 11.9 ms).
  using NanGuard = FuseAttention::NanGuard;
  const NanGuard nan_guard =
      fuses_for_cpu(device) || float16_follows ? NanGuard::All : NanGuard::Float16;
  // Cleanup and folding first; layout simplifications next (they expose patterns); then the
  // transformer fusions, whose results (Gelu, LayerNormalization) the bias + activation fusion
  // and SkipLayerNormalization build on; the bias + activation fusion last, so that a bias
  // before a residual Add goes into SkipLayerNormalization rather than FusedMatMul.
  // On the CPU, the int8 weights of QDQ models stay int8 for FuseQuantizedOps (after the bias
  // and activation fusion, whose results it takes).
  const bool cpu = fuses_for_cpu(device);
  pm.add(EliminateIdentity{})
      .add(FoldConstants{.keep_int8_weights = cpu})
      .add(CancelTransposes{})
      .add(CollapseReshapes{})
      .add(FoldPadIntoConv{})
      .add(FuseConvBatchNorm{})
      .add(FuseGemmBatchNorm{})
      .add(FuseLayerNorm{})
      .add(FuseGelu{})
      .add(FuseSkipLayerNorm{})
      .add(FuseAttention{.nan_guard = nan_guard})
      .add(FuseBiasActivation{});
  if (cpu) pm.add(FuseQuantizedOps{});
  return pm.add(EliminateCommonSubexpressions{}).add(EliminateDeadCode{});
}

PassManager& add_device_passes(PassManager& pm, std::string_view device, bool float16_follows) {
  // The CPU's oneDNN convolution adds a residual with its sum post-op (onednn.conv), and runs a
  // 1x1 convolution with the depthwise one reading it as one primitive (onednn.conv_dw; float32
  // only: a float16 conversion after the passes would leave those nodes float32 between casts).
  if (fuses_for_cpu(device)) {
    pm.add(FuseConvResidual{});
    if (!float16_follows) pm.add(FuseConvDepthwise{});
    // cpu.attention reads and writes [.., S, N, H] operands through strides too.
    pm.add(FoldAttentionTransposes{});
    return pm.add(EliminateDeadCode{});
  }
  pm.add(FuseConvResidual{})
      .add(FoldClipIntoDepthwise{})
      .add(MergeParallelMatMuls{})
      .add(FoldAttentionTransposes{});
  // On by default since it ran on an H100 (2026-12-06, seventh session: its harness cases and
  // seven full-size models in float32 and float16 within the gate); KILN_GPU_POINT_CHAINS=0
  // leaves the ops apart (to compare).
  const char* chains = std::getenv("KILN_GPU_POINT_CHAINS");
  if (targets_gpu(device) && !(chains && std::string_view(chains) == "0"))
    pm.add(FusePointChains{});
  return pm.add(EliminateDeadCode{});
}

}  // namespace kiln::passes
