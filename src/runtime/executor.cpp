#include "runtime/executor.hpp"

#include <algorithm>
#include <cstdlib>
#include <deque>
#include <string_view>

#include "backends/cpu/cpu_backend.hpp"
#include "core/log.hpp"
#include "runtime/node_errors.hpp"

namespace kiln::runtime {
namespace {

using backends::Backend;
using backends::DeviceTensor;

}  // namespace

Tensor Executor::allocate_value(int v, Backend* device, DataType dtype, std::vector<int64_t> dims,
                                Backend* host_for) {
  const backends::Layout layout = v >= 0 ? plan_->layouts()[v] : backends::Layout{};
  const size_t bytes = device->storage_bytes(dtype, dims, layout);
  const ArenaRange* r = v >= 0 ? &plan_->ranges()[v] : nullptr;
  if (r && r->arena >= 0 && plan_->arenas()[r->arena].backend == device && bytes <= r->size) {
    const DeviceArena& a = plan_->arenas()[r->arena];
    return Tensor::view(dtype, std::move(dims), a.base() + r->offset, a.buffer);
  }
  // Unbounded size, or a graph output: memory of its own, handed out with the result. The
  // buffer this value had last run is taken again when nothing holds it any more and it is big
  // enough (fresh memory every run costs page faults: a dynamic batch's whole network otherwise).
  Backend* owner = host_for ? host_for : device;
  std::shared_ptr<backends::DeviceBuffer> buf;
  if (v >= 0) {
    SpareBuffer& spare = spare_[v];
    if (spare.buffer && spare.backend == owner && spare.buffer.use_count() == 1 &&
        spare.buffer->size() >= bytes) {
      buf = spare.buffer;
    }
  }
  if (!buf) {
    buf = std::make_shared<backends::DeviceBuffer>(host_for ? host_for->allocate_host(bytes)
                                                            : device->allocate(bytes));
    if (v >= 0) spare_[v] = {owner, buf};
  }
  return Tensor::view(dtype, std::move(dims), buf->data(), buf);
}

backends::Stream& Executor::stream_for(Backend* b) {
  if (!b) b = &backends::CpuBackend::instance();
  auto it = streams_.find(b);
  if (it == streams_.end()) it = streams_.emplace(b, b->create_stream()).first;
  return *it->second;
}

// Where a kernel's outputs go: their planned arena space, or memory of their own.
class Executor::Outputs final : public backends::KernelOutputs {
 public:
  Outputs(Executor& ex, PlanStep& step, std::vector<LiveValue>& values)
      : ex_(ex), step_(step), values_(values), done_(step.outputs.size(), false) {}

  DeviceTensor allocate(size_t index, DataType dtype, std::vector<int64_t> dims) override {
    KILN_CHECK(index < step_.outputs.size(), ErrorCode::Internal,
               "node {}: kernel '{}' wrote output {} of {}", step_.node->label(),
               step_.kernel->name(), index, step_.outputs.size());
    const int v = step_.outputs[index];
    Tensor t = ex_.allocate_value(v, step_.backend, dtype, std::move(dims));
    DeviceTensor out{t.dtype(), t.dims(), t.raw_data(),
                     v >= 0 ? ex_.plan_->layouts()[v] : backends::Layout{}};
    if (v >= 0) {
      values_[v] = {RtValue(t), step_.backend};
    } else {
      unused_.push_back(std::move(t));
    }
    done_[index] = true;
    return out;
  }

  void check_complete() const {
    for (size_t i = 0; i < done_.size(); ++i) {
      KILN_CHECK(done_[i] || step_.outputs[i] < 0, ErrorCode::Internal,
                 "node {}: kernel '{}' did not produce output {}", step_.node->label(),
                 step_.kernel->name(), i);
    }
  }

 private:
  Executor& ex_;
  PlanStep& step_;
  std::vector<LiveValue>& values_;
  std::vector<bool> done_;
  std::vector<Tensor> unused_;  // outputs the graph does not read, kept until the step ends
};

// The state of one run.
class Executor::Run {
 public:
  Run(Executor& ex, std::vector<LiveValue>& values, const RunControl* control)
      : ex_(ex), values_(values), control_(control) {}

