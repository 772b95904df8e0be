#pragma once
// Request tracing (Triton's trace extension, TIMESTAMPS level): a sampled request carries a
// RequestTrace; the frontend, the server core and the scheduler stamp its activities
// (HTTP_RECV_START ... REQUEST_START, QUEUE_START, COMPUTE_START ... HTTP_SEND_END) with the
// steady clock in nanoseconds, as tritonserver does, and when its last holder lets go the trace
// is appended to the trace file in tritonserver's JSON: one object naming the model, version
// and request id, then one object a timestamp, all carrying the trace's "id" (and "parent_id"
// for an ensemble's steps), so Triton's trace tools read Kiln's files.
//
// Nothing is buffered beyond the trace being written: each goes to the file as it ends (the
// file is a JSON array, closed when the server stops or, with log_frequency N, every N traces,
// which go to FILE.0, FILE.1, ...). Untraced requests cost one atomic load.
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "server/infer_types.hpp"
#include "server/trace_settings.hpp"

namespace kiln::server {

enum class TraceActivity {
  HttpRecvStart,
  HttpRecvEnd,
  GrpcWaitReadStart,
  GrpcWaitReadEnd,
  RequestStart,
  QueueStart,
  ComputeStart,
  ComputeInputEnd,
  ComputeOutputStart,
  ComputeEnd,
  InferResponseComplete,
  RequestEnd,
  HttpSendStart,
  HttpSendEnd,
  GrpcSendStart,
  GrpcSendEnd,
};
std::string_view trace_activity_name(TraceActivity activity);

class TraceFile;

class RequestTrace {
 public:
  RequestTrace(std::shared_ptr<TraceFile> file, uint64_t id, uint64_t parent_id,
               std::string model_name);
  // Appends the trace to its file (errors are logged, never thrown).
  ~RequestTrace();
  RequestTrace(const RequestTrace&) = delete;
  RequestTrace& operator=(const RequestTrace&) = delete;

  uint64_t id() const { return id_; }
  // A step of this request (an ensemble's): traced with it, into the same file.
  std::shared_ptr<RequestTrace> child(std::string model_name) const;

  void stamp(TraceActivity activity, Clock::time_point when = Clock::now());
  void set_version(int64_t version);
  void set_request_id(std::string id);

 private:
  friend class TraceFile;
  std::shared_ptr<TraceFile> file_;
  uint64_t id_, parent_id_;
  std::string model_name_;
  mutable std::mutex mutex_;  // stamps come from the frontend's and the scheduler's threads
  int64_t version_ = -1;
  std::string request_id_;
  std::vector<std::pair<TraceActivity, int64_t>> stamps_;
};

// Stamps `trace` when there is one (most requests carry none).
inline void stamp(const std::shared_ptr<RequestTrace>& trace, TraceActivity activity,
                  Clock::time_point when = Clock::now()) {
  if (trace) trace->stamp(activity, when);
}

// The times of one execution, stamped on each request it ran (a batch's requests share them).
struct ComputeStamps {
  Clock::time_point start, input_end, output_start, end;
};
inline void stamp_compute(const std::shared_ptr<RequestTrace>& trace, const ComputeStamps& c) {
  if (!trace) return;
  trace->stamp(TraceActivity::ComputeStart, c.start);
  trace->stamp(TraceActivity::ComputeInputEnd, c.input_end);
  trace->stamp(TraceActivity::ComputeOutputStart, c.output_start);
  trace->stamp(TraceActivity::ComputeEnd, c.end);
}
// The request's response is complete and the request ends (stamped just before its callback).
inline void stamp_request_end(const std::shared_ptr<RequestTrace>& trace) {
  if (!trace) return;
  const Clock::time_point now = Clock::now();
  trace->stamp(TraceActivity::InferResponseComplete, now);
  trace->stamp(TraceActivity::RequestEnd, now);
}

// The trace file: appends finished traces, starting a new numbered file every log_frequency
// traces when that is set.
class TraceFile {
 public:
  explicit TraceFile(std::string path);
  ~TraceFile();  // closes the array
  void set_log_frequency(uint32_t n);
  void write(const RequestTrace& trace);
  uint64_t next_id() { return next_id_.fetch_add(1) + 1; }

 private:
  bool open_locked();
  void close_locked();
  const std::string path_;
  std::atomic<uint64_t> next_id_{0};
  std::mutex mutex_;
  std::FILE* out_ = nullptr;
  bool first_ = true;       // no entry in the open file yet
  uint32_t frequency_ = 0;  // traces a file
  uint32_t in_file_ = 0;    // traces in the open file
  uint64_t index_ = 0;      // the next numbered file
  bool failed_ = false;     // logged once
};

// The server's trace settings (and each model's overrides) and the sampling they drive.
class Tracer {
 public:
  explicit Tracer(TraceSettings start);

  // A trace for a request to `model_name`, or null when this request is not sampled (tracing
  // off, not the rate's turn, the count spent).
  std::shared_ptr<RequestTrace> start(const std::string& model_name);

  // The settings a model's requests see (`model` empty: the server's).
  TraceSettings settings(const std::string& model) const;
  // Applies a client's update (all or nothing; kiln::Error naming the setting) and returns the
  // settings after it.
  TraceSettings update(const std::string& model, const TraceSettingsUpdate& update);

 private:
  struct Scope {
    uint64_t seen = 0;  // requests counted against the rate
  };
  void refresh_active_locked();
  const TraceSettings start_;
  mutable std::mutex mutex_;
  TraceSettings server_;
  Scope server_scope_;
  std::unordered_map<std::string, std::pair<TraceOverride, Scope>> models_;
  std::shared_ptr<TraceFile> file_;
  std::atomic<bool> active_{false};  // some scope traces: worth taking the lock
};

}  // namespace kiln::server
