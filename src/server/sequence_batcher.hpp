#pragma once
// The sequence batcher of a stateful model (config `sequence_batching`, Triton's "Stateful
// Models"). Every request names its sequence (the `sequence_id` parameter, an unsigned integer or
// a string) and may carry `sequence_start` / `sequence_end`. A sequence holds one slot of one
// instance from its START until its END or until it has been idle for max_sequence_idle; a START
// that finds every slot taken waits in a bounded backlog for one. Each instance's worker runs, in
// one execution, the oldest waiting request of up to max_batch_size of its sequences (never two of
// one sequence, whose requests run in order), with the control inputs (START / END / READY /
// CORRID) and the implicit states filled per row by the server; a state output becomes the state
// input of the sequence's next request. State memory is leased from the server's request memory
// budget.
//
// Rows are packed: a batch holds only the sequences that have a request ready (Triton's direct
// strategy pads the batch to the highest slot with not-ready rows). Kiln's models keep no state of
// their own between runs, so the result is the same and no row is computed for nothing.
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <variant>
#include <vector>

#include "runtime/session.hpp"
#include "server/instance_workers.hpp"
#include "server/memory_budget.hpp"
#include "server/scheduler.hpp"
#include "server/sequence_config.hpp"

namespace kiln::server {

// A request's correlation ID: the same number and the same string are different sequences.
using SequenceId = std::variant<uint64_t, std::string>;
std::string sequence_id_string(const SequenceId& id);

// The sequence parameters of a request; `id` is empty when the request names no sequence (absent,
// 0 or ""). InvalidArgument for a parameter of the wrong type or a negative ID.
struct SequenceParameters {
  std::optional<SequenceId> id;
  bool start = false;
  bool end = false;
};
SequenceParameters read_sequence_parameters(const Parameters& params);

class SequenceBatcher {
 public:
  // Starts one worker per session; throws Unavailable when the OS refuses a thread (having joined
  // those started). `statistics` must outlive the batcher; `state_memory` may be null (no limit).
  SequenceBatcher(SchedulerOptions options, SequenceOptions sequence,
                  std::vector<std::unique_ptr<Session>> instances, ModelStatistics& statistics,
                  std::shared_ptr<MemoryBudget> state_memory);
  ~SequenceBatcher();
  SequenceBatcher(const SequenceBatcher&) = delete;
  SequenceBatcher& operator=(const SequenceBatcher&) = delete;

  // As Scheduler::enqueue; refuses (calling `done` before it returns) a request with no sequence
  // ID, a first request without START, a batch of more than one, or a START that finds no slot
  // and a full backlog.
  void enqueue(std::unique_ptr<InferRequest> request, InferCallback done,
               std::shared_ptr<const void> keepalive);

  // Sequences holding a slot or waiting for one.
  size_t live_sequences() const;

 private:
  struct Pending;
  struct Sequence;
  struct Item;
  void worker(size_t instance);
  void run_worker(size_t instance);
  void fail_expired_locked(size_t instance, Clock::time_point now,
                           std::vector<std::unique_ptr<Pending>>& expired, Clock::time_point& wake);
  void release_finished_locked(size_t instance, Clock::time_point now, Clock::time_point& wake);
  bool take_batch_locked(size_t instance, Clock::time_point now, std::vector<Item>& batch,
                         Clock::time_point& wake);
  void execute(Session& session, std::vector<Item>& batch);
  bool prepare_state(Item& item, std::string& error);
  Tensor control_tensor(const SequenceControl& control, const std::vector<Item>& batch) const;
  void respond_failure(Pending& p, const Status& status, FailureReason reason);
  int free_instance_locked() const;

  SchedulerOptions options_;
  SequenceOptions sequence_;
  std::vector<std::unique_ptr<Session>> instances_;
  ModelStatistics& statistics_;
  std::shared_ptr<MemoryBudget> state_memory_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::map<SequenceId, std::shared_ptr<Sequence>> by_id_;      // sequences not yet ended
  std::vector<std::vector<std::shared_ptr<Sequence>>> slots_;  // per instance: slot holders
  std::deque<std::shared_ptr<Sequence>> backlog_;              // waiting for a slot, oldest first
  bool stopping_ = false;
  InstanceWorkers workers_;
};

}  // namespace kiln::server
