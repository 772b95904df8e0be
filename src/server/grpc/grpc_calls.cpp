#include "server/grpc/grpc_calls.hpp"

#include <span>

#include "server/grpc/grpc_stream.hpp"
#include "server/server_log.hpp"

namespace kiln::server::grpc {
namespace {

// Runs `fn`, turning what it throws into the status the client sees.
template <typename Fn>
::grpc::Status guarded(Fn&& fn) {
  try {
    fn();
    return ::grpc::Status::OK;
  } catch (const Error& e) {
    return to_grpc_status(Status(e));
  } catch (const std::exception& e) {
    return {::grpc::StatusCode::INTERNAL, e.what()};
  }
}

// ---- unary RPCs answered on the queue thread -----------------------------------------------

template <class Req, class Resp>
struct UnaryKind {
  using RequestFn = void (Service::*)(::grpc::ServerContext*, Req*,
                                      ::grpc::ServerAsyncResponseWriter<Resp>*,
                                      ::grpc::CompletionQueue*, ::grpc::ServerCompletionQueue*,
                                      void*);
  RequestFn request;
  void (*handle)(InferenceServer& core, const Req& request, Resp& response);  // throws Error
  const char* category;                                                       // restricted API
};

template <class Req, class Resp>
class UnaryCall final : public Tag {
 public:
  static void listen(Frontend& frontend, ::grpc::ServerCompletionQueue* cq,
                     const UnaryKind<Req, Resp>& kind) {
    frontend.if_accepting([&] {
      auto* call = new UnaryCall(frontend, cq, kind);
      (frontend.service.*kind.request)(&call->context_, &call->request_, &call->responder_, cq, cq,
                                       call);
    });
  }

  void proceed(bool ok) override {
    if (!ok || finishing_) {
      delete this;
      return;
    }
    listen(frontend_, cq_, kind_);
    // The peer's address is a string made per call: only when the line is written.
    if (ServerLog::instance().enabled(LogSeverity::Verbose, 1))
      log_verbose(1, "gRPC request: {} ({})", kind_.category, context_.peer());
    ::grpc::Status status = frontend_.check_access(context_, kind_.category);
    if (status.ok()) {
      status = guarded([&] { kind_.handle(frontend_.core, request_, response_); });
    }
    finishing_ = true;
    const bool started = frontend_.if_open([&] {
      if (status.ok()) {
        responder_.Finish(response_, status, this);
      } else {
        responder_.FinishWithError(status, this);
      }
    });
    if (!started) delete this;
  }

 private:
  UnaryCall(Frontend& frontend, ::grpc::ServerCompletionQueue* cq, const UnaryKind<Req, Resp>& kind)
      : frontend_(frontend), cq_(cq), kind_(kind), responder_(&context_) {}

