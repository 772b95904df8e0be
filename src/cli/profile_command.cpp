// `kiln profile`: time (medians over the profiled runs), the kernel that ran it and memory per node
// and per op type, the nodes left on reference kernels; Chrome trace (measured timestamps) and
// HTML report files.
#include <algorithm>
#include <chrono>
#include <fstream>
#include <iostream>
#include <memory>
#include <unordered_map>

#include <fmt/format.h>

#include "cli/command.hpp"
#include "cli/inputs.hpp"
#include "cli/profile_report.hpp"
#include "cli/progress.hpp"
#include "runtime/interpreter.hpp"
#include "runtime/precision.hpp"
#include "runtime/session.hpp"

namespace kiln::cli {
namespace {

struct ProfileOptions {
  std::string model;
  InputOptions inputs;
  int threads = 0;
  std::string device = "cpu";
  bool no_optimize = false;
  int warmup = 1;
  int iterations = 10;
  int top = 15;
  std::string trace;
  std::string html;
};

// Shapes and bytes of every value from a run of the session itself (its profile records each
// node's outputs), and from the graph's uses, the activation bytes alive while each node runs.
void measure_memory(const std::shared_ptr<const ir::Graph>& graph,
                    const std::vector<const ir::Node*>& nodes, const runtime::Feeds& feeds,
                    const std::vector<runtime::NodeTiming>& run, ProfileData& data) {
  std::unordered_map<const ir::Node*, size_t> index;
  for (size_t i = 0; i < nodes.size(); ++i) index[nodes[i]] = i;
  std::unordered_map<const ir::Value*, size_t> bytes;
  std::unordered_map<const ir::Value*, std::string> shapes;
  for (const ir::Value* v : graph->inputs()) {
    auto it = feeds.find(v->name());
    if (it != feeds.end()) {
      bytes[v] = it->second.nbytes();
      shapes[v] = it->second.describe();
      data.input_bytes += bytes[v];
    }
  }
  for (const runtime::NodeTiming& t : run) {
    auto it = index.find(t.node);
    if (it == index.end()) continue;
    NodeRecord& r = data.nodes[it->second];
    if (!r.output_shapes.empty()) continue;  // a node timed twice in one run (none today)
    for (size_t k = 0; k < t.output_shapes.size() && k < t.node->outputs().size(); ++k) {
      const ir::Value* v = t.node->output(k);
      if (!v) continue;
      bytes[v] = t.output_bytes[k];
      shapes[v] = t.output_shapes[k];
      r.output_bytes += bytes[v];
      r.output_shapes.push_back(shapes[v]);
    }
  }

  // Alive from the step that makes a value to the last step that reads it (outputs: the end).
  size_t steps = nodes.size();
  std::unordered_map<const ir::Value*, std::pair<size_t, size_t>> life;
  for (const auto& [v, b] : bytes) {
    size_t def = v->producer() && index.count(v->producer()) ? index[v->producer()] : 0;
    life[v] = {def, graph->is_output(v) && steps ? steps - 1 : def};
  }
  for (size_t i = 0; i < steps; ++i) {
    std::vector<const ir::Value*> reads;
    runtime::collect_reads(*nodes[i], *graph, reads);
    for (const ir::Value* v : reads) {
      auto it = life.find(v);
      if (it != life.end()) it->second.second = std::max(it->second.second, i);
      if (v->is_constant()) {
        data.nodes[i].input_shapes.push_back(v->constant().describe());
      } else if (shapes.count(v)) {
        data.nodes[i].input_shapes.push_back(shapes[v]);
      }
    }
  }
  std::vector<int64_t> delta(steps + 1, 0);
  for (const auto& [v, span] : life) {
    delta[span.first] += static_cast<int64_t>(bytes[v]);
    delta[span.second + 1] -= static_cast<int64_t>(bytes[v]);
  }
  int64_t live = 0;
  for (size_t i = 0; i < steps; ++i) {
    live += delta[i];
    data.nodes[i].live_bytes = static_cast<size_t>(live);
    data.peak_live_bytes = std::max(data.peak_live_bytes, data.nodes[i].live_bytes);
  }
  for (const auto& v : graph->values()) {
    if (v->is_constant()) data.weight_bytes += v->constant().nbytes();
  }
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  KILN_CHECK(out.good(), ErrorCode::Unavailable, "cannot write '{}'", path);
}

std::string mib(size_t bytes) {
  return fmt::format("{:.3f} MiB", static_cast<double>(bytes) / (1 << 20));
}

int profile(const ProfileOptions& o) {
  auto files = o.inputs.file_map();
  auto dims = o.inputs.dims();
  SessionOptions so;
  so.threads = o.threads;
  so.device = o.device;
  so.optimize = !o.no_optimize;
  so.profiling = true;
  Session session(o.model, so);
  runtime::Feeds feeds = make_feeds(session.inputs(), files, dims, o.inputs.seed);
  std::shared_ptr<const ir::Graph> graph = session.model().graph;
  std::vector<const ir::Node*> nodes;
  for (const ir::Node* n : graph->nodes()) nodes.push_back(n);

  ProfileData data;
  data.model = o.model;
  for (const ir::Node* n : nodes)
    data.nodes.push_back({n->name().empty() ? n->label() : n->name(), n->op_type(), n->domain()});
  // The kernel that runs each node, as the session's executor chose it (in node order).
  if (const runtime::Executor* ex = session.executor()) {
    const std::vector<runtime::KernelChoice>& choices = ex->kernel_choices();
    for (size_t i = 0; i < nodes.size() && i < choices.size(); ++i) {
      data.nodes[i].backend = choices[i].backend;
      data.nodes[i].kernel = choices[i].kernel;
    }
  }
  std::unordered_map<const ir::Node*, size_t> index;
  for (size_t i = 0; i < nodes.size(); ++i) index[nodes[i]] = i;
  Progress progress("profile", static_cast<size_t>(o.warmup + o.iterations));
  for (int i = 0; i < o.warmup; ++i) {
    session.run(feeds);
    progress.step("warm-up");
  }
  using Clock = std::chrono::steady_clock;
  const Clock::time_point origin = Clock::now();
  auto since_origin = [&](Clock::time_point t) {
    return std::chrono::duration<double, std::micro>(t - origin).count();
  };
  for (int r = 0; r < o.iterations; ++r) {
    const Clock::time_point start = Clock::now();
    session.run(feeds);
    const Clock::time_point end = Clock::now();
    data.run_start_us.push_back(since_origin(start));
    data.run_wall_us.push_back(std::chrono::duration<double, std::micro>(end - start).count());
    std::vector<double> us(nodes.size(), 0), starts(nodes.size(), -1);
    for (const runtime::NodeTiming& t : session.last_profile()) {
      auto it = index.find(t.node);
      if (it == index.end()) continue;
      us[it->second] += t.microseconds;
      if (starts[it->second] < 0) starts[it->second] = since_origin(t.start);
    }
    data.runs_us.push_back(std::move(us));
    data.node_start_us.push_back(std::move(starts));
    progress.step();
  }
  progress.finish();
  // Shapes and memory from the last profiled run (every run has the same feeds).
  measure_memory(graph, nodes, feeds, session.last_profile(), data);
  data.take_medians();

  const double node_sum = data.nodes_us();
  auto share = [&](double us) { return node_sum > 0 ? 100 * us / node_sum : 0.0; };
  std::cout << fmt::format("model: {}\n", o.model) << describe_feeds(feeds);
  std::cout << fmt::format(
      "{} nodes, {} profiled runs after {} warm-up: {:.3f} ms per run ({:.3f} ms in nodes), "
      "medians over the runs\n",
      nodes.size(), data.run_count(), o.warmup, data.median_run_us() / 1000, node_sum / 1000);
  std::cout << fmt::format("memory: weights {}, inputs {}, peak live activations {} ({} bytes)\n",
                           mib(data.weight_bytes), mib(data.input_bytes), mib(data.peak_live_bytes),
                           data.peak_live_bytes);
  std::cout << fmt::format("\n{:<28} {:>6} {:>12} {:>12} {:>7}\n", "op type", "count", "median ms",
                           "per node us", "% run");
  for (const OpTypeRecord& r : data.by_op_type()) {
    std::cout << fmt::format("{:<28} {:>6} {:>12.3f} {:>12.1f} {:>6.1f}%\n", r.op_type, r.count,
                             r.median_us / 1000, r.median_us / static_cast<double>(r.count),
                             share(r.median_us));
  }
  std::vector<size_t> order(nodes.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return data.nodes[a].median_us > data.nodes[b].median_us;
  });
  auto kernel_of = [](const NodeRecord& r) {
    return r.kernel.empty() ? std::string("reference (interpreter)") : r.backend + ":" + r.kernel;
  };
  std::cout << fmt::format("\n{:<36} {:<16} {:<24} {:>10} {:>7} {:>14}  {}\n", "node", "op type",
                           "kernel", "median us", "% run", "output bytes", "output");
  for (size_t k = 0; k < order.size() && k < static_cast<size_t>(o.top); ++k) {
    const NodeRecord& r = data.nodes[order[k]];
    std::cout << fmt::format("{:<36} {:<16} {:<24} {:>10.1f} {:>6.1f}% {:>14}  {}\n", r.name,
                             r.op_type, kernel_of(r), r.median_us, share(r.median_us),
                             r.output_bytes, r.output_shapes.empty() ? "" : r.output_shapes[0]);
  }
  // Nodes no fast kernel took: where a model loses speed, all of them however fast they ran.
  std::vector<const NodeRecord*> fallbacks;
  double fallback_us = 0;
  for (const NodeRecord& r : data.nodes) {
    if (!r.is_fallback()) continue;
    fallbacks.push_back(&r);
    fallback_us += r.median_us;
  }
  std::cout << fmt::format(
      "\nreference kernels (fallbacks): {} of {} nodes, {:.1f}% of the time in "
      "nodes{}\n",
      fallbacks.size(), nodes.size(), share(fallback_us), fallbacks.empty() ? "" : ":");
  for (const NodeRecord* r : fallbacks) {
    std::cout << fmt::format("  {:<36} {:<16} {:>10.1f} us\n", r->name, r->op_type, r->median_us);
  }
  if (!o.trace.empty()) {
    write_text(o.trace, chrome_trace_json(data));
    std::cout << fmt::format("\nwrote {} (Chrome trace: open in https://ui.perfetto.dev)\n",
                             o.trace);
  }
  if (!o.html.empty()) {
    write_text(o.html, html_report(data));
    std::cout << fmt::format("wrote {} (HTML report)\n", o.html);
  }
  return kExitOk;
}

}  // namespace

