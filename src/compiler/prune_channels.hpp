#pragma once
// Structured channel pruning: a Conv's (or a Gemm's / MatMul's) whole output channels removed,
// and every tensor downstream that is indexed by those channels cut to match, so that the result
// is a smaller dense model.
//
// A layer's channel group is found by following its output through ops that keep channels apart
// (BatchNormalization, element-wise activations, Pad without padding of the channel axis,
// pooling, Flatten, Add / Mul / Sub / Div with a scalar or per-channel constant or with another
// value of the same group, depthwise Conv whose group count follows the channels) until every
// path ends in a consumer that sums over the channels: a Conv with group 1 (its input channels
// cut), a Gemm or MatMul (its input features cut). Where the channels meet another branch at an
// Add (a residual connection), the layer producing that branch joins the group and the same
// channels go on both (a whole stage of residual blocks becomes one group); a branch that no
// prunable layer produces (a graph input, a depthwise Conv's output) leaves the group alone. A
// group whose channels reach anything else (a Concat, a Reshape that does not flatten, a graph
// output) is left alone too, and the reason is reported.
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "compiler/prune_targets.hpp"
#include "ir/graph.hpp"

namespace kiln::compiler {

// Contribution: what removing the channel changes in its readers once its mean is compensated,
// the channel's standard deviation on the input sets times the L2 norm of the readers' weights
// over it (data-driven; the norms of a filter alone say little after BatchNormalization folding).
enum class ChannelCriterion { L1, L2, BatchNormGamma, Contribution };

// A constant indexed by the group's channels: cut along `axis`, in blocks of `block` entries per
// channel (a Flatten before a Gemm turns each channel into H * W features).
struct ChannelSlice {
  ir::Value* constant = nullptr;
  int64_t axis = 0;
  int64_t block = 1;
};

struct ChannelGroup {
  WeightLayer producer;
  // Producers whose channels meet the producer's at an Add (residual branches): the same
  // channels go on all of them.
  std::vector<WeightLayer> joined;
  int64_t channels = 0;
  std::vector<ChannelSlice> slices;             // the producer's own weight and bias first
  std::vector<ir::Node*> depthwise;             // Convs whose `group` follows the channel count
  std::vector<ir::Node*> consumers;             // their outputs keep their shapes
  std::vector<int64_t> consumer_blocks;         // entries per channel in each consumer's input
  const ir::Value* batch_norm_scale = nullptr;  // the first BatchNormalization's gamma, if any
};

struct ChannelGroups {
  std::vector<ChannelGroup> groups;
  std::vector<std::pair<std::string, std::string>> left_alone;  // layer, why
};

// `join_residuals` off: a group that meets another branch at an Add is left alone instead.
ChannelGroups find_channel_groups(const ir::Graph& graph, const WeightLayers& layers,
                                  bool join_residuals = true);

// A statistic (mean, standard deviation) of each channel (axis 1) of values, by value name, over
// the calibration sets.
using ChannelMeans = std::map<std::string, std::vector<double>>;

// Importance of each output channel of the group's producer (higher is kept): the L1 or L2 norm
// of its filter, or |gamma| of the BatchNormalization that follows (InvalidArgument naming the
// layer when none does), or the contribution (`stds`: of the readers' inputs; InvalidArgument
// when missing).
std::vector<double> channel_importance(const ChannelGroup& group, ChannelCriterion criterion,
                                       const ChannelMeans* stds = nullptr);

// The channels to keep at `ratio` removed (ascending): the most important, at least one, their
// count rounded up to a multiple of `multiple` (at most every channel).
std::vector<int64_t> channels_to_keep(const std::vector<double>& importance, double ratio,
                                      int64_t multiple);

// Cuts every slice of the group to `keep` and sets the depthwise Convs' group counts. With
// `means` of the consumers' inputs, each consumer's bias first takes what the removed channels
// gave it on average (sum of its weights over a removed channel times the channel's mean): exact
// for a channel that is constant (a filter near zero with a large folded-BatchNormalization bias
// is one), and the expected value otherwise (Conv borders aside). Consumers without a bias input
// (or with a scalar Gemm C) are not compensated. The caller re-infers the value shapes afterwards.
void remove_channels(ir::Graph& graph, const ChannelGroup& group, const std::vector<int64_t>& keep,
                     const ChannelMeans* means = nullptr);

// `t` with only the `keep` channels (blocks of `block` entries) of `axis`.
Tensor take_channels(const Tensor& t, int64_t axis, const std::vector<int64_t>& keep,
                     int64_t block);

}  // namespace kiln::compiler
