// `kiln compile`: ONNX in, optimized engine file out, kept only when it passes the precision gate.
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>

#include <fmt/format.h>

#include "backends/cpu/cpu_backend.hpp"
#include "cli/command.hpp"
#include "cli/flops.hpp"
#include "cli/fp16.hpp"
#include "cli/load_model.hpp"
#include "cli/precision_gate.hpp"
#include "cli/progress.hpp"
#include "core/regular_file.hpp"
#include "onnx/onnx_io.hpp"
#include "passes/pass_manager.hpp"
#include "passes/passes.hpp"
#include "runtime/executor.hpp"

namespace kiln::cli {
namespace {
namespace fs = std::filesystem;

struct CompileOptions {
  std::string model;
  std::string output;  // default: the model's path with extension .kiln
  bool no_optimize = false;
  bool no_prepack = false;  // leave weights plain: kernels pack them when the engine opens
  std::string dump_after;   // pass name: print the graph after it
  bool trace_passes = false;
  std::string target;  // "cpu:x86-64,..." (Target::parse); default the portable CPU baseline
  // NAME:1x3x224x224 fixes an input's dims; NAME:1..64x3x224x224 bounds them (a range per dim).
  std::vector<std::string> shapes;
  GateOptions gate;
  Fp16Options fp16;
};

// "name:1x3x224x224" or "name:1..64x3x224x224" -> (name, shape); a range gives a bounded symbol.
std::pair<std::string, Shape> parse_shape_spec(const std::string& spec) {
  auto colon = spec.rfind(':');
  KILN_CHECK_ARG(colon != std::string::npos && colon > 0 && colon + 1 < spec.size(),
                 "--shape '{}' must be NAME:D1xD2x... (each D a number or MIN..MAX)", spec);
  std::string name = spec.substr(0, colon);
  std::vector<Dim> dims;
  std::stringstream ss(spec.substr(colon + 1));
  for (std::string part; std::getline(ss, part, 'x');) {
    try {
      size_t used = 0;
      auto range = part.find("..");
      if (range == std::string::npos) {
        int64_t v = std::stoll(part, &used);
        KILN_CHECK_ARG(used == part.size() && v >= 0, "bad dim '{}'", part);
        dims.emplace_back(v);
      } else {
        int64_t lo = std::stoll(part.substr(0, range), &used);
        KILN_CHECK_ARG(used == range, "bad dim '{}'", part);
        std::string hi_text = part.substr(range + 2);
        int64_t hi = std::stoll(hi_text, &used);
        KILN_CHECK_ARG(used == hi_text.size() && 0 <= lo && lo <= hi, "bad dim range '{}'", part);
        if (lo == hi)
          dims.emplace_back(lo);
        else
          dims.push_back(Dim::symbol(fmt::format("{}_{}", name, dims.size()), lo, hi));
      }
    } catch (const std::logic_error&) {
      fail(ErrorCode::InvalidArgument, "--shape '{}': '{}' is not a number or MIN..MAX", spec,
           part);
    }
  }
  return {name, Shape(std::move(dims))};
}

size_t count_nodes(const ir::Graph& g) {
  size_t n = 0;
  for (const auto& [op, count] : ir::op_histogram(g)) n += count;
  return n;
}

// A directory, device or fifo is refused before it is read; protobuf parses at most 2 GiB.
std::string read_file(const std::string& path) {
  RegularFile file(path, "model file");
  KILN_CHECK_ARG(file.size() < static_cast<uint64_t>(INT32_MAX),
                 "{}: model of {} bytes is over protobuf's 2 GiB limit: store weights as external "
                 "data",
                 path, file.size());
  return file.read_all(INT32_MAX);
}

// Why a node is left on a reference kernel, as the CPU backend says.
std::string fallback_reason(const ir::Node& n) {
  if (!ir::subgraphs_of(n).empty()) return "control flow: its bodies run on the interpreter";
  std::string reason = backends::CpuBackend::instance().supports(n).reason;
  return reason.empty() ? "sequence or optional values" : reason;
}

// The nodes no fast kernel took, with their share of the model's FLOPs (symbolic dims at the low
// end of their range): what will run slowly, said before the engine ships.
std::string describe_fallbacks(const runtime::Executor& ex) {
  const ir::Graph& g = ex.graph();
  const std::vector<runtime::KernelChoice>& choices = ex.kernel_choices();
  FlopCount flops = count_flops(g, {});
  std::vector<std::pair<const ir::Node*, double>> left;
  double left_flops = 0;
  size_t i = 0;
  for (const ir::Node* n : g.nodes()) {
    if (i < choices.size() && choices[i].kernel == runtime::kReferenceKernel) {
      auto it = flops.by_node.find(n);
      double f = it != flops.by_node.end() ? it->second : 0;
      left.emplace_back(n, f);
      left_flops += f;
    }
    ++i;
  }
  std::string out = fmt::format(
      "reference kernels (no fast kernel): {} of {} nodes, {:.1f}% of {} FLOPs{}\n", left.size(),
      choices.size(), flops.total > 0 ? 100 * left_flops / flops.total : 0.0,
      si_number(flops.total), left.empty() ? "" : ":");
  // Most FLOPs first; a long tail is summed up.
  std::stable_sort(left.begin(), left.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  constexpr size_t kListed = 20;
  for (size_t k = 0; k < left.size() && k < kListed; ++k) {
    const ir::Node* n = left[k].first;
    out += fmt::format("  {} '{}': {} FLOPs ({})\n", n->op_type(),
                       n->name().empty() ? n->label() : n->name(), si_number(left[k].second),
                       fallback_reason(*n));
  }
  if (left.size() > kListed) out += fmt::format("  and {} more\n", left.size() - kListed);
  return out;
}

// "activation memory: ..." per arena, a histogram of the chosen kernels and the nodes left on
// reference kernels.
std::string describe_execution_plan(const runtime::Executor& ex) {
  std::string out;
  for (const auto& a : ex.arena_summaries()) {
    out += fmt::format(
        "activation memory: {} bytes planned in one {} arena (naive sum {} bytes, {:.1f}x; {} of "
        "{} values in place or views){}\n",
        a.bytes, a.device, a.naive_bytes,
        a.bytes ? static_cast<double>(a.naive_bytes) / static_cast<double>(a.bytes) : 1.0, a.shared,
        a.values, a.unplanned ? fmt::format("; {} values of unbounded size", a.unplanned) : "");
  }
  if (ex.arena_summaries().empty()) out += "activation memory: 0 bytes (no fast kernels)\n";
  std::map<std::string, size_t> kernels;
  for (const auto& c : ex.kernel_choices()) ++kernels[c.backend + ":" + c.kernel];
  out += "kernels:";
  for (const auto& [name, count] : kernels) out += fmt::format(" {} {}", count, name);
  return out + "\n" + describe_fallbacks(ex);
}

ir::Model import(const std::string& bytes, const CompileOptions& o) {
  onnx_io::ImportOptions import;
  import.base_dir = fs::absolute(o.model).parent_path().string();
  ir::Model model;
  try {
    model = onnx_io::import_model_bytes(bytes, import);
  } catch (const Error& e) {
    throw Error(e.code(), fmt::format("{}: {}", o.model, e.message()));
  }
  model.source_path = o.model;
  return model;
}

// Hands each line written to it to a callback: turns the pass manager's trace into progress.
class LineSink : public std::streambuf {
 public:
  explicit LineSink(std::function<void(const std::string&)> fn) : fn_(std::move(fn)) {}

 protected:
  int overflow(int c) override {
    if (c == '\n') {
      fn_(line_);
      line_.clear();
    } else if (c != EOF) {
      line_ += static_cast<char>(c);
    }
    return c;
  }

 private:
  std::function<void(const std::string&)> fn_;
  std::string line_;
};

// Test hook for the precision gate: KILN_TEST_CORRUPT_WEIGHT=NAME scales the float initializer
// NAME of the optimized graph, as a broken pass would, so tests can see the gate refuse it.
void corrupt_weight_for_tests(ir::Graph& g) {
  const char* name = std::getenv("KILN_TEST_CORRUPT_WEIGHT");
  if (!name || !*name) return;
  ir::Value* v = g.find_local_value(name);
  KILN_CHECK(v && v->is_constant() &&
                 (v->constant().dtype() == DataType::Float32 ||
                  v->constant().dtype() == DataType::Float16),
             ErrorCode::NotFound,
             "KILN_TEST_CORRUPT_WEIGHT: the compiled graph has no float initializer '{}'", name);
  Tensor t = v->constant().clone();
  if (t.dtype() == DataType::Float16) {  // a --fp16 engine's weights
    for (Float16& x : t.values<Float16>()) x = Float16(static_cast<float>(x) * 1.25f + 0.01f);
  } else {
    for (float& x : t.values<float>()) x = x * 1.25f + 0.01f;
  }
  v->set_constant(std::move(t));
  std::cerr << fmt::format("kiln: test hook: corrupted weight '{}'\n", name);
}

int compile(const CompileOptions& o) {
  auto start = std::chrono::steady_clock::now();
  std::string bytes = read_file(o.model);
  KILN_CHECK_ARG(!engine::has_engine_magic(bytes),
                 "'{}' is already a compiled Kiln engine; compile its ONNX model instead", o.model);
  KILN_CHECK_ARG(!engine::has_engine_layout(bytes),
                 "'{}' has a Kiln engine header but is {}; compile its ONNX model instead", o.model,
                 engine::engine_magic_problem(bytes));
  if (o.no_optimize && !o.dump_after.empty())
    throw UsageError("--dump-after needs the optimizer: drop --no-optimize");
  std::string output = o.output;
  if (output.empty()) output = fs::path(o.model).replace_extension(".kiln").string();
  KILN_CHECK_ARG(fs::weakly_canonical(output) != fs::weakly_canonical(o.model),
                 "the engine file would overwrite the model '{}': choose another -o", o.model);

  engine::EngineInfo info;
  info.source_hash = engine::hash_bytes(bytes.data(), bytes.size());
  if (!o.target.empty()) info.target = engine::Target::parse(o.target);

  ir::Model model = import(bytes, o);
  // The gate compares against the graph as the user wrote it, imported apart from the one the
  // passes rewrite.
  std::shared_ptr<const ir::Graph> original;
  if (!o.gate.skip) original = import(bytes, o).graph;
  size_t before = count_nodes(*model.graph);
  if (!o.shapes.empty()) {
    for (const std::string& spec : o.shapes) {
      auto [name, shape] = parse_shape_spec(spec);
      passes::set_input_shape(*model.graph, name, shape);
    }
    passes::InferShapes{}.apply(*model.graph);
  }

  if (!o.no_optimize) {
    passes::PassManagerOptions pm_options = passes::PassManagerOptions::from_env();
    Progress progress("optimizing", 0);
    size_t runs = 0;
    LineSink sink([&](const std::string& line) {
      if (o.trace_passes) std::cout << line << "\n";
      // "pass NAME iteration N ..." -> NAME
      std::istringstream words(line);
      std::string word, pass;
      words >> word >> pass;
      progress.update(++runs, pass);
    });
    std::ostream trace(&sink);
    if (o.trace_passes || Progress::enabled()) pm_options.trace = &trace;
    if (!o.dump_after.empty()) {
      pm_options.dump_after = o.dump_after;
      pm_options.dump = &std::cout;
    }
    passes::PassManager pm(pm_options);
    passes::add_default_passes(pm);
    pm.run(*model.graph);
  }
  if (o.fp16.enabled) convert_model_to_fp16(model, o.fp16, std::cout);
  corrupt_weight_for_tests(*model.graph);
  size_t after = count_nodes(*model.graph);
  std::cout << fmt::format("nodes: {} -> {}{}\n", before, after,
                           o.no_optimize ? " (not optimized)" : "");
  // The execution plan (kernel choices, memory plan) is made by preparing the model exactly as
  // a session would, and stored so that loading the engine does not redo it.
  runtime::Executor prepared(model.graph);
  std::cout << describe_execution_plan(prepared);
  engine::ExecutionPlan plan = prepared.execution_plan();
  // Weights in the layouts the kernels compute with, so that opening maps them (this CPU's
  // layouts: a CPU with other vector units packs again at open).
  if (!o.no_prepack) {
    plan.packed = prepared.pack_weights();
    size_t packed_bytes = 0;
    for (const engine::StoredPackedWeight& w : plan.packed) packed_bytes += w.data.nbytes();
    if (!plan.packed.empty()) {
      std::cout << fmt::format("packed weights: {} ({:.2f} MiB, for this CPU's kernels)\n",
                               plan.packed.size(), packed_bytes / 1048576.0);
    }
  }

  // Written beside the destination first, renamed into place only once it is known good.
  std::string staged = o.gate.skip ? output : output + ".unverified";
  engine::write_engine(model, info, staged, &plan);
  // Read the engine back and compare: a writer bug must fail the compile, not the deployment.
  engine::ReadOptions check;
  check.check_target = false;
  engine::LoadedEngine loaded = engine::read_engine(staged, check);
  if (ir::print_graph(*loaded.model.graph) != ir::print_graph(*model.graph)) {
    fs::remove(staged);
    fail(ErrorCode::Internal, "the engine written to '{}' does not read back as the same graph",
         output);
  }
  if (o.gate.skip) {
    std::cout << "precision gate: skipped (--no-verify): the engine's outputs were not checked\n";
  } else {
    GateResult gate;
    GateOptions gate_options = o.gate;
    if (o.fp16.enabled) use_fp16_tolerance(gate_options.tolerance);
    try {
      gate = run_precision_gate(staged, info.target, model, original, gate_options, std::cout);
    } catch (...) {
      fs::remove(staged);
      throw;
    }
    if (!gate.pass && !o.gate.allow_drift) {
      fs::remove(staged);
      fail(ErrorCode::InvalidArgument,
           "precision gate: {}. The engine was not written; --allow-drift writes it anyway, "
           "--max-rel-l2 changes the tolerance",
           gate.failure);
    }
    if (!gate.pass) {
      std::cerr << fmt::format(
          "kiln: warning: precision gate: {}. Writing the engine anyway (--allow-drift)\n",
          gate.failure);
    }
    fs::rename(staged, output);
  }
  double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  std::cout << fmt::format("wrote {}: {} bytes ({} of weights) in {:.1f} ms\n", output, loaded.size,
                           loaded.weights_size, ms);
  std::cout << describe_engine(loaded.info);
  std::cout << describe_precision(*loaded.model.graph);
  return kExitOk;
}

}  // namespace

Command add_compile_command(CLI::App& app) {
  auto o = std::make_shared<CompileOptions>();
  CLI::App* cmd = app.add_subcommand(
      "compile",
      "Optimize an ONNX model and write it as a .kiln engine file, checked by the precision gate");
  cmd->add_option("model", o->model, "ONNX model file")->required()->check(CLI::ExistingFile);
  cmd->add_option("-o,--output", o->output,
                  "Engine file to write (default: the model's name with .kiln)");
  cmd->add_flag("--no-optimize", o->no_optimize, "Skip the graph passes");
  cmd->add_flag("--no-prepack", o->no_prepack,
                "Store weights only plain (smaller file; kernels pack them when it opens)");
  cmd->add_option("--shape,--shape-range", o->shapes,
                  "Input dims, fixed or as ranges: NAME:1x3x224x224 or NAME:1..64x3x224x224");
  cmd->add_option("--dump-after", o->dump_after, "Print the graph after the pass of this name");
  cmd->add_flag("--trace-passes", o->trace_passes, "Print one line per pass run");
  cmd->add_option("--target", o->target,
                  "Target to stamp, DEVICE[:FEATURE,...] (default: portable CPU)");
  add_gate_options(cmd, o->gate);
  add_fp16_options(cmd, o->fp16);
  return {cmd, [o] { return compile(*o); }};
}

}  // namespace kiln::cli