  Frontend& frontend_;
  ::grpc::ServerCompletionQueue* cq_;
  const UnaryKind<Req, Resp>& kind_;
  ::grpc::ServerContext context_;
  Req request_;
  Resp response_;
  ::grpc::ServerAsyncResponseWriter<Resp> responder_;
  bool finishing_ = false;
};

void load_model(InferenceServer& core, const inference::RepositoryModelLoadRequest& request) {
  std::optional<std::string> config;
  for (const auto& [key, value] : request.parameters()) {
    if (key == "config") {
      KILN_CHECK_ARG(
          value.parameter_choice_case() == inference::ModelRepositoryParameter::kStringParam,
          "load parameter 'config' must be a string");
      config = value.string_param();
    } else if (key.starts_with("file:")) {
      fail(ErrorCode::Unsupported, "file overrides in a load request are not supported ({})", key);
    }
  }
  core.repository().load(request.model_name(), config);
}

using namespace inference;  // the message names below are the protocol's

const UnaryKind<ServerLiveRequest, ServerLiveResponse> kServerLive{
    &Service::RequestServerLive,
    [](InferenceServer& core, const ServerLiveRequest&, ServerLiveResponse& r) {
      r.set_live(core.live());
    },
    "health"};
const UnaryKind<ServerReadyRequest, ServerReadyResponse> kServerReady{
    &Service::RequestServerReady,
    [](InferenceServer& core, const ServerReadyRequest&, ServerReadyResponse& r) {
      r.set_ready(core.ready());
    },
    "health"};
const UnaryKind<ModelReadyRequest, ModelReadyResponse> kModelReady{
    &Service::RequestModelReady,
    [](InferenceServer& core, const ModelReadyRequest& q, ModelReadyResponse& r) {
      r.set_ready(core.model_ready(q.name(), parse_model_version(q.version())));
    },
    "health"};
const UnaryKind<ServerMetadataRequest, ServerMetadataResponse> kServerMetadata{
    &Service::RequestServerMetadata,
    [](InferenceServer& core, const ServerMetadataRequest&, ServerMetadataResponse& r) {
      encode_server_metadata(core.metadata(), r);
    },
    "metadata"};
const UnaryKind<ModelMetadataRequest, ModelMetadataResponse> kModelMetadata{
    &Service::RequestModelMetadata,
    [](InferenceServer& core, const ModelMetadataRequest& q, ModelMetadataResponse& r) {
      encode_model_metadata(core.model_metadata(q.name(), parse_model_version(q.version())), r);
    },
    "metadata"};
const UnaryKind<ModelConfigRequest, ModelConfigResponse> kModelConfig{
    &Service::RequestModelConfig,
    [](InferenceServer& core, const ModelConfigRequest& q, ModelConfigResponse& r) {
      std::shared_ptr<ModelVersion> hold;
      *r.mutable_config() = core.model_config(q.name(), parse_model_version(q.version()), hold);
    },
    "model-config"};
const UnaryKind<ModelStatisticsRequest, ModelStatisticsResponse> kModelStatistics{
    &Service::RequestModelStatistics,
    [](InferenceServer& core, const ModelStatisticsRequest& q, ModelStatisticsResponse& r) {
      encode_statistics(core.statistics(q.name(), parse_model_version(q.version())), r);
    },
    "statistics"};
const UnaryKind<RepositoryIndexRequest, RepositoryIndexResponse> kRepositoryIndex{
    &Service::RequestRepositoryIndex,
    [](InferenceServer& core, const RepositoryIndexRequest& q, RepositoryIndexResponse& r) {
      encode_repository_index(core.repository().index(q.ready()), r);
    },
    "model-repository"};
const UnaryKind<RepositoryModelLoadRequest, RepositoryModelLoadResponse> kRepositoryModelLoad{
    &Service::RequestRepositoryModelLoad,
    [](InferenceServer& core, const RepositoryModelLoadRequest& q, RepositoryModelLoadResponse&) {
      load_model(core, q);
    },
    "model-repository"};
const UnaryKind<RepositoryModelUnloadRequest, RepositoryModelUnloadResponse> kRepositoryModelUnload{
    &Service::RequestRepositoryModelUnload,
    [](InferenceServer& core, const RepositoryModelUnloadRequest& q,
       RepositoryModelUnloadResponse&) { core.repository().unload(q.model_name()); },
    "model-repository"};

// Triton's logging extension: the settings named in the request are checked together and
// applied at once (none when one is refused); the answer is every setting.
const UnaryKind<LogSettingsRequest, LogSettingsResponse> kLogSettings{
    &Service::RequestLogSettings,
    [](InferenceServer&, const LogSettingsRequest& q, LogSettingsResponse& r) {
      ServerLog& log = ServerLog::instance();
      if (!q.settings().empty()) {
        LogSettings next = log.settings();
        for (const auto& [name, v] : q.settings()) {
          LogSettingValue value;
          switch (v.parameter_choice_case()) {
            case LogSettingsRequest::SettingValue::kBoolParam:
              value = v.bool_param();
              break;
            case LogSettingsRequest::SettingValue::kUint32Param:
              value = uint64_t{v.uint32_param()};
              break;
            case LogSettingsRequest::SettingValue::kStringParam:
              value = v.string_param();
              break;
            default:
              fail(ErrorCode::InvalidArgument, "log setting '{}' has no value", name);
          }
          set_log_setting(next, name, value);
        }
        log.apply(next);
      }
      const LogSettings now = log.settings();
      auto& out = *r.mutable_settings();
      out["log_file"].set_string_param(now.file);
      out["log_info"].set_bool_param(now.info);
      out["log_warning"].set_bool_param(now.warning);
      out["log_error"].set_bool_param(now.error);
      out["log_verbose_level"].set_uint32_param(now.verbose_level);
      out["log_format"].set_string_param(now.format);
    },
    "logging"};

// Triton's trace extension: settings given with no value clear a model's override (or reset a
// server-wide setting); all are checked before any applies. The answer is every setting.
const UnaryKind<TraceSettingRequest, TraceSettingResponse> kTraceSetting{
    &Service::RequestTraceSetting,
    [](InferenceServer& core, const TraceSettingRequest& q, TraceSettingResponse& r) {
      const std::string& model = q.model_name();
      if (!model.empty()) {
        KILN_CHECK_ARG(!core.repository().versions(model).empty(), "Request for unknown model : {}",
                       model);
      }
      TraceSettings now = core.tracer().settings(model);
      if (!q.settings().empty()) {
        TraceSettingsUpdate update;
        for (const auto& [name, v] : q.settings()) {
          if (v.value().empty()) {
            update[name] = std::nullopt;
          } else {
            update[name] = std::vector<std::string>(v.value().begin(), v.value().end());
          }
        }
        now = core.tracer().update(model, update);
      }
      auto& out = *r.mutable_settings();
      for (const auto& [name, values] : trace_settings_view(now)) {
        for (const std::string& v : values) out[name].add_value(v);
      }
    },
    "trace"};

// ---- system and CUDA shared memory (server/shared_memory.hpp) ----------------------------

const UnaryKind<SystemSharedMemoryStatusRequest, SystemSharedMemoryStatusResponse>
    kSystemSharedMemoryStatus{
        &Service::RequestSystemSharedMemoryStatus,
        [](InferenceServer& core, const SystemSharedMemoryStatusRequest& q,
           SystemSharedMemoryStatusResponse& r) {
          for (const SharedMemoryRegionStatus& s : core.shared_memory().status(q.name())) {
            SystemSharedMemoryStatusResponse::RegionStatus& out = (*r.mutable_regions())[s.name];
            out.set_name(s.name);
            out.set_key(s.key);
            out.set_offset(s.offset);
            out.set_byte_size(s.byte_size);
          }
        },
        "shared-memory"};
const UnaryKind<SystemSharedMemoryRegisterRequest, SystemSharedMemoryRegisterResponse>
    kSystemSharedMemoryRegister{
        &Service::RequestSystemSharedMemoryRegister,
        [](InferenceServer& core, const SystemSharedMemoryRegisterRequest& q,
           SystemSharedMemoryRegisterResponse&) {
          core.shared_memory().register_region(q.name(), q.key(), q.offset(), q.byte_size());
        },
        "shared-memory"};
const UnaryKind<SystemSharedMemoryUnregisterRequest, SystemSharedMemoryUnregisterResponse>
    kSystemSharedMemoryUnregister{
        &Service::RequestSystemSharedMemoryUnregister,
        [](InferenceServer& core, const SystemSharedMemoryUnregisterRequest& q,
           SystemSharedMemoryUnregisterResponse&) {
          if (q.name().empty()) {
            core.shared_memory().unregister_all();
          } else {
            core.shared_memory().unregister(q.name());
          }
        },
        "shared-memory"};
// CUDA regions share the registry's name space with system regions; each kind's status and
// unregistering see their own kind only, as tritonserver's.
const UnaryKind<CudaSharedMemoryStatusRequest, CudaSharedMemoryStatusResponse>
    kCudaSharedMemoryStatus{&Service::RequestCudaSharedMemoryStatus,
                            [](InferenceServer& core, const CudaSharedMemoryStatusRequest& q,
                               CudaSharedMemoryStatusResponse& r) {
                              for (const SharedMemoryRegionStatus& s :
                                   core.shared_memory().status(q.name(), SharedMemoryKind::Cuda)) {
                                CudaSharedMemoryStatusResponse::RegionStatus& out =
                                    (*r.mutable_regions())[s.name];
                                out.set_name(s.name);
                                out.set_device_id(static_cast<uint64_t>(s.device_id));
                                out.set_byte_size(s.byte_size);
                              }
                            },
                            "shared-memory"};
const UnaryKind<CudaSharedMemoryRegisterRequest, CudaSharedMemoryRegisterResponse>
    kCudaSharedMemoryRegister{&Service::RequestCudaSharedMemoryRegister,
                              [](InferenceServer& core, const CudaSharedMemoryRegisterRequest& q,
                                 CudaSharedMemoryRegisterResponse&) {
                                core.shared_memory().register_cuda_region(
                                    q.name(), std::as_bytes(std::span(q.raw_handle())),
                                    q.device_id(), q.byte_size());
                              },
                              "shared-memory"};
const UnaryKind<CudaSharedMemoryUnregisterRequest, CudaSharedMemoryUnregisterResponse>
    kCudaSharedMemoryUnregister{
        &Service::RequestCudaSharedMemoryUnregister,
        [](InferenceServer& core, const CudaSharedMemoryUnregisterRequest& q,
           CudaSharedMemoryUnregisterResponse&) {
          if (q.name().empty()) {
            core.shared_memory().unregister_all(SharedMemoryKind::Cuda);
          } else {
            core.shared_memory().unregister(q.name(), SharedMemoryKind::Cuda);
          }
        },
        "shared-memory"};

// ---- ModelInfer: answered from the scheduler's callback ------------------------------------

// Two events end a call: the completion of its Finish and the "done" notice gRPC delivers once
// a started call is over (AsyncNotifyWhenDone; it says whether the client cancelled). The
// object goes when both have come. A client that cancels while its request waits in a queue
// marks the request cancelled, so the scheduler drops it instead of running it.
class InferCall final : public Tag {
 public:
  static void listen(const std::shared_ptr<Frontend>& frontend, ::grpc::ServerCompletionQueue* cq) {
    frontend->if_accepting([&] {
      auto* call = new InferCall(frontend, cq);
      call->context_.AsyncNotifyWhenDone(&call->done_tag_);
      frontend->service.RequestModelInfer(&call->context_, &call->request_, &call->responder_, cq,
                                          cq, call);
    });
  }

