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
// cut), a Gemm or MatMul (its input features cut). A group whose channels reach anything else
// (an Add or Concat joining another branch, as residual connections do; a Reshape; a graph
// output) is left alone, and the reason is reported: pruning it would need the same channels
// pruned on every branch joined there.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "compiler/prune_targets.hpp"
#include "ir/graph.hpp"

namespace kiln::compiler {

enum class ChannelCriterion { L1, L2, BatchNormGamma };

// A constant indexed by the group's channels: cut along `axis`, in blocks of `block` entries per
// channel (a Flatten before a Gemm turns each channel into H * W features).
struct ChannelSlice {
  ir::Value* constant = nullptr;
  int64_t axis = 0;
  int64_t block = 1;
};

struct ChannelGroup {
  WeightLayer producer;
  int64_t channels = 0;
  std::vector<ChannelSlice> slices;             // the producer's own weight and bias first
  std::vector<ir::Node*> depthwise;             // Convs whose `group` follows the channel count
  std::vector<ir::Node*> consumers;             // their outputs keep their shapes
  const ir::Value* batch_norm_scale = nullptr;  // the first BatchNormalization's gamma, if any
};

struct ChannelGroups {
  std::vector<ChannelGroup> groups;
  std::vector<std::pair<std::string, std::string>> left_alone;  // layer, why
};

ChannelGroups find_channel_groups(const ir::Graph& graph, const WeightLayers& layers);

// Importance of each output channel of the group's producer (higher is kept): the L1 or L2 norm
// of its filter, or |gamma| of the BatchNormalization that follows (InvalidArgument naming the
// layer when none does).
std::vector<double> channel_importance(const ChannelGroup& group, ChannelCriterion criterion);

// The channels to keep at `ratio` removed (ascending): the most important, at least one, their
// count rounded up to a multiple of `multiple` (at most every channel).
std::vector<int64_t> channels_to_keep(const std::vector<double>& importance, double ratio,
                                      int64_t multiple);

// Cuts every slice of the group to `keep` and sets the depthwise Convs' group counts. The
// caller re-infers the value shapes afterwards.
void remove_channels(ir::Graph& graph, const ChannelGroup& group, const std::vector<int64_t>& keep);

// `t` with only the `keep` channels (blocks of `block` entries) of `axis`.
Tensor take_channels(const Tensor& t, int64_t axis, const std::vector<int64_t>& keep,
                     int64_t block);

}  // namespace kiln::compiler
