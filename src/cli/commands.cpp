#include "cli/commands.hpp"

#include <algorithm>
#include <chrono>
#include <iostream>
#include <random>

#include <fmt/format.h>

#include "cli/load_model.hpp"
#include "onnx/onnx_io.hpp"
#include "runtime/interpreter.hpp"

namespace kiln::cli {
namespace {

Tensor random_tensor(const ir::Value& v, const std::map<std::string, int64_t>& dims,
                     std::mt19937_64& rng) {
  const TypeInfo& t = v.type();
  KILN_CHECK_ARG(t.is_tensor() && t.shape, "input '{}' has type {}: give it with --input", v.name(),
                 t.to_string());
  std::vector<int64_t> shape;
  for (const Dim& d : t.shape->dims()) {
    if (d.is_static()) {
      shape.push_back(d.value());
    } else {
      auto it = dims.find(d.symbol_name());
      shape.push_back(it != dims.end() ? it->second : std::max<int64_t>(1, d.min()));
    }
  }
  Tensor out(t.dtype, shape);
  std::uniform_real_distribution<double> real(-1.0, 1.0);
  std::uniform_int_distribution<int> small(0, 9);
  dispatch_dtype(t.dtype, fmt::format("random input '{}'", v.name()), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* p = out.data<T>();
    for (int64_t i = 0; i < out.numel(); ++i) {
      if constexpr (std::is_same_v<T, std::string>) {
        p[i] = std::to_string(small(rng));
      } else if constexpr (std::is_same_v<T, bool>) {
        p[i] = small(rng) % 2;
      } else if constexpr (std::is_integral_v<T>) {
        p[i] = static_cast<T>(small(rng));
      } else {
        p[i] = T(static_cast<float>(real(rng)));
      }
    }
  });
  return out;
}

std::string summarize(const Tensor& t) {
  std::string s = t.describe();
  if (t.numel() == 0 || t.dtype() == DataType::String) return s;
  double lo = t.double_at(0), hi = lo, sum = 0;
  for (int64_t i = 0; i < t.numel(); ++i) {
    double x = t.double_at(i);
    lo = std::min(lo, x);
    hi = std::max(hi, x);
    sum += x;
  }
  s += fmt::format("  min {:.6g} max {:.6g} mean {:.6g}  [", lo, hi,
                   sum / static_cast<double>(t.numel()));
  for (int64_t i = 0; i < std::min<int64_t>(t.numel(), 6); ++i) {
    s += fmt::format("{}{:.6g}", i ? ", " : "", t.double_at(i));
  }
  return s + (t.numel() > 6 ? ", ...]" : "]");
}

}  // namespace

int run_command(const RunOptions& o) {
  ir::Model model = load_model(o.model).model;
  runtime::Interpreter interp(model.graph);
  std::map<std::string, std::string> given;
  for (const std::string& spec : o.inputs) {
    auto eq = spec.find('=');
    KILN_CHECK_ARG(eq != std::string::npos, "--input '{}' must be NAME=FILE", spec);
    given[spec.substr(0, eq)] = spec.substr(eq + 1);
  }
  std::mt19937_64 rng(o.seed);
  std::map<std::string, RtValue> feeds;
  for (const ir::Value* v : model.graph->inputs()) {
    auto it = given.find(v->name());
    if (it != given.end()) {
      feeds[v->name()] = onnx_io::read_value_file(it->second, v->type());
      given.erase(it);
    } else if (!v->is_constant()) {
      feeds[v->name()] = random_tensor(*v, o.dims, rng);
    }
  }
  KILN_CHECK(given.empty(), ErrorCode::NotFound, "the model has no input named '{}'",
             given.begin()->first);
  for (const auto& [name, v] : feeds)
    std::cout << "input  " << name << ": " << v.describe() << "\n";

  interp.set_profiling(o.profile);
  std::vector<double> times;
  std::map<std::string, RtValue> outputs;
  for (int r = 0; r < o.repeat; ++r) {
    auto start = std::chrono::steady_clock::now();
    outputs = interp.run(feeds);
    times.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
            .count());
  }
  for (const ir::Value* v : model.graph->outputs()) {
    const RtValue& r = outputs.at(v->name());
    std::cout << "output " << v->name() << ": "
              << (r.is_tensor() ? summarize(r.tensor()) : r.describe()) << "\n";
  }
  std::sort(times.begin(), times.end());
  std::cout << fmt::format("time: {:.3f} ms (median of {})\n", times[times.size() / 2],
                           times.size());
  if (o.profile) {
    std::map<std::string, double> per_op;
    for (const auto& t : interp.last_profile()) per_op[t.node->op_type()] += t.microseconds;
    std::vector<std::pair<double, std::string>> sorted;
    for (const auto& [op, us] : per_op) sorted.emplace_back(us, op);
    std::sort(sorted.rbegin(), sorted.rend());
    for (const auto& [us, op] : sorted) std::cout << fmt::format("  {:<24} {:10.1f} us\n", op, us);
  }
  return 0;
}

int inspect_command(const InspectOptions& o) {
  LoadedModel loaded = load_model(o.model);
  const ir::Model& model = loaded.model;
  const ir::Graph& g = *model.graph;
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
  if (o.print_graph) std::cout << ir::print_graph(g);
  return 0;
}

}  // namespace kiln::cli
