#include "server/ensemble_scheduler.hpp"

#include <algorithm>
#include <mutex>
#include <optional>

#include "runtime/run_control.hpp"
#include "server/model.hpp"
#include "server/request_errors.hpp"
#include "server/server_log.hpp"
#include "server/trace.hpp"

namespace kiln::server {
namespace {

uint64_t ns_between(Clock::time_point a, Clock::time_point b) {
  return b > a ? static_cast<uint64_t>(
                     std::chrono::duration_cast<std::chrono::nanoseconds>(b - a).count())
               : 0;
}

// What a tensor holds in memory, for the request memory budget: its elements, and for BYTES the
// bytes of each string besides.
size_t tensor_bytes(const Tensor& t) {
  size_t n = t.nbytes();
  if (t.dtype() == DataType::String) {
    for (const std::string& s : t.values<std::string>()) n += s.size();
  }
  return n;
}

// The failure in flight as a status. The callbacks below run on the composing models' worker
// threads, where nothing may escape: every failure ends the ensemble request instead.
Status status_of_exception() {
  try {
    throw;
  } catch (const Error& e) {
    return Status(e);
  } catch (const std::bad_alloc&) {
    return Status(ErrorCode::Unavailable, "out of memory while running the ensemble");
  } catch (const std::exception& e) {
    return Status(ErrorCode::Internal, e.what());
  } catch (...) {
    return Status(ErrorCode::Internal, "unknown failure while running the ensemble");
  }
}

bool dims_match(const std::vector<int64_t>& config, const std::vector<int64_t>& dims) {
  if (config.size() != dims.size()) return false;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (config[i] != -1 && config[i] != dims[i]) return false;
  }
  return true;
}

// Triton's reshape of a tensor passed between a batching and a non-batching model: a tensor
// without a batch dim gets one of 1 when the reader batches and its dims are the reader's; a
// tensor of batch 1 loses it when the reader does not batch and its dims are not the reader's.
// `batch` is the batch size the tensor was made with (0: by a model that does not batch).
std::vector<int64_t> reshape_dims(const std::vector<int64_t>& config_dims, bool reader_batches,
                                  int64_t batch, const std::vector<int64_t>& dims) {
  if (reader_batches == (batch != 0)) return dims;
  if (reader_batches) {
    if (!dims_match(config_dims, dims)) return dims;
    std::vector<int64_t> out{1};
    out.insert(out.end(), dims.begin(), dims.end());
    return out;
  }
  if (dims_match(config_dims, dims) || batch != 1 || dims.empty()) return dims;
  return {dims.begin() + 1, dims.end()};
}

}  // namespace

// One ensemble request in flight. Shared by the callbacks of its running steps; holds the
// ensemble's version (keepalive), so `owner` stays valid while it lives.
struct EnsembleScheduler::Run {
  struct Slot {
    Tensor data;         // undefined: not produced yet, released, or an absent optional input
    bool ready = false;  // produced (or given by the request)
    int64_t batch = 0;   // the batch size it was made with; 0: by a model that does not batch
    size_t readers = 0;  // steps still to read it, plus 1 when the answer returns it
    size_t bytes = 0;    // leased from the request memory budget
  };
  static constexpr size_t kSkipped = static_cast<size_t>(-1);

  const EnsembleScheduler* owner = nullptr;
  std::unique_ptr<InferRequest> request;
  InferCallback done;
  std::shared_ptr<const void> keepalive;
  std::vector<size_t> outputs;  // the outputs to return: indices into options().outputs
  int64_t batch = 0;            // the request's batch size; 0 when the ensemble does not batch
  Clock::time_point enqueued, started, deadline = Clock::time_point::max();

  std::mutex mutex;                         // guards everything below
  std::vector<Slot> slots;                  // one per ensemble tensor
  std::vector<size_t> waiting;              // per step: tensors it still waits for, or kSkipped
  std::vector<std::vector<size_t>> wanted;  // per step: its outputs (indices) anything reads
  size_t inflight = 0;                      // steps started and not done
  size_t missing = 0;                       // requested outputs not produced yet
  bool finished = false;
  std::optional<Status> failure;
  MemoryLease lease;
  ComputeTimes compute;  // the steps' compute times, summed

  const EnsembleOptions& options() const { return owner->options_; }

  // A reader is done with tensor `t`: the last one releases it and its lease. Under `mutex`.
  void release(size_t t) {
    Slot& slot = slots[t];
    if (slot.readers == 0 || --slot.readers > 0) return;
    slot.data = Tensor();
    lease.shrink(slot.bytes);
    slot.bytes = 0;
  }
  // The distinct tensors step `s` reads.
  std::vector<size_t> step_inputs(size_t s) const {
    std::vector<size_t> out;
    for (const EnsemblePlan::Binding& b : options().plan.steps[s].inputs) {
      if (std::find(out.begin(), out.end(), b.tensor) == out.end()) out.push_back(b.tensor);
    }
    return out;
  }
};

