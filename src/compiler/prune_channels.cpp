#include "compiler/prune_channels.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <set>

#include "core/error.hpp"

namespace kiln::compiler {
namespace {

// Ops that map each channel to itself, reading the group's value as input 0 (further inputs,
// when any, must be constants: Clip's bounds).
const std::set<std::string> kChannelwiseUnary = {"Relu",
                                                 "Clip",
                                                 "LeakyRelu",
                                                 "Sigmoid",
                                                 "Tanh",
                                                 "HardSigmoid",
                                                 "HardSwish",
                                                 "Elu",
                                                 "Selu",
                                                 "Celu",
                                                 "Softplus",
                                                 "Softsign",
                                                 "Identity",
                                                 "Dropout",
                                                 "Gelu",
                                                 "Mish",
                                                 "Erf",
                                                 "Neg",
                                                 "Abs",
                                                 "Exp",
                                                 "Sqrt",
                                                 "Reciprocal",
                                                 "ThresholdedRelu",
                                                 "Cast",
                                                 "Floor",
                                                 "Ceil",
                                                 "Round"};
const std::set<std::string> kPooling = {"MaxPool",       "AveragePool", "GlobalAveragePool",
                                        "GlobalMaxPool", "LpPool",      "GlobalLpPool"};
const std::set<std::string> kBinary = {"Add", "Sub", "Mul", "Div"};

int64_t int_attr(const ir::Node& n, const char* name, int64_t fallback) {
  const ir::Attribute* a = n.attribute(name);
  return a ? a->get<int64_t>(name) : fallback;
}

std::string describe_node(const ir::Node& n) {
  return n.name().empty() ? n.op_type() : fmt::format("{} '{}'", n.op_type(), n.name());
}

std::optional<std::vector<int64_t>> static_dims(const ir::Value* v) {
  if (!v || !v->type().is_tensor() || !v->type().shape) return std::nullopt;
  std::vector<int64_t> dims;
  for (const Dim& d : v->type().shape->dims()) {
    if (!d.is_static()) return std::nullopt;
    dims.push_back(d.value());
  }
  return dims;
}

std::optional<size_t> rank_of(const ir::Value* v) {
  if (!v || !v->type().is_tensor() || !v->type().shape) return std::nullopt;
  return v->type().shape->dims().size();
}

// Follows one producer's channels; an empty `why` at the end means the group can be pruned.
class GroupWalker {
 public:
  GroupWalker(const ir::Graph& g, const std::map<const ir::Value*, std::vector<ir::Node*>>& uses,
              ChannelGroup& group)
      : g_(g), uses_(uses), group_(group) {}

  // The channels of every value in `starts` (the outputs of producers pruned together).
  std::string walk(const std::vector<ir::Value*>& starts) {
    std::vector<ir::Value*> work;
    for (ir::Value* start : starts) {
      block_of_[start] = 1;
      work.push_back(start);
    }
    while (!work.empty() && why_.empty()) {
      ir::Value* v = work.back();
      work.pop_back();
      if (g_.is_output(v)) {
        return fmt::format("its channels reach the graph output '{}'", v->name());
      }
      auto it = uses_.find(v);
      if (it == uses_.end()) continue;
      for (ir::Node* r : it->second) {
        if (!visited_.insert(r).second) continue;
        if (ir::Value* next = step(*r, v)) {
          work.push_back(next);
        }
        if (!why_.empty()) return why_;
      }
    }
    if (!why_.empty()) return why_;
    for (const ir::Node* b : binaries_) {
      for (const ir::Value* u : b->inputs()) {
        if (u && !u->is_constant() && !block_of_.count(u)) {
          join_input_ = u;
          return fmt::format(
              "its channels are joined by {} with a branch (a residual connection) that no "
              "prunable layer produces, so the same channels cannot go on every joined branch",
              describe_node(*b));
        }
      }
    }
    if (group_.consumers.empty()) return "its channels reach no Conv, Gemm or MatMul";
    return "";
  }

  // After a walk that failed at a join: the joined branch's value.
  const ir::Value* join_input() const { return join_input_; }