  void run_step(PlanStep& step) {
    switch (step.kind) {
      case StepKind::Kernel:
        run_kernel(step);
        break;
      case StepKind::Copy:
        run_copy(step);
        break;
      case StepKind::View:
      case StepKind::Interpreter:
        run_host(step);
        break;
    }
    keep_out_of_arenas(step);
  }

  // Waits for every device's queued work, then fills in device-timed steps.
  void finish(std::vector<NodeTiming>& profile) {
    for (auto& [backend, stream] : ex_.streams_) {
      if (!is_host(backend)) stream->synchronize();
    }
    held_.clear();
    for (DeviceTiming& d : timed_) {
      d.end->synchronize();
      profile[d.entry].microseconds = d.end->elapsed_ms(*d.begin) * 1000.0;
    }
  }

  // Device steps are timed with their backend's events when profiling (host steps by the clock).
  void time_device_step(size_t entry, std::unique_ptr<backends::Event> begin,
                        std::unique_ptr<backends::Event> end) {
    timed_.push_back({entry, std::move(begin), std::move(end)});
  }

  const RunControl* control() const { return control_; }

 private:
  // A value a host step reads: the plan put it (or its copy) in host memory.
  const RtValue& on_host(int v, const PlanStep& step) {
    const LiveValue& lv = values_[v];
    KILN_CHECK(is_host(lv.device) || !lv.value.is_tensor(), ErrorCode::Internal,
               "node {}: '{}' is in {}'s memory, with no copy to the host planned",
               step.node ? step.node->label() : "copy", ex_.plan_->values()[v].value->name(),
               lv.device->name());
    return lv.value;
  }

  void run_kernel(PlanStep& step) {
    Backend& b = *step.backend;
    std::vector<DeviceTensor> ins(step.inputs.size());
    for (size_t k = 0; k < step.inputs.size(); ++k) {
      const int v = step.inputs[k];
      if (v < 0 || values_[v].value.is_none()) continue;
      const LiveValue& lv = values_[v];
      KILN_CHECK(lv.value.is_tensor(), ErrorCode::Internal, "node {}: input {} is {}, not a tensor",
                 step.node->label(), k, lv.value.describe());
      KILN_CHECK(same_memory(lv.device, &b), ErrorCode::Internal,
                 "node {}: input {} is in {}'s memory, not {}'s: a planned copy is missing",
                 step.node->label(), k, lv.device ? lv.device->name() : "host", b.name());
      const Tensor& t = lv.value.tensor();
      ins[k] = {t.dtype(), t.dims(), const_cast<void*>(t.raw_data()), ex_.plan_->layouts()[v]};
    }
    Outputs outs(ex_, step, values_);
    step.kernel->run(ins, outs, ex_.stream_for(&b));
    outs.check_complete();
  }

  void run_copy(PlanStep& step) {
    const int from = step.inputs[0], to = step.outputs[0];
    const LiveValue& src = values_[from];
    if (!src.value.is_tensor()) {  // an absent optional input, or nothing to move
      values_[to] = {src.value, ex_.plan_->values()[to].device};
      return;
    }
    const Tensor& t = src.value.tensor();
    // An initializer that is a graph input, not fed this run: its upload (in values_ since the
    // run began) holds the same bytes.
    const std::vector<RtValue>& constants = ex_.plan_->constants();
    if (ex_.plan_->overridable_upload(to) && constants[from].is_tensor() &&
        t.raw_data() == constants[from].tensor().raw_data()) {
      return;
    }
    Backend* dst_device = ex_.plan_->values()[to].device;
    // Off a device: into memory that device copies to fastest (page-locked on a GPU), unless
    // the value has space in the host arena.
    Tensor dst =
        ex_.allocate_value(to, dst_device, t.dtype(), t.dims(),
                           is_host(dst_device) && !is_host(src.device) ? src.device : nullptr);
    const size_t bytes = t.nbytes();
    if (is_host(dst_device)) {
      // The host reads it next: wait for it.
      backends::Stream& s = ex_.stream_for(src.device);
      src.device->copy_to_host(dst.raw_data(), t.raw_data(), bytes, s);
      s.synchronize();
    } else if (is_host(src.device)) {
      dst_device->copy_to_device(dst.raw_data(), t.raw_data(), bytes, ex_.stream_for(dst_device));
      held_.push_back(src.value);  // the host bytes must outlive the queued copy
    } else {
      // Between two devices, through the host.
      Tensor staged(t.dtype(), t.dims());
      backends::Stream& s = ex_.stream_for(src.device);
      src.device->copy_to_host(staged.raw_data(), t.raw_data(), bytes, s);
      s.synchronize();
      dst_device->copy_to_device(dst.raw_data(), staged.raw_data(), bytes,
                                 ex_.stream_for(dst_device));
      held_.push_back(RtValue(std::move(staged)));
    }
    values_[to] = {RtValue(std::move(dst)), dst_device};
  }

