#include "compiler/prune.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "compiler/flops.hpp"
#include "compiler/output_agreement.hpp"
#include "compiler/prune_masks.hpp"
#include "core/closest_name.hpp"
#include "core/error.hpp"
#include "onnx/onnx_io.hpp"
#include "onnx/shape_inference.hpp"
#include "passes/passes.hpp"

namespace kiln::compiler {
namespace {

namespace fs = std::filesystem;

const char* method_name(PruneMethod m) {
  switch (m) {
    case PruneMethod::Magnitude:
      return "magnitude";
    case PruneMethod::TwoFour:
      return "2:4";
    case PruneMethod::Channels:
      return "channels";
  }
  return "?";
}

const char* criterion_name(ChannelCriterion c) {
  switch (c) {
    case ChannelCriterion::L1:
      return "l1";
    case ChannelCriterion::L2:
      return "l2";
    case ChannelCriterion::BatchNormGamma:
      return "bn-gamma";
    case ChannelCriterion::Contribution:
      return "contribution";
  }
  return "?";
}

// The model as pruning sees it: constant subgraphs folded (exporters compute Pad's pads and
// Reshape's shapes from Constant nodes, which would otherwise hide that they are constant).
ir::Model load_model(const std::string& path) {
  onnx_io::ImportOptions io;
  io.base_dir = fs::absolute(path).parent_path().string();
  ir::Model model = onnx_io::import_model_file(path, io);
  passes::FoldConstants{}.apply(*model.graph);
  passes::EliminateDeadCode{}.apply(*model.graph);
  // The folded values (Pad's pads) make shapes known that import could not infer.
  passes::InferShapes{}.apply(*model.graph);
  return model;
}

ModelStats stats_of(const ir::Graph& g) {
  ModelStats s;
  for (const ir::Value* v : g.initializers()) {
    if (!v->is_constant() || v->constant().dtype() != DataType::Float32) continue;
    s.parameters += v->constant().numel();
    s.zeros += count_zeros(v->constant());
  }
  s.flops = count_flops(g, {}).total;
  return s;
}

// One pruned model, with what was done to it.
struct Candidate {
  ir::Model model;
  std::vector<LayerPrune> layers;
  std::vector<std::pair<std::string, std::string>> left_alone;
  std::map<std::string, std::string> watched;  // value -> layer to name it by
  std::vector<std::string> notes;
};

// The per-channel mean and standard deviation of every float value that a Conv or Gemm reads as
// its input, over the sets.
std::pair<ChannelMeans, ChannelMeans> reader_input_stats(const std::shared_ptr<ir::Graph>& g,
                                                         const std::vector<runtime::Feeds>& sets,
                                                         const ObserveOptions& obs) {
  std::set<std::string> wanted;
  for (const ir::Node* n : g->nodes()) {
    if ((n->op_type() == "Conv" || n->op_type() == "Gemm") && n->input(0)) {
      wanted.insert(n->input(0)->name());
    }
  }
  struct Sums {
    std::vector<double> sum, sum2;
    double count = 0;
  };
  std::map<std::string, Sums> sums;
  auto add = [&](const std::string& name, const Tensor& t) {
    if (!wanted.count(name) || t.rank() < 2) return;
    const int64_t c = t.dim(1);
    int64_t inner = 1;
    for (size_t d = 2; d < t.rank(); ++d) inner *= t.dim(d);
    Sums& s = sums[name];
    s.sum.resize(static_cast<size_t>(c), 0.0);
    s.sum2.resize(static_cast<size_t>(c), 0.0);
    const float* v = t.data<float>();
    for (int64_t i = 0; i < t.numel(); ++i) {
      s.sum[(i / inner) % c] += v[i];
      s.sum2[(i / inner) % c] += double(v[i]) * v[i];
    }
    s.count += static_cast<double>(t.numel() / c);
  };
  for (const runtime::Feeds& set : sets) {
    for (const auto& [name, value] : set) {
      if (value.is_tensor() && value.tensor().dtype() == DataType::Float32)
        add(name, value.tensor());
    }
  }
  const std::string skipped = observe_float_values(
      g, sets, obs, [&](const ir::Value& v, const Tensor& t, size_t) { add(v.name(), t); });
  KILN_CHECK_ARG(skipped.empty(), "prune: the channel statistics cannot be measured: {}", skipped);
  ChannelMeans means, stds;
  for (auto& [name, s] : sums) {
    const double n = std::max(s.count, 1.0);
    std::vector<double>& m = means[name];
    std::vector<double>& sd = stds[name];
    for (size_t c = 0; c < s.sum.size(); ++c) {
      m.push_back(s.sum[c] / n);
      sd.push_back(std::sqrt(std::max(s.sum2[c] / n - m.back() * m.back(), 0.0)));
    }
  }
  return {means, stds};
}

class Pruner {
 public:
  explicit Pruner(const PruneOptions& o) : o_(o) {}
  void set_stats(ChannelMeans means, ChannelMeans stds) {
    means_ = std::move(means);
    stds_ = std::move(stds);
  }

