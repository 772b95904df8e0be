#include "server/scheduler.hpp"

#include <algorithm>
#include <cstring>

#include "runtime/run_control.hpp"
#include "server/batching.hpp"
#include "server/trace.hpp"

namespace kiln::server {
namespace {

uint64_t ns_between(Clock::time_point a, Clock::time_point b) {
  return b > a ? static_cast<uint64_t>(
                     std::chrono::duration_cast<std::chrono::nanoseconds>(b - a).count())
               : 0;
}

SchedulerOptions::QueuePolicy to_policy(const inference::ModelQueuePolicy& p) {
  SchedulerOptions::QueuePolicy q;
  q.delay_on_timeout = p.timeout_action() == inference::ModelQueuePolicy::DELAY;
  q.default_timeout_us = p.default_timeout_microseconds();
  q.allow_timeout_override = p.allow_timeout_override();
  q.max_queue_size = p.max_queue_size();
  return q;
}

}  // namespace

SchedulerOptions SchedulerOptions::from_config(const ModelConfig& config, int64_t version) {
  SchedulerOptions o;
  o.model_name = config.name();
  o.model_version = version;
  o.max_batch_size = config.max_batch_size();
  if (config.has_dynamic_batching()) {
    const inference::ModelDynamicBatching& db = config.dynamic_batching();
    o.dynamic_batching = true;
    o.preferred_batch_sizes.assign(db.preferred_batch_size().begin(),
                                   db.preferred_batch_size().end());
    std::sort(o.preferred_batch_sizes.begin(), o.preferred_batch_sizes.end());
    o.max_queue_delay_us = db.max_queue_delay_microseconds();
    o.priority_levels = db.priority_levels();
    o.default_priority = db.default_priority_level();
    const size_t levels = std::max<uint64_t>(1, o.priority_levels);
    o.policies.assign(levels, to_policy(db.default_queue_policy()));
    for (const auto& entry : db.priority_queue_policy()) {
      if (entry.first >= 1 && entry.first <= levels) {
        o.policies[entry.first - 1] = to_policy(entry.second);
      }
    }
  } else {
    o.policies.assign(1, QueuePolicy{});
  }
  for (const inference::ModelInput& in : config.input()) {
    TensorSpec t;
    t.name = in.name();
    t.dtype = datatype_from_config(in.data_type());
    t.dims.assign(in.dims().begin(), in.dims().end());
    t.has_reshape = in.has_reshape();
    t.reshape.assign(in.reshape().shape().begin(), in.reshape().shape().end());
    t.optional = in.optional();
    o.inputs.push_back(std::move(t));
  }
  for (const inference::ModelOutput& out : config.output()) {
    TensorSpec t;
    t.name = out.name();
    t.dtype = datatype_from_config(out.data_type());
    t.dims.assign(out.dims().begin(), out.dims().end());
    t.has_reshape = out.has_reshape();
    t.reshape.assign(out.reshape().shape().begin(), out.reshape().shape().end());
    o.outputs.push_back(std::move(t));
  }
  return o;
}

// One accepted request waiting in, or taken from, a queue.
struct Scheduler::Pending {
  std::unique_ptr<InferRequest> request;
  InferCallback done;
  std::shared_ptr<const void> keepalive;
  Clock::time_point enqueued;
  Clock::time_point deadline = Clock::time_point::max();      // queue policy's
  Clock::time_point run_deadline = Clock::time_point::max();  // the request's, queued or running
  bool delay_on_timeout = false;
  int64_t batch = 1;                       // rows this request adds to a batch
  std::vector<const InferInput*> by_spec;  // request input per options_.inputs (null: absent)
  std::vector<size_t> outputs;             // indices into options_.outputs, in the order to return
};

struct Scheduler::Batch {
  std::vector<std::unique_ptr<Pending>> items;
  int64_t rows = 0;
};

Scheduler::Scheduler(SchedulerOptions options, std::vector<std::unique_ptr<Session>> instances,
                     ModelStatistics& statistics)
    : options_(std::move(options)), instances_(std::move(instances)), statistics_(statistics) {
  KILN_CHECK(!instances_.empty(), ErrorCode::Internal, "model '{}' has no instances",
             options_.model_name);
  queues_.resize(std::max<size_t>(1, options_.policies.size()));
  workers_.start(
      instances_.size(), [this](size_t i) { worker(i); }, mutex_, stopping_, cv_,
      options_.model_name, options_.model_version);
}

Scheduler::~Scheduler() {
  workers_.stop(mutex_, stopping_, cv_);
}

size_t Scheduler::queued() const {
  std::lock_guard lock(mutex_);
  size_t n = 0;
  for (const auto& q : queues_) n += q.size();
  return n;
}

void Scheduler::enqueue(std::unique_ptr<InferRequest> request, InferCallback done,
                        std::shared_ptr<const void> keepalive) {
  auto p = std::make_unique<Pending>();
  size_t level = 0;
  try {
    CheckedRequest checked = check_request(*request, options_.inputs, options_.outputs,
                                           options_.max_batch_size, options_.model_name);
    p->by_spec = std::move(checked.by_spec);
    p->batch = checked.batch > 0 ? checked.batch : 1;
    p->outputs = std::move(checked.outputs);
    // Priority 0 or beyond the levels falls back to the default level, as Triton does.
    if (options_.priority_levels > 0) {
      uint64_t prio = request->priority;
      if (prio == 0 || prio > options_.priority_levels) prio = options_.default_priority;
      level = static_cast<size_t>(prio - 1);
    }
    const SchedulerOptions::QueuePolicy& policy = options_.policies[level];
    uint64_t timeout = policy.default_timeout_us;
    if (request->timeout_us > 0 && policy.allow_timeout_override &&
        (timeout == 0 || request->timeout_us < timeout)) {
      timeout = request->timeout_us;
    }
    p->enqueued = Clock::now();
    stamp(request->trace, TraceActivity::QueueStart, p->enqueued);
    // Saturating: a timeout near 2^63 us means "never", not a time in the past.
    if (timeout > 0) p->deadline = runtime::deadline_after(p->enqueued, timeout);
    p->delay_on_timeout = policy.delay_on_timeout;
    const uint64_t run_timeout =
        runtime::shorter_timeout(request->timeout_us, options_.request_timeout_us);
    if (run_timeout > 0) p->run_deadline = runtime::deadline_after(request->received, run_timeout);
    p->run_deadline = std::min(p->run_deadline, request->deadline);
  } catch (const Error& e) {
    // A request refused here never reached the model: Triton counts it in no statistic.
    done(Status(e), nullptr);
    return;
  }
  p->request = std::move(request);
  p->done = std::move(done);
  p->keepalive = std::move(keepalive);
  {
    std::unique_lock lock(mutex_);
    const uint32_t max_size = options_.policies[level].max_queue_size;
    if (stopping_ || (max_size > 0 && queues_[level].size() >= max_size)) {
      const bool stopping = stopping_;
      lock.unlock();
      statistics_.record_failure(ns_between(p->request->received, Clock::now()),
                                 FailureReason::Rejected);
      p->done(Status(ErrorCode::Unavailable,
                     stopping ? fmt::format("model '{}' is unloading", options_.model_name)
                              : std::string("Exceeds maximum queue size")),
              nullptr);
      return;
    }
    statistics_.add_pending(1);
    queues_[level].push_back(std::move(p));
  }
  cv_.notify_one();
}

void Scheduler::fail_expired_locked(Clock::time_point now,
                                    std::vector<std::unique_ptr<Pending>>& expired) {
  for (auto& q : queues_) {
    for (auto it = q.begin(); it != q.end();) {
      if ((*it)->request->is_cancelled() || (!(*it)->delay_on_timeout && (*it)->deadline <= now) ||
          (*it)->run_deadline <= now) {
        expired.push_back(std::move(*it));
        it = q.erase(it);
      } else {
        ++it;
      }
    }
  }
}

namespace {

// Requests can share one execution when every input they carry agrees on all non-batch dims.
bool compatible(const std::vector<const InferInput*>& a, const std::vector<const InferInput*>& b) {
  for (size_t i = 0; i < a.size(); ++i) {
    if ((a[i] == nullptr) != (b[i] == nullptr)) return false;
    if (a[i] == nullptr) continue;
    const auto& da = a[i]->shape;
    const auto& db = b[i]->shape;
    if (da.size() != db.size() || !std::equal(da.begin() + 1, da.end(), db.begin() + 1)) {
      return false;
    }
  }
  return true;
}

}  // namespace

bool Scheduler::take_batch(std::unique_lock<std::mutex>& lock, Batch& batch) {
  for (;;) {
    std::vector<std::unique_ptr<Pending>> expired;
    const Clock::time_point now = Clock::now();
    fail_expired_locked(now, expired);
    if (!expired.empty()) {
      lock.unlock();
      for (auto& p : expired) {
        statistics_.record_failure(
            ns_between(p->request->received, Clock::now()),
            p->request->is_cancelled() ? FailureReason::Canceled : FailureReason::Rejected);
        statistics_.add_pending(-1);
        p->done(p->request->is_cancelled()
                    ? Status(ErrorCode::Unavailable, "Request was cancelled by the client")
                    : Status(ErrorCode::Unavailable, "Request timeout expired"),
                nullptr);
        p.reset();
      }
      lock.lock();
      continue;
    }
    Pending* first = nullptr;
    size_t first_level = 0;
    Clock::time_point earliest_deadline = Clock::time_point::max();
    for (size_t l = 0; l < queues_.size(); ++l) {
      for (const auto& p : queues_[l]) {
        if (!p->delay_on_timeout) earliest_deadline = std::min(earliest_deadline, p->deadline);
        earliest_deadline = std::min(earliest_deadline, p->run_deadline);
      }
      if (first == nullptr && !queues_[l].empty()) {
        first = queues_[l].front().get();
        first_level = l;
      }
    }
    if (first == nullptr) {
      if (stopping_) return false;
      cv_.wait(lock);
      continue;
    }
    const bool batching = options_.dynamic_batching && options_.max_batch_size > 0;
    // Gather: the first request plus compatible ones in priority then arrival order.
    std::vector<std::pair<size_t, Pending*>> chosen{{first_level, first}};
    int64_t rows = first->batch;
    bool full = !batching || rows >= options_.max_batch_size;
    auto preferred = [&](int64_t n) {
      return std::find(options_.preferred_batch_sizes.begin(), options_.preferred_batch_sizes.end(),
                       n) != options_.preferred_batch_sizes.end();
    };
    bool at_preferred = batching && preferred(rows);
    for (size_t l = first_level; batching && !full && !at_preferred && l < queues_.size(); ++l) {
      for (const auto& p : queues_[l]) {
        if (p.get() == first) continue;
        if (rows + p->batch > options_.max_batch_size) continue;
        if (!compatible(first->by_spec, p->by_spec)) continue;
        chosen.emplace_back(l, p.get());
        rows += p->batch;
        if (rows >= options_.max_batch_size) full = true;
        if (preferred(rows)) at_preferred = true;
        if (full || at_preferred) break;
      }
    }
    const Clock::time_point ready_at =
        first->enqueued + std::chrono::microseconds(options_.max_queue_delay_us);
    if (!full && !at_preferred && batching && now < ready_at && !stopping_) {
      cv_.wait_until(lock, std::min(ready_at, earliest_deadline));
      continue;
    }
    for (const auto& [level, ptr] : chosen) {
      auto& q = queues_[level];
      for (auto it = q.begin(); it != q.end(); ++it) {
        if (it->get() == ptr) {
          batch.items.push_back(std::move(*it));
          q.erase(it);
          break;
        }
      }
    }
    batch.rows = rows;
    return true;
  }
}

void Scheduler::worker(size_t instance) {
  Session& session = *instances_[instance];
  std::unique_lock lock(mutex_);
  for (;;) {
    Batch batch;
    if (!take_batch(lock, batch)) return;
    // Another worker may be able to start on what is left while this one executes.
    cv_.notify_one();
    lock.unlock();
    execute(session, batch);
    lock.lock();
  }
}

void Scheduler::execute(Session& session, Batch& batch) {
  const Clock::time_point start = Clock::now();
  const bool batched = options_.max_batch_size > 0;
  std::vector<std::unique_ptr<InferResponse>> responses(batch.items.size());
  uint64_t input_ns = 0, infer_ns = 0, output_ns = 0;
  ComputeStamps stamps{start, start, start, start};
  // The run stops at the last deadline of the batch's requests (all have passed then) or when a
  // drain cancels it; either way the instance is free for the next request.
  runtime::RunControl control;
  control.cancel = options_.cancel.get();
  control.deadline = Clock::time_point::min();
  for (const auto& p : batch.items) control.deadline = std::max(control.deadline, p->run_deadline);
  control.deadline_message = "Request timeout expired";
  control.cancel_message = "Server is shutting down: the request was cancelled at the exit timeout";
  try {
    control.check();
    // Feeds: each present input, concatenated over the batch and reshaped for the model.
    std::map<std::string, RtValue> feeds;
    for (size_t i = 0; i < options_.inputs.size(); ++i) {
      if (batch.items.front()->by_spec[i] == nullptr) continue;
      std::vector<const Tensor*> parts;
      for (const auto& p : batch.items) parts.push_back(&p->by_spec[i]->data);
      Tensor merged = concat_rows(parts);
      feeds.emplace(options_.inputs[i].name,
                    to_model_shape(merged, options_.inputs[i], batched, options_.model_name));
    }
    std::vector<size_t> wanted;
    for (const auto& p : batch.items) {
      for (size_t o : p->outputs) {
        if (std::find(wanted.begin(), wanted.end(), o) == wanted.end()) wanted.push_back(o);
      }
    }
    std::vector<std::string> names;
    for (size_t o : wanted) names.push_back(options_.outputs[o].name);
    const Clock::time_point t_input = Clock::now();
    std::vector<RtValue> results = session.run(names, feeds, &control);
    const Clock::time_point t_infer = Clock::now();
    std::vector<Tensor> outputs(options_.outputs.size());
    for (size_t k = 0; k < wanted.size(); ++k) {
      const TensorSpec& spec = options_.outputs[wanted[k]];
      KILN_CHECK(results[k].is_tensor(), ErrorCode::Internal,
                 "model '{}' output '{}' is not a tensor", options_.model_name, spec.name);
      // Session::run returns tensors the caller owns; responses keep them past the next run.
      Tensor t = results[k].tensor();
      KILN_CHECK(t.dtype() == spec.dtype, ErrorCode::Internal,
                 "model '{}' output '{}' is {} but the config says {}", options_.model_name,
                 spec.name, dtype_name(t.dtype()), datatype_name(spec.dtype));
      outputs[wanted[k]] = from_model_shape(t, spec, batched, batch.rows, options_.model_name);
    }
    int64_t offset = 0;
    for (size_t r = 0; r < batch.items.size(); ++r) {
      Pending& p = *batch.items[r];
      auto response = std::make_unique<InferResponse>();
      response->model_name = options_.model_name;
      response->model_version = options_.model_version;
      response->id = p.request->id;
      for (size_t o : p.outputs) {
        InferOutput out;
        out.name = options_.outputs[o].name;
        out.datatype = options_.outputs[o].dtype;
        out.data = batch.items.size() == 1 ? outputs[o] : slice_rows(outputs[o], offset, p.batch);
        out.shape = out.data.dims();
        response->outputs.push_back(std::move(out));
      }
      offset += p.batch;
      responses[r] = std::move(response);
    }
    const Clock::time_point t_output = Clock::now();
    input_ns = ns_between(start, t_input);
    infer_ns = ns_between(t_input, t_infer);
    output_ns = ns_between(t_infer, t_output);
    stamps = ComputeStamps{start, t_input, t_infer, t_output};
    statistics_.record_execution(static_cast<uint64_t>(batch.rows), input_ns, infer_ns, output_ns);
  } catch (const Error& e) {
    for (auto& p : batch.items) {
      statistics_.record_failure(ns_between(p->request->received, Clock::now()),
                                 FailureReason::Backend);
      statistics_.add_pending(-1);
      p->done(Status(e), nullptr);
      p.reset();
    }
    return;
  } catch (const std::exception& e) {
    for (auto& p : batch.items) {
      statistics_.record_failure(ns_between(p->request->received, Clock::now()),
                                 FailureReason::Backend);
      statistics_.add_pending(-1);
      p->done(Status(ErrorCode::Internal, e.what()), nullptr);
      p.reset();
    }
    return;
  }
  for (size_t r = 0; r < batch.items.size(); ++r) {
    Pending& p = *batch.items[r];
    const Clock::time_point end = Clock::now();
    statistics_.record_success(static_cast<uint64_t>(p.batch), ns_between(p.request->received, end),
                               ns_between(p.enqueued, start), input_ns, infer_ns, output_ns);
    statistics_.add_pending(-1);
    responses[r]->compute = ComputeTimes{input_ns, infer_ns, output_ns};
    stamp_compute(p.request->trace, stamps);
    stamp_request_end(p.request->trace);
    p.done(Status::ok(), std::move(responses[r]));
    // Dropping the request here releases the keepalive after the callback has run.
    batch.items[r].reset();
  }
}

}  // namespace kiln::server