  void run_host(PlanStep& step) {
    const ir::Node& n = *step.node;
    std::vector<const RtValue*> in_ptrs;
    Backend* view_device = nullptr;
    for (size_t k = 0; k < step.inputs.size(); ++k) {
      const int v = step.inputs[k];
      if (v < 0) {
        in_ptrs.push_back(nullptr);
      } else if (step.kind == StepKind::View && k == 0) {
        // A view only reads dims: device memory stays where it is and the view keeps its device.
        view_device = values_[v].device;
        in_ptrs.push_back(&values_[v].value);
      } else {
        in_ptrs.push_back(&on_host(v, step));
      }
    }
    std::vector<RtValue> outs(n.outputs().size());
    struct Runner final : ops::SubgraphRunner {
      Executor::Run& run;
      const PlanStep& step;
      Runner(Executor::Run& r, const PlanStep& s) : run(r), step(s) {}
      std::vector<RtValue> run_subgraph(const ir::Graph& body,
                                        const std::vector<RtValue>& inputs) override {
        Interpreter::ValueLookup outer = [this](const ir::Value* v) -> const RtValue* {
          for (const auto& [value, idx] : step.captures) {
            if (value == v) return &run.on_host(idx, step);
          }
          return nullptr;
        };
        return run.ex_.interpreter_->run_subgraph(body, inputs, outer, run.control_);
      }
    };
    Runner runner(*this, step);
    ops::KernelContext ctx(n, in_ptrs, outs, ex_.interpreter_ ? &runner : nullptr);
    step.def->kernel(ctx);
    for (size_t k = 0; k < outs.size(); ++k) {
      const int v = step.outputs[k];
      if (v < 0) continue;
      Backend* device = step.kind == StepKind::View ? view_device : nullptr;
      if (step.kind == StepKind::View && !is_host(device) && outs[k].is_tensor() &&
          in_ptrs[0]->is_tensor() &&
          outs[k].tensor().raw_data() != in_ptrs[0]->tensor().raw_data()) {
        fail(ErrorCode::Internal, "node {}: a view of device memory moved its data", n.label());
      }
      values_[v] = {std::move(outs[k]), device};
    }
  }

  // A result whose memory lies in an arena outside its own planned space (a reference kernel
  // that returned a view of an input, a sequence holding such a tensor) would change when the
  // space is reused: it gets memory of its own now.
  void keep_out_of_arenas(const PlanStep& step) {
    const std::vector<DeviceArena>& arenas = ex_.plan_->arenas();
    auto inside_own_space = [&](int v, const Tensor& t) {
      const ArenaRange& r = ex_.plan_->ranges()[v];
      if (r.arena < 0) return false;
      const DeviceArena& a = arenas[r.arena];
      auto* c = static_cast<const char*>(t.raw_data());
      return c >= a.base() + r.offset && c + t.nbytes() <= a.base() + r.offset + r.size;
    };
    auto in_arena = [&](const Tensor& t) {
      if (!t.defined() || t.nbytes() == 0 || t.dtype() == DataType::String) return false;
      for (const DeviceArena& a : arenas) {
        if (is_host(a.backend) && a.contains(t.raw_data())) return true;
      }
      return false;
    };
    for (int v : step.outputs) {
      if (v < 0 || !is_host(values_[v].device)) continue;
      RtValue& value = values_[v].value;
      if (value.is_tensor()) {
        if (in_arena(value.tensor()) && !inside_own_space(v, value.tensor())) {
          value = value.tensor().clone();
        }
      } else if (value.is_sequence()) {
        for (Tensor& t : value.sequence()) {
          if (in_arena(t)) t = t.clone();
        }
      }
    }
  }

  struct DeviceTiming {
    size_t entry;
    std::unique_ptr<backends::Event> begin, end;
  };

