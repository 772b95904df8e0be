#include "server/sequence_batcher.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "runtime/run_control.hpp"
#include "server/batching.hpp"
#include "server/server_log.hpp"
#include "server/trace.hpp"

namespace kiln::server {
namespace {

uint64_t ns_between(Clock::time_point a, Clock::time_point b) {
  return b > a ? static_cast<uint64_t>(
                     std::chrono::duration_cast<std::chrono::nanoseconds>(b - a).count())
               : 0;
}

std::vector<int64_t> with_batch_dim(const std::vector<int64_t>& dims) {
  std::vector<int64_t> out{1};
  out.insert(out.end(), dims.begin(), dims.end());
  return out;
}

// A state the model returned fits its config dims when every fixed dim agrees.
bool fits(const std::vector<int64_t>& dims, const std::vector<int64_t>& spec) {
  if (dims.size() != spec.size()) return false;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (spec[i] >= 0 && dims[i] != spec[i]) return false;
  }
  return true;
}

}  // namespace

std::string sequence_id_string(const SequenceId& id) {
  if (const uint64_t* n = std::get_if<uint64_t>(&id)) return std::to_string(*n);
  return std::get<std::string>(id);
}

SequenceParameters read_sequence_parameters(const Parameters& params) {
  SequenceParameters out;
  auto it = params.find("sequence_id");
  if (it != params.end()) {
    if (const std::string* s = std::get_if<std::string>(&it->second)) {
      if (!s->empty()) out.id = *s;
    } else if (const uint64_t* u = std::get_if<uint64_t>(&it->second)) {
      if (*u != 0) out.id = *u;
    } else if (const int64_t* i = std::get_if<int64_t>(&it->second)) {
      KILN_CHECK_ARG(*i >= 0, "parameter 'sequence_id' must not be negative");
      if (*i != 0) out.id = static_cast<uint64_t>(*i);
    } else {
      fail(ErrorCode::InvalidArgument, "parameter 'sequence_id' must be an integer or a string");
    }
  }
  out.start = parameter_bool(params, "sequence_start").value_or(false);
  out.end = parameter_bool(params, "sequence_end").value_or(false);
  return out;
}

// One accepted request of a sequence.
struct SequenceBatcher::Pending {
  std::unique_ptr<InferRequest> request;
  InferCallback done;
  std::shared_ptr<const void> keepalive;
  Clock::time_point enqueued;
  Clock::time_point run_deadline = Clock::time_point::max();
  bool start = false;
  bool end = false;
  std::vector<const InferInput*> by_spec;  // request input per options_.inputs (null: absent)
  std::vector<size_t> outputs;             // indices into options_.outputs, in the order to return
};

// One sequence from its START to its END (or idle timeout). Its state and lease are touched only
// by its instance's worker while `running`, or under the mutex otherwise.
struct SequenceBatcher::Sequence {
  SequenceId id;
  int instance = -1;  // -1: waiting in the backlog
  std::deque<std::unique_ptr<Pending>> queue;
  std::vector<Tensor> state;  // one per sequence_.states; empty before the first run
  MemoryLease lease;          // the bytes of `state`
  Clock::time_point last_arrival;
  bool ended = false;  // its END request arrived: the ID may name a new sequence
  bool running = false;
};

// One row of an execution: a sequence and its oldest request.
struct SequenceBatcher::Item {
  std::shared_ptr<Sequence> sequence;
  std::unique_ptr<Pending> pending;
  std::vector<Tensor> state;  // the state this row feeds
};

SequenceBatcher::SequenceBatcher(SchedulerOptions options, SequenceOptions sequence,
                                 std::vector<std::unique_ptr<Session>> instances,
                                 ModelStatistics& statistics,
                                 std::shared_ptr<MemoryBudget> state_memory)
    : options_(std::move(options)),
      sequence_(std::move(sequence)),
      instances_(std::move(instances)),
      statistics_(statistics),
      state_memory_(std::move(state_memory)) {
  KILN_CHECK(!instances_.empty(), ErrorCode::Internal, "model '{}' has no instances",
             options_.model_name);
  slots_.resize(instances_.size());
  workers_.start(
      instances_.size(), [this](size_t i) { worker(i); }, mutex_, stopping_, cv_,
      options_.model_name, options_.model_version);
}