EnsembleScheduler::EnsembleScheduler(EnsembleOptions options, ModelStatistics& statistics)
    : options_(std::move(options)), statistics_(statistics) {}

void EnsembleScheduler::enqueue(std::unique_ptr<InferRequest> request, InferCallback done,
                                std::shared_ptr<const void> keepalive) {
  const EnsemblePlan& plan = options_.plan;
  auto run = std::make_shared<Run>();
  run->owner = this;
  run->enqueued = Clock::now();
  stamp(request->trace, TraceActivity::QueueStart, run->enqueued);
  std::vector<size_t> ready;
  try {
    // The ensemble checks its own request as any model does (and in the same words), before
    // any step runs; a request refused here counts in no statistic.
    CheckedRequest checked = check_request(*request, options_.inputs, options_.outputs,
                                           options_.max_batch_size, options_.model_name);
    run->outputs = std::move(checked.outputs);
    run->batch = checked.batch;
    const uint64_t run_timeout =
        runtime::shorter_timeout(request->timeout_us, options_.request_timeout_us);
    if (run_timeout > 0) run->deadline = runtime::deadline_after(request->received, run_timeout);
    run->deadline = std::min(run->deadline, request->deadline);
    run->slots.resize(plan.tensors.size());
    for (size_t i = 0; i < options_.inputs.size(); ++i) {
      Run::Slot& slot = run->slots[plan.inputs[i]];
      slot.ready = true;  // an absent optional input is "ready" with no data, as in Triton
      slot.batch = run->batch;
      if (checked.by_spec[i] != nullptr) slot.data = checked.by_spec[i]->data;
    }
    // Only the steps the requested outputs depend on run (Triton prunes the same way).
    std::vector<char> needed(plan.steps.size(), 0);
    std::vector<size_t> stack;
    for (size_t o : run->outputs) {
      const int p = plan.producer[plan.outputs[o]];
      if (p >= 0) stack.push_back(static_cast<size_t>(p));
    }
    while (!stack.empty()) {
      const size_t s = stack.back();
      stack.pop_back();
      if (needed[s]) continue;
      needed[s] = 1;
      for (const EnsemblePlan::Binding& b : plan.steps[s].inputs) {
        const int p = plan.producer[b.tensor];
        if (p >= 0 && !needed[p]) stack.push_back(static_cast<size_t>(p));
      }
    }
    run->waiting.assign(plan.steps.size(), Run::kSkipped);
    run->wanted.resize(plan.steps.size());
    for (size_t s = 0; s < plan.steps.size(); ++s) {
      if (!needed[s]) continue;
      run->waiting[s] = 0;
      for (size_t t : run->step_inputs(s)) {
        ++run->slots[t].readers;
        if (!run->slots[t].ready) ++run->waiting[s];
      }
    }
    for (size_t o : run->outputs) {
      Run::Slot& slot = run->slots[plan.outputs[o]];
      ++slot.readers;
      if (!slot.ready) ++run->missing;
    }
    for (size_t s = 0; s < plan.steps.size(); ++s) {
      if (!needed[s]) continue;
      const auto& outs = plan.steps[s].outputs;
      for (size_t k = 0; k < outs.size(); ++k) {
        if (run->slots[outs[k].tensor].readers > 0) run->wanted[s].push_back(k);
      }
      if (run->waiting[s] == 0) ready.push_back(s);
    }
    if (options_.memory) run->lease = MemoryLease(*options_.memory);
  } catch (const Error& e) {
    done(Status(e), nullptr);
    return;
  }
  run->request = std::move(request);
  run->done = std::move(done);
  run->keepalive = std::move(keepalive);
  statistics_.add_pending(1);
  run->inflight = ready.size();
  run->started = Clock::now();
  if (ready.empty()) {
    // Every requested output is an ensemble input: nothing to run.
    run->finished = true;
    finish(run);
    return;
  }
  for (size_t s : ready) launch(run, s);
}

