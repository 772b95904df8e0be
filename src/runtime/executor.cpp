#include "runtime/executor.hpp"

#include <algorithm>
#include <chrono>
#include <deque>
#include <set>

#include "backends/cpu/cpu_backend.hpp"
#include "core/log.hpp"
#include "ops/registry.hpp"
#include "runtime/layout_plan.hpp"
#include "runtime/node_errors.hpp"

namespace kiln::runtime {
namespace {

using backends::Backend;
using backends::DeviceTensor;

bool is_host(const Backend* b) {
  return !b || b->device_kind() == backends::DeviceKind::Cpu;
}

bool has_subgraphs(const ir::Node& n) {
  for (const auto& [name, a] : n.attributes()) {
    if (a.kind() == ir::AttrKind::Graph || a.kind() == ir::AttrKind::Graphs) return true;
  }
  return false;
}

// Nodes whose values are not plain tensors, or that run subgraphs, stay on the interpreter's
// path (host, reference kernels).
bool needs_interpreter(const ir::Node& n) {
  if (has_subgraphs(n)) return true;
  auto non_tensor = [](const ir::Value* v) {
    return v && (v->type().kind == TypeInfo::Kind::Sequence ||
                 v->type().kind == TypeInfo::Kind::Optional);
  };
  return std::any_of(n.inputs().begin(), n.inputs().end(), non_tensor) ||
         std::any_of(n.outputs().begin(), n.outputs().end(), non_tensor);
}

std::vector<Backend*> with_cpu(std::span<Backend* const> backends) {
  std::vector<Backend*> out(backends.begin(), backends.end());
  bool has_cpu = std::any_of(out.begin(), out.end(), [](const Backend* b) {
    return b->name() == backends::kCpuBackendName;
  });
  if (!has_cpu) out.push_back(&backends::CpuBackend::instance());
  return out;
}

}  // namespace

std::vector<KernelChoice> choose_kernels(const ir::Graph& graph,
                                         std::span<Backend* const> backends) {
  std::vector<Backend*> all = with_cpu(backends);
  std::vector<KernelChoice> out;
  for (const ir::Node* n : graph.nodes()) {
    if (needs_interpreter(*n)) {
      out.push_back({backends::kCpuBackendName, kReferenceKernel});
    } else if (is_view_op(*n)) {
      out.push_back({std::string(all.front()->name()), kViewKernel});
    } else {
      KernelChoice c{backends::kCpuBackendName, kReferenceKernel};
      for (Backend* b : all) {
        backends::Support s = b->supports(*n);
        if (s.ok()) {
          c = {std::string(b->name()), s.kernel};
          break;
        }
      }
      out.push_back(std::move(c));
    }
  }
  return out;
}

struct Executor::Arena {
  Backend* backend = nullptr;
  size_t bytes = 0;
  std::shared_ptr<backends::DeviceBuffer> buffer;  // shared with the tensor views over it
  char* base() const { return buffer ? static_cast<char*>(buffer->data()) : nullptr; }
  bool contains(const void* p) const {
    auto* c = static_cast<const char*>(p);
    return buffer && c >= base() && c < base() + bytes;
  }
};

struct Executor::Step {
  enum class Kind { Fast, View, Reference };
  const ir::Node* node = nullptr;
  Kind kind = Kind::Reference;
  Backend* backend = nullptr;  // Fast: where it runs
  std::unique_ptr<backends::Kernel> kernel;
  const ops::OpDef* def = nullptr;   // View, Reference
  std::vector<int> inputs, outputs;  // value indices, -1 for an empty slot
  std::vector<int> release;          // values dead after this step
};

// A value at run time and the backend whose memory holds it (nullptr: host memory).
struct Executor::Slot {
  RtValue value;
  Backend* device = nullptr;
};

// The state of one run.
class Executor::Run {
 public:
  Run(Executor& ex, std::vector<Slot>& values, const RunControl* control)
      : ex_(ex), values_(values), control_(control) {}

