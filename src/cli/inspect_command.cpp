// `kiln inspect`: a model's inputs, outputs, parameters, op histogram and FLOPs; --dot, --graph.
#include <algorithm>
#include <fstream>
#include <iostream>
#include <memory>

#include <fmt/format.h>

#include "cli/command.hpp"
#include "cli/fp16.hpp"
#include "cli/graph_dot.hpp"
#include "cli/inputs.hpp"
#include "cli/load_model.hpp"
#include "compiler/flops.hpp"

namespace kiln::cli {
namespace {

using compiler::count_flops;
using compiler::FlopCount;
using compiler::si_number;

struct InspectOptions {
  std::string model;
  bool print_graph = false;
  std::string dot;
  InputOptions inputs;  // only --dim is used: the dims FLOPs are counted at
};

int inspect(const InspectOptions& o) {
  auto dims = o.inputs.dims();
  LoadedModel loaded = load_model(o.model);
  const ir::Model& model = loaded.model;
  const ir::Graph& g = *model.graph;
  {
    // Any symbolic dim of the graph may be given (shape inference names some inside it).
    std::vector<IoInfo> values;
    for (const ir::Value* v : g.inputs()) values.push_back({v->name(), v->type()});
    for (const auto& v : g.values()) values.push_back({v->name(), v->type()});
    check_dim_names(dims, symbolic_dim_names(values));
  }
  std::cout << fmt::format("model: {} (ir_version {}, producer '{}' {})\n", o.model,
                           model.ir_version, model.producer_name, model.producer_version);
  if (loaded.engine) std::cout << describe_engine(*loaded.engine);
  std::cout << "opsets:";
  for (const auto& [d, v] : g.opsets()) std::cout << " " << (d.empty() ? "ai.onnx" : d) << "=" << v;
  std::cout << "\ninputs:\n";
  for (const ir::Value* v : g.inputs()) {
    if (!v->is_constant()) std::cout << "  " << v->name() << ": " << v->type().to_string() << "\n";
  }
  std::cout << "outputs:\n";
  for (const ir::Value* v : g.outputs())
    std::cout << "  " << v->name() << ": " << v->type().to_string() << "\n";
  int64_t params = 0, bytes = 0;
  for (const auto& v : g.values()) {
    if (v->is_constant()) {
      params += v->constant().numel();
      bytes += static_cast<int64_t>(v->constant().nbytes());
    }
  }
  std::cout << fmt::format("parameters: {} ({:.2f} MiB)\n", params,
                           static_cast<double>(bytes) / (1 << 20));
  std::cout << describe_precision(g);
  auto hist = ir::op_histogram(g);
  size_t total = 0;
  for (const auto& [op, n] : hist) total += n;
  std::cout << fmt::format("nodes: {}\n", total);
  std::vector<std::pair<size_t, std::string>> sorted;
  for (const auto& [op, n] : hist) sorted.emplace_back(n, op);
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  for (const auto& [n, op] : sorted) std::cout << fmt::format("  {:<28} {}\n", op, n);

  FlopCount flops = count_flops(g, dims);
  std::string at;
  for (const auto& [name, value] : flops.assumed)
    at += fmt::format("{}{}={}", at.empty() ? " at " : ", ", name, value);
  std::cout << fmt::format("FLOPs{}: {:.0f} ({})\n", at, flops.total, si_number(flops.total));
  std::vector<std::pair<double, std::string>> by_op;
  for (const auto& [op, f] : flops.by_op_type) {
    if (f > 0) by_op.emplace_back(f, op);
  }
  std::sort(by_op.rbegin(), by_op.rend());
  for (const auto& [f, op] : by_op) {
    std::cout << fmt::format("  {:<28} {:>12} {:5.1f}%\n", op, si_number(f),
                             flops.total > 0 ? 100 * f / flops.total : 0.0);
  }
  for (const auto& [op, n] : flops.uncounted)
    std::cout << fmt::format("  not counted (shapes unknown): {} x{}\n", op, n);
  if (flops.control_flow)
    std::cout << fmt::format("  not counted: {} If/Loop/Scan bodies\n", flops.control_flow);

  if (o.print_graph) std::cout << ir::print_graph(g);
  if (!o.dot.empty()) {
    std::ofstream out(o.dot, std::ios::trunc);
    out << graph_to_dot(g);
    out.close();
    KILN_CHECK(out.good(), ErrorCode::Unavailable, "cannot write '{}'", o.dot);
    std::cout << fmt::format("wrote {} (render: dot -Tsvg {} -o graph.svg)\n", o.dot, o.dot);
  }
  return kExitOk;
}

}  // namespace

Command add_inspect_command(CLI::App& app) {
  auto o = std::make_shared<InspectOptions>();
  CLI::App* cmd = app.add_subcommand(
      "inspect", "Show a model's inputs, outputs, parameters, op histogram and FLOPs");
  cmd->add_option("model", o->model, "ONNX model or .kiln engine file")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_flag("--graph", o->print_graph, "Print the whole graph as text");
  cmd->add_option("--dot", o->dot, "Write the graph as Graphviz DOT to this file");
  cmd->add_option("-d,--dim", o->inputs.dim_specs,
                  "Value of a symbolic dim for the FLOP count, NAME=N (default: the low end of "
                  "its range, at least 1)")
      ->delimiter(',');
  return {cmd, [o] { return inspect(*o); }};
}

}  // namespace kiln::cli