SequenceBatcher::~SequenceBatcher() {
  // Every accepted request holds the model version, so none is queued any more; a backlog
  // sequence can hold no request either. The workers only have to stop.
  workers_.stop(mutex_, stopping_, cv_);
}

size_t SequenceBatcher::live_sequences() const {
  std::lock_guard lock(mutex_);
  size_t n = backlog_.size();
  for (const auto& s : slots_) n += s.size();
  return n;
}

int SequenceBatcher::free_instance_locked() const {
  int best = -1;
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (slots_[i].size() >= sequence_.slots_per_instance) continue;
    if (best < 0 || slots_[i].size() < slots_[static_cast<size_t>(best)].size()) {
      best = static_cast<int>(i);
    }
  }
  return best;
}

void SequenceBatcher::enqueue(std::unique_ptr<InferRequest> request, InferCallback done,
                              std::shared_ptr<const void> keepalive) {
  auto p = std::make_unique<Pending>();
  SequenceId id;
  try {
    CheckedRequest checked = check_request(*request, options_.inputs, options_.outputs,
                                           options_.max_batch_size, options_.model_name);
    KILN_CHECK_ARG(checked.batch <= 1,
                   "inference request to model '{}' must specify batch-size 1 due to requirements "
                   "of sequence batcher",
                   options_.model_name);
    const SequenceParameters sp = read_sequence_parameters(request->parameters);
    KILN_CHECK_ARG(sp.id.has_value(),
                   "inference request to model '{}' must specify a non-zero or non-empty "
                   "correlation ID",
                   options_.model_name);
    id = *sp.id;
    for (const SequenceControl& c : sequence_.controls) {
      if (c.kind != SequenceControl::Kind::CorrId) continue;
      const bool string_id = std::holds_alternative<std::string>(id);
      KILN_CHECK_ARG(string_id == (c.dtype == DataType::String),
                     "inference request to model '{}' must specify {} correlation ID: its "
                     "CONTROL_SEQUENCE_CORRID input '{}' is {}",
                     options_.model_name, c.dtype == DataType::String ? "a string" : "an integer",
                     c.input, datatype_name(c.dtype));
    }
    p->start = sp.start;
    p->end = sp.end;
    p->by_spec = std::move(checked.by_spec);
    p->outputs = std::move(checked.outputs);
    p->enqueued = Clock::now();
    stamp(request->trace, TraceActivity::QueueStart, p->enqueued);
    const uint64_t run_timeout =
        runtime::shorter_timeout(request->timeout_us, options_.request_timeout_us);
    if (run_timeout > 0) p->run_deadline = runtime::deadline_after(request->received, run_timeout);
    p->run_deadline = std::min(p->run_deadline, request->deadline);
  } catch (const Error& e) {
    // Refused before reaching the model: no statistic counts it (as the scheduler).
    done(Status(e), nullptr);
    return;
  }
  p->request = std::move(request);
  p->done = std::move(done);
  p->keepalive = std::move(keepalive);
  std::optional<Status> refused;
  bool conflict = false;
  {
    std::lock_guard lock(mutex_);
    auto it = by_id_.find(id);
    if (stopping_) {
      refused = Status(ErrorCode::Unavailable,
                       fmt::format("model '{}' is unloading", options_.model_name));
    } else if (it == by_id_.end() && !p->start) {
      refused = Status(ErrorCode::InvalidArgument,
                       fmt::format("inference request for sequence {} to model '{}' must specify "
                                   "the START flag on the first request of the sequence",
                                   sequence_id_string(id), options_.model_name));
    } else {
      std::shared_ptr<Sequence> seq;
      if (it != by_id_.end()) {
        seq = it->second;
        conflict = p->start;
      } else {
        const int instance = free_instance_locked();
        if (instance < 0 && backlog_.size() >= sequence_.max_backlog) {
          refused = Status(
              ErrorCode::Unavailable,
              fmt::format("inference request for sequence {} to model '{}' cannot start: every "
                          "sequence slot is taken and the backlog of {} sequences is full",
                          sequence_id_string(id), options_.model_name, sequence_.max_backlog));
        } else {
          seq = std::make_shared<Sequence>();
          seq->id = id;
          seq->instance = instance;
          if (instance >= 0) {
            slots_[static_cast<size_t>(instance)].push_back(seq);
          } else {
            backlog_.push_back(seq);
          }
          by_id_.emplace(id, seq);
        }
      }
      if (seq) {
        if (p->end) {
          // Later requests with this ID start a new sequence (or are refused without START).
          by_id_.erase(id);
          seq->ended = true;
        }
        seq->last_arrival = p->enqueued;
        statistics_.add_pending(1);
        seq->queue.push_back(std::move(p));
      }
    }
  }
  if (refused) {
    if (refused->code() == ErrorCode::Unavailable) {
      statistics_.record_failure(ns_between(p->request->received, Clock::now()),
                                 FailureReason::Rejected);
    }
    p->done(*refused, nullptr);
    return;
  }
  if (conflict) {
    log_warning(
        "sequence {} for model '{}' has a conflict. The previous sequence did not end before this "
        "sequence start. Previous sequence will be terminated early.",
        sequence_id_string(id), options_.model_name);
  }
  cv_.notify_all();
}