void EnsembleScheduler::launch(const std::shared_ptr<Run>& run, size_t s) {
  const EnsemblePlan::Step& step = run->options().plan.steps[s];
  bool failed = false;
  {
    std::lock_guard lock(run->mutex);
    failed = run->failure.has_value();
  }
  if (failed) {
    // A step failed meanwhile: the ensemble ends, nothing more starts.
    step_done(run, s, step.model, step.version, false, Status::ok(), nullptr);
    return;
  }
  std::shared_ptr<ModelVersion> model;
  std::unique_ptr<InferRequest> request;
  bool batches = false;
  try {
    request = std::make_unique<InferRequest>();
    model = run->options().resolve(step.model, step.version);
    const ModelConfig& config = model->config();
    batches = config.max_batch_size() > 0;
    const InferRequest& parent = *run->request;
    request->model_name = step.model;
    request->model_version = model->version();
    request->id = parent.id;
    request->parameters = parent.parameters;
    request->priority = parent.priority;
    request->timeout_us = parent.timeout_us;
    request->received = Clock::now();
    request->deadline = run->deadline;
    request->cancelled = parent.cancelled;
    // A traced ensemble traces its steps, each naming it as parent (as tritonserver does).
    if (parent.trace) {
      request->trace = parent.trace->child(step.model);
      request->trace->set_version(model->version());
      request->trace->set_request_id(parent.id);
      request->trace->stamp(TraceActivity::RequestStart, request->received);
    }
    std::lock_guard lock(run->mutex);
    for (const EnsemblePlan::Binding& b : step.inputs) {
      const Run::Slot& slot = run->slots[b.tensor];
      if (!slot.data.defined()) continue;  // an optional input the request left out
      std::vector<int64_t> config_dims;
      for (const inference::ModelInput& in : config.input()) {
        if (in.name() == b.model_tensor) config_dims.assign(in.dims().begin(), in.dims().end());
      }
      InferInput in;
      in.name = b.model_tensor;
      in.datatype = slot.data.dtype();
      in.shape = reshape_dims(config_dims, batches, slot.batch, slot.data.dims());
      in.data = in.shape == slot.data.dims() ? slot.data : slot.data.reshaped(in.shape);
      request->inputs.push_back(std::move(in));
    }
    for (size_t k : run->wanted[s]) request->outputs.push_back({step.outputs[k].model_tensor, {}});
  } catch (...) {
    step_done(run, s, step.model, step.version, false, status_of_exception(), nullptr);
    return;
  }
  const int64_t version = model->version();
  try {
    ModelVersion::infer_async(
        model, std::move(request),
        [run, s, version, batches](Status status, std::unique_ptr<InferResponse> response) {
          const std::string& name = run->options().plan.steps[s].model;
          step_done(run, s, name, version, batches, std::move(status), std::move(response));
        });
  } catch (...) {
    // Thrown before the scheduler took the request (it calls back once it has).
    step_done(run, s, step.model, version, batches, status_of_exception(), nullptr);
  }
}

void EnsembleScheduler::step_done(const std::shared_ptr<Run>& run, size_t s,
                                  const std::string& model, int64_t version, bool model_batches,
                                  Status status, std::unique_ptr<InferResponse> response) {
  std::vector<size_t> launch_now;
  bool finish_now = false;
  {
    std::lock_guard lock(run->mutex);
    --run->inflight;
    try {
      for (size_t t : run->step_inputs(s)) run->release(t);
      step_result_locked(*run, s, model, version, model_batches, status, response.get(),
                         launch_now);
    } catch (...) {
      launch_now.clear();
      try {
        if (!run->failure) run->failure = status_of_exception();
      } catch (...) {
        // Out of memory even for the message: the missing outputs fail the request.
      }
    }
    if (run->failure) launch_now.clear();
    run->inflight += launch_now.size();
    finish_now = !run->finished && run->inflight == 0;
    if (finish_now) run->finished = true;
  }
  response.reset();
  for (size_t r : launch_now) launch(run, r);
  if (finish_now) finish(run);
}

void EnsembleScheduler::step_result_locked(Run& run, size_t s, const std::string& model,
                                           int64_t version, bool model_batches,
                                           const Status& status, InferResponse* response,
                                           std::vector<size_t>& launch_now) {
  const EnsembleOptions& options = run.options();
  const EnsemblePlan::Step& step = options.plan.steps[s];
  // Which step, for the messages (formatted only on failure: this runs for every step).
  auto where = [&] {
    return fmt::format("step {}: model '{}'{}", s, model,
                       version >= 0 ? fmt::format(" version {}", version) : std::string());
  };
  if (!status.is_ok()) {
    if (!run.failure) {
      run.failure = Status(
          status.code(),
          fmt::format("in ensemble '{}', {} ({})", options.model_name, status.message(), where()));
    }
  } else if (response != nullptr && !run.failure) {
    run.compute.input_ns += response->compute.input_ns;
    run.compute.infer_ns += response->compute.infer_ns;
    run.compute.output_ns += response->compute.output_ns;
    for (size_t k : run.wanted[s]) {
      const EnsemblePlan::Binding& b = step.outputs[k];
      InferOutput* out = nullptr;
      for (InferOutput& o : response->outputs) {
        if (o.name == b.model_tensor) out = &o;
      }
      if (out == nullptr || !out->data.defined()) {
        run.failure = Status(ErrorCode::Internal,
                             fmt::format("in ensemble '{}', output '{}' is missing from the "
                                         "response ({})",
                                         options.model_name, b.model_tensor, where()));
        break;
      }
      Run::Slot& slot = run.slots[b.tensor];
      const size_t bytes = tensor_bytes(out->data);
      if (!run.lease.grow(bytes)) {
        run.failure =
            Status(ErrorCode::Unavailable,
                   fmt::format("in ensemble '{}', the server's request memory budget ({} bytes) is "
                               "spent; retry later ({} returned {} bytes for '{}')",
                               options.model_name, options.memory ? options.memory->limit() : 0,
                               where(), bytes, options.plan.tensors[b.tensor]));
        break;
      }
      slot.data = std::move(out->data);
      slot.bytes = bytes;
      slot.batch = model_batches && slot.data.rank() > 0 ? slot.data.dim(0) : 0;
      slot.ready = true;
      for (size_t r : options.plan.readers[b.tensor]) {
        if (run.waiting[r] != Run::kSkipped && --run.waiting[r] == 0) launch_now.push_back(r);
      }
      for (size_t o : run.outputs) {
        if (options.plan.outputs[o] == b.tensor) --run.missing;
      }
    }
  }
}