Command add_profile_command(CLI::App& app) {
  auto o = std::make_shared<ProfileOptions>();
  CLI::App* cmd = app.add_subcommand(
      "profile",
      "Time (medians over runs), kernel and memory per node and op type, reference-kernel "
      "fallbacks; Chrome trace (--trace) and HTML report");
  cmd->add_option("model", o->model, "ONNX model or .kiln engine file")
      ->required()
      ->check(CLI::ExistingFile);
  add_input_options(cmd, o->inputs);
  cmd->add_option("--device", o->device,
                  "Devices to run on: cpu, gpu, gpu,cpu (nodes on a GPU are timed with its "
                  "events)");
  cmd->add_option("--threads", o->threads, "Intra-op threads (0: one per core)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--no-optimize", o->no_optimize, "ONNX models: run the graph as imported");
  cmd->add_option("--warmup", o->warmup, "Unprofiled runs first")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--iterations", o->iterations, "Profiled runs (times are their medians)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--top", o->top, "Nodes to list, slowest first")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--trace", o->trace,
                  "Write a Chrome-trace JSON file (Perfetto, chrome://tracing)");
  cmd->add_option("--html", o->html, "Write a self-contained HTML report");
  return {cmd, [o] { return profile(*o); }};
}

}  // namespace kiln::cli