void SequenceBatcher::respond_failure(Pending& p, const Status& status, FailureReason reason) {
  statistics_.record_failure(ns_between(p.request->received, Clock::now()), reason);
  statistics_.add_pending(-1);
  p.done(status, nullptr);
}

void SequenceBatcher::fail_expired_locked(size_t instance, Clock::time_point now,
                                          std::vector<std::unique_ptr<Pending>>& expired,
                                          Clock::time_point& wake) {
  auto sweep = [&](Sequence& seq) {
    for (auto it = seq.queue.begin(); it != seq.queue.end();) {
      if ((*it)->request->is_cancelled() || (*it)->run_deadline <= now) {
        expired.push_back(std::move(*it));
        it = seq.queue.erase(it);
      } else {
        wake = std::min(wake, (*it)->run_deadline);
        ++it;
      }
    }
  };
  for (const auto& seq : slots_[instance]) sweep(*seq);
  // Every worker sweeps the backlog: its sequences belong to no instance yet.
  for (const auto& seq : backlog_) sweep(*seq);
}

void SequenceBatcher::release_finished_locked(size_t instance, Clock::time_point now,
                                              Clock::time_point& wake) {
  // Ended and drained, or idle past the limit: the slot and the state go back. The arithmetic
  // saturates: an idle limit near 2^64 us means "never".
  auto finished = [&](Sequence& seq) {
    if (seq.running || !seq.queue.empty()) return false;
    const Clock::time_point idle_at =
        runtime::deadline_after(seq.last_arrival, sequence_.max_idle_us);
    if (seq.ended || now >= idle_at) return true;
    wake = std::min(wake, idle_at);
    return false;
  };
  auto forget = [&](const std::shared_ptr<Sequence>& seq) {
    auto it = by_id_.find(seq->id);
    if (it != by_id_.end() && it->second == seq) by_id_.erase(it);
    seq->state.clear();
    seq->lease.reset();
  };
  auto drop_finished = [&](auto& sequences) {
    for (auto it = sequences.begin(); it != sequences.end();) {
      if (finished(**it)) {
        forget(*it);
        it = sequences.erase(it);
      } else {
        ++it;
      }
    }
  };
  auto& held = slots_[instance];
  drop_finished(held);
  drop_finished(backlog_);
  // A freed slot goes to the sequence that has waited longest.
  while (held.size() < sequence_.slots_per_instance && !backlog_.empty()) {
    std::shared_ptr<Sequence> seq = std::move(backlog_.front());
    backlog_.pop_front();
    seq->instance = static_cast<int>(instance);
    held.push_back(std::move(seq));
  }
}

