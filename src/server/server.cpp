#include "server/server.hpp"

#include <fmt/format.h>

#include <chrono>
#include <optional>

#include "server/server_log.hpp"
#include "server/shared_memory_io.hpp"

namespace kiln::server {

namespace {

RepositoryOptions with_memory(RepositoryOptions options, std::shared_ptr<MemoryBudget> memory) {
  options.request_memory = std::move(memory);
  return options;
}

}  // namespace

InferenceServer::InferenceServer(ServerOptions options)
    : options_(std::move(options)),
      request_memory_(std::make_shared<MemoryBudget>(options_.request_memory_bytes > 0
                                                         ? options_.request_memory_bytes
                                                         : default_memory_budget())),
      repository_(
          std::make_unique<ModelRepository>(with_memory(options_.repository, request_memory_))),
      cache_(options_.response_cache_bytes > 0
                 ? std::make_unique<ResponseCache>(options_.response_cache_bytes)
                 : nullptr),
      tracer_(options_.trace),
      shared_memory_(options_.shared_memory, options_.shared_memory_device) {}

InferenceServer::~InferenceServer() {
  stopped_ = true;
}

bool InferenceServer::start() {
  const bool ok = repository_->start();
  start_ok_ = ok;
  return ok;
}

bool InferenceServer::ready() const {
  if (draining_.load() || stopped_.load()) return false;
  return !options_.strict_readiness || start_ok_.load();
}

ServerMetadata InferenceServer::metadata() const {
  ServerMetadata m;
  m.name = options_.server_id;
  m.version = KILN_VERSION;
  // tritonserver 2.51's list and order, less what Kiln does not serve (classification;
  // docs/SERVER.md). cuda_shared_memory is listed since it ran on a GPU (2026-12-07, H100); on
  // a machine without one, registering a region answers why.
  m.extensions = {"sequence",
                  "model_repository",
                  "model_repository(unload_dependents)",
                  "schedule_policy",
                  "model_configuration",
                  "system_shared_memory",
                  "cuda_shared_memory",
                  "binary_tensor_data",
                  "parameters",
                  "statistics",
                  "trace",
                  "logging"};
  return m;
}

ModelMetadata InferenceServer::model_metadata(std::string_view name, int64_t version) const {
  std::shared_ptr<ModelVersion> v = repository_->get(name, version);
  ModelMetadata m;
  m.name = v->name();
  // As Triton: the metadata of one version lists that version, of the model all served ones.
  if (version >= 0) {
    m.versions.push_back(std::to_string(v->version()));
  } else {
    for (int64_t n : repository_->versions(name)) m.versions.push_back(std::to_string(n));
  }
  m.platform = v->platform();
  m.inputs = v->input_metadata();
  m.outputs = v->output_metadata();
  return m;
}

const ModelConfig& InferenceServer::model_config(std::string_view name, int64_t version,
                                                 std::shared_ptr<ModelVersion>& holder) const {
  holder = repository_->get(name, version);
  return holder->config();
}

bool InferenceServer::model_ready(std::string_view name, int64_t version) const {
  return !draining_.load() && repository_->model_ready(name, version);
}

void InferenceServer::infer_async(std::unique_ptr<InferRequest> request, InferCallback done) {
  stamp(request->trace, TraceActivity::RequestStart);
  if (draining_.load()) {
    done(Status(ErrorCode::Unavailable, "Server is shutting down"), nullptr);
    return;
  }
  std::shared_ptr<ModelVersion> version;
  std::vector<SharedMemoryOutput> shm_outputs;
  // The copies of shared memory inputs are request memory: leased before they are read, held
  // until the request is done.
  std::shared_ptr<MemoryLease> shm_lease;  // only for requests with shared memory inputs
  try {
    version = repository_->get(request->model_name, request->model_version);
    uint64_t shm_bytes = 0;
    for (const InferInput& in : request->inputs) {
      if (in.shm) shm_bytes += std::min<uint64_t>(in.shm->byte_size, SIZE_MAX / 4);
    }
    if (shm_bytes > 0) {
      shm_lease = std::make_shared<MemoryLease>(*request_memory_);
      KILN_CHECK(shm_bytes <= SIZE_MAX / 4 && shm_lease->grow(static_cast<size_t>(shm_bytes)),
                 ErrorCode::Unavailable,
                 "the server's request memory budget ({} bytes) cannot hold this request's {} "
                 "bytes of shared memory inputs; retry later",
                 request_memory_->limit(), shm_bytes);
    }
    // Shared memory before the cache: its key is made of the input bytes, and an output region
    // too small is refused before anything runs.
    read_shared_memory_inputs(*request, shared_memory_);
    shm_outputs = plan_shared_memory_outputs(*request, *version, shared_memory_);
  } catch (const Error& e) {
    done(Status(e), nullptr);
    return;
  } catch (const std::bad_alloc&) {
    done(Status(ErrorCode::Unavailable, "out of memory while reading shared memory inputs"),
         nullptr);
    return;
  }
  if (!shm_outputs.empty() || shm_lease) {
    // The regions stay held (open) until the response is written, even when unregistered; the
    // input copies' lease until the request is done.
    done = [done = std::move(done), outputs = std::move(shm_outputs), shm_lease](
               Status status, std::unique_ptr<InferResponse> response) {
      if (status && response) {
        try {
          write_shared_memory_outputs(*response, outputs);
        } catch (const Error& e) {
          done(Status(e), nullptr);
          return;
        }
      }
      done(std::move(status), std::move(response));
    };
  }
  if (request->trace) {
    request->trace->set_version(version->version());
    request->trace->set_request_id(request->id);
  }
  // The response cache, for a model that enables it: a hit answers at once, a miss keeps the
  // response on its way back. A request too large for the cache is a miss that builds no key
  // (no second copy of its inputs).
  const bool cached_model = cache_ && version->config().response_cache().enable();
  std::optional<CacheKey> key;
  Clock::duration lookup{};
  if (cached_model && cache_->may_hold(*request)) {
    const Clock::time_point start = Clock::now();
    key = response_cache_key(*request, version->name(), version->version());
    std::unique_ptr<InferResponse> hit = cache_->lookup(*key);
    lookup = Clock::now() - start;
    if (hit) {
      hit->id = request->id;
      const auto ns = [](Clock::duration d) {
        return static_cast<uint64_t>(std::chrono::nanoseconds(d).count());
      };
      version->statistics().record_cache_hit(ns(Clock::now() - request->received), ns(lookup));
      stamp_request_end(request->trace);
      done(Status::ok(), std::move(hit));
      return;
    }
  }
  inflight_.fetch_add(1);
  // Counted until the callback has returned and the frontend's closure is destroyed, so that a
  // drain returns only when nothing of a request still refers to the frontend (its connection
  // objects must not outlive the frontend's I/O context).
  auto holder = std::make_shared<InferCallback>(std::move(done));
  InferCallback counted = [this, holder, version, cached_model, key = std::move(key), lookup](
                              Status status, std::unique_ptr<InferResponse> r) {
    if (cached_model && status && r) {
      const Clock::time_point start = Clock::now();
      const size_t kept = key ? cache_->insert(*key, *r) : 0;
      // Its arguments (a formatted part, the cache's lock) only when the line is written.
      if (ServerLog::instance().enabled(LogSeverity::Verbose, 1)) {
        log_verbose(1, "response cache: '{}' version {}: {} ({} of {} bytes in use)", r->model_name,
                    r->model_version,
                    kept ? fmt::format("kept a response of {} bytes", kept)
                         : std::string("request or response larger than the cache, not kept"),
                    cache_->bytes(), cache_->capacity());
      }
      version->statistics().record_cache_miss(
          static_cast<uint64_t>(std::chrono::nanoseconds(lookup + (Clock::now() - start)).count()));
    }
    {
      InferCallback cb = std::move(*holder);
      cb(std::move(status), std::move(r));
    }
    if (inflight_.fetch_sub(1) == 1) {
      std::lock_guard lock(idle_mutex_);
      idle_cv_.notify_all();
    }
  };
  ModelVersion::infer_async(version, std::move(request), std::move(counted));
}

std::vector<ModelStatisticsEntry> InferenceServer::statistics(std::string_view name,
                                                              int64_t version) const {
  std::vector<ModelStatisticsEntry> out;
  if (!name.empty()) {
    // Unknown names are an error (400, not the 404 of the other model APIs), in Triton's words.
    KILN_CHECK_ARG(!repository_->versions(name).empty(), "requested model '{}' is not available",
                   name);
    if (version >= 0) {
      std::shared_ptr<ModelVersion> v;
      try {
        v = repository_->get(name, version);
      } catch (const Error&) {
        fail(ErrorCode::InvalidArgument, "requested model version is not available for model '{}'",
             name);
      }
      out.push_back({v->name(), v->version(), v->statistics().snapshot()});
      return out;
    }
  }
  for (const std::shared_ptr<ModelVersion>& v : repository_->all_versions()) {
    if (!name.empty() && v->name() != name) continue;
    out.push_back({v->name(), v->version(), v->statistics().snapshot()});
  }
  return out;
}

DrainResult InferenceServer::drain() {
  // How long cancelled requests get to answer: each stops at its next plan step or Loop
  // iteration, so this only runs out for a single kernel that takes longer.
  constexpr std::chrono::seconds kCancelGrace(3);
  draining_ = true;
  std::unique_lock lock(idle_mutex_);
  idle_cv_.wait_for(lock, std::chrono::seconds(std::max(0, options_.exit_timeout_secs)),
                    [&] { return inflight_.load() == 0; });
  DrainResult result;
  result.at_exit_timeout = inflight_.load();
  if (result.at_exit_timeout > 0) {
    repository_->cancel_requests();
    idle_cv_.wait_for(lock, kCancelGrace, [&] { return inflight_.load() == 0; });
  }
  result.left = inflight_.load();
  return result;
}

}  // namespace kiln::server