  Executor& ex_;
  std::vector<LiveValue>& values_;
  const RunControl* control_;
  std::vector<RtValue> held_;  // host sources of copies still queued
  std::vector<DeviceTiming> timed_;
};

Executor::Executor(std::shared_ptr<const ir::Graph> graph, ExecutorOptions options,
                   const engine::ExecutionPlan* stored)
    : graph_(std::move(graph)), options_(std::move(options)) {
  KILN_CHECK_ARG(graph_ != nullptr, "the executor needs a graph");
  KILN_CHECK_ARG(options_.threads >= 0, "threads must be 0 (one per core) or more, got {}",
                 options_.threads);
  options_.backends = with_cpu(options_.backends);
  for (Backend* b : options_.backends) b->set_threads(options_.threads);
  Placement placement = place(*graph_, options_.backends, stored);
  const bool any_subgraph = placement.any_subgraph;
  plan_ = std::make_unique<ExecutionPlan>(graph_, std::move(placement), stored);
  spare_.resize(plan_->values().size());
  if (any_subgraph) interpreter_ = std::make_unique<Interpreter>(graph_);
  const char* env = std::getenv("KILN_DEVICE_GRAPHS");
  replay_enabled_ = options_.replay_device_work && !(env && std::string_view(env) == "0");
  // Found either way: a segment's device time is measured whether it is replayed or not.
  segments_ = find_replay_segments(*plan_);
  replay_.resize(segments_.size());
  segment_at_.assign(plan_->steps().size(), -1);
  for (size_t i = 0; i < segments_.size(); ++i)
    segment_at_[segments_[i].first] = static_cast<int>(i);
}

Executor::~Executor() = default;

int Executor::layout_block(const ir::Value* v) const {
  const int idx = plan_->value_index(v);
  return idx >= 0 ? plan_->layouts()[idx].block : 0;
}

std::map<std::string, size_t> Executor::arena_bytes() const {
  std::map<std::string, size_t> out;
  for (const DeviceArena& a : plan_->arenas()) out[std::string(a.backend->name())] = a.bytes;
  return out;
}

void Executor::run_step(Run& run, std::vector<LiveValue>& values, size_t i, bool release) {
  PlanStep& step = plan_->steps()[i];
  const auto start = std::chrono::steady_clock::now();
  const bool on_device = step.backend && !is_host(step.backend);
  std::unique_ptr<backends::Event> begin, end;
  if (profiling_ && on_device && step.node) {
    begin = step.backend->create_event();
    end = step.backend->create_event();
    if (begin && end) begin->record(stream_for(step.backend));
  }
  if (step.node) {
    with_node_errors(*step.node, [&] { run.run_step(step); });
  } else {
    run.run_step(step);
  }
  if (profiling_ && step.node) {
    profile_.push_back(
        {step.node,
         std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
             .count(),
         start});
    // The end event first: the host's bookkeeping below must not land in the device time.
    if (begin && end) {
      end->record(stream_for(step.backend));
      run.time_device_step(profile_.size() - 1, std::move(begin), std::move(end));
    }
    for (int v : step.outputs) profile_.back().record_output(v < 0 ? nullptr : &values[v].value);
  }
  if (release) {
    for (int idx : step.release) values[idx] = LiveValue{};
  }
}

void Executor::run_segment(Run& run, std::vector<LiveValue>& values, size_t s) {
  const ReplaySegment& seg = segments_[s];
  ReplayState& st = replay_[s];
  backends::Stream& stream = stream_for(seg.backend);
  auto release_all = [&] {
    for (size_t i = seg.first; i <= seg.last; ++i) {
      for (int idx : plan_->steps()[i].release) values[idx] = LiveValue{};
    }
  };
  auto run_eagerly = [&] {
    for (size_t i = seg.first; i <= seg.last; ++i) run_step(run, values, i, false);
  };
  if (!st.begin) {
    st.begin = seg.backend->create_event();
    st.end = seg.backend->create_event();
  }
  if (st.begin) st.begin->record(stream);
  std::vector<std::pair<const void*, std::vector<int64_t>>> key;
  key.reserve(seg.reads.size());
  for (int v : seg.reads) {
    const RtValue& r = values[v].value;
    if (r.is_tensor()) {
      key.emplace_back(r.tensor().raw_data(), r.tensor().dims());
    } else {
      key.emplace_back(nullptr, std::vector<int64_t>{});
    }
  }
  if (st.work && key == st.key) {
    st.work->replay(stream);
    for (const auto& [v, lv] : st.saved) values[v] = lv;
    ++last_replayed_;
  } else if (!replay_enabled_ || st.disabled || !stream.can_capture() || !st.seen ||
             key != st.key) {
    // First run with these reads (kernels pick their algorithms and scratch now), or a device
    // that cannot record: step by step. A recording made for other reads is dropped: the
    // kernels' scratch it points into may be reallocated.
    st.work.reset();
    st.saved.clear();
    run_eagerly();
    st.key = std::move(key);
    st.seen = true;
  } else {
    // The second run with the same reads: record it, then replay the recording (recording runs
    // nothing).
    try {
      stream.begin_capture();
      try {
        run_eagerly();
      } catch (...) {
        try {
          (void)stream.end_capture();
        } catch (...) {
        }
        throw;
      }
      st.work = stream.end_capture();
    } catch (const Error& e) {
      st.disabled = true;
      st.work.reset();
      log_warning("{}: recording steps {}..{} for replay failed ({}); they run step by step",
                  seg.backend->name(), seg.first, seg.last, e.message());
      run_eagerly();
    }
    if (st.work) {
      st.work->replay(stream);
      st.saved.clear();
      for (int v : seg.produced) st.saved.emplace_back(v, values[v]);
      ++last_replayed_;
    }
  }
  if (st.end) st.end->record(stream);
  release_all();
}

std::vector<RtValue> Executor::run(const std::vector<RtValue>& inputs, const RunControl* control) {
  std::lock_guard<std::mutex> lock(run_mutex_);
  for (Backend* b : options_.backends) b->set_threads(options_.threads);
  profile_.clear();
  const ir::Graph& g = *graph_;
  KILN_CHECK_ARG(inputs.size() <= g.inputs().size(), "the graph takes {} inputs, got {}",
                 g.inputs().size(), inputs.size());
  const std::vector<PlanValue>& pv = plan_->values();
  std::vector<LiveValue> values(pv.size());
  const std::vector<RtValue>& constants = plan_->constants();
  for (size_t i = 0; i < pv.size(); ++i) {
    if (!constants[i].is_none()) values[i] = {constants[i], pv[i].device};
  }
  for (size_t i = 0; i < g.inputs().size(); ++i) {
    const ir::Value* v = g.inputs()[i];
    const int idx = plan_->value_index(v);
    if (i < inputs.size() && !inputs[i].is_none()) {
      check_value_matches(inputs[i], v->type(), fmt::format("input '{}'", v->name()));
      values[idx] = {inputs[i], pv[idx].device};
    } else if (!v->is_constant() && v->type().kind != TypeInfo::Kind::Optional) {
      fail(ErrorCode::InvalidArgument, "graph '{}': input '{}' was not given", g.name(), v->name());
    }
  }
  Run run(*this, values, control);
  last_replayed_ = 0;
  last_device_ms_ = 0;
  const size_t count = plan_->steps().size();
  for (size_t i = 0; i < count;) {
    check_run(control);
    const int seg = profiling_ ? -1 : segment_at_[i];
    if (seg >= 0) {
      run_segment(run, values, static_cast<size_t>(seg));
      i = segments_[seg].last + 1;
    } else {
      run_step(run, values, i, true);
      ++i;
    }
  }
  run.finish(profile_);
  if (!profiling_) {
    for (ReplayState& st : replay_) {
      if (st.begin && st.end && st.seen) last_device_ms_ += st.end->elapsed_ms(*st.begin);
    }
  }
  std::vector<RtValue> results;
  for (int idx : plan_->results()) {
    RtValue r = values[idx].value;
    // Never hand out arena memory: the next run would overwrite it.
    if (r.is_tensor()) {
      for (const DeviceArena& a : plan_->arenas()) {
        if (is_host(a.backend) && r.tensor().nbytes() > 0 && a.contains(r.tensor().raw_data())) {
          r = r.tensor().clone();
          break;
        }
      }
    }
    results.push_back(std::move(r));
  }
  return results;
}

}  // namespace kiln::runtime