bool SequenceBatcher::take_batch_locked(size_t instance, Clock::time_point now,
                                        std::vector<Item>& batch, Clock::time_point& wake) {
  std::vector<Sequence*> ready;
  for (const auto& seq : slots_[instance]) {
    if (!seq->queue.empty() && !seq->running) ready.push_back(seq.get());
  }
  if (ready.empty()) return false;
  std::stable_sort(ready.begin(), ready.end(), [](const Sequence* a, const Sequence* b) {
    return a->queue.front()->enqueued < b->queue.front()->enqueued;
  });
  // The state a row feeds: the initial one on START (or before the first run), else its own.
  auto state_dims = [&](const Sequence& seq, size_t k) {
    const bool fresh = seq.queue.front()->start || seq.state.empty();
    return fresh ? sequence_.states[k].initial.dims() : seq.state[k].dims();
  };
  // Rows can share one execution when every input and state agrees on its non-batch dims.
  auto compatible = [&](const Sequence& a, const Sequence& b) {
    const auto& ia = a.queue.front()->by_spec;
    const auto& ib = b.queue.front()->by_spec;
    for (size_t i = 0; i < ia.size(); ++i) {
      if ((ia[i] == nullptr) != (ib[i] == nullptr)) return false;
      if (ia[i] == nullptr) continue;
      const auto& da = ia[i]->shape;
      const auto& db = ib[i]->shape;
      if (da.size() != db.size() || !std::equal(da.begin() + 1, da.end(), db.begin() + 1)) {
        return false;
      }
    }
    for (size_t k = 0; k < sequence_.states.size(); ++k) {
      if (state_dims(a, k) != state_dims(b, k)) return false;
    }
    return true;
  };
  std::vector<Sequence*> chosen{ready.front()};
  for (size_t r = 1; r < ready.size() && chosen.size() < sequence_.max_rows; ++r) {
    if (compatible(*ready.front(), *ready[r])) chosen.push_back(ready[r]);
  }
  if (sequence_.max_queue_delay_us > 0 && chosen.size() < sequence_.max_rows && !stopping_) {
    const auto& preferred = sequence_.preferred_batch_sizes;
    const bool at_preferred = std::find(preferred.begin(), preferred.end(),
                                        static_cast<int>(chosen.size())) != preferred.end();
    const double wanted =
        std::ceil(sequence_.minimum_slot_utilization * double(sequence_.slots_per_instance));
    const bool utilized = sequence_.minimum_slot_utilization > 0 && double(chosen.size()) >= wanted;
    const Clock::time_point ready_at = runtime::deadline_after(
        ready.front()->queue.front()->enqueued, sequence_.max_queue_delay_us);
    if (!at_preferred && !utilized && now < ready_at) {
      wake = std::min(wake, ready_at);
      return false;
    }
  }
  for (Sequence* seq : chosen) {
    Item item;
    for (const auto& held : slots_[instance]) {
      if (held.get() == seq) item.sequence = held;
    }
    item.pending = std::move(seq->queue.front());
    seq->queue.pop_front();
    seq->running = true;
    batch.push_back(std::move(item));
  }
  return true;
}

void SequenceBatcher::worker(size_t instance) {
  // No exception may leave a thread: log it; the instance takes no more requests, the others go
  // on.
  try {
    run_worker(instance);
  } catch (const std::exception& e) {
    log_error("model '{}' sequence batcher instance {} stopped: {}", options_.model_name, instance,
              e.what());
  } catch (...) {
    log_error("model '{}' sequence batcher instance {} stopped", options_.model_name, instance);
  }
}

