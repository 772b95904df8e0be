#pragma once
// `kiln prune`: weight pruning of an ONNX model, held to the same task gate as `kiln quantize`
// (output_agreement.hpp), reporting sparsity, parameters, file size and FLOPs before and after.
//
// Methods:
// - magnitude: the smallest |w| of every Conv / MatMul / Gemm weight set to zero (per layer at
//   the ratio, or `global`: one threshold over every layer). A mask: the model keeps its shape.
// - 2:4: in every 4 consecutive weights along the reduction axis (input channels, K) the 2
//   smallest set to zero (layers whose reduction axis is not a multiple of 4 are left alone).
// - channels: whole output channels of a Conv (output features of a Gemm / MatMul) removed by a
//   criterion, and every tensor downstream indexed by them cut to match (prune_channels.hpp):
//   a smaller dense model. Layers whose channels join another branch (residual Add, Concat) are
//   left alone and named with the reason.
//
// The gate: the pruned model and the float one run on the input sets; each output's cosine must
// reach min_cosine (and top-1 agreement min_top1 when given), else the model is not written
// (allow_drift writes it). `search` finds, layer by layer, the largest ratio (up to `ratio`, in
// steps) at which the model still passes with that layer alone pruned, then lowers the ratios of
// the most sensitive layers until all of them together pass.
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "compiler/precision_gate.hpp"
#include "compiler/prune_channels.hpp"
#include "compiler/quantize.hpp"

namespace kiln::compiler {

enum class PruneMethod { Magnitude, TwoFour, Channels };

struct PruneOptions {
  std::string model_path;
  std::string output_path;
  PruneMethod method = PruneMethod::Channels;
  double ratio = 0.5;   // share of weights (magnitude) or output channels (channels) removed
  bool global = false;  // magnitude: one threshold over every layer instead of per layer
  ChannelCriterion criterion = ChannelCriterion::L1;
  int64_t channel_multiple = 1;  // kept channel counts rounded up to a multiple of this
  // channels: each reader's bias takes the removed channels' mean contribution, measured on the
  // input sets (prune_channels.hpp); readers without a bias get one.
  bool bias_compensation = true;
  // channels: layers whose channels meet at residual Adds are pruned together (the same
  // channels on every branch); off: they are left alone.
  bool residual_groups = true;
  std::map<std::string, double> layer_ratios;  // per-layer ratio, by display name
  std::vector<std::string> op_types = {"Conv", "MatMul", "Gemm"};
  std::vector<std::string> exclude_nodes;
  bool search = false;
  int search_steps = 4;  // ratios tried per layer: ratio * i / steps, i = 1..steps
  GateInputs calibration;
  double min_cosine = 0.99;
  std::optional<double> min_top1;
  bool allow_drift = false;
  int threads = 0;
  double run_timeout_seconds = 600;
  std::function<void(std::string_view)> on_report;
};

struct LayerPrune {
  std::string name;
  std::string op_type;
  std::vector<std::string> joined;  // channels: layers pruned with it (residual branches)
  double ratio = 0;                 // as asked
  int64_t parameters_before = 0, parameters_after = 0;
  int64_t zeros = 0;                                // in its weight, after
  int64_t channels_before = 0, channels_after = 0;  // channels method
};

struct ModelStats {
  int64_t parameters = 0;  // float initializer entries
  int64_t zeros = 0;
  double flops = 0;  // dense, as the FLOPs counter counts them
  size_t file_bytes = 0;
};

struct PruneResult {
  std::vector<LayerPrune> layers;
  std::vector<std::pair<std::string, std::string>> left_alone;  // layer, why
  ModelStats before, after;
  std::vector<OutputScore> outputs;
  std::vector<std::pair<std::string, double>> worst_nodes;
  bool pass = true;
  std::string failure;
  size_t input_sets = 0;
};

// Throws kiln::Error (InvalidArgument) for bad options (a ratio out of range, a layer ratio for a
// layer it cannot prune), a model with nothing to prune, and when the gate refuses without
// allow_drift.
PruneResult prune_model(const PruneOptions& options);

}  // namespace kiln::compiler
