#include "server/trace.hpp"

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <cerrno>
#include <cstring>

#include "core/error.hpp"
#include "server/server_log.hpp"

namespace kiln::server {

std::string_view trace_activity_name(TraceActivity activity) {
  switch (activity) {
    case TraceActivity::HttpRecvStart:
      return "HTTP_RECV_START";
    case TraceActivity::HttpRecvEnd:
      return "HTTP_RECV_END";
    case TraceActivity::GrpcWaitReadStart:
      return "GRPC_WAITREAD_START";
    case TraceActivity::GrpcWaitReadEnd:
      return "GRPC_WAITREAD_END";
    case TraceActivity::RequestStart:
      return "REQUEST_START";
    case TraceActivity::QueueStart:
      return "QUEUE_START";
    case TraceActivity::ComputeStart:
      return "COMPUTE_START";
    case TraceActivity::ComputeInputEnd:
      return "COMPUTE_INPUT_END";
    case TraceActivity::ComputeOutputStart:
      return "COMPUTE_OUTPUT_START";
    case TraceActivity::ComputeEnd:
      return "COMPUTE_END";
    case TraceActivity::InferResponseComplete:
      return "INFER_RESPONSE_COMPLETE";
    case TraceActivity::RequestEnd:
      return "REQUEST_END";
    case TraceActivity::HttpSendStart:
      return "HTTP_SEND_START";
    case TraceActivity::HttpSendEnd:
      return "HTTP_SEND_END";
    case TraceActivity::GrpcSendStart:
      return "GRPC_SEND_START";
    case TraceActivity::GrpcSendEnd:
      return "GRPC_SEND_END";
  }
  return "UNKNOWN";
}

// ---- RequestTrace ------------------------------------------------------------------------------

RequestTrace::RequestTrace(std::shared_ptr<TraceFile> file, uint64_t id, uint64_t parent_id,
                           std::string model_name)
    : file_(std::move(file)), id_(id), parent_id_(parent_id), model_name_(std::move(model_name)) {
  stamps_.reserve(16);
}

RequestTrace::~RequestTrace() {
  try {
    file_->write(*this);
  } catch (...) {
    // A trace that cannot be written is lost; the request it describes is not affected.
  }
}

std::shared_ptr<RequestTrace> RequestTrace::child(std::string model_name) const {
  return std::make_shared<RequestTrace>(file_, file_->next_id(), id_, std::move(model_name));
}

void RequestTrace::stamp(TraceActivity activity, Clock::time_point when) {
  const int64_t ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(when.time_since_epoch()).count();
  std::lock_guard lock(mutex_);
  stamps_.emplace_back(activity, ns);
}

void RequestTrace::set_version(int64_t version) {
  std::lock_guard lock(mutex_);
  version_ = version;
}

void RequestTrace::set_request_id(std::string id) {
  std::lock_guard lock(mutex_);
  request_id_ = std::move(id);
}

// ---- TraceFile ---------------------------------------------------------------------------------

TraceFile::TraceFile(std::string path) : path_(std::move(path)) {}

TraceFile::~TraceFile() {
  std::lock_guard lock(mutex_);
  close_locked();
}

void TraceFile::set_log_frequency(uint32_t n) {
  std::lock_guard lock(mutex_);
  frequency_ = n;
}

bool TraceFile::open_locked() {
  if (out_) return true;
  if (failed_) return false;
  // With a log frequency each file is numbered, as tritonserver names them.
  const std::string name = frequency_ > 0 ? path_ + "." + std::to_string(index_++) : path_;
  out_ = std::fopen(name.c_str(), "w");
  if (!out_) {
    failed_ = true;
    log_error("cannot write the trace file '{}': {}", name, std::strerror(errno));
    return false;
  }
  std::fputc('[', out_);
  first_ = true;
  in_file_ = 0;
  return true;
}

void TraceFile::close_locked() {
  if (!out_) return;
  std::fputs("]", out_);
  std::fclose(out_);
  out_ = nullptr;
}

void TraceFile::write(const RequestTrace& trace) {
  // The entries are formatted before taking the file's lock.
  rapidjson::StringBuffer b;
  {
    std::lock_guard lock(trace.mutex_);
    rapidjson::Writer<rapidjson::StringBuffer> w(b);
    w.StartObject();
    w.Key("id");
    w.Uint64(trace.id_);
    if (trace.parent_id_ != 0) {
      w.Key("parent_id");
      w.Uint64(trace.parent_id_);
    }
    w.Key("model_name");
    w.String(trace.model_name_.data(), static_cast<rapidjson::SizeType>(trace.model_name_.size()));
    w.Key("model_version");
    w.Int64(trace.version_);
    if (!trace.request_id_.empty()) {
      w.Key("request_id");
      w.String(trace.request_id_.data(),
               static_cast<rapidjson::SizeType>(trace.request_id_.size()));
    }
    w.EndObject();
    for (const auto& [activity, ns] : trace.stamps_) {
      b.Put(',');
      w.Reset(b);
      const std::string_view name = trace_activity_name(activity);
      w.StartObject();
      w.Key("id");
      w.Uint64(trace.id_);
      w.Key("timestamps");
      w.StartArray();
      w.StartObject();
      w.Key("name");
      w.String(name.data(), static_cast<rapidjson::SizeType>(name.size()));
      w.Key("ns");
      w.Int64(ns);
      w.EndObject();
      w.EndArray();
      w.EndObject();
    }
  }
  std::lock_guard lock(mutex_);
  if (!open_locked()) return;
  if (!first_) std::fputc(',', out_);
  std::fwrite(b.GetString(), 1, b.GetSize(), out_);
  first_ = false;
  // Flushed a trace at a time: a reader sees whole traces while the server runs.
  std::fflush(out_);
  if (frequency_ > 0 && ++in_file_ >= frequency_) close_locked();
}

// ---- Tracer ------------------------------------------------------------------------------------

Tracer::Tracer(TraceSettings start)
    : start_(start),
      server_(std::move(start)),
      file_(server_.file.empty() ? nullptr : std::make_shared<TraceFile>(server_.file)) {
  if (file_) file_->set_log_frequency(server_.log_frequency);
  refresh_active_locked();
}

void Tracer::refresh_active_locked() {
  bool on = file_ && server_.timestamps && server_.count != 0;
  for (const auto& [name, entry] : models_) {
    const TraceSettings s = merged(server_, entry.first);
    on = on || (file_ && s.timestamps && s.count != 0);
  }
  active_.store(on, std::memory_order_relaxed);
}

std::shared_ptr<RequestTrace> Tracer::start(const std::string& model_name) {
  if (!active_.load(std::memory_order_relaxed)) return nullptr;
  std::lock_guard lock(mutex_);
  auto it = models_.find(model_name);
  TraceOverride none;
  TraceOverride& model = it != models_.end() ? it->second.first : none;
  Scope& scope = it != models_.end() ? it->second.second : server_scope_;
  const TraceSettings s = merged(server_, model);
  if (!file_ || !s.timestamps || s.count == 0) return nullptr;
  if (++scope.seen % s.rate != 0) return nullptr;
  if (s.count > 0) {
    // The count is spent where it is set: the model's own, else the server's.
    int64_t& count = model.count ? *model.count : server_.count;
    if (--count == 0) refresh_active_locked();
  }
  return std::make_shared<RequestTrace>(file_, file_->next_id(), 0, model_name);
}

TraceSettings Tracer::settings(const std::string& model) const {
  std::lock_guard lock(mutex_);
  if (model.empty()) return server_;
  auto it = models_.find(model);
  return it == models_.end() ? server_ : merged(server_, it->second.first);
}

TraceSettings Tracer::update(const std::string& model, const TraceSettingsUpdate& update) {
  std::lock_guard lock(mutex_);
  TraceSettings after;
  if (model.empty()) {
    TraceSettings next = server_;
    apply_trace_update(next, start_, update);
    KILN_CHECK(!next.timestamps || file_, ErrorCode::InvalidArgument,
               "no trace file: start kiln-serve with --trace-config triton,file=PATH to trace");
    server_ = next;
    after = server_;
  } else {
    auto& entry = models_[model];
    TraceOverride next = entry.first;
    try {
      apply_trace_update(next, update);
      KILN_CHECK(!merged(server_, next).timestamps || file_, ErrorCode::InvalidArgument,
                 "no trace file: start kiln-serve with --trace-config triton,file=PATH to trace");
    } catch (...) {
      if (entry.first.empty()) models_.erase(model);
      throw;
    }
    entry.first = next;
    after = merged(server_, next);
    if (next.empty()) models_.erase(model);
  }
  if (file_) file_->set_log_frequency(server_.log_frequency);
  refresh_active_locked();
  return after;
}

}  // namespace kiln::server