  void proceed(bool ok) override {
    if (finishing_) {
      // Finish completed (or failed: the client is gone).
      stamp(trace_, TraceActivity::GrpcSendEnd);
      trace_.reset();  // the trace is written once its last holder lets go
      return release();
    }
    if (!ok) {
      delete this;  // the call never started, so no done notice will come either
      return;
    }
    const Clock::time_point received = Clock::now();
    listen(frontend_, cq_);
    if (ServerLog::instance().enabled(LogSeverity::Verbose, 1)) {
      log_verbose(1, "gRPC request: infer '{}' version '{}' ({})", request_.model_name(),
                  request_.model_version(), context_.peer());
    }
    std::unique_ptr<InferRequest> request;
    ::grpc::Status status = frontend_->check_access(context_, "inference");
    if (status.ok() && !lease_.grow(request_.ByteSizeLong())) {
      status = ::grpc::Status(::grpc::StatusCode::RESOURCE_EXHAUSTED,
                              fmt::format("the server's request memory budget ({} bytes) is "
                                          "spent; retry later",
                                          frontend_->core.request_memory().limit()));
    }
    if (status.ok()) {
      status = guarded([&] { request = decode_infer_request(request_, frontend_->options.codec); });
    }
    if (!status.ok()) {
      finish(status);
      return;
    }
    // The tensors are decoded; free the message's copy before the request waits in a queue.
    ModelInferRequest().Swap(&request_);
    request->received = received;
    request->cancelled = cancelled_;
    request->trace = frontend_->core.tracer().start(request->model_name);
    if (request->trace) {
      request->trace->stamp(TraceActivity::GrpcWaitReadStart, listening_since_);
      request->trace->stamp(TraceActivity::GrpcWaitReadEnd, received);
      trace_ = request->trace;
    }
    finishing_ = true;
    frontend_->core.infer_async(std::move(request),
                                [this](Status s, std::unique_ptr<InferResponse> response) {
                                  complete(s, std::move(response));
                                });
  }