void SequenceBatcher::run_worker(size_t instance) {
  Session& session = *instances_[instance];
  std::unique_lock lock(mutex_);
  for (;;) {
    const Clock::time_point now = Clock::now();
    Clock::time_point wake = Clock::time_point::max();
    std::vector<std::unique_ptr<Pending>> expired;
    fail_expired_locked(instance, now, expired, wake);
    if (!expired.empty()) {
      lock.unlock();
      for (auto& p : expired) {
        const bool cancelled = p->request->is_cancelled();
        respond_failure(*p,
                        cancelled
                            ? Status(ErrorCode::Unavailable, "Request was cancelled by the client")
                            : Status(ErrorCode::Unavailable, "Request timeout expired"),
                        cancelled ? FailureReason::Canceled : FailureReason::Rejected);
        p.reset();
      }
      lock.lock();
      continue;
    }
    release_finished_locked(instance, now, wake);
    std::vector<Item> batch;
    if (take_batch_locked(instance, now, batch, wake)) {
      // `running` is read under the mutex: the worker clears it once it holds the lock again.
      std::vector<std::shared_ptr<Sequence>> taken;
      for (const Item& item : batch) taken.push_back(item.sequence);
      lock.unlock();
      execute(session, batch);
      batch.clear();
      lock.lock();
      for (const auto& seq : taken) seq->running = false;
      continue;
    }
    if (stopping_) {
      bool queued = false;
      for (const auto& seq : slots_[instance]) queued |= !seq->queue.empty();
      if (!queued) return;
    }
    if (wake == Clock::time_point::max()) {
      cv_.wait(lock);
    } else {
      cv_.wait_until(lock, wake);
    }
  }
}

bool SequenceBatcher::prepare_state(Item& item, std::string& error) {
  Sequence& seq = *item.sequence;
  const bool fresh = item.pending->start || seq.state.empty();
  if (!fresh) {
    item.state = seq.state;
    return true;
  }
  size_t bytes = 0;
  for (const SequenceState& s : sequence_.states) {
    item.state.push_back(s.initial);
    bytes += s.initial.nbytes();
  }
  if (state_memory_ && seq.lease.bytes() == 0 && bytes > 0) seq.lease = MemoryLease(*state_memory_);
  if (bytes > seq.lease.bytes()) {
    if (state_memory_ && !seq.lease.grow(bytes - seq.lease.bytes())) {
      error = fmt::format(
          "model '{}': the state of sequence {} needs {} bytes, more than the server's request "
          "memory budget has free",
          options_.model_name, sequence_id_string(seq.id), bytes);
      return false;
    }
  } else {
    seq.lease.shrink(seq.lease.bytes() - bytes);
  }
  return true;
}

Tensor SequenceBatcher::control_tensor(const SequenceControl& control,
                                       const std::vector<Item>& batch) const {
  const bool batched = options_.max_batch_size > 0;
  const int64_t rows = static_cast<int64_t>(batch.size());
  Tensor t(control.dtype, batched ? std::vector<int64_t>{rows, 1} : std::vector<int64_t>{1});
  for (int64_t r = 0; r < rows; ++r) {
    const Pending& p = *batch[static_cast<size_t>(r)].pending;
    if (control.kind == SequenceControl::Kind::CorrId) {
      const SequenceId& id = batch[static_cast<size_t>(r)].sequence->id;
      if (control.dtype == DataType::String) {
        t.data<std::string>()[r] = std::get<std::string>(id);
        continue;
      }
      const uint64_t n = std::get<uint64_t>(id);
      switch (control.dtype) {
        case DataType::UInt64:
          t.data<uint64_t>()[r] = n;
          break;
        case DataType::Int64:
          t.data<int64_t>()[r] = static_cast<int64_t>(n);
          break;
        case DataType::UInt32:
          t.data<uint32_t>()[r] = static_cast<uint32_t>(n);
          break;
        default:
          t.data<int32_t>()[r] = static_cast<int32_t>(n);
          break;
      }
      continue;
    }
    bool on = true;  // Ready: every packed row is ready
    if (control.kind == SequenceControl::Kind::Start) on = p.start;
    if (control.kind == SequenceControl::Kind::End) on = p.end;
    const Tensor& v = on ? control.true_value : control.false_value;
    const size_t size = dtype_size(control.dtype);
    std::memcpy(static_cast<char*>(t.raw_data()) + static_cast<size_t>(r) * size, v.raw_data(),
                size);
  }
  return t;
}