  // The model pruned at `fallback` for every layer, but for those in `ratios`.
  Candidate make(double fallback, const std::map<std::string, double>& ratios) const {
    Candidate c;
    c.model = load_model(o_.model_path);
    ir::Graph& g = *c.model.graph;
    const std::set<std::string> excluded(o_.exclude_nodes.begin(), o_.exclude_nodes.end());
    WeightLayers layers = find_weight_layers(g, o_.op_types, excluded);
    c.left_alone = layers.skipped;
    auto ratio_of = [&](const std::string& name) {
      auto it = ratios.find(name);
      return it == ratios.end() ? fallback : it->second;
    };
    if (o_.method == PruneMethod::Channels) {
      prune_channels(c, layers, ratio_of);
    } else {
      prune_masks(c, layers, ratio_of);
    }
    return c;
  }

 private:
  template <typename RatioOf>
  void prune_channels(Candidate& c, const WeightLayers& layers, const RatioOf& ratio_of) const {
    ir::Graph& g = *c.model.graph;
    if (!means_.empty()) {
      // A reader without a bias gets a zero one, so that it can take the removed channels'
      // contribution (and so that any later cut of its own channels cuts the bias too).
      for (const WeightLayer& w : layers.layers) {
        if (w.node->input(2) || w.node->op_type() == "MatMul") continue;
        const int64_t outputs = w.weight->constant().dims()[w.output_axis];
        Tensor zeros(DataType::Float32, {outputs});
        std::fill_n(zeros.data<float>(), outputs, 0.f);
        w.node->set_input(2, g.add_initializer(g.unique_name(w.weight->name() + "_bias"), zeros));
      }
    }
    ChannelGroups groups = find_channel_groups(g, layers, o_.residual_groups);
    c.left_alone.insert(c.left_alone.end(), groups.left_alone.begin(), groups.left_alone.end());
    if (o_.criterion == ChannelCriterion::BatchNormGamma) {
      const bool any = std::any_of(groups.groups.begin(), groups.groups.end(),
                                   [](const ChannelGroup& gr) { return gr.batch_norm_scale; });
      KILN_CHECK_ARG(any || groups.groups.empty(),
                     "prune: no prunable layer of '{}' has a BatchNormalization after it, so the "
                     "bn-gamma criterion has nothing to rank by (exporters in eval mode fold "
                     "BatchNormalization into the Conv; use --criterion l1 or l2)",
                     o_.model_path);
    }
    // Every choice is made on the unpruned weights, then every cut applied.
    std::vector<std::vector<int64_t>> keeps;
    std::vector<int64_t> parameters_before;  // of each producer, before any cut
    for (const ChannelGroup& gr : groups.groups) {
      ChannelCriterion criterion = o_.criterion;
      if (criterion == ChannelCriterion::BatchNormGamma && !gr.batch_norm_scale) {
        criterion = ChannelCriterion::L1;
        c.notes.push_back(
            fmt::format("{}: no BatchNormalization follows it; its channels ranked by L1",
                        gr.producer.display));
      }
      parameters_before.push_back(gr.producer.weight->constant().numel());
      keeps.push_back(channels_to_keep(channel_importance(gr, criterion, &stds_),
                                       ratio_of(gr.producer.display), o_.channel_multiple));
    }
    for (size_t i = 0; i < groups.groups.size(); ++i) {
      const ChannelGroup& gr = groups.groups[i];
      LayerPrune l;
      l.name = gr.producer.display;
      l.op_type = gr.producer.node->op_type();
      l.ratio = ratio_of(l.name);
      l.parameters_before = parameters_before[i];
      l.channels_before = gr.channels;
      l.channels_after = static_cast<int64_t>(keeps[i].size());
      for (const WeightLayer& j : gr.joined) l.joined.push_back(j.display);
      remove_channels(g, gr, keeps[i], means_.empty() ? nullptr : &means_);
      for (const ir::Node* consumer : gr.consumers) {
        if (consumer->output(0)) c.watched[consumer->output(0)->name()] = l.name;
      }
      c.layers.push_back(l);
    }
    for (ir::Node* n : g.nodes()) onnx_io::infer_node(*n, {});
    for (LayerPrune& l : c.layers) {
      for (const WeightLayer& w : layers.layers) {
        if (w.display == l.name) {
          l.parameters_after = w.weight->constant().numel();
          l.zeros = count_zeros(w.weight->constant());
        }
      }
    }
  }