 private:
  struct DoneTag final : Tag {
    explicit DoneTag(InferCall* c) : call(c) {}
    void proceed(bool) override {
      if (call->context_.IsCancelled()) call->cancelled_->store(true, std::memory_order_relaxed);
      call->release();
    }
    InferCall* call;
  };

  InferCall(std::shared_ptr<Frontend> frontend, ::grpc::ServerCompletionQueue* cq)
      : frontend_(std::move(frontend)),
        cq_(cq),
        responder_(&context_),
        lease_(frontend_->core.request_memory()) {}

  // On a scheduler thread (or the queue thread for a request refused up front). Encoding here
  // spares a hop back to the queue thread; the write itself is asynchronous.
  void complete(const Status& s, std::unique_ptr<InferResponse> response) {
    ::grpc::Status status = to_grpc_status(s);
    // A refusal under a latency objective: the wait in milliseconds, as gRPC's retry policy
    // reads it (grpc-retry-pushback-ms) and plainly for other clients.
    if (s.retry_after_ms() > 0) {
      context_.AddTrailingMetadata("retry-after-ms", std::to_string(s.retry_after_ms()));
      context_.AddTrailingMetadata("grpc-retry-pushback-ms", std::to_string(s.retry_after_ms()));
    }
    if (status.ok()) status = guarded([&] { encode_infer_response(*response, response_); });
    response.reset();
    finish(status);
  }