 private:
  // One reader `r` of the group's value `v`: records what it needs cut and returns its output
  // when the channels go on through it (nullptr when they end there, or why_ is set).
  ir::Value* step(ir::Node& r, ir::Value* v) {
    const std::string& op = r.op_type();
    const int64_t block = block_of_.at(v);
    const int64_t c = group_.channels;
    auto refuse = [&](std::string why) -> ir::Value* {
      why_ = std::move(why);
      return nullptr;
    };
    auto follow = [&](size_t slot, int64_t b) -> ir::Value* {
      ir::Value* out = r.output(slot);
      if (!out) return nullptr;
      block_of_[out] = b;
      return out;
    };
    if (!r.domain().empty()) {
      return refuse(fmt::format("its channels are read by {} ({})", describe_node(r), r.domain()));
    }
    const bool first = r.input(0) == v;
    if (kChannelwiseUnary.count(op) && first) {
      for (size_t i = 1; i < r.inputs().size(); ++i) {
        if (r.input(i) && !r.input(i)->is_constant()) {
          return refuse(fmt::format("{} has a computed input", describe_node(r)));
        }
      }
      return follow(0, block);
    }
    if (op == "BatchNormalization" && first) {
      for (size_t i = 1; i <= 4; ++i) {
        ir::Value* p = r.input(i);
        if (!p || !p->is_constant() || p->constant().numel() != c) {
          return refuse(
              fmt::format("{} has no constant per-channel input {}", describe_node(r), i));
        }
        add_slice(p, 0, 1);
      }
      if (!group_.batch_norm_scale) group_.batch_norm_scale = r.input(1);
      return follow(0, block);
    }
    if (kPooling.count(op) && first) {
      if (r.output(1) && uses_.count(r.output(1))) {
        return refuse(fmt::format("{} has its indices read", describe_node(r)));
      }
      return follow(0, block);
    }
    if (op == "Pad" && first) return pad(r, v, block) ? follow(0, block) : nullptr;
    if (op == "Flatten" && first) {
      if (int_attr(r, "axis", 1) != 1) {
        return refuse(fmt::format("{} does not flatten at axis 1", describe_node(r)));
      }
      // The batch may be symbolic; the dims after the channels must be known.
      const TypeInfo& t = v->type();
      if (!t.is_tensor() || !t.shape) {
        return refuse(fmt::format("{} reads a value of unknown shape", describe_node(r)));
      }
      int64_t spatial = 1;
      const auto& dims = t.shape->dims();
      for (size_t d = 2; d < dims.size(); ++d) {
        if (!dims[d].is_static()) {
          return refuse(fmt::format("{} reads a value of unknown spatial size", describe_node(r)));
        }
        spatial *= dims[d].value();
      }
      return follow(0, block * spatial);
    }
    if (op == "Reshape" && first) {
      // A Reshape that flattens [N, C, ...] to [N, C * ...] (exporters write Flatten so) is one.
      const auto in = static_dims(v);
      const auto out = static_dims(r.output(0));
      int64_t features = 1;
      for (size_t d = 1; in && d < in->size(); ++d) features *= (*in)[d];
      if (!in || !out || out->size() != 2 || (*out)[0] != (*in)[0] || (*out)[1] != features) {
        return refuse(fmt::format("its channels are read by {}, which does not flatten them",
                                  describe_node(r)));
      }
      return follow(0, block * (features / c));
    }
    if (op == "Conv" && first) return conv(r, block);
    if ((op == "Gemm" || op == "MatMul") && first) return matrix_consumer(r, v, block);
    if (kBinary.count(op)) return binary(r, v, block);
    return refuse(fmt::format("its channels are read by {}", describe_node(r)));
  }

  void add_slice(ir::Value* constant, int64_t axis, int64_t block) {
    const auto it = uses_.find(constant);
    if (it != uses_.end() && it->second.size() > 1) {
      why_ = fmt::format("its constant '{}' is shared with other nodes", constant->name());
    }
    group_.slices.push_back({constant, axis, block});
  }

  bool pad(const ir::Node& r, const ir::Value* v, int64_t) {
    const ir::Value* pads = r.input(1);
    const auto rank = rank_of(v);
    if (r.input(3) || !pads || !pads->is_constant() || !rank) {
      why_ = fmt::format("{} has computed pads or axes", describe_node(r));
      return false;
    }
    const std::vector<int64_t> p = pads->constant().to_int64_vector();
    if (p.size() != 2 * *rank || p[1] != 0 || p[1 + *rank] != 0) {
      why_ = fmt::format("{} pads the channel axis", describe_node(r));
      return false;
    }
    return true;
  }