void EnsembleScheduler::finish_locked(Run& run, std::unique_ptr<InferResponse>& response,
                                      std::optional<Status>& failure) {
  const EnsembleOptions& options = run.options();
  try {
    failure = run.failure;
    if (!failure && run.missing > 0) {
      // Cannot happen for a checked plan; Triton's words should it ever.
      failure = Status(ErrorCode::InvalidArgument,
                       fmt::format("in ensemble '{}', {}unexpected deadlock, at least one output "
                                   "is not set while no more ensemble steps can be made",
                                   options.model_name, request_id_prefix(*run.request)));
    }
    if (!failure) {
      response = std::make_unique<InferResponse>();
      response->model_name = options.model_name;
      response->model_version = options.model_version;
      response->id = run.request->id;
      for (size_t o : run.outputs) {
        const TensorSpec& spec = options.outputs[o];
        Run::Slot& slot = run.slots[options.plan.outputs[o]];
        if (slot.data.dtype() != spec.dtype) {
          failure =
              Status(ErrorCode::InvalidArgument,
                     fmt::format("in ensemble '{}', output '{}' is {} but the ensemble's "
                                 "config says {}",
                                 options.model_name, spec.name, datatype_name(slot.data.dtype()),
                                 datatype_name(spec.dtype)));
          response.reset();
          break;
        }
        InferOutput out;
        out.name = spec.name;
        out.datatype = spec.dtype;
        out.shape = reshape_dims(spec.dims, run.batch != 0, slot.batch, slot.data.dims());
        out.data = out.shape == slot.data.dims() ? slot.data : slot.data.reshaped(out.shape);
        response->outputs.push_back(std::move(out));
      }
    }
    if (response) response->compute = run.compute;
  } catch (...) {
    response.reset();
    failure = status_of_exception();
  }
  // The answer's tensors are the frontend's from here, as any model's answer is: the lease
  // covered what only the ensemble held.
  run.slots.clear();
  run.lease.reset();
}

void EnsembleScheduler::finish(const std::shared_ptr<Run>& run) {
  const EnsembleOptions& options = run->options();
  ModelStatistics& statistics = run->owner->statistics_;
  std::unique_ptr<InferResponse> response;
  std::optional<Status> failure;
  {
    std::unique_lock lock(run->mutex);
    finish_locked(*run, response, failure);
  }
  const uint64_t request_ns = ns_between(run->request->received, Clock::now());
  try {
    if (failure) {
      statistics.record_failure(request_ns, FailureReason::Other);
    } else {
      const uint64_t rows = static_cast<uint64_t>(std::max<int64_t>(1, run->batch));
      const ComputeTimes& c = run->compute;
      statistics.record_success(rows, request_ns, ns_between(run->enqueued, run->started),
                                c.input_ns, c.infer_ns, c.output_ns);
      statistics.record_execution(rows, c.input_ns, c.infer_ns, c.output_ns);
    }
  } catch (const std::exception& e) {
    log_error("kiln-serve: ensemble '{}': statistics not recorded: {}", options.model_name,
              e.what());
  }
  statistics.add_pending(-1);
  InferCallback done = std::move(run->done);
  if (run->request) stamp_request_end(run->request->trace);
  try {
    done(failure ? *failure : Status::ok(), std::move(response));
  } catch (const std::exception& e) {
    log_error("kiln-serve: ensemble '{}': answering failed: {}", options.model_name, e.what());
  }
}

}  // namespace kiln::server