  void finish(const ::grpc::Status& status) {
    finishing_ = true;
    // `this` may be deleted by the queue thread as soon as Finish is called: hold the frontend.
    std::shared_ptr<Frontend> frontend = frontend_;
    stamp(trace_, TraceActivity::GrpcSendStart);
    const bool started = frontend->if_open([&] {
      if (status.ok()) {
        if (frontend->infer_compression != GRPC_COMPRESS_LEVEL_NONE) {
          context_.set_compression_level(frontend->infer_compression);
        }
        responder_.Finish(response_, status, this);
      } else {
        responder_.FinishWithError(status, this);
      }
    });
    if (!started) release();  // the queue is closing: only the done notice is left to come
  }

  // One of the two ending events has come; the second deletes the call.
  void release() {
    if (ends_left_.fetch_sub(1) == 1) delete this;
  }

  std::shared_ptr<Frontend> frontend_;
  ::grpc::ServerCompletionQueue* cq_;
  ::grpc::ServerContext context_;
  ModelInferRequest request_;
  ModelInferResponse response_;
  ::grpc::ServerAsyncResponseWriter<ModelInferResponse> responder_;
  DoneTag done_tag_{this};
  MemoryLease lease_;  // pays for the request until the call is gone
  std::shared_ptr<std::atomic<bool>> cancelled_ = std::make_shared<std::atomic<bool>>(false);
  std::atomic<int> ends_left_{2};
  bool finishing_ = false;
  // Tracing: when the call began waiting for its request, and the request's trace.
  Clock::time_point listening_since_ = Clock::now();
  std::shared_ptr<RequestTrace> trace_;
};

}  // namespace

Frontend::Frontend(InferenceServer& c, const GrpcOptions& o, Service& s)
    : core(c), options(o), service(s) {
  const std::string& level = options.infer_compression;
  if (level == "none") {
    infer_compression = GRPC_COMPRESS_LEVEL_NONE;
  } else if (level == "low") {
    infer_compression = GRPC_COMPRESS_LEVEL_LOW;
  } else if (level == "medium") {
    infer_compression = GRPC_COMPRESS_LEVEL_MED;
  } else if (level == "high") {
    infer_compression = GRPC_COMPRESS_LEVEL_HIGH;
  } else {
    fail(ErrorCode::InvalidArgument,
         "--grpc-infer-response-compression-level '{}' must be none, low, medium or high", level);
  }
}

::grpc::Status Frontend::check_access(const ::grpc::ServerContext& context,
                                      std::string_view category) const {
  const auto& metadata = context.client_metadata();
  auto restricted = options.restricted.by_category.find(std::string(category));
  if (restricted != options.restricted.by_category.end()) {
    const auto& [key, value] = restricted->second;
    auto it = metadata.find(key);
    if (it == metadata.end() || std::string_view(it->second.data(), it->second.size()) != value) {
      return {::grpc::StatusCode::UNAVAILABLE,
              fmt::format("This protocol is restricted, expecting header '{}'", key)};
    }
  }
  if (!options.bearer_token.empty() && category != "health") {
    auto it = metadata.find("authorization");
    const std::string expected = "Bearer " + options.bearer_token;
    if (it == metadata.end() ||
        std::string_view(it->second.data(), it->second.size()) != expected) {
      return {::grpc::StatusCode::UNAUTHENTICATED, "Unauthorized"};
    }
  }
  return ::grpc::Status::OK;
}

void Frontend::stop_accepting() {
  std::unique_lock lock(mutex_);
  accepting_ = false;
}

void Frontend::close() {
  std::unique_lock lock(mutex_);
  accepting_ = false;
  open_ = false;
}

void listen_all(const std::shared_ptr<Frontend>& frontend, ::grpc::ServerCompletionQueue* cq) {
  Frontend& f = *frontend;
  UnaryCall<ServerLiveRequest, ServerLiveResponse>::listen(f, cq, kServerLive);
  UnaryCall<ServerReadyRequest, ServerReadyResponse>::listen(f, cq, kServerReady);
  UnaryCall<ModelReadyRequest, ModelReadyResponse>::listen(f, cq, kModelReady);
  UnaryCall<ServerMetadataRequest, ServerMetadataResponse>::listen(f, cq, kServerMetadata);
  UnaryCall<ModelMetadataRequest, ModelMetadataResponse>::listen(f, cq, kModelMetadata);
  UnaryCall<ModelConfigRequest, ModelConfigResponse>::listen(f, cq, kModelConfig);
  UnaryCall<ModelStatisticsRequest, ModelStatisticsResponse>::listen(f, cq, kModelStatistics);
  UnaryCall<RepositoryIndexRequest, RepositoryIndexResponse>::listen(f, cq, kRepositoryIndex);
  UnaryCall<RepositoryModelLoadRequest, RepositoryModelLoadResponse>::listen(f, cq,
                                                                             kRepositoryModelLoad);
  UnaryCall<RepositoryModelUnloadRequest, RepositoryModelUnloadResponse>::listen(
      f, cq, kRepositoryModelUnload);
  UnaryCall<SystemSharedMemoryStatusRequest, SystemSharedMemoryStatusResponse>::listen(
      f, cq, kSystemSharedMemoryStatus);
  UnaryCall<SystemSharedMemoryRegisterRequest, SystemSharedMemoryRegisterResponse>::listen(
      f, cq, kSystemSharedMemoryRegister);
  UnaryCall<SystemSharedMemoryUnregisterRequest, SystemSharedMemoryUnregisterResponse>::listen(
      f, cq, kSystemSharedMemoryUnregister);
  UnaryCall<CudaSharedMemoryStatusRequest, CudaSharedMemoryStatusResponse>::listen(
      f, cq, kCudaSharedMemoryStatus);
  UnaryCall<CudaSharedMemoryRegisterRequest, CudaSharedMemoryRegisterResponse>::listen(
      f, cq, kCudaSharedMemoryRegister);
  UnaryCall<CudaSharedMemoryUnregisterRequest, CudaSharedMemoryUnregisterResponse>::listen(
      f, cq, kCudaSharedMemoryUnregister);
  UnaryCall<TraceSettingRequest, TraceSettingResponse>::listen(f, cq, kTraceSetting);
  UnaryCall<LogSettingsRequest, LogSettingsResponse>::listen(f, cq, kLogSettings);
  InferCall::listen(frontend, cq);
  listen_stream(frontend, cq);
}

}  // namespace kiln::server::grpc