void SequenceBatcher::execute(Session& session, std::vector<Item>& batch) {
  const Clock::time_point start = Clock::now();
  const bool batched = options_.max_batch_size > 0;
  // Rows whose state cannot be paid for fail alone; the others run.
  for (auto it = batch.begin(); it != batch.end();) {
    std::string error;
    if (prepare_state(*it, error)) {
      ++it;
      continue;
    }
    respond_failure(*it->pending, Status(ErrorCode::Unavailable, error), FailureReason::Rejected);
    it = batch.erase(it);
  }
  if (batch.empty()) return;
  const int64_t rows = static_cast<int64_t>(batch.size());
  std::vector<std::unique_ptr<InferResponse>> responses(batch.size());
  uint64_t input_ns = 0, infer_ns = 0, output_ns = 0;
  ComputeStamps stamps{start, start, start, start};
  runtime::RunControl control;
  control.cancel = options_.cancel.get();
  control.deadline = Clock::time_point::min();
  for (const Item& item : batch) {
    control.deadline = std::max(control.deadline, item.pending->run_deadline);
  }
  control.deadline_message = "Request timeout expired";
  control.cancel_message = "Server is shutting down: the request was cancelled at the exit timeout";
  try {
    control.check();
    std::map<std::string, RtValue> feeds;
    for (size_t i = 0; i < options_.inputs.size(); ++i) {
      if (batch.front().pending->by_spec[i] == nullptr) continue;
      std::vector<const Tensor*> parts;
      for (const Item& item : batch) parts.push_back(&item.pending->by_spec[i]->data);
      feeds.emplace(options_.inputs[i].name, to_model_shape(concat_rows(parts), options_.inputs[i],
                                                            batched, options_.model_name));
    }
    for (const SequenceControl& c : sequence_.controls) {
      feeds.emplace(c.input, control_tensor(c, batch));
    }
    std::vector<Tensor> state_rows(batch.size());
    for (size_t k = 0; k < sequence_.states.size(); ++k) {
      if (!batched) {
        feeds.emplace(sequence_.states[k].input, batch.front().state[k]);
        continue;
      }
      for (size_t r = 0; r < batch.size(); ++r) {
        state_rows[r] = batch[r].state[k].reshaped(with_batch_dim(batch[r].state[k].dims()));
      }
      std::vector<const Tensor*> parts;
      for (const Tensor& t : state_rows) parts.push_back(&t);
      feeds.emplace(sequence_.states[k].input, concat_rows(parts));
    }
    // The outputs to compute: every one a row asked for, then the states.
    std::vector<std::string> names;
    std::vector<size_t> wanted;
    for (const Item& item : batch) {
      for (size_t o : item.pending->outputs) {
        if (std::find(wanted.begin(), wanted.end(), o) == wanted.end()) wanted.push_back(o);
      }
    }
    for (size_t o : wanted) names.push_back(options_.outputs[o].name);
    for (const SequenceState& s : sequence_.states) names.push_back(s.output);
    const Clock::time_point t_input = Clock::now();
    std::vector<RtValue> results = session.run(names, feeds, &control);
    const Clock::time_point t_infer = Clock::now();
    std::vector<Tensor> outputs(options_.outputs.size());
    for (size_t k = 0; k < wanted.size(); ++k) {
      const TensorSpec& spec = options_.outputs[wanted[k]];
      KILN_CHECK(results[k].is_tensor(), ErrorCode::Internal,
                 "model '{}' output '{}' is not a tensor", options_.model_name, spec.name);
      Tensor t = results[k].tensor();
      KILN_CHECK(t.dtype() == spec.dtype, ErrorCode::Internal,
                 "model '{}' output '{}' is {} but the config says {}", options_.model_name,
                 spec.name, dtype_name(t.dtype()), datatype_name(spec.dtype));
      outputs[wanted[k]] = from_model_shape(t, spec, batched, rows, options_.model_name);
    }
    // The next state of every row, checked before any sequence takes it.
    std::vector<std::vector<Tensor>> next(batch.size());
    for (size_t k = 0; k < sequence_.states.size(); ++k) {
      const SequenceState& s = sequence_.states[k];
      const RtValue& value = results[wanted.size() + k];
      KILN_CHECK(value.is_tensor() && value.tensor().dtype() == s.dtype, ErrorCode::Internal,
                 "model '{}' state output '{}' is not a {} tensor", options_.model_name, s.output,
                 datatype_name(s.dtype));
      const Tensor& t = value.tensor();
      KILN_CHECK(!batched || (t.rank() >= 1 && t.dim(0) == rows), ErrorCode::Internal,
                 "model '{}' state output '{}' has shape {} but the batch has {} rows",
                 options_.model_name, s.output, dims_to_string(t.dims()), rows);
      for (size_t r = 0; r < batch.size(); ++r) {
        Tensor row = t;
        if (batched) {
          row = slice_rows(t, static_cast<int64_t>(r), 1);
          row = row.reshaped(std::vector<int64_t>(t.dims().begin() + 1, t.dims().end()));
        }
        KILN_CHECK(fits(row.dims(), s.dims), ErrorCode::Internal,
                   "model '{}' state output '{}' has shape {} per sequence but the state's dims "
                   "are {}",
                   options_.model_name, s.output, dims_to_string(row.dims()),
                   dims_to_string(s.dims));
        next[r].push_back(std::move(row));
      }
    }
    for (size_t r = 0; r < batch.size(); ++r) {
      Item& item = batch[r];
      Pending& p = *item.pending;
      auto response = std::make_unique<InferResponse>();
      response->model_name = options_.model_name;
      response->model_version = options_.model_version;
      response->id = p.request->id;
      for (size_t o : p.outputs) {
        InferOutput out;
        out.name = options_.outputs[o].name;
        out.datatype = options_.outputs[o].dtype;
        out.data = rows == 1 ? outputs[o] : slice_rows(outputs[o], static_cast<int64_t>(r), 1);
        out.shape = out.data.dims();
        response->outputs.push_back(std::move(out));
      }
      responses[r] = std::move(response);
    }
    const Clock::time_point t_output = Clock::now();
    input_ns = ns_between(start, t_input);
    infer_ns = ns_between(t_input, t_infer);
    output_ns = ns_between(t_infer, t_output);
    stamps = ComputeStamps{start, t_input, t_infer, t_output};
    statistics_.record_execution(static_cast<uint64_t>(rows), input_ns, infer_ns, output_ns);
    // The states move on; a state that grew past the memory budget fails its request instead.
    for (size_t r = 0; r < batch.size(); ++r) {
      Sequence& seq = *batch[r].sequence;
      size_t bytes = 0;
      for (const Tensor& t : next[r]) bytes += t.nbytes();
      const size_t held = seq.lease.bytes();
      if (state_memory_ && bytes > held) {
        if (held == 0) seq.lease = MemoryLease(*state_memory_);
        if (!seq.lease.grow(bytes - held)) {
          responses[r].reset();
          continue;
        }
      } else if (bytes < held) {
        seq.lease.shrink(held - bytes);
      }
      seq.state = std::move(next[r]);
    }
  } catch (const Error& e) {
    for (Item& item : batch) respond_failure(*item.pending, Status(e), FailureReason::Backend);
    for (Item& item : batch) item.pending.reset();
    return;
  } catch (const std::exception& e) {
    for (Item& item : batch) {
      respond_failure(*item.pending, Status(ErrorCode::Internal, e.what()), FailureReason::Backend);
    }
    for (Item& item : batch) item.pending.reset();
    return;
  }
  for (size_t r = 0; r < batch.size(); ++r) {
    Pending& p = *batch[r].pending;
    if (!responses[r]) {
      respond_failure(
          p,
          Status(ErrorCode::Unavailable,
                 fmt::format("model '{}': the state of sequence {} grew past the "
                             "server's request memory budget",
                             options_.model_name, sequence_id_string(batch[r].sequence->id))),
          FailureReason::Rejected);
      batch[r].pending.reset();
      continue;
    }
    const Clock::time_point end = Clock::now();
    statistics_.record_success(1, ns_between(p.request->received, end),
                               ns_between(p.enqueued, start), input_ns, infer_ns, output_ns);
    statistics_.add_pending(-1);
    responses[r]->compute = ComputeTimes{input_ns, infer_ns, output_ns};
    stamp_compute(p.request->trace, stamps);
    stamp_request_end(p.request->trace);
    p.done(Status::ok(), std::move(responses[r]));
    // Dropping the request releases its keepalive after the callback has run.
    batch[r].pending.reset();
  }
}

}  // namespace kiln::server