  // The value in host memory (a copy, kept in `keep`, when it lives on a device). A deque, so
  // earlier references stay valid as copies are added.
  const RtValue& host(int idx, std::deque<RtValue>& keep) {
    Slot& s = values_[idx];
    if (is_host(s.device) || !s.value.is_tensor()) return s.value;
    const Tensor& t = s.value.tensor();
    Tensor h(t.dtype(), t.dims());
    backends::Stream& st = ex_.stream_for(s.device);
    s.device->copy_to_host(h.raw_data(), t.raw_data(), t.nbytes(), st);
    st.synchronize();
    keep.push_back(RtValue(std::move(h)));
    return keep.back();
  }

  void run_step(Step& step);

 private:
  void run_fast(Step& step);
  void run_host(Step& step);
  void keep_out_of_arenas(const Step& step);

  Executor& ex_;
  std::vector<Slot>& values_;
  const RunControl* control_;
};

class Executor::Outputs final : public backends::KernelOutputs {
 public:
  Outputs(Executor& ex, Step& step, std::vector<Slot>& values)
      : ex_(ex), step_(step), values_(values), done_(step.outputs.size(), false) {}

  DeviceTensor allocate(size_t index, DataType dtype, std::vector<int64_t> dims) override {
    KILN_CHECK(index < step_.outputs.size(), ErrorCode::Internal,
               "node {}: kernel '{}' wrote output {} of {}", step_.node->label(),
               step_.kernel->name(), index, step_.outputs.size());
    Tensor t;
    const int idx = step_.outputs[index];
    const int block = idx >= 0 ? ex_.block_[idx] : 0;
    const size_t bytes =
        static_cast<size_t>(backends::blocked_numel(dims, block)) * dtype_size(dtype);
    const PlannedSlot* p = idx >= 0 ? &ex_.planned_[idx] : nullptr;
    if (p && p->arena >= 0 && ex_.arenas_[p->arena]->backend == step_.backend && bytes <= p->size) {
      const Arena& a = *ex_.arenas_[p->arena];
      t = Tensor::view(dtype, std::move(dims), a.base() + p->offset, a.buffer);
    } else {
      // Unbounded size, or a graph output: memory of its own, handed out with the result. The
      // buffer this value had last run is taken again when nothing holds it any more and it
      // is big enough (fresh memory every run costs page faults: a dynamic batch's whole
      // network otherwise).
      std::shared_ptr<backends::DeviceBuffer> buf;
      if (idx >= 0) {
        Executor::Spare& spare = ex_.spare_[idx];
        if (spare.buffer && spare.backend == step_.backend && spare.buffer.use_count() == 1 &&
            spare.buffer->size() >= bytes) {
          buf = spare.buffer;
        }
      }
      if (!buf) {
        buf = std::make_shared<backends::DeviceBuffer>(step_.backend->allocate(bytes));
        if (idx >= 0) ex_.spare_[idx] = {step_.backend, buf};
      }
      t = Tensor::view(dtype, std::move(dims), buf->data(), buf);
    }
    DeviceTensor out{t.dtype(), t.dims(), t.raw_data(), block};
    if (idx >= 0) {
      values_[idx] = {RtValue(t), step_.backend};
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
  Step& step_;
  std::vector<Slot>& values_;
  std::vector<bool> done_;
  std::vector<Tensor> unused_;  // outputs the graph does not read, kept until the step ends
};

backends::Stream& Executor::stream_for(Backend* b) {
  if (!b) b = &backends::CpuBackend::instance();
  auto it = streams_.find(b);
  if (it == streams_.end()) it = streams_.emplace(b, b->create_stream()).first;
  return *it->second;
}

void Executor::Run::run_step(Step& step) {
  if (step.kind == Step::Kind::Fast) {
    run_fast(step);
  } else {
    run_host(step);
  }
  keep_out_of_arenas(step);
}

void Executor::Run::run_fast(Step& step) {
  Backend& b = *step.backend;
  backends::Stream& stream = ex_.stream_for(&b);
  std::vector<DeviceTensor> ins(step.inputs.size());
  std::vector<backends::DeviceBuffer> copies;  // inputs brought over from another device
  std::deque<RtValue> keep;
  for (size_t k = 0; k < step.inputs.size(); ++k) {
    const int idx = step.inputs[k];
    if (idx < 0 || values_[idx].value.is_none()) continue;
    Slot& s = values_[idx];
    KILN_CHECK(s.value.is_tensor(), ErrorCode::Internal, "node {}: input {} is {}, not a tensor",
               step.node->label(), k, s.value.describe());
    const Tensor& t = s.value.tensor();
    if (s.device == &b || (is_host(s.device) && is_host(&b))) {
      ins[k] = {t.dtype(), t.dims(), const_cast<void*>(t.raw_data()), ex_.block_[idx]};
      continue;
    }
    // Another device's memory: through the host, explicitly.
    const RtValue& h = host(idx, keep);
    backends::DeviceBuffer d = b.allocate(t.nbytes());
    b.copy_to_device(d.data(), h.tensor().raw_data(), t.nbytes(), stream);
    ins[k] = {t.dtype(), t.dims(), d.data()};
    copies.push_back(std::move(d));
  }
  Outputs outs(ex_, step, values_);
  step.kernel->run(ins, outs, stream);
  outs.check_complete();
  if (!copies.empty()) stream.synchronize();  // the copies must outlive their use
}

void Executor::Run::run_host(Step& step) {
  const ir::Node& n = *step.node;
  std::deque<RtValue> keep;
  std::vector<const RtValue*> in_ptrs;
  Backend* view_device = nullptr;
  for (size_t k = 0; k < step.inputs.size(); ++k) {
    const int idx = step.inputs[k];
    if (idx < 0) {
      in_ptrs.push_back(nullptr);
    } else if (step.kind == Step::Kind::View && k == 0) {
      // A view only reads dims: device memory stays where it is and the view keeps its device.
      view_device = values_[idx].device;
      in_ptrs.push_back(&values_[idx].value);
    } else {
      in_ptrs.push_back(&host(idx, keep));
    }
  }
  std::vector<RtValue> outs(n.outputs().size());
  struct Runner final : ops::SubgraphRunner {
    Executor::Run& run;
    Executor& ex;
    std::deque<RtValue>& keep;
    Runner(Executor::Run& r, Executor& e, std::deque<RtValue>& k) : run(r), ex(e), keep(k) {}
    std::vector<RtValue> run_subgraph(const ir::Graph& body,
                                      const std::vector<RtValue>& inputs) override {
      Interpreter::ValueLookup outer = [this](const ir::Value* v) -> const RtValue* {
        int idx = ex.value_index(v);
        if (idx < 0) return nullptr;
        return &run.host(idx, keep);
      };
      return ex.interpreter_->run_subgraph(body, inputs, outer, run.control_);
    }
  };
  std::deque<RtValue> captured;  // host copies of captured device values
  Runner runner(*this, ex_, captured);
  ops::KernelContext ctx(n, in_ptrs, outs, ex_.interpreter_ ? &runner : nullptr);
  step.def->kernel(ctx);
  for (size_t k = 0; k < outs.size(); ++k) {
    const int idx = step.outputs[k];
    if (idx < 0) continue;
    Backend* device = step.kind == Step::Kind::View ? view_device : nullptr;
    if (step.kind == Step::Kind::View && !is_host(device) && outs[k].is_tensor() &&
        in_ptrs[0]->is_tensor() && outs[k].tensor().raw_data() != in_ptrs[0]->tensor().raw_data()) {
      fail(ErrorCode::Internal, "node {}: a view of device memory moved its data", n.label());
    }
    values_[idx] = {std::move(outs[k]), device};
  }
}

// A result whose memory lies in an arena outside its own planned slot (a reference kernel that
// returned a view of an input, a sequence holding such a tensor) would change when the slot is
// reused: it gets memory of its own now.
void Executor::Run::keep_out_of_arenas(const Step& step) {
  auto inside_own_slot = [&](int idx, const Tensor& t) {
    const PlannedSlot& p = ex_.planned_[idx];
    if (p.arena < 0) return false;
    const Arena& a = *ex_.arenas_[p.arena];
    auto* c = static_cast<const char*>(t.raw_data());
    return c >= a.base() + p.offset && c + t.nbytes() <= a.base() + p.offset + p.size;
  };
  auto in_arena = [&](const Tensor& t) {
    if (!t.defined() || t.nbytes() == 0 || t.dtype() == DataType::String) return false;
    for (const auto& a : ex_.arenas_) {
      if (is_host(a->backend) && a->contains(t.raw_data())) return true;
    }
    return false;
  };
  for (int idx : step.outputs) {
    if (idx < 0) continue;
    RtValue& v = values_[idx].value;
    if (v.is_tensor()) {
      if (in_arena(v.tensor()) && !inside_own_slot(idx, v.tensor())) v = v.tensor().clone();
    } else if (v.is_sequence()) {
      for (Tensor& t : v.sequence()) {
        if (in_arena(t)) t = t.clone();
      }
    }
  }
}

Executor::Executor(std::shared_ptr<const ir::Graph> graph, ExecutorOptions options,
                   const engine::ExecutionPlan* stored)
    : graph_(std::move(graph)), options_(std::move(options)) {
  KILN_CHECK_ARG(graph_ != nullptr, "the executor needs a graph");
  KILN_CHECK_ARG(options_.threads >= 0, "threads must be 0 (one per core) or more, got {}",
                 options_.threads);
  options_.backends = with_cpu(options_.backends);
  for (Backend* b : options_.backends) b->set_threads(options_.threads);
  for (const ir::Node* n : graph_->nodes()) nodes_.push_back(n);
  for (const auto& v : graph_->values()) {
    index_[v.get()] = static_cast<int>(values_.size());
    values_.push_back(v.get());
  }
  constants_.resize(values_.size());
  spare_.resize(values_.size());
  for (size_t i = 0; i < values_.size(); ++i) {
    if (values_[i]->is_constant()) constants_[i] = RtValue(values_[i]->constant());
  }
  choose(stored);
  prepare_steps();
  use_packed_weights(stored);
  plan_layouts(stored);
  plan_arenas(stored);
}

Executor::~Executor() = default;

Backend* Executor::backend_named(const std::string& name) const {
  for (Backend* b : options_.backends) {
    if (b->name() == name) return b;
  }
  return nullptr;
}

int Executor::value_index(const ir::Value* v) const {
  auto it = index_.find(v);
  return it == index_.end() ? -1 : it->second;
}

void Executor::choose(const engine::ExecutionPlan* stored) {
  if (!stored || stored->kernels.empty()) {
    choices_ = choose_kernels(*graph_, options_.backends);
    return;
  }
  choices_.assign(nodes_.size(), KernelChoice{});
  std::vector<bool> given(nodes_.size(), false);
  for (const engine::StoredKernel& k : stored->kernels) {
    KILN_CHECK_ARG(k.node < nodes_.size(), "engine plan: kernel choice for node #{} of {}", k.node,
                   nodes_.size());
    choices_[k.node] = {k.backend, k.kernel};
    given[k.node] = true;
  }
  if (std::find(given.begin(), given.end(), false) != given.end()) {
    std::vector<KernelChoice> fresh = choose_kernels(*graph_, options_.backends);
    for (size_t i = 0; i < nodes_.size(); ++i) {
      if (!given[i]) choices_[i] = fresh[i];
    }
  }
}

void Executor::prepare_steps() {
  Backend* preferred = options_.backends.front();
  std::set<std::string> warned;
  auto warn_once = [&](const ir::Node& n, const std::string& what) {
    std::string key = n.domain() + "." + n.op_type() + ":" + what.substr(0, what.find(':'));
    if (warned.insert(key).second) log_warning("{}", what);
  };
  bool any_subgraph = false;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const ir::Node& n = *nodes_[i];
    auto step = std::make_unique<Step>();
    step->node = &n;
    for (const ir::Value* v : n.inputs()) step->inputs.push_back(v ? value_index(v) : -1);
    for (const ir::Value* v : n.outputs()) step->outputs.push_back(v ? value_index(v) : -1);
    KernelChoice& c = choices_[i];
    if (c.kernel == kViewKernel && is_view_op(n)) {
      step->kind = Step::Kind::View;
    } else if (c.kernel != kReferenceKernel && !needs_interpreter(n)) {
      Backend* b = backend_named(c.backend);
      if (!b) {
        warn_once(n, fmt::format("{}: backend '{}' of the engine's kernel choice is not "
                                 "available: running the CPU reference kernel",
                                 n.op_type(), c.backend));
      } else {
        try {
          step->kernel = b->create_kernel(n, c.kernel);
          step->kind = Step::Kind::Fast;
          step->backend = b;
        } catch (const Error& e) {
          warn_once(n, fmt::format("{}: kernel '{}' cannot run node {} ({}): running the CPU "
                                   "reference kernel",
                                   n.op_type(), c.kernel, n.label(), e.message()));
        }
      }
    }
    if (step->kind == Step::Kind::Reference) c = {backends::kCpuBackendName, kReferenceKernel};
    if (step->kind != Step::Kind::Fast) {
      step->def = &ops::OpRegistry::instance().get(n.domain(), n.op_type(), n.opset());
    }
    // A node the preferred device cannot run falls back to the CPU: say so once per op type.
    if (!is_host(preferred) && step->kind != Step::Kind::View &&
        (step->kind != Step::Kind::Fast || step->backend != preferred)) {
      backends::Support s = preferred->supports(n);
      warn_once(
          n, fmt::format("{}: {} cannot run it ({}): falling back to the CPU ({}) with "
                         "copies to and from host memory",
                         n.op_type(), preferred->name(),
                         s.ok() ? "kernel failed to prepare" : s.reason,
                         step->kind == Step::Kind::Fast ? step->kernel->name() : kReferenceKernel));
    }
    any_subgraph |= has_subgraphs(n);
    steps_.push_back(std::move(step));
  }
  if (any_subgraph) interpreter_ = std::make_unique<Interpreter>(graph_);

  // Free each value after its last reader (subgraph captures count as reads of their node).
  std::map<int, size_t> last_use;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    std::set<const ir::Value*> reads;
    collect_reads(*nodes_[i], reads);
    for (const ir::Value* v : reads) {
      int idx = value_index(v);
      if (idx >= 0 && !v->is_constant()) last_use[idx] = i;
    }
  }
  std::set<const ir::Value*> outputs(graph_->outputs().begin(), graph_->outputs().end());
  for (const auto& [idx, i] : last_use) {
    if (!outputs.count(values_[idx])) steps_[i]->release.push_back(idx);
  }
}

void Executor::use_packed_weights(const engine::ExecutionPlan* stored) {
  if (!stored) return;
  for (const engine::StoredPackedWeight& p : stored->packed) {
    KILN_CHECK_ARG(p.node < steps_.size() && p.input < steps_[p.node]->inputs.size(),
                   "engine plan: packed weight for input {} of node #{} of {}", p.input, p.node,
                   steps_.size());
    Step& s = *steps_[p.node];
    // A kernel chosen afresh (this build lacks the stored one) packs for itself.
    if (s.kind != Step::Kind::Fast || s.backend->name() != p.backend) continue;
    with_node_errors(*s.node, [&] { s.kernel->use_packed_weight({p.input, p.format, p.data}); });
  }
}

void Executor::plan_layouts(const engine::ExecutionPlan* stored) {
  std::vector<LayoutStep> ls(steps_.size());
  for (size_t i = 0; i < steps_.size(); ++i) {
    const Step& s = *steps_[i];
    LayoutStep& l = ls[i];
    if (s.kind == Step::Kind::Fast) {
      l.backend = s.backend;
      l.layouts = s.kernel->blocked_layouts();
    }
    l.inputs = s.inputs;
    l.outputs = s.outputs;
    std::set<const ir::Value*> reads;
    collect_reads(*s.node, reads);
    for (const ir::Value* v : reads) l.reads.push_back(value_index(v));
  }
  std::vector<bool> pinned(values_.size(), false);
  for (size_t i = 0; i < values_.size(); ++i) {
    pinned[i] = values_[i]->is_constant() || graph_->is_output(values_[i]);
  }
  for (const ir::Value* v : graph_->inputs()) pinned[value_index(v)] = true;
  // An engine planned without blocked layouts (an older build, or KILN_CPU_BLOCKED=0) may give
  // a value too small a slot for its padded channels: that value stays row-major.
  if (stored) {
    for (const engine::StoredArena& a : stored->arenas) {
      const Backend* b = backend_named(a.device);
      if (!b || b->layout_block() <= 0) continue;
      for (const engine::StoredBuffer& buf : a.buffers) {
        const ir::Value* v = graph_->find_local_value(buf.value);
        if (!v || value_index(v) < 0) continue;
        std::optional<size_t> need = max_value_bytes_in(*v, b->layout_block());
        if (need && buf.size < *need) pinned[value_index(v)] = true;
      }
    }
  }
  block_ = runtime::plan_layouts(ls, values_, pinned);
  for (auto& step : steps_) {
    if (step->kind != Step::Kind::Fast) continue;
    const int in0 = !step->inputs.empty() && step->inputs[0] >= 0 ? block_[step->inputs[0]] : 0;
    const int out0 = !step->outputs.empty() && step->outputs[0] >= 0 ? block_[step->outputs[0]] : 0;
    const backends::BlockedLayouts caps = step->kernel->blocked_layouts();
    if (caps.input0 || caps.output0 || caps.uniform || caps.follows >= 0) {
      with_node_errors(*step->node, [&] { step->kernel->set_layouts(in0, out0); });
    }
  }
}

void Executor::plan_arenas(const engine::ExecutionPlan* stored) {
  planned_.assign(values_.size(), PlannedSlot{});
  for (Backend* b : options_.backends) {
    bool used = std::any_of(steps_.begin(), steps_.end(), [&](const auto& s) {
      return s->kind == Step::Kind::Fast && s->backend == b;
    });
    if (!used) continue;
    auto arena = std::make_unique<Arena>();
    arena->backend = b;
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
      summary.from_engine = true;
      arena->bytes = from_file->bytes;
      for (const engine::StoredBuffer& buf : from_file->buffers) {
        const ir::Value* v = graph_->find_local_value(buf.value);
        KILN_CHECK_ARG(v, "engine plan: value '{}' is not in the graph", buf.value);
        std::optional<size_t> need = max_value_bytes_in(*v, block_[value_index(v)]);
        if (!need) continue;  // unbounded now: allocated per run
        KILN_CHECK_ARG(buf.size >= *need && buf.offset <= arena->bytes &&
                           buf.size <= arena->bytes - buf.offset,
                       "engine plan: value '{}' gets {} bytes at offset {} of a {}-byte arena "
                       "but needs {}: recompile the model",
                       buf.value, buf.size, buf.offset, arena->bytes, *need);
        planned_[value_index(v)] = {ai, buf.offset, buf.size};
        summary.naive_bytes += buf.size;
        ++summary.values;
      }
    } else {
      PlanOptions po;
      po.in_place = true;
      po.plan_graph_outputs = false;
      std::map<const ir::Node*, const Step*> by_node;
      for (const auto& s : steps_) by_node[s->node] = s.get();
      po.writes_arena = [&](const ir::Node& n) {
        const Step* s = by_node.at(&n);
        return (s->kind == Step::Kind::Fast && s->backend == b) || s->kind == Step::Kind::View;
      };
      po.value_bytes = [&](const ir::Value& v) {
        return max_value_bytes_in(v, block_[value_index(&v)]);
      };
      MemoryPlan plan = plan_memory(*graph_, po);
      arena->bytes = plan.arena_bytes;
      for (const PlannedBuffer& pb : plan.buffers) {
        planned_[value_index(pb.value)] = {ai, pb.offset, pb.bytes};
      }
      summary.naive_bytes = plan.naive_bytes;
      summary.values = plan.buffers.size();
      summary.shared = plan.shared;
      summary.unplanned = plan.unplanned.size();
    }
    summary.bytes = arena->bytes;
    summaries_.push_back(summary);
    KILN_CHECK(arena->bytes <= Tensor::max_bytes(), ErrorCode::InvalidArgument,
               "the activation arena needs {} bytes, over the limit of {} bytes", arena->bytes,
               Tensor::max_bytes());
    if (arena->bytes > 0) {
      arena->buffer = std::make_shared<backends::DeviceBuffer>(b->allocate(arena->bytes));
    }
    arenas_.push_back(std::move(arena));
  }
}