  template <typename RatioOf>
  void prune_masks(Candidate& c, const WeightLayers& layers, const RatioOf& ratio_of) const {
    std::vector<const WeightLayer*> chosen;
    for (const WeightLayer& w : layers.layers) {
      if (o_.method == PruneMethod::TwoFour) {
        const int64_t size = w.weight->constant().dims()[w.reduction_axis];
        if (size % 4 != 0) {
          c.left_alone.emplace_back(
              w.display,
              fmt::format("its reduction axis has {} entries, not a multiple of 4", size));
          continue;
        }
      }
      chosen.push_back(&w);
    }
    // Weights may be shared: each is masked once, from a copy (the tensor may be shared with the
    // caller's model).
    for (const WeightLayer* w : chosen) w->weight->set_constant(w->weight->constant().clone());
    std::optional<GlobalThreshold> threshold;
    int64_t ties = 0;
    if (o_.method == PruneMethod::Magnitude && o_.global) {
      std::vector<const Tensor*> all;
      for (const WeightLayer* w : chosen) all.push_back(&w->weight->constant());
      threshold = global_magnitude_threshold(all, o_.ratio);
      ties = threshold->ties_to_zero;
    }
    for (const WeightLayer* w : chosen) {
      Tensor& t = const_cast<Tensor&>(w->weight->constant());
      LayerPrune l;
      l.name = w->display;
      l.op_type = w->node->op_type();
      l.ratio = o_.method == PruneMethod::TwoFour ? 0.5 : ratio_of(w->display);
      l.parameters_before = l.parameters_after = t.numel();
      const int64_t axis_size = t.dims()[w->output_axis];
      l.channels_before = l.channels_after = axis_size;
      if (o_.method == PruneMethod::TwoFour) {
        l.zeros = mask_two_of_four(t, w->reduction_axis, w->display);
      } else if (threshold) {
        l.zeros = mask_below(t, *threshold, ties);
      } else {
        l.zeros = mask_by_magnitude(t, l.ratio);
      }
      if (w->node->output(0)) c.watched[w->node->output(0)->name()] = l.name;
      c.layers.push_back(l);
    }
  }

