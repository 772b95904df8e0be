#include "compiler/compile.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <ostream>
#include <sstream>
#include <streambuf>

#include <fmt/format.h>

#include "backends/backend_registry.hpp"
#include "compiler/fp16_range.hpp"
#include "compiler/option_error.hpp"
#include "compiler/shape_spec.hpp"
#include "compiler/tune_tactics.hpp"
#include "core/log.hpp"
#include "core/regular_file.hpp"
#include "onnx/onnx_io.hpp"
#include "passes/pass_manager.hpp"
#include "passes/passes.hpp"
#include "runtime/executor.hpp"

namespace kiln::compiler {
namespace {

// Float32 values the fp16 range check may keep for its one run (beyond it, it is skipped).
constexpr size_t kFp16RangeMemory = size_t{2} << 30;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

// Sends messages to the caller's callback (or the log), keeping the report's text.
class Messages {
 public:
  Messages(const MessageCallback& fn, std::string& report) : fn_(fn), report_(report) {}
  void operator()(MessageKind kind, std::string_view text) const {
    if (kind == MessageKind::Report) report_ += text;
    if (fn_) {
      fn_(kind, text);
      return;
    }
    // The log takes one line per message.
    if (!text.empty() && text.back() == '\n') text.remove_suffix(1);
    for (size_t start = 0; start <= text.size();) {
      size_t end = std::min(text.find('\n', start), text.size());
      log_message(kind == MessageKind::Warning ? LogLevel::Warning : LogLevel::Info,
                  text.substr(start, end - start));
      start = end + 1;
    }
  }

 private:
  const MessageCallback& fn_;
  std::string& report_;
};

// Hands each line written to it to a callback: turns the pass manager's trace and dump into
// messages and progress.
class LineSink : public std::streambuf {
 public:
  explicit LineSink(std::function<void(const std::string&)> fn) : fn_(std::move(fn)) {}
  // A last line without its newline.
  void flush_line() {
    if (!line_.empty()) fn_(std::exchange(line_, {}));
  }

 protected:
  int overflow(int c) override {
    if (c == '\n') {
      fn_(std::exchange(line_, {}));
    } else if (c != EOF) {
      line_ += static_cast<char>(c);
    }
    return c;
  }