int Executor::layout_block(const ir::Value* v) const {
  const int idx = value_index(v);
  return idx >= 0 ? block_[idx] : 0;
}

std::map<std::string, size_t> Executor::arena_bytes() const {
  std::map<std::string, size_t> out;
  for (const auto& a : arenas_) out[std::string(a->backend->name())] = a->bytes;
  return out;
}

engine::ExecutionPlan Executor::execution_plan() const {
  engine::ExecutionPlan plan;
  for (size_t ai = 0; ai < arenas_.size(); ++ai) {
    engine::StoredArena a;
    a.device = std::string(arenas_[ai]->backend->name());
    a.bytes = arenas_[ai]->bytes;
    for (size_t i = 0; i < values_.size(); ++i) {
      if (planned_[i].arena == static_cast<int>(ai)) {
        a.buffers.push_back({values_[i]->name(), planned_[i].offset, planned_[i].size});
      }
    }
    plan.arenas.push_back(std::move(a));
  }
  for (size_t i = 0; i < choices_.size(); ++i) {
    plan.kernels.push_back({static_cast<uint32_t>(i), choices_[i].backend, choices_[i].kernel});
  }
  return plan;
}

std::vector<engine::StoredPackedWeight> Executor::pack_weights() {
  std::vector<engine::StoredPackedWeight> out;
  for (size_t i = 0; i < steps_.size(); ++i) {
    Step& s = *steps_[i];
    if (s.kind != Step::Kind::Fast) continue;
    std::vector<backends::PackedWeight> packed;
    with_node_errors(*s.node, [&] { packed = s.kernel->pack_weights(); });
    for (backends::PackedWeight& p : packed) {
      out.push_back({static_cast<uint32_t>(i), static_cast<uint32_t>(p.input),
                     std::string(s.backend->name()), std::move(p.format), std::move(p.data)});
    }
  }
  return out;
}