  const PruneOptions& o_;
  ChannelMeans means_;  // empty: no bias compensation
  ChannelMeans stds_;
};

void check_options(const PruneOptions& o) {
  KILN_CHECK_ARG(!o.output_path.empty(), "prune: give the output path (-o)");
  const fs::path out = fs::absolute(o.output_path);
  KILN_CHECK_ARG(fs::is_directory(out.parent_path()),
                 "prune: cannot write '{}': its directory does not exist", o.output_path);
  KILN_CHECK_ARG(
      !fs::exists(o.model_path) || !fs::exists(out) || !fs::equivalent(out, fs::path(o.model_path)),
      "prune: the output would overwrite the model '{}': choose another -o", o.model_path);
  auto check_ratio = [&](double r, const std::string& what) {
    if (o.method == PruneMethod::Channels) {
      KILN_CHECK_ARG(r >= 0 && r < 1,
                     "prune: the {} {} must be in [0, 1) for channel pruning (the share of "
                     "output channels removed; at least one channel stays)",
                     what, r);
    } else {
      KILN_CHECK_ARG(r >= 0 && r <= 1, "prune: the {} {} must be in [0, 1]", what, r);
    }
  };
  check_ratio(o.ratio, "ratio");
  for (const auto& [name, r] : o.layer_ratios) check_ratio(r, fmt::format("ratio of '{}'", name));
  KILN_CHECK_ARG(!o.global || o.method == PruneMethod::Magnitude,
                 "prune: a global threshold applies to magnitude pruning only");
  KILN_CHECK_ARG(!o.global || o.layer_ratios.empty(),
                 "prune: per-layer ratios and a global threshold exclude each other");
  KILN_CHECK_ARG(!o.search || o.method != PruneMethod::TwoFour,
                 "prune: the ratio search applies to magnitude and channel pruning, not 2:4");
  KILN_CHECK_ARG(!o.search || !o.global, "prune: the ratio search works per layer, not global");
  KILN_CHECK_ARG(o.search_steps >= 1 && o.search_steps <= 100,
                 "prune: search_steps {} must be in [1, 100]", o.search_steps);
  KILN_CHECK_ARG(o.channel_multiple >= 1, "prune: the channel multiple {} must be >= 1",
                 o.channel_multiple);
  KILN_CHECK_ARG(o.run_timeout_seconds >= 0, "prune: the run timeout {} must be >= 0",
                 o.run_timeout_seconds);
}

std::string si(double v) {
  return si_number(v);
}

std::string mib(size_t bytes) {
  return fmt::format("{:.2f} MiB", static_cast<double>(bytes) / (1 << 20));
}

}  // namespace

PruneResult prune_model(const PruneOptions& o) {
  auto say = [&](const std::string& line) {
    if (o.on_report) o.on_report(line + "\n");
  };
  check_options(o);
  KILN_CHECK_ARG(fs::is_regular_file(o.model_path), "prune: no model file '{}'", o.model_path);
  Pruner pruner(o);
  PruneResult r;
  const ir::Model original = load_model(o.model_path);
  r.before = stats_of(*original.graph);
  r.before.file_bytes = fs::file_size(o.model_path);

  ObserveOptions obs;
  obs.threads = o.threads;
  obs.timeout_seconds = o.run_timeout_seconds;
  std::vector<runtime::Feeds> sets = input_sets_for(*original.graph, o.calibration);
  if (o.method == PruneMethod::Channels &&
      (o.bias_compensation || o.criterion == ChannelCriterion::Contribution)) {
    auto [means, stds] = reader_input_stats(original.graph, sets, obs);
    pruner.set_stats(o.bias_compensation ? std::move(means) : ChannelMeans{}, std::move(stds));
  }
  // What can be pruned, and the per-layer ratios checked against it.
  Candidate probe = pruner.make(0, {});
  std::vector<std::string> names;
  for (const LayerPrune& l : probe.layers) names.push_back(l.name);
  for (const auto& layer_ratio : o.layer_ratios) {
    // A named copy: clang before 16 lets no lambda capture a structured binding.
    const std::string& name = layer_ratio.first;
    if (std::find(names.begin(), names.end(), name) != names.end()) continue;
    const auto why = std::find_if(probe.left_alone.begin(), probe.left_alone.end(),
                                  [&](const auto& p) { return p.first == name; });
    KILN_CHECK_ARG(why == probe.left_alone.end(),
                   "prune: the layer ratio names '{}', which cannot be pruned: {}", name,
                   why == probe.left_alone.end() ? "" : why->second);
    fail(ErrorCode::InvalidArgument, "prune: the layer ratio names '{}', not a prunable layer{}",
         name, did_you_mean(name, names));
  }
  KILN_CHECK_ARG(!names.empty(), "prune: '{}' has no {} layer that {} pruning can prune{}",
                 o.model_path, fmt::join(o.op_types, " / "), method_name(o.method),
                 probe.left_alone.empty() ? std::string()
                                          : fmt::format(" ({}: {})", probe.left_alone.front().first,
                                                        probe.left_alone.front().second));

  const FloatReference reference(original.graph, std::move(sets), obs);
  r.input_sets = reference.sets();
  const AgreementThresholds thresholds{o.min_cosine, o.min_top1};

  std::map<std::string, double> ratios = o.layer_ratios;
  if (o.search) {
    // Each layer alone: the largest ratio on the ladder that passes (stopping at the first that
    // does not: more pruning of one layer rarely helps).
    std::map<std::string, double> margin;  // layer -> its cosine alone at the chosen ratio
    std::map<std::string, std::vector<double>> ladder;
    for (const std::string& name : names) {
      const double top = o.layer_ratios.count(name) ? o.layer_ratios.at(name) : o.ratio;
      double best = 0, best_cos = 1;
      for (int i = 1; i <= o.search_steps; ++i) {
        const double ratio = top * i / o.search_steps;
        ladder[name].push_back(ratio);
        const Candidate c = pruner.make(0, {{name, ratio}});
        const Agreement a = reference.score(c.model.graph, {}, thresholds);
        if (!a.pass) break;
        best = ratio;
        best_cos = a.outputs.empty() ? 1 : a.outputs.front().cosine;
      }
      ratios[name] = best;
      margin[name] = best_cos;
      say(fmt::format("prune search: {} alone passes up to ratio {:.3f} (cosine {:.5f})", name,
                      best, best_cos));
    }
    // Together: while the gate refuses, step back the layer that alone drifted most.
    for (;;) {
      const Candidate c = pruner.make(0, ratios);
      const Agreement a = reference.score(c.model.graph, {}, thresholds);
      if (a.pass) break;
      std::string worst;
      for (const std::string& name : names) {
        if (ratios[name] > 0 && (worst.empty() || margin[name] < margin[worst])) worst = name;
      }
      if (worst.empty()) break;
      const std::vector<double>& steps = ladder[worst];
      auto it = std::find(steps.begin(), steps.end(), ratios[worst]);
      ratios[worst] = it == steps.begin() || it == steps.end() ? 0 : *(it - 1);
      margin[worst] = 1;  // measured alone no more; others step back next
      say(fmt::format("prune search: together they miss the gate; {} steps back to ratio {:.3f}",
                      worst, ratios[worst]));
    }
  }

  Candidate c = pruner.make(o.search ? 0 : o.ratio, ratios);
  r.layers = c.layers;
  r.left_alone = c.left_alone;
  r.after = stats_of(*c.model.graph);
  const std::string how =
      o.method == PruneMethod::Channels
          ? fmt::format(
                "channels ({}{}{})", criterion_name(o.criterion),
                o.bias_compensation ? ", bias compensation" : "",
                o.channel_multiple > 1 ? fmt::format(", multiple of {}", o.channel_multiple) : "")
      : o.method == PruneMethod::TwoFour
          ? std::string("2:4")
          : fmt::format("magnitude ({})", o.global ? "global" : "per layer");
  say(fmt::format("prune: {}{}: {} layer{} pruned, {} left alone", how,
                  o.method == PruneMethod::TwoFour ? std::string()
                  : o.search                       ? std::string(", ratios searched")
                                                   : fmt::format(" at ratio {}", o.ratio),
                  r.layers.size(), r.layers.size() == 1 ? "" : "s", r.left_alone.size()));
  for (const LayerPrune& l : r.layers) {
    if (o.method == PruneMethod::Channels) {
      say(fmt::format("prune:   {} ({}): channels {} -> {}, weights {} -> {}{}", l.name, l.op_type,
                      l.channels_before, l.channels_after, l.parameters_before, l.parameters_after,
                      l.joined.empty() ? std::string()
                                       : fmt::format(" (with {}: joined by residual Adds)",
                                                     fmt::join(l.joined, ", "))));
    } else {
      say(fmt::format("prune:   {} ({}): sparsity {:.1f}% of {} weights", l.name, l.op_type,
                      100.0 * static_cast<double>(l.zeros) /
                          static_cast<double>(std::max<int64_t>(l.parameters_after, 1)),
                      l.parameters_after));
    }
  }
  for (const auto& [name, why] : r.left_alone)
    say(fmt::format("prune:   left alone: {}: {}", name, why));
  for (const std::string& note : c.notes) say("prune:   " + note);
  auto sparsity = [](const ModelStats& s) {
    return 100.0 * static_cast<double>(s.zeros) /
           static_cast<double>(std::max<int64_t>(s.parameters, 1));
  };
  say(fmt::format(
      "prune: parameters {} -> {} (sparsity {:.1f}% -> {:.1f}%), FLOPs {} -> {} "
      "(dense count)",
      si(static_cast<double>(r.before.parameters)), si(static_cast<double>(r.after.parameters)),
      sparsity(r.before), sparsity(r.after), si(r.before.flops), si(r.after.flops)));

  const Agreement a = reference.score(c.model.graph, c.watched, thresholds);
  r.outputs = a.outputs;
  r.worst_nodes = a.worst_nodes;
  r.pass = a.pass;
  r.failure = a.failure;
  for (const OutputScore& s : a.outputs) {
    say(fmt::format("prune gate: {} on {} input set{}", describe_score(s, thresholds), r.input_sets,
                    r.input_sets == 1 ? "" : "s"));
  }
  if (!a.worst_nodes.empty()) {
    std::string worst;
    for (const auto& [name, cos] : a.worst_nodes) {
      worst += fmt::format("{}{} {:.4f}", worst.empty() ? "" : ", ", name, cos);
    }
    say("prune gate: pruned layers whose outputs (or their readers') drift most: " + worst);
  }
  if (!r.pass && !o.allow_drift) {
    fail(ErrorCode::InvalidArgument,
         "prune gate: {}. The model was not written; --allow-drift writes it anyway, a lower "
         "--ratio or --exclude-node prunes less, --search finds per-layer ratios that pass",
         r.failure);
  }
  onnx_io::save_model_file(c.model, o.output_path);
  r.after.file_bytes = fs::file_size(o.output_path);
  say(fmt::format("prune: file {} -> {}", mib(r.before.file_bytes), mib(r.after.file_bytes)));
  say(fmt::format("wrote {}", o.output_path));
  return r;
}

}  // namespace kiln::compiler