  ir::Value* conv(ir::Node& r, int64_t block) {
    ir::Value* w = r.input(1);
    if (!w || !w->is_constant()) {
      why_ = fmt::format("{} reading its channels has a computed weight", describe_node(r));
      return nullptr;
    }
    const std::vector<int64_t>& wd = w->constant().dims();
    const int64_t group = int_attr(r, "group", 1);
    const int64_t c = group_.channels;
    if (block != 1 || wd.size() < 3) {
      why_ = fmt::format("{} reads its channels flattened", describe_node(r));
      return nullptr;
    }
    if (group == 1 && wd[1] == c) {
      add_slice(w, 1, 1);
      group_.consumers.push_back(&r);
      group_.consumer_blocks.push_back(1);
      return nullptr;
    }
    if (group == c && wd[0] == c && wd[1] == 1) {  // depthwise: its channels are the group's
      add_slice(w, 0, 1);
      if (ir::Value* b = r.input(2)) {
        if (!b->is_constant()) {
          why_ = fmt::format("{} has a computed bias", describe_node(r));
          return nullptr;
        }
        add_slice(b, 0, 1);
      }
      group_.depthwise.push_back(&r);
      ir::Value* out = r.output(0);
      block_of_[out] = 1;
      return out;
    }
    why_ = fmt::format(
        "its channels are read by {} with group {} (only group 1 and depthwise "
        "Convs follow a channel removal)",
        describe_node(r), group);
    return nullptr;
  }

  ir::Value* matrix_consumer(ir::Node& r, const ir::Value* v, int64_t block) {
    ir::Value* w = r.input(1);
    const auto rank = rank_of(v);
    if (!w || !w->is_constant() || w->constant().rank() != 2 || rank != 2) {
      why_ = fmt::format("its channels are read by {} without a constant 2-D weight on a 2-D input",
                         describe_node(r));
      return nullptr;
    }
    if (r.op_type() == "Gemm" && int_attr(r, "transA", 0) != 0) {
      why_ = fmt::format("its channels are read by {} with transA", describe_node(r));
      return nullptr;
    }
    const bool trans_b = r.op_type() == "Gemm" && int_attr(r, "transB", 0) != 0;
    const int64_t axis = trans_b ? 1 : 0;
    if (w->constant().dims()[axis] != group_.channels * block) {
      why_ = fmt::format("{} reads {} features, not {} channels of {}", describe_node(r),
                         w->constant().dims()[axis], group_.channels, block);
      return nullptr;
    }
    add_slice(w, axis, block);
    group_.consumers.push_back(&r);
    group_.consumer_blocks.push_back(block);
    return nullptr;
  }

  ir::Value* binary(ir::Node& r, const ir::Value* v, int64_t block) {
    const auto out_rank = rank_of(r.output(0));
    for (ir::Value* u : r.inputs()) {
      if (!u || u == v || block_of_.count(u)) continue;
      if (!u->is_constant()) {
        binaries_.push_back(&r);  // checked at the end: the other input must join the group
        continue;
      }
      const Tensor& t = u->constant();
      if (t.numel() == 1) continue;
      const int64_t axis =
          out_rank ? 1 - (static_cast<int64_t>(*out_rank) - static_cast<int64_t>(t.rank())) : -1;
      bool per_channel = axis >= 0 && block == 1 && t.dims()[axis] == group_.channels;
      for (int64_t d = 0; per_channel && d < static_cast<int64_t>(t.rank()); ++d) {
        per_channel = d == axis || t.dims()[d] == 1;
      }
      if (!per_channel) {
        why_ = fmt::format("{} reads a constant {} that is not per channel", describe_node(r),
                           t.describe());
        return nullptr;
      }
      add_slice(u, axis, 1);
    }
    ir::Value* out = r.output(0);
    block_of_[out] = block;
    return out;
  }

