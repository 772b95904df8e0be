#include "runtime/execution_plan.hpp"

#include <algorithm>
#include <limits>
#include <mutex>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "backends/cpu/cpu_backend.hpp"
#include "core/log.hpp"
#include "runtime/interpreter.hpp"
#include "runtime/layout_plan.hpp"
#include "runtime/memory_planner.hpp"
#include "runtime/node_errors.hpp"

namespace kiln::runtime {

using backends::Backend;

namespace {

// The extent a dim gets space for in a host arena: its value, the top of its range, else (a
// symbolic batch with no upper bound, a data-dependent length) the low end of its range, at
// least 1.
int64_t host_planning_extent(const Dim& d) {
  if (d.is_static() || d.max() != std::numeric_limits<int64_t>::max()) return d.max();
  return std::max<int64_t>(d.min(), 1);
}

// Arena space for a value at its declared maximum shape in `layout`, as `backend` computes its
// storage, rounded up to kArenaAlignment; nullopt when its size is unbounded. In a host arena
// an unbounded dim is planned at its low end instead: a model exported with a dynamic batch then
// runs batch 1 (its common case) in the planned arena, in place where kernels allow, rather than
// every value in memory of its own (MobileNetV2 and EfficientNet-B0 5-9 % slower at one thread
// that way, bench/results/2026-12-07f-cpu-dynamic-batch-arena.md); a run whose value outgrows its
// space gets memory of its own for it (Executor::allocate_value). Device arenas keep the bound:
// recorded device work must never allocate.
std::optional<size_t> arena_bytes(const Backend& backend, const ir::Value& v,
                                  backends::Layout layout) {
  const bool host = is_host(&backend);
  // The overflow-checked bound first: it also says whether the size is bounded at all.
  if (!max_value_bytes_in(v, layout) && !(host && is_sized_tensor(v))) return std::nullopt;
  std::vector<int64_t> dims;
  for (const Dim& d : v.type().shape->dims()) {
    dims.push_back(host ? host_planning_extent(d) : d.max());
  }
  size_t numel = 1;
  for (int64_t d : dims) {
    if (d < 0 || __builtin_mul_overflow(numel, static_cast<size_t>(d), &numel)) {
      return std::nullopt;
    }
  }
  const size_t bytes = backend.storage_bytes(v.type().dtype, dims, layout);
  if (bytes > std::numeric_limits<size_t>::max() - kArenaAlignment) return std::nullopt;
  return (bytes + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
}

}  // namespace

ExecutionPlan::ExecutionPlan(std::shared_ptr<const ir::Graph> graph, Placement placement,
                             const engine::ExecutionPlan* stored)
    : graph_(std::move(graph)), placement_(std::move(placement)) {
  KILN_CHECK_ARG(graph_ != nullptr, "the execution plan needs a graph");
  for (const auto& v : graph_->values()) {
    index_[v.get()] = static_cast<int>(values_.size());
    values_.push_back({v.get(), host(), -1});
  }
  constants_.resize(values_.size());
  for (size_t i = 0; i < values_.size(); ++i) {
    if (values_[i].value->is_constant()) constants_[i] = RtValue(values_[i].value->constant());
  }
  build_steps();
  compute_releases();
  use_packed_weights(stored);
  use_tactics(stored);
  plan_layouts(stored);
  plan_arenas(stored);
  upload_constants();
}

Backend* ExecutionPlan::host() const {
  // Placement appends the CPU when it is not among the requested backends.
  return backend_named(placement_.backends, backends::kCpuBackendName);
}

int ExecutionPlan::value_index(const ir::Value* v) const {
  auto it = index_.find(v);
  return it == index_.end() ? -1 : it->second;
}

// The plan value holding `v`'s data in `device`'s memory: `v` itself when it lives there, else
// its one copy there, made by a Copy step placed now (before the step about to be added) or, for
// an initializer, uploaded once at open.
int ExecutionPlan::need_in(int v, Backend* device) {
  if (v < 0 || same_memory(values_[v].device, device)) return v;
  if (is_host(device)) device = host();
  auto key = std::make_pair(v, device);
  if (auto it = copies_.find(key); it != copies_.end()) return it->second;
  const int c = static_cast<int>(values_.size());
  values_.push_back({values_[v].value, device, v});
  constants_.emplace_back();
  copies_[key] = c;
  // An initializer is uploaded once. One that is also a graph input keeps its Copy step too:
  // a run that feeds it copies the feed there (Executor::Run::run_copy skips the others).
  const ir::Value* value = values_[v].value;
  if (value->is_constant()) {
    uploads_pending_.push_back(c);
    if (!graph_->is_input(value)) return c;
  }
  PlanStep copy;
  copy.kind = StepKind::Copy;
  copy.backend = is_host(device) ? values_[v].device : device;
  copy.inputs = {v};
  copy.outputs = {c};
  steps_.push_back(std::move(copy));
  return c;
}

void ExecutionPlan::build_steps() {
  const std::vector<ir::Node*> nodes = graph_->nodes();
  node_steps_.resize(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    NodePlacement& np = placement_.nodes[i];
    const ir::Node& n = *nodes[i];
    Backend* where = np.kind == StepKind::Kernel ? np.backend : host();
    PlanStep step;
    step.kind = np.kind;
    step.node = &n;
    step.node_index = i;
    step.backend = np.kind == StepKind::Kernel ? np.backend : nullptr;
    step.kernel = std::move(np.kernel);
    step.def = np.def;
    for (size_t k = 0; k < n.inputs().size(); ++k) {
      const int v = n.input(k) ? value_index(n.input(k)) : -1;
      // A view reads only its data input's dims: that input stays where it is.
      step.inputs.push_back(np.kind == StepKind::View && k == 0 ? v : need_in(v, where));
    }
    if (has_subgraphs(n)) {
      std::set<const ir::Value*> reads;
      collect_reads(n, reads);
      for (const ir::Value* r : reads) {
        const int v = value_index(r);
        if (v >= 0) step.captures.emplace_back(r, need_in(v, host()));
      }
    }
    Backend* home = where;
    if (np.kind == StepKind::View)
      home = step.inputs[0] >= 0 ? values_[step.inputs[0]].device : host();
    for (const ir::Value* out : n.outputs()) {
      const int v = out ? value_index(out) : -1;
      step.outputs.push_back(v);
      if (v >= 0) values_[v].device = home;
    }
    node_steps_[i] = steps_.size();
    steps_.push_back(std::move(step));
  }
  for (const ir::Value* out : graph_->outputs())
    results_.push_back(need_in(value_index(out), host()));
}

void ExecutionPlan::compute_releases() {
  // Free each value after its last reader (subgraph captures count as reads of their node);
  // constants, their uploads and the results stay.
  std::vector<int> last(values_.size(), -1);
  for (size_t s = 0; s < steps_.size(); ++s) {
    for (int v : steps_[s].inputs) {
      if (v >= 0) last[v] = static_cast<int>(s);
    }
    for (const auto& [value, v] : steps_[s].captures) last[v] = static_cast<int>(s);
  }
  std::set<int> kept(results_.begin(), results_.end());
  for (size_t v = 0; v < values_.size(); ++v) {
    if (last[v] < 0 || kept.count(static_cast<int>(v)) || values_[v].value->is_constant()) {
      continue;
    }
    steps_[last[v]].release.push_back(static_cast<int>(v));
  }
}

void ExecutionPlan::use_packed_weights(const engine::ExecutionPlan* stored) {
  if (!stored) return;
  for (const engine::StoredPackedWeight& p : stored->packed) {
    KILN_CHECK_ARG(
        p.node < node_steps_.size() && p.input < steps_[node_steps_[p.node]].inputs.size(),
        "engine plan: packed weight for input {} of node #{} of {}", p.input, p.node,
        node_steps_.size());
    PlanStep& s = steps_[node_steps_[p.node]];
    // A kernel chosen afresh (this build lacks the stored one) packs for itself.
    if (s.kind != StepKind::Kernel || s.backend->name() != p.backend) continue;
    with_node_errors(*s.node, [&] { s.kernel->use_packed_weight({p.input, p.format, p.data}); });
  }
}

void ExecutionPlan::use_tactics(const engine::ExecutionPlan* stored) {
  if (!stored) return;
  for (const engine::StoredTactics& t : stored->tactics) {
    KILN_CHECK_ARG(t.node < node_steps_.size(), "engine plan: tactics for node #{} of {}", t.node,
                   node_steps_.size());
    PlanStep& s = steps_[node_steps_[t.node]];
    // A kernel chosen afresh, or another arch's backend, times for itself.
    if (s.kind != StepKind::Kernel || s.backend->name() != t.backend) continue;
    const std::vector<std::string> here = s.backend->library_versions();
    if (t.libraries != here) {
      static std::once_flag once;
      std::call_once(once, [&] {
        log_warning(
            "{}: the engine's tactics were timed with {}; this machine has {}: timing them "
            "again at the first run",
            t.backend, fmt::join(t.libraries, ", "), fmt::join(here, ", "));
      });
      continue;
    }
    with_node_errors(*s.node, [&] { s.kernel->use_tactics(t.text); });
  }
}

void ExecutionPlan::plan_layouts(const engine::ExecutionPlan* stored) {
  std::vector<LayoutStep> ls(steps_.size());
  for (size_t i = 0; i < steps_.size(); ++i) {
    const PlanStep& s = steps_[i];
    LayoutStep& l = ls[i];
    if (s.kind == StepKind::Kernel) {
      l.backend = s.backend;
      l.layouts = s.kernel->blocked_layouts();
    }
    l.inputs = s.inputs;
    l.outputs = s.outputs;
    l.reads = s.inputs;
    for (const auto& [value, v] : s.captures) l.reads.push_back(v);
  }
  std::vector<const ir::Value*> values(values_.size());
  std::vector<bool> pinned(values_.size(), false);
  for (size_t i = 0; i < values_.size(); ++i) {
    values[i] = values_[i].value;
    pinned[i] = values[i]->is_constant() || graph_->is_output(values[i]) ||
                graph_->is_input(values[i]) || values_[i].copy_of >= 0;
  }
  // An engine planned without blocked layouts (an older build, or KILN_CPU_BLOCKED=0) may give
  // a value too small a space for its padded channels: that value stays row-major.
  if (stored) {
    for (const engine::StoredArena& a : stored->arenas) {
      const Backend* b = backend_named(placement_.backends, a.device);
      if (!b || b->activation_layout().is_row_major()) continue;
      for (const engine::StoredBuffer& buf : a.buffers) {
        const ir::Value* v = graph_->find_local_value(buf.value);
        if (!v || value_index(v) < 0) continue;
        std::optional<size_t> need = arena_bytes(*b, *v, b->activation_layout());
        if (need && buf.size < *need) pinned[value_index(v)] = true;
      }
    }
  }
  layouts_ = runtime::plan_layouts(ls, values, pinned);
  for (PlanStep& step : steps_) {
    if (step.kind != StepKind::Kernel) continue;
    const backends::Layout in0 =
        !step.inputs.empty() && step.inputs[0] >= 0 ? layouts_[step.inputs[0]] : backends::Layout{};
    const backends::Layout out0 = !step.outputs.empty() && step.outputs[0] >= 0
                                      ? layouts_[step.outputs[0]]
                                      : backends::Layout{};
    const backends::BlockedLayouts caps = step.kernel->blocked_layouts();
    if (caps.input0 || caps.output0 || caps.uniform || caps.follows >= 0) {
      with_node_errors(*step.node, [&] { step.kernel->set_layouts(in0, out0); });
    }
  }
}

void ExecutionPlan::plan_arenas(const engine::ExecutionPlan* stored) {
  ranges_.assign(values_.size(), ArenaRange{});
  std::set<int> handed_out(results_.begin(), results_.end());
  // A step writes `b`'s arena when it computes there, copies into its memory, or views.
  auto writes = [&](const PlanStep& s, const Backend* b) {
    switch (s.kind) {
      case StepKind::Kernel:
        return s.backend == b;
      case StepKind::Copy:
        return s.outputs[0] >= 0 && same_memory(values_[s.outputs[0]].device, b);
      case StepKind::View:
        return true;
      case StepKind::Interpreter:
        return false;
    }
    return false;
  };
  for (Backend* b : placement_.backends) {
    const bool used = std::any_of(steps_.begin(), steps_.end(), [&](const PlanStep& s) {
      return s.kind != StepKind::View && writes(s, b);
    });
    if (!used) continue;
    DeviceArena arena;
    arena.backend = b;
    const int ai = static_cast<int>(arenas_.size());
    const engine::StoredArena* from_file = nullptr;
    if (stored) {
      for (const engine::StoredArena& a : stored->arenas) {
        if (a.device == b->name()) from_file = &a;
      }
    }
    ArenaSummary summary;
    summary.device = std::string(b->name());
    if (from_file) {
      // The stored buffers name graph values; in a device's arena a name is the copy there.
      std::map<std::string, int> in_memory;
      for (size_t v = 0; v < values_.size(); ++v) {
        if (same_memory(values_[v].device, b))
          in_memory[values_[v].value->name()] = static_cast<int>(v);
      }
      summary.from_engine = true;
      arena.bytes = from_file->bytes;
      for (const engine::StoredBuffer& buf : from_file->buffers) {
        auto it = in_memory.find(buf.value);
        KILN_CHECK_ARG(it != in_memory.end(),
                       "engine plan: value '{}' is not in the graph or not in {}'s memory",
                       buf.value, b->name());
        const int v = it->second;
        std::optional<size_t> need = arena_bytes(*b, *values_[v].value, layouts_[v]);
        if (!need) continue;  // unbounded now: allocated per run
        KILN_CHECK_ARG(
            buf.size >= *need && buf.offset <= arena.bytes && buf.size <= arena.bytes - buf.offset,
            "engine plan: value '{}' gets {} bytes at offset {} of a {}-byte arena "
            "but needs {}: recompile the model",
            buf.value, buf.size, buf.offset, arena.bytes, *need);
        ranges_[v] = {ai, buf.offset, buf.size};
        summary.naive_bytes += buf.size;
        ++summary.values;
      }
    } else {
      std::vector<MemoryStep> ms(steps_.size());
      for (size_t i = 0; i < steps_.size(); ++i) {
        const PlanStep& s = steps_[i];
        MemoryStep& m = ms[i];
        m.inputs = s.inputs;
        m.outputs = s.outputs;
        m.reads = s.inputs;
        for (const auto& [value, v] : s.captures) m.reads.push_back(v);
        m.writes_arena = writes(s, b);
        m.view = s.kind == StepKind::View;
        if (s.kind == StepKind::Kernel) m.in_place = placement_.nodes[s.node_index].in_place_inputs;
      }
      std::vector<MemoryValue> mv(values_.size());
      for (size_t v = 0; v < values_.size(); ++v) {
        const ir::Value& value = *values_[v].value;
        mv[v].bytes = arena_bytes(*b, value, layouts_[v]);
        mv[v].planned = !handed_out.count(static_cast<int>(v));
        mv[v].live_to_end = graph_->is_output(&value) && !mv[v].planned;
        mv[v].type_key = memory_type_key(value);
      }
      StepMemoryPlan plan = plan_step_memory(ms, mv);
      arena.bytes = plan.arena_bytes;
      for (size_t v = 0; v < values_.size(); ++v) {
        if (plan.placed[v]) ranges_[v] = {ai, plan.placed[v]->offset, plan.placed[v]->bytes};
      }
      summary.naive_bytes = plan.naive_bytes;
      summary.values = static_cast<size_t>(std::count_if(
          plan.placed.begin(), plan.placed.end(), [](const auto& p) { return p.has_value(); }));
      summary.shared = plan.shared;
      summary.unplanned = plan.unplanned.size();
    }
    summary.bytes = arena.bytes;
    summaries_.push_back(summary);
    KILN_CHECK(arena.bytes <= Tensor::max_bytes(), ErrorCode::InvalidArgument,
               "the activation arena needs {} bytes, over the limit of {} bytes", arena.bytes,
               Tensor::max_bytes());
    if (arena.bytes > 0) {
      arena.buffer = std::make_shared<backends::DeviceBuffer>(b->allocate(arena.bytes));
    }
    arenas_.push_back(std::move(arena));
  }
}

void ExecutionPlan::upload_constants() {
  std::map<Backend*, std::unique_ptr<backends::Stream>> streams;
  for (int c : uploads_pending_) {
    Backend* device = values_[c].device;
    const Tensor& t = constants_[values_[c].copy_of].tensor();
    auto buf = std::make_shared<backends::DeviceBuffer>(device->allocate(t.nbytes()));
    auto& stream = streams[device];
    if (!stream) stream = device->create_stream();
    if (t.nbytes() > 0) device->copy_to_device(buf->data(), t.raw_data(), t.nbytes(), *stream);
    constants_[c] = RtValue(Tensor::view(t.dtype(), t.dims(), buf->data(), buf));
    ++uploads_;
  }
  // The initializers' host memory is the graph's, alive as long as the plan: waiting once
  // here keeps the uploads off every run.
  for (auto& [device, stream] : streams) stream->synchronize();
}

engine::ExecutionPlan ExecutionPlan::to_stored() const {
  engine::ExecutionPlan plan;
  for (size_t ai = 0; ai < arenas_.size(); ++ai) {
    engine::StoredArena a;
    a.device = std::string(arenas_[ai].backend->name());
    a.bytes = arenas_[ai].bytes;
    for (size_t i = 0; i < values_.size(); ++i) {
      if (ranges_[i].arena == static_cast<int>(ai)) {
        a.buffers.push_back({values_[i].value->name(), ranges_[i].offset, ranges_[i].size});
      }
    }
    plan.arenas.push_back(std::move(a));
  }
  const std::vector<KernelChoice>& choices = placement_.choices;
  for (size_t i = 0; i < choices.size(); ++i) {
    plan.kernels.push_back({static_cast<uint32_t>(i), choices[i].backend, choices[i].kernel});
  }
  return plan;
}

std::vector<engine::StoredTactics> ExecutionPlan::tactics() const {
  std::vector<engine::StoredTactics> out;
  for (const PlanStep& s : steps_) {
    if (s.kind != StepKind::Kernel) continue;
    std::string text;
    with_node_errors(*s.node, [&] { text = s.kernel->tactics(); });
    if (text.empty()) continue;
    out.push_back({static_cast<uint32_t>(s.node_index), std::string(s.backend->name()),
                   s.backend->library_versions(), std::move(text)});
  }
  return out;
}

std::vector<engine::StoredPackedWeight> ExecutionPlan::pack_weights() {
  std::vector<engine::StoredPackedWeight> out;
  for (PlanStep& s : steps_) {
    if (s.kind != StepKind::Kernel) continue;
    std::vector<backends::PackedWeight> packed;
    with_node_errors(*s.node, [&] { packed = s.kernel->pack_weights(); });
    for (backends::PackedWeight& p : packed) {
      out.push_back({static_cast<uint32_t>(s.node_index), static_cast<uint32_t>(p.input),
                     std::string(s.backend->name()), std::move(p.format), std::move(p.data)});
    }
  }
  return out;
}

}  // namespace kiln::runtime