std::vector<RtValue> Executor::run(const std::vector<RtValue>& inputs, const RunControl* control) {
  std::lock_guard<std::mutex> lock(run_mutex_);
  for (Backend* b : options_.backends) b->set_threads(options_.threads);
  profile_.clear();
  const ir::Graph& g = *graph_;
  KILN_CHECK_ARG(inputs.size() <= g.inputs().size(), "the graph takes {} inputs, got {}",
                 g.inputs().size(), inputs.size());
  std::vector<Slot> values(values_.size());
  for (size_t i = 0; i < values_.size(); ++i) {
    if (!constants_[i].is_none()) values[i].value = constants_[i];
  }
  for (size_t i = 0; i < g.inputs().size(); ++i) {
    const ir::Value* v = g.inputs()[i];
    const int idx = value_index(v);
    if (i < inputs.size() && !inputs[i].is_none()) {
      check_value_matches(inputs[i], v->type(), fmt::format("input '{}'", v->name()));
      values[idx].value = inputs[i];
    } else if (!v->is_constant() && v->type().kind != TypeInfo::Kind::Optional) {
      fail(ErrorCode::InvalidArgument, "graph '{}': input '{}' was not given", g.name(), v->name());
    }
  }
  Run run(*this, values, control);
  for (auto& step : steps_) {
    check_run(control);
    auto start = std::chrono::steady_clock::now();
    with_node_errors(*step->node, [&] { run.run_step(*step); });
    if (profiling_) {
      profile_.push_back(
          {step->node,
           std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
               .count(),
           start});
    }
    for (int idx : step->release) values[idx] = Slot{};
  }
  std::vector<RtValue> results;
  std::deque<RtValue> keep;
  for (const ir::Value* v : g.outputs()) {
    const int idx = value_index(v);
    RtValue r = run.host(idx, keep);
    // Never hand out arena memory: the next run would overwrite it.
    if (r.is_tensor()) {
      for (const auto& a : arenas_) {
        if (is_host(a->backend) && r.tensor().nbytes() > 0 && a->contains(r.tensor().raw_data())) {
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