  const ir::Graph& g_;
  const std::map<const ir::Value*, std::vector<ir::Node*>>& uses_;
  ChannelGroup& group_;
  std::map<const ir::Value*, int64_t> block_of_;
  std::set<const ir::Node*> visited_;
  std::vector<const ir::Node*> binaries_;
  std::string why_;
  const ir::Value* join_input_ = nullptr;
};

}  // namespace

namespace {

// Why `layer` cannot produce a channel group, or "".
std::string producer_problem(const WeightLayer& layer) {
  const ir::Node& n = *layer.node;
  if (n.op_type() == "Conv" && int_attr(n, "group", 1) != 1) {
    return "a grouped or depthwise Conv: its channels follow its input's";
  }
  if (n.op_type() != "Conv" && rank_of(n.input(0)) != 2) {
    return "its activation is not 2-D (only [N, features] are pruned)";
  }
  return "";
}

// The producer's own weight and bias as slices of `group`, or why not.
std::string add_producer_slices(const WeightLayer& layer, int64_t channels,
                                const std::map<const ir::Value*, std::vector<ir::Node*>>& uses,
                                ChannelGroup& group) {
  const auto weight_uses = uses.find(layer.weight);
  if (weight_uses != uses.end() && weight_uses->second.size() > 1) {
    return fmt::format("its weight '{}' is shared with other nodes", layer.weight->name());
  }
  group.slices.push_back({layer.weight, layer.output_axis, 1});
  if (ir::Value* b = layer.node->input(2)) {
    if (!b->is_constant()) return fmt::format("its bias '{}' is computed", b->name());
    if (b->constant().numel() == channels) {
      group.slices.push_back({b, static_cast<int64_t>(b->constant().rank()) - 1, 1});
    } else if (b->constant().numel() != 1) {
      return fmt::format("its bias {} is not per channel", b->constant().describe());
    }
  }
  return "";
}

}  // namespace

ChannelGroups find_channel_groups(const ir::Graph& g, const WeightLayers& layers,
                                  bool join_residuals) {
  const auto uses = g.compute_uses();
  std::map<const ir::Node*, const WeightLayer*> layer_of;
  for (const WeightLayer& l : layers.layers) layer_of[l.node] = &l;
  std::set<const ir::Node*> grouped;
  ChannelGroups out;
  for (const WeightLayer& layer : layers.layers) {
    if (grouped.count(layer.node)) continue;
    if (std::string why = producer_problem(layer); !why.empty()) {
      out.left_alone.emplace_back(layer.display, why);
      continue;
    }
    const int64_t channels = layer.weight->constant().dims()[layer.output_axis];
    // Producers whose channels meet at an Add (residual branches) are pruned together, with one
    // set of channels: the walk restarts with the joined branch's producer added, until every
    // join is among them or a branch has no prunable producer.
    std::vector<const WeightLayer*> members = {&layer};
    for (;;) {
      ChannelGroup group;
      group.producer = layer;
      group.channels = channels;
      std::string why;
      for (const WeightLayer* m : members) {
        if (why.empty()) why = add_producer_slices(*m, channels, uses, group);
      }
      GroupWalker walker(g, uses, group);
      if (why.empty()) {
        std::vector<ir::Value*> starts;
        for (const WeightLayer* m : members) starts.push_back(m->node->output(0));
        why = walker.walk(starts);
      }
      if (why.empty()) {
        for (size_t i = 1; i < members.size(); ++i) group.joined.push_back(*members[i]);
        for (const WeightLayer* m : members) grouped.insert(m->node);
        out.groups.push_back(std::move(group));
        break;
      }
      const ir::Value* joined = walker.join_input();
      const ir::Node* partner = joined ? joined->producer() : nullptr;
      auto it = partner ? layer_of.find(partner) : layer_of.end();
      const bool can_join =
          join_residuals && it != layer_of.end() && !grouped.count(partner) &&
          std::find(members.begin(), members.end(), it->second) == members.end() &&
          producer_problem(*it->second).empty() &&
          it->second->weight->constant().dims()[it->second->output_axis] == channels;
      if (!can_join) {
        if (members.size() > 1) {
          std::string names;
          for (size_t i = 1; i < members.size(); ++i) {
            names += (i > 1 ? ", " : "") + members[i]->display;
          }
          why += fmt::format(" (tried together with {})", names);
        }
        out.left_alone.emplace_back(layer.display, why);
        break;
      }
      members.push_back(it->second);
    }
  }
  return out;
}

std::vector<double> channel_importance(const ChannelGroup& group, ChannelCriterion criterion,
                                       const ChannelMeans* stds) {
  const int64_t c = group.channels;
  std::vector<double> score(static_cast<size_t>(c), 0.0);
  if (criterion == ChannelCriterion::Contribution) {
    for (size_t i = 0; i < group.consumers.size(); ++i) {
      const ir::Node& reader = *group.consumers[i];
      const auto sd = stds ? stds->find(reader.input(0)->name()) : ChannelMeans::const_iterator{};
      const int64_t block = group.consumer_blocks[i];
      KILN_CHECK_ARG(stds && sd != stds->end() && sd->second.size() == size_t(c * block),
                     "prune: no channel statistics of '{}' (read by {}) to rank {} by "
                     "contribution",
                     reader.input(0)->name(), describe_node(reader), group.producer.display);
      const Tensor& w = reader.input(1)->constant();
      const std::vector<int64_t>& d = w.dims();
      const float* v = w.data<float>();
      const int64_t features = c * block;
      // Squared weight norm per input feature (Conv: per input channel over outputs and taps).
      std::vector<double> norm2(static_cast<size_t>(features), 0.0);
      if (reader.op_type() == "Conv") {
        int64_t kernel = 1;
        for (size_t k = 2; k < d.size(); ++k) kernel *= d[k];
        for (int64_t i2 = 0; i2 < w.numel(); ++i2) {
          norm2[(i2 / kernel) % features] += double(v[i2]) * v[i2];
        }
      } else {
        const bool trans_b = reader.op_type() == "Gemm" && int_attr(reader, "transB", 0) != 0;
        for (int64_t i2 = 0; i2 < w.numel(); ++i2) {
          norm2[trans_b ? i2 % features : i2 / d[1]] += double(v[i2]) * v[i2];
        }
      }
      for (int64_t f = 0; f < features; ++f)
        score[f / block] += sd->second[f] * std::sqrt(norm2[f]);
    }
    return score;
  }
  if (criterion == ChannelCriterion::BatchNormGamma) {
    KILN_CHECK_ARG(group.batch_norm_scale,
                   "prune: {} has no BatchNormalization after it to rank its channels by gamma "
                   "(use the l1 or l2 criterion)",
                   group.producer.display);
    const Tensor& gamma = group.batch_norm_scale->constant();
    for (int64_t i = 0; i < c; ++i) score[i] = std::fabs(gamma.double_at(i));
    return score;
  }
  std::vector<const WeightLayer*> producers = {&group.producer};
  for (const WeightLayer& j : group.joined) producers.push_back(&j);
  for (const WeightLayer* p : producers) {  // joined producers: their norms add up
    const Tensor& w = p->weight->constant();
    const std::vector<int64_t>& dims = w.dims();
    const int64_t axis = p->output_axis;
    int64_t inner = 1;
    for (size_t d = static_cast<size_t>(axis) + 1; d < dims.size(); ++d) inner *= dims[d];
    const float* v = w.data<float>();
    for (int64_t i = 0; i < w.numel(); ++i) {
      const double x = v[i];
      score[(i / inner) % c] += criterion == ChannelCriterion::L1 ? std::fabs(x) : x * x;
    }
  }
  if (criterion == ChannelCriterion::L2) {
    for (double& s : score) s = std::sqrt(s);
  }
  return score;
}

std::vector<int64_t> channels_to_keep(const std::vector<double>& importance, double ratio,
                                      int64_t multiple) {
  KILN_CHECK_ARG(ratio >= 0 && ratio < 1, "prune: the channel ratio {} must be in [0, 1)", ratio);
  KILN_CHECK_ARG(multiple >= 1, "prune: the channel multiple {} must be >= 1", multiple);
  const auto c = static_cast<int64_t>(importance.size());
  int64_t keep = c - static_cast<int64_t>(std::floor(ratio * static_cast<double>(c) + 1e-9));
  keep = std::max<int64_t>(keep, 1);
  keep = std::min(c, (keep + multiple - 1) / multiple * multiple);
  std::vector<int64_t> order(static_cast<size_t>(c));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return importance[a] > importance[b]; });
  order.resize(static_cast<size_t>(keep));
  std::sort(order.begin(), order.end());
  return order;
}

