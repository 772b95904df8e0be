#include "runtime/session.hpp"

#include <algorithm>
#include <map>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "backends/backend_registry.hpp"
#include "backends/cpu/cpu_backend.hpp"
#include "backends/cpu/openmp_runtime.hpp"
#include "core/cpus.hpp"
#include "core/log.hpp"
#include "passes/pass_manager.hpp"
#include "runtime/model_loader.hpp"

namespace kiln {
namespace {

// How long after runs last overlapped a lone run still expects company (the brief team spin).
constexpr auto kOverlapMemory = std::chrono::seconds(1);

}  // namespace

Session::Session(const std::string& path, SessionOptions options)
    : Session(runtime::load_model(path, /*defer_unpacking=*/true), std::move(options)) {}

Session::Session(runtime::LoadedModel loaded, SessionOptions options)
    : options_(std::move(options)),
      model_(std::move(loaded.model)),
      engine_(std::move(loaded.engine)),
      plan_(std::move(loaded.plan)),
      deferred_(std::move(loaded.deferred)) {
  init();
}

Session::Session(ir::Model model, SessionOptions options)
    : options_(std::move(options)), model_(std::move(model)) {
  init();
}

Session::~Session() = default;

void Session::init() {
  // The device's backends (preferred first, the CPU last for what the device cannot run).
  std::vector<backends::Backend*> placed_on = backends::backends_for(options_.device);
  KILN_CHECK_ARG(options_.threads >= 0, "threads must be 0 (one per core) or more, got {}",
                 options_.threads);
  KILN_CHECK_ARG(model_.graph != nullptr, "the model has no graph");
  // An engine was optimized when it was compiled; an ONNX model is optimized here.
  if (!engine_ && options_.optimize) {
    passes::PassManager pm(passes::PassManagerOptions::from_env());
    passes::add_default_passes(pm, options_.device);
    passes::add_device_passes(pm, options_.device);
    pm.run(*model_.graph);
  }
  for (const ir::Value* v : model_.graph->inputs()) {
    if (!v->is_constant()) inputs_.push_back({v->name(), v->type()});
  }
  for (const ir::Value* v : model_.graph->outputs()) outputs_.push_back({v->name(), v->type()});
  auto mode = options_.config.find("executor");
  const bool on_cpu_only =
      placed_on.size() == 1 && placed_on[0]->name() == backends::kCpuBackendName;
  if (mode != options_.config.end() && mode->second == "interpreter") {
    unpack_deferred();
    interpreter_ = std::make_unique<runtime::Interpreter>(model_.graph);
  } else {
    KILN_CHECK_ARG(mode == options_.config.end() || mode->second == "kernels",
                   "config 'executor' must be 'kernels' or 'interpreter', got '{}'", mode->second);
    // An engine made for a device (its stamp's device targets) opens on that device or on the
    // CPU, never on another device: its plan, tactics and fusions were chosen for that arch.
    if (engine_ && !engine_->device_targets.empty() && !placed_on.empty() &&
        placed_on.front()->device_kind() != backends::DeviceKind::Cpu) {
      const std::string_view here = placed_on.front()->name();
      const bool same = std::any_of(engine_->device_targets.begin(), engine_->device_targets.end(),
                                    [&](const engine::Target& t) { return t.device == here; });
      if (!same) {
        std::vector<std::string> names;
        for (const engine::Target& t : engine_->device_targets) names.push_back(t.device);
        fail(ErrorCode::Unsupported,
             "the engine was compiled for {}; this session's device is {}: compile the model "
             "again on this machine (kiln compile --device {}), or open the engine on the cpu",
             fmt::join(names, ", "), here, options_.device);
      }
    }
    // An engine planned for other backends than the session's (a CPU engine opened with
    // device "gpu", a GPU engine on "cpu") keeps its graph, weights and passes; its kernels and
    // memory are planned again here for the session's devices.
    if (plan_ && !placed_on.empty()) {
      const std::string_view preferred = placed_on.front()->name();
      auto known = [&](std::string_view name) {
        return std::any_of(placed_on.begin(), placed_on.end(),
                           [&](const backends::Backend* b) { return b->name() == name; });
      };
      const bool uses_preferred =
          std::any_of(plan_->kernels.begin(), plan_->kernels.end(),
                      [&](const engine::StoredKernel& k) { return k.backend == preferred; });
      const bool all_known =
          std::all_of(plan_->kernels.begin(), plan_->kernels.end(),
                      [&](const engine::StoredKernel& k) { return known(k.backend); });
      if (!all_known || (!uses_preferred && preferred != backends::kCpuBackendName)) {
        log_info(
            "the engine was planned for other devices: planning its kernels and memory "
            "for {}",
            options_.device);
        plan_.reset();
      }
    }
    // Another device uploads constants as they are, and without the stored plan no kernel is
    // handed the packed form: both need every plain form.
    if (!on_cpu_only || !plan_) unpack_deferred();
    build_executor(placed_on);
    if (!only_packing_kernels_read_deferred()) {
      // A node chosen afresh (a kernel this build lacks) may read the plain form, even while
      // preparing: fill it, then prepare again with every constant whole.
      unpack_deferred();
      build_executor(placed_on);
    }
    make_executor_pool(placed_on);
  }
  plan_.reset();
}

void Session::build_executor(std::vector<backends::Backend*> backends) {
  executor_.reset();
  runtime::ExecutorOptions eo;
  eo.threads = options_.threads;
  eo.backends = std::move(backends);
  executor_ = std::make_unique<runtime::Executor>(model_.graph, eo, plan_ ? &*plan_ : nullptr);
}

void Session::make_executor_pool(std::vector<backends::Backend*> backends) {
  int limit = options_.parallel_runs;
  if (auto it = options_.config.find("parallel_runs"); it != options_.config.end()) {
    try {
      size_t used = 0;
      limit = std::stoi(it->second, &used);
      if (used != it->second.size()) throw std::invalid_argument(it->second);
    } catch (const std::exception&) {
      fail(ErrorCode::InvalidArgument,
           "config 'parallel_runs' must be a whole number of runs (0: automatic), got '{}'",
           it->second);
    }
  }
  KILN_CHECK_ARG(limit >= 0 && limit <= kMaxParallelRuns,
                 "parallel_runs must be 0 (automatic) to {}, got {}", kMaxParallelRuns, limit);
  const bool cpu_only = backends.size() == 1 && backends[0]->name() == backends::kCpuBackendName;
  KILN_CHECK(limit <= 1 || cpu_only, ErrorCode::Unsupported,
             "overlapping runs (parallel_runs {}) run on the cpu only so far; this session's "
             "device is {}",
             limit, options_.device);
  // Threads of the executors made for overlapping runs (the first keeps the session's).
  int more_threads = options_.threads;
  bool first_runs_alone = false;
  if (limit == 0) {
    const int cpus = static_cast<int>(online_cpus());
    const int per_run = options_.threads > 0 ? options_.threads : cpus;
    if (!cpu_only) {
      limit = 1;
    } else if (per_run >= cpus) {
      // A run takes every core (the default threads): a lone caller keeps that executor, and
      // runs that overlap get executors of one thread each, one a core, never the first's team
      // while another run is in flight (first_runs_alone), so that they share the cores rather
      // than queue for one executor whose every run wakes a team of its caller's own, or compete
      // with that team (4 Python threads x 200 MLP runs on 2 cores: 40-43 -> 28-43 ms, onnxruntime
      // 24-27; bench/results/2026-12-07d-cpu-overlapping-runs.md).
      limit = std::clamp(cpus + 1, 1, kAutoParallelRuns);
      more_threads = 1;
      first_runs_alone = true;
    } else {
      limit = std::clamp(cpus / per_run, 1, kAutoParallelRuns);
    }
  }
  if (options_.profiling) limit = 1;  // one run's profile, on the executor that reports it
  // More executors are made from the first one's plan: the same kernels and memory plan, with
  // no placement or layout search again.
  auto plan = std::make_shared<engine::ExecutionPlan>(executor_->execution_plan());
  runtime::ExecutorOptions eo;
  eo.threads = more_threads;
  eo.backends = std::move(backends);
  std::shared_ptr<const ir::Graph> graph = model_.graph;
  executors_ = std::make_unique<runtime::ExecutorPool>(
      std::move(executor_),
      [graph, eo, plan] { return std::make_unique<runtime::Executor>(graph, eo, plan.get()); },
      static_cast<size_t>(limit), first_runs_alone);
}

bool Session::only_packing_kernels_read_deferred() const {
  std::lock_guard lock(deferred_mutex_);
  if (deferred_.empty()) return true;
  if (!plan_) return false;
  std::map<uint32_t, const engine::StoredKernel*> stored;
  for (const engine::StoredKernel& k : plan_->kernels) stored[k.node] = &k;
  std::set<std::string> names;
  for (const engine::DeferredWeight& w : deferred_) names.insert(w.value);
  const std::vector<runtime::KernelChoice>& chosen = executor_->kernel_choices();
  const std::vector<ir::Node*> nodes = model_.graph->nodes();
  for (uint32_t i = 0; i < nodes.size(); ++i) {
    bool reads = false;
    for (const ir::Value* v : nodes[i]->inputs()) reads |= v && names.count(v->name());
    if (!reads) continue;
    auto it = stored.find(i);
    if (it == stored.end() || i >= chosen.size() || chosen[i].backend != it->second->backend ||
        chosen[i].kernel != it->second->kernel) {
      return false;
    }
  }
  return true;
}

void Session::unpack_deferred() const {
  std::lock_guard lock(deferred_mutex_);
  for (engine::DeferredWeight& w : deferred_) engine::unpack_deferred(w);
  deferred_.clear();
}

size_t Session::weights_left_packed() const {
  std::lock_guard lock(deferred_mutex_);
  return deferred_.size();
}

const ir::Model& Session::model() const {
  unpack_deferred();
  return model_;
}

std::vector<RtValue> Session::run(const std::vector<std::string>& output_names,
                                  const std::map<std::string, RtValue>& feeds,
                                  const runtime::RunControl* control) {
  std::set<std::string> known;
  for (const IoInfo& in : inputs_) known.insert(in.name);
  for (const auto& [name, value] : feeds) {
    if (known.count(name)) continue;
    // A feed may also override an initializer that is a graph input, as in ONNX.
    bool overridable = false;
    for (const ir::Value* v : model_.graph->inputs()) overridable |= v->name() == name;
    KILN_CHECK_ARG(overridable, "the model has no input named '{}'", name);
  }
  for (const std::string& name : output_names) {
    bool found = false;
    for (const IoInfo& out : outputs_) found |= out.name == name;
    KILN_CHECK(found, ErrorCode::NotFound, "the model has no output named '{}'", name);
  }
  std::map<std::string, RtValue> results;
  if (interpreter_) {
    std::lock_guard<std::mutex> lock(run_mutex_);
    interpreter_->set_profiling(options_.profiling);
    results = interpreter_->run(feeds, control);
  } else {
    const auto& graph_inputs = model_.graph->inputs();
    std::vector<RtValue> ordered(graph_inputs.size());
    for (size_t i = 0; i < graph_inputs.size(); ++i) {
      auto it = feeds.find(graph_inputs[i]->name());
      if (it != feeds.end()) ordered[i] = it->second;
    }
    std::vector<RtValue> outs;
    {
      runtime::ExecutorPool::Lease executor = executors_->acquire();
      if (executors_->first_runs_alone() && &*executor == &executors_->first()) {
        // Runs that overlapped a moment ago will likely overlap again: this run's team should
        // not keep a core spinning after it (backends/cpu/openmp_runtime.hpp).
        backends::cpu::set_team_spin(executors_->overlapped_within(kOverlapMemory)
                                         ? backends::cpu::TeamSpin::Brief
                                         : backends::cpu::TeamSpin::Default);
      }
      executor->set_profiling(options_.profiling);
      outs = executor->run(ordered, control);
    }
    for (size_t i = 0; i < outs.size(); ++i) {
      results[model_.graph->outputs()[i]->name()] = std::move(outs[i]);
    }
  }
  std::vector<RtValue> out;
  if (output_names.empty()) {
    for (const IoInfo& o : outputs_) out.push_back(results.at(o.name));
  } else {
    for (const std::string& name : output_names) out.push_back(results.at(name));
  }
  return out;
}

std::map<std::string, RtValue> Session::run(const std::map<std::string, RtValue>& feeds,
                                            const runtime::RunControl* control) {
  std::vector<RtValue> values = run({}, feeds, control);
  std::map<std::string, RtValue> out;
  for (size_t i = 0; i < outputs_.size(); ++i) out[outputs_[i].name] = std::move(values[i]);
  return out;
}

std::vector<runtime::NodeTiming> Session::last_profile() const {
  if (interpreter_) {
    std::lock_guard<std::mutex> lock(run_mutex_);
    return interpreter_->last_profile();
  }
  // Profiling keeps one executor, the first: its runs are the session's.
  return executors_->first().last_profile();
}

}  // namespace kiln