 private:
  std::function<void(const std::string&)> fn_;
  std::string line_;
};

size_t count_nodes(const ir::Graph& g) {
  size_t n = 0;
  for (const auto& [op, count] : ir::op_histogram(g)) n += count;
  return n;
}

// A directory, device or fifo is refused before it is read; protobuf parses at most 2 GiB.
std::string read_model_file(const std::string& path) {
  RegularFile file(path, "model file");
  KILN_CHECK_ARG(file.size() < static_cast<uint64_t>(INT32_MAX),
                 "{}: model of {} bytes is over protobuf's 2 GiB limit: store weights as external "
                 "data",
                 path, file.size());
  return file.read_all(INT32_MAX);
}

ir::Model import(const std::string& bytes, const CompileOptions& o) {
  onnx_io::ImportOptions import;
  if (!o.model_path.empty()) import.base_dir = fs::absolute(o.model_path).parent_path().string();
  ir::Model model;
  try {
    model = onnx_io::import_model_bytes(bytes, import);
  } catch (const Error& e) {
    throw Error(e.code(),
                fmt::format("{}: {}", o.model_path.empty() ? "model" : o.model_path, e.message()));
  }
  model.source_path = o.model_path;
  return model;
}

// Test hook for the precision gate: KILN_TEST_CORRUPT_WEIGHT=NAME scales the float initializer
// NAME of the optimized graph, as a broken pass would, so tests can see the gate refuse it.
void corrupt_weight_for_tests(ir::Graph& g, const Messages& say) {
  const char* name = std::getenv("KILN_TEST_CORRUPT_WEIGHT");
  if (!name || !*name) return;
  ir::Value* v = g.find_local_value(name);
  KILN_CHECK(v && v->is_constant() &&
                 (v->constant().dtype() == DataType::Float32 ||
                  v->constant().dtype() == DataType::Float16),
             ErrorCode::NotFound,
             "KILN_TEST_CORRUPT_WEIGHT: the compiled graph has no float initializer '{}'", name);
  Tensor t = v->constant().clone();
  if (t.dtype() == DataType::Float16) {  // a float16 engine's weights
    for (Float16& x : t.values<Float16>()) x = Float16(static_cast<float>(x) * 1.25f + 0.01f);
  } else {
    for (float& x : t.values<float>()) x = x * 1.25f + 0.01f;
  }
  v->set_constant(std::move(t));
  say(MessageKind::Note, fmt::format("test hook: corrupted weight '{}'\n", name));
}

void optimize(ir::Model& model, const CompileOptions& o, const Messages& say) {
  passes::PassManagerOptions pm_options = passes::PassManagerOptions::from_env();
  size_t runs = 0;
  bool progress_open = false;
  auto progress = [&](size_t done, std::string_view detail, bool finished) {
    if (!o.on_progress) return;
    o.on_progress({.stage = "optimizing", .done = done, .detail = detail, .finished = finished});
    progress_open = !finished;
  };
  LineSink trace_sink([&](const std::string& line) {
    if (o.trace_passes) say(MessageKind::Trace, line + "\n");
    // "pass NAME iteration N ..." -> NAME
    std::istringstream words(line);
    std::string word, pass;
    words >> word >> pass;
    progress(++runs, pass, false);
  });
  LineSink dump_sink([&](const std::string& line) { say(MessageKind::Trace, line + "\n"); });
  std::ostream trace(&trace_sink), dump(&dump_sink);
  if (o.trace_passes || o.on_progress) pm_options.trace = &trace;
  if (!o.dump_after.empty()) {
    pm_options.dump_after = o.dump_after;
    pm_options.dump = &dump;
  }
  progress(0, {}, false);
  // The bar is erased however the passes end.
  struct Erase {
    std::function<void()> fn;
    ~Erase() { fn(); }
  } erase{[&] {
    if (progress_open) progress(runs, {}, true);
  }};
  passes::PassManager pm(pm_options);
  passes::add_default_passes(pm, o.device, o.fp16.enabled);
  passes::add_device_passes(pm, o.device, o.fp16.enabled);
  pm.run(*model.graph);
  trace_sink.flush_line();
  dump_sink.flush_line();
}

// The gate's default for engines with int8 nodes: each requantization may round a tie (or a
// float32 sum one ulp apart) a whole quantization step away from the reference's, and through a
// deep network those steps add up. Random inputs, the static QDQ files of `kiln quantize`:
// ResNet-50 1.17e-2, BERT-base 1.2e-2 (onnxruntime's runs of them are as far from the
// reference); the earlier 1e-2 refused both. A wrong scale, zero point or weight is off by 1e-1
// and more.
constexpr double kInt8MaxRelL2 = 3e-2;
// DynamicQuantizeLSTM requantizes its hidden state every step: a tie rounded the other way (the
// kernel's float32 cell against the reference's double) moves every later step by a quantization
// step too, and the noise that follows differs. Resemblyzer with random inputs: 8e-3 for the
// file `kiln quantize --max-drop` writes (its sensitive first LSTM float32); the all-int8 file,
// whose embedding is only 0.7 cosine to the float model's, 2.3e-2 at batch 1 and 6.6e-2 at
// batch 4 (onnxruntime's run of it is as far). A wrong scale or weight is off by far more.
constexpr double kDynamicLstmMaxRelL2 = 5e-2;

// The relative L2 the gate allows by default for the int8 nodes `g` holds (0: none).
double int8_max_rel_l2(const ir::Graph& g) {
  double tol = 0;
  for (const ir::Node* n : g.nodes()) {
    const std::string& op = n->op_type();
    if (op == "FusedQLinearConv" || op == "FusedQLinearMatMul" || op == "QLinearConv" ||
        op == "QLinearMatMul") {
      tol = std::max(tol, kInt8MaxRelL2);
    } else if (op == "DynamicQuantizeLSTM") {
      tol = std::max(tol, kDynamicLstmMaxRelL2);
    }
  }
  return tol;
}

runtime::DriftTolerance gate_tolerance(const CompileOptions& o) {
  runtime::DriftTolerance t;
  if (o.max_rel_l2) {
    // A limit the caller gives is taken as it is, for every element type.
    KILN_CHECK_ARG(*o.max_rel_l2 >= 0, "--max-rel-l2 {} must be >= 0", *o.max_rel_l2);
    t.max_rel_l2 = *o.max_rel_l2;
    t.scale_by_type = false;
  } else if (o.fp16.enabled) {
    t.max_rel_l2 = default_half_max_rel_l2(o.fp16);
  }
  KILN_CHECK_ARG(!o.rtol || *o.rtol >= 0, "--rtol {} must be >= 0", *o.rtol);
  KILN_CHECK_ARG(!o.atol || *o.atol >= 0, "--atol {} must be >= 0", *o.atol);
  t.rtol = o.rtol;
  t.atol = o.atol;
  return t;
}

}  // namespace

CompileResult compile_model(const CompileOptions& o) {
  const auto start = Clock::now();
  CompileResult result;
  Messages say(o.on_message, result.report);
  KILN_CHECK_ARG(!o.model_path.empty() || o.model_bytes,
                 "compile: no model: give the path of an ONNX file or its bytes");
  KILN_CHECK_ARG(o.verify_timeout_seconds >= 0, "--verify-timeout {} must be >= 0",
                 o.verify_timeout_seconds);
  KILN_CHECK_ARG(o.verify || !o.verify_full,
                 "verify_full needs the precision gate: it widens what the gate compares");
  KILN_CHECK_ARG(o.verify || !o.allow_drift,
                 "allow_drift needs the precision gate: it keeps an engine the gate refuses");
  const runtime::DriftTolerance tolerance = gate_tolerance(o);
  if (o.fp16.enabled && o.fp16.bfloat16) {
    // Refused before any work where the device would only emulate bfloat16 (a device not
    // present here is planned at open, and checked there).
    std::vector<backends::Backend*> devices;
    try {
      devices = backends::backends_for(o.device);
    } catch (const Error& e) {
      if (e.code() != ErrorCode::Unavailable) throw;
    }
    for (const backends::Backend* b : devices) {
      const std::string why = b->cannot_compute(DataType::BFloat16);
      KILN_CHECK(why.empty(), ErrorCode::Unsupported, "--bf16 on device '{}': {}", b->name(), why);
    }
  }
  const std::string name = o.model_path.empty() ? "the model bytes" : o.model_path;
  std::string bytes = o.model_bytes ? *o.model_bytes : read_model_file(o.model_path);
  KILN_CHECK_ARG(!engine::has_engine_magic(bytes),
                 "'{}' is already a compiled Kiln engine; compile its ONNX model instead", name);
  KILN_CHECK_ARG(!engine::has_engine_layout(bytes),
                 "'{}' has a Kiln engine header but is {}; compile its ONNX model instead", name,
                 engine::engine_magic_problem(bytes));
  if (!o.optimize && !o.dump_after.empty())
    throw OptionError("--dump-after needs the optimizer: drop --no-optimize");
  std::string output = o.output_path;
  if (output.empty()) {
    KILN_CHECK_ARG(!o.model_path.empty(),
                   "compile: give the engine's output path (a model in memory has no name to "
                   "derive it from)");
    output = fs::path(o.model_path).replace_extension(".kiln").string();
  }
  KILN_CHECK_ARG(
      o.model_path.empty() || fs::weakly_canonical(output) != fs::weakly_canonical(o.model_path),
      "the engine file would overwrite the model '{}': choose another -o", o.model_path);

  engine::EngineInfo info;
  info.source_hash = engine::hash_bytes(bytes.data(), bytes.size());
  if (!o.target.empty()) info.target = engine::Target::parse(o.target);

  auto t = Clock::now();
  ir::Model model = import(bytes, o);
  // The gate compares against the graph as the user wrote it, imported apart from the one the
  // passes rewrite.
  std::shared_ptr<const ir::Graph> original;
  if (o.verify) original = import(bytes, o).graph;
  result.nodes_before = count_nodes(*model.graph);
  if (!o.shapes.empty()) {
    for (const std::string& spec : o.shapes) {
      auto [input, shape] = parse_shape_spec(spec);
      passes::set_input_shape(*model.graph, input, shape);
    }
    passes::InferShapes{}.apply(*model.graph);
  }
  result.timings.import = ms_since(t);

  t = Clock::now();
  if (o.optimize) optimize(model, o, say);
  result.timings.optimize = ms_since(t);
  t = Clock::now();
  if (o.fp16.enabled) {
    Fp16Options fp16 = o.fp16;
    // bfloat16 has float32's range: nothing to measure.
    if (fp16.bfloat16) fp16.range_check = false;
    Fp16RangeReport range;
    if (fp16.range_check) {
      try {
        range = measure_fp16_range(model.graph, o.inputs, o.threads, kFp16RangeMemory,
                                   o.verify_timeout_seconds);
      } catch (const Error& e) {
        // The measurement is an aid: a model it cannot run here converts without it (the gate
        // still checks the engine), and says why.
        range.ran = false;
        range.skipped = e.message();
      }
      fp16.keep_values.insert(range.beyond.begin(), range.beyond.end());
    }
    result.fp16_summary = convert_model_to_fp16(model, fp16);
    say(MessageKind::Report, result.fp16_summary);
    if (fp16.range_check) {
      say(range.ran && range.beyond.empty() ? MessageKind::Report : MessageKind::Warning,
          describe_fp16_range(range));
    }
  }
  result.timings.fp16 = ms_since(t);
  corrupt_weight_for_tests(*model.graph, say);
  result.nodes_after = count_nodes(*model.graph);
  say(MessageKind::Report, fmt::format("nodes: {} -> {}{}\n", result.nodes_before,
                                       result.nodes_after, o.optimize ? "" : " (not optimized)"));

  // The execution plan (kernel choices, memory plan) is made by preparing the model exactly as
  // a session would, and stored so that loading the engine does not redo it.
  t = Clock::now();
  runtime::ExecutorOptions eo;
  bool device_here = true;
  try {
    eo.backends = backends::backends_for(o.device);
  } catch (const Error& e) {
    if (e.code() != ErrorCode::Unavailable) throw;
    device_here = false;
    say(MessageKind::Warning,
        fmt::format("device '{}' is not available here ({}): the engine's kernels and memory are "
                    "planned when it opens on a machine that has it\n",
                    o.device, e.message()));
  }
  // The stamp names the devices the plan is for (another arch refuses the engine at open) and
  // the libraries their kernels use.
  bool any_device = false;
  for (const backends::Backend* b : eo.backends) {
    if (b->device_kind() != backends::DeviceKind::Cpu) {
      std::vector<std::string> libraries = b->library_versions();
      std::sort(libraries.begin(), libraries.end());
      info.device_targets.push_back({std::string(b->name()), std::move(libraries)});
      any_device = true;
    }
  }
  runtime::Executor prepared(model.graph, eo);
  result.plan = summarize_plan(prepared);
  say(MessageKind::Report, describe_execution_plan(prepared, result.plan));
  engine::ExecutionPlan plan = prepared.execution_plan();
  result.timings.plan = ms_since(t);
  if (any_device) {
    t = Clock::now();
    TunedTactics tuned = tune_tactics(prepared, *model.graph);
    plan.tactics = std::move(tuned.tactics);
    result.tactics = plan.tactics.size();
    result.timings.tune = ms_since(t);
    say(MessageKind::Report,
        tuned.skipped.empty()
            ? fmt::format("tactics: {} kernels timed their choices on the device ({:.1f} ms); "
                          "stored\n",
                          plan.tactics.size(), tuned.milliseconds)
            : fmt::format("tactics: none stored ({})\n", tuned.skipped));
  }
  // Weights in the layouts the kernels compute with, so that opening maps them (this CPU's
  // layouts: a CPU with other vector units packs again at open).
  t = Clock::now();
  if (o.prepack) {
    plan.packed = prepared.pack_weights();
    for (const engine::StoredPackedWeight& w : plan.packed) result.packed_bytes += w.data.nbytes();
    result.packed_weights = plan.packed.size();
    if (!plan.packed.empty()) {
      say(MessageKind::Report,
          fmt::format("packed weights: {} ({:.2f} MiB, for this CPU's kernels)\n",
                      plan.packed.size(), static_cast<double>(result.packed_bytes) / 1048576.0));
    }
  }
  result.timings.pack = ms_since(t);

  // Written beside the destination first, renamed into place only once it is known good.
  t = Clock::now();
  std::string staged = o.verify ? output + ".unverified" : output;
  engine::write_engine(model, info, staged, &plan);
  result.timings.write = ms_since(t);
  // Read the engine back and compare: a writer bug must fail the compile, not the deployment.
  t = Clock::now();
  engine::ReadOptions check;
  check.check_target = false;
  engine::LoadedEngine loaded = engine::read_engine(staged, check);
  if (ir::print_graph(*loaded.model.graph) != ir::print_graph(*model.graph)) {
    fs::remove(staged);
    fail(ErrorCode::Internal, "the engine written to '{}' does not read back as the same graph",
         output);
  }
  result.timings.read_back = ms_since(t);
  result.stored_once = loaded.packed_only;
  if (result.stored_once > 0) {
    say(MessageKind::Report,
        fmt::format("stored once: {} of the packed weights are in the engine only packed (no "
                    "kernel reads their plain form; it is decoded from the packed bytes when "
                    "needed)\n",
                    result.stored_once));
  }
  t = Clock::now();
  if (!o.verify) {
    say(MessageKind::Report,
        "precision gate: skipped (--no-verify): the engine's outputs were not checked\n");
  } else {
    GateOptions gate_options;
    gate_options.tolerance = tolerance;
    const double int8_tol = int8_max_rel_l2(*model.graph);
    if (!o.max_rel_l2 && int8_tol > 0) {
      // Int8 kernels round where the reference's float path rounds, and a tie or a float32
      // sum one ulp apart moves a value by a whole quantization step (the gate of `kiln
      // quantize` measures the task instead).
      gate_options.tolerance.max_rel_l2 = std::max(tolerance.max_rel_l2, int8_tol);
      say(MessageKind::Report,
          fmt::format("precision gate: int8 nodes: float outputs within relative L2 {:.0e} of "
                      "the reference (a quantization step of rounding; --max-rel-l2 sets it)\n",
                      int8_tol));
    }
    gate_options.timeout_seconds = o.verify_timeout_seconds;
    gate_options.threads = o.threads;
    gate_options.device = device_here ? o.device : "cpu";
    gate_options.inputs = o.inputs;
    if (o.verify_full) gate_options.reference_flops_budget = 0;
    MessageCallback report = [&](MessageKind kind, std::string_view text) { say(kind, text); };
    try {
      result.gate = run_precision_gate(staged, info.target, model, original, gate_options, report,
                                       o.on_progress);
    } catch (...) {
      fs::remove(staged);
      throw;
    }
    if (!result.gate.pass && !o.allow_drift) {
      fs::remove(staged);
      fail(ErrorCode::InvalidArgument,
           "precision gate: {}. The engine was not written; --allow-drift writes it anyway, "
           "--max-rel-l2 changes the tolerance",
           result.gate.failure);
    }
    if (!result.gate.pass) {
      say(MessageKind::Warning,
          fmt::format("precision gate: {}. Writing the engine anyway (--allow-drift)\n",
                      result.gate.failure));
    }
    fs::rename(staged, output);
  }
  result.timings.gate = ms_since(t);
  result.timings.total = ms_since(start);
  result.engine_path = output;
  result.engine_bytes = loaded.size;
  result.weight_bytes = loaded.weights_size;
  result.info = loaded.info;
  say(MessageKind::Report, fmt::format("wrote {}: {} bytes ({} of weights) in {:.1f} ms\n", output,
                                       loaded.size, loaded.weights_size, result.timings.total));
  say(MessageKind::Report, describe_engine(loaded.info) + describe_precision(*loaded.model.graph));
  return result;
}

}  // namespace kiln::compiler