Tensor take_channels(const Tensor& t, int64_t axis, const std::vector<int64_t>& keep,
                     int64_t block) {
  std::vector<int64_t> dims = t.dims();
  KILN_CHECK(axis >= 0 && axis < static_cast<int64_t>(dims.size()) && dims[axis] % block == 0,
             ErrorCode::Internal, "take_channels: axis {} block {} of {}", axis, block,
             t.describe());
  int64_t inner = 1;
  for (size_t d = static_cast<size_t>(axis) + 1; d < dims.size(); ++d) inner *= dims[d];
  const int64_t size = dims[axis];
  const int64_t outer = t.numel() / std::max<int64_t>(size * inner, 1);
  dims[axis] = static_cast<int64_t>(keep.size()) * block;
  Tensor out(t.dtype(), dims);
  const size_t elem = dtype_size(t.dtype());
  const auto* src = static_cast<const char*>(t.raw_data());
  auto* dst = static_cast<char*>(out.raw_data());
  const size_t run = static_cast<size_t>(block * inner) * elem;
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t k : keep) {
      std::copy_n(src + static_cast<size_t>((o * size + k * block) * inner) * elem, run, dst);
      dst += run;
    }
  }
  return out;
}

namespace {

// Adds to `consumer`'s bias what its removed input channels gave on average (see the header).
void compensate(const ir::Node& consumer, int64_t block, const std::vector<int64_t>& keep,
                int64_t channels, const std::vector<double>& mean) {
  const bool gemm = consumer.op_type() == "Gemm";
  ir::Value* bias = consumer.input(2);
  const Tensor& w = consumer.input(1)->constant();
  if (consumer.op_type() == "MatMul" || !bias || !bias->is_constant() ||
      mean.size() != static_cast<size_t>(channels * block)) {
    return;
  }
  const std::vector<int64_t>& d = w.dims();
  const bool trans_b = gemm && int_attr(consumer, "transB", 0) != 0;
  const int64_t outputs = gemm ? (trans_b ? d[0] : d[1]) : d[0];
  if (bias->constant().numel() != outputs) return;
  std::vector<bool> kept(static_cast<size_t>(channels), false);
  for (int64_t k : keep) kept[k] = true;
  std::vector<double> delta(static_cast<size_t>(outputs), 0.0);
  const float* v = w.data<float>();
  if (!gemm) {  // Conv [O, C, k...]
    int64_t kernel = 1;
    for (size_t i = 2; i < d.size(); ++i) kernel *= d[i];
    for (int64_t o = 0; o < outputs; ++o) {
      for (int64_t c = 0; c < channels; ++c) {
        if (kept[c]) continue;
        double sum = 0;
        for (int64_t k = 0; k < kernel; ++k) sum += v[(o * channels + c) * kernel + k];
        delta[o] += sum * mean[c];
      }
    }
  } else {
    const int64_t features = channels * block;
    for (int64_t o = 0; o < outputs; ++o) {
      for (int64_t f = 0; f < features; ++f) {
        if (kept[f / block]) continue;
        delta[o] += mean[f] * (trans_b ? v[o * features + f] : v[f * outputs + o]);
      }
    }
    const ir::Attribute* alpha = consumer.attribute("alpha");
    const ir::Attribute* beta = consumer.attribute("beta");
    const double scale =
        (alpha ? alpha->get<float>("alpha") : 1.f) / (beta ? beta->get<float>("beta") : 1.f);
    for (double& x : delta) x *= scale;
  }
  Tensor b = bias->constant().clone();
  for (int64_t o = 0; o < outputs; ++o) b.data<float>()[o] += static_cast<float>(delta[o]);
  bias->set_constant(std::move(b));
}

}  // namespace

void remove_channels(ir::Graph&, const ChannelGroup& group, const std::vector<int64_t>& keep,
                     const ChannelMeans* means) {
  for (size_t i = 0; means && i < group.consumers.size(); ++i) {
    const ir::Node& consumer = *group.consumers[i];
    auto m = means->find(consumer.input(0)->name());
    if (m != means->end()) {
      compensate(consumer, group.consumer_blocks[i], keep, group.channels, m->second);
    }
  }
  for (const ChannelSlice& s : group.slices) {
    Tensor cut = take_channels(s.constant->constant(), s.axis, keep, s.block);
    TypeInfo type = s.constant->type();
    type.shape = Shape::from_values(cut.dims());
    s.constant->set_type(type);
    s.constant->set_constant(std::move(cut));
  }
  for (ir::Node* n : group.depthwise) {
    n->set_attribute("group", ir::Attribute(static_cast<int64_t>(keep.size())));
  }
}

}  // namespace kiln::compiler
