// kiln-serve: the Triton / KServe v2 compatible inference server (`kiln serve` runs it). Flag
// names follow tritonserver's so scripts and Helm charts written for Triton work unchanged.
#include <pthread.h>
#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "server/gpu_metrics.hpp"
#include "server/grpc/grpc_flags.hpp"
#include "server/http/http_server.hpp"
#include "server/model_table.hpp"
#include "server/server.hpp"
#include "server/server_log.hpp"

namespace {

using kiln::server::InferenceServer;

struct Flags {
  std::vector<std::string> repositories;
  std::string model_control_mode = "none";
  std::vector<std::string> load_models;
  int poll_secs = 15;
  bool strict_model_config = false;
  bool disable_auto_complete = false;
  bool strict_readiness = true;
  bool exit_on_error = true;
  int exit_timeout_secs = 30;
  std::string id = "kiln";
  bool allow_http = true, allow_grpc = true, allow_metrics = true;
  bool allow_cpu_metrics = true, allow_gpu_metrics = true;
  std::string http_address = "0.0.0.0", metrics_address = "0.0.0.0", grpc_address = "0.0.0.0";
  int http_port = 8000, grpc_port = 8001, metrics_port = 8002;
  int http_threads = 8;
  std::vector<std::string> http_restricted;
  std::vector<std::string> grpc_restricted;
  std::string bearer_token;
  std::string http_cert, http_key, http_client_ca;
  size_t max_body = size_t{64} << 20;
  size_t max_header = size_t{64} << 10;
  size_t max_connections = 4096;
  int read_timeout_secs = 30;
  size_t min_body_rate = size_t{64} << 10;
  size_t max_response = size_t{512} << 20;
  size_t request_memory = 0;
  size_t shm_max_regions = 128;
  uint64_t shm_max_bytes = 0;
  bool metrics_require_token = false;
  std::vector<std::string> metrics_config;
  size_t instance_budget = kiln::server::default_instance_budget();
  size_t thread_budget = kiln::server::default_thread_budget();
  uint64_t request_timeout_ms = 600000;
  std::vector<std::string> ignored;  // tritonserver flags with no meaning here
  kiln::server::LogSettings log;
  std::vector<std::string> cache_config;
  kiln::server::TraceFlags trace;
};

void add_flags(CLI::App& app, Flags& f) {
  app.add_option("--model-repository,--model-store", f.repositories,
                 "model repository path (repeatable)")
      ->required();
  app.add_option("--model-control-mode", f.model_control_mode, "none, poll or explicit")
      ->check(CLI::IsMember({"none", "poll", "explicit"}));
  app.add_option("--load-model", f.load_models,
                 "model to load at start in explicit mode ('*' for all; repeatable)");
  app.add_option("--repository-poll-secs", f.poll_secs, "poll interval in poll mode")
      ->check(CLI::Range(1, 86400));
  app.add_option("--strict-model-config", f.strict_model_config,
                 "true: config.pbtxt must be complete (no auto-complete)");
  app.add_option("--disable-auto-complete-config", f.disable_auto_complete,
                 "do not auto-complete model configurations")
      ->expected(0, 1)
      ->default_str("true");
  app.add_option("--strict-readiness", f.strict_readiness,
                 "true: ready only when every model loaded");
  app.add_option("--exit-on-error", f.exit_on_error, "exit when a model fails to load at start");
  app.add_option("--exit-timeout-secs", f.exit_timeout_secs,
                 "on SIGTERM, how long to wait for in-flight requests")
      ->check(CLI::Range(0, 86400));
  app.add_option("--id", f.id, "server identifier reported by server metadata");
  app.add_option("--allow-http", f.allow_http, "serve HTTP/REST");
  app.add_option("--allow-grpc", f.allow_grpc, "serve gRPC");
  app.add_option("--allow-metrics", f.allow_metrics, "serve Prometheus metrics");
  app.add_option("--allow-cpu-metrics", f.allow_cpu_metrics,
                 "publish nv_cpu_utilization and the CPU memory gauges")
      ->capture_default_str();
  app.add_option("--allow-gpu-metrics", f.allow_gpu_metrics,
                 "publish the GPU gauges (nv_gpu_utilization, memory, power, energy) through NVML "
                 "or ROCm SMI, where the machine has one")
      ->capture_default_str();
  app.add_option("--http-address", f.http_address, "HTTP bind address");
  app.add_option("--http-port", f.http_port, "HTTP port (0: any free port)")
      ->check(CLI::Range(0, 65535));
  app.add_option("--http-thread-count", f.http_threads, "HTTP I/O threads")
      ->check(CLI::Range(1, 1024));
  app.add_option("--grpc-address", f.grpc_address, "gRPC bind address");
  app.add_option("--grpc-port", f.grpc_port, "gRPC port")->check(CLI::Range(0, 65535));
  app.add_option("--metrics-address", f.metrics_address, "metrics bind address");
  app.add_option("--metrics-port", f.metrics_port, "metrics port (0: any free port)")
      ->check(CLI::Range(0, 65535));
  app.add_option("--http-restricted-api", f.http_restricted,
                 "<category,...>:<header>=<value>: restrict API categories (repeatable)");
  app.add_option("--grpc-restricted-protocol", f.grpc_restricted,
                 "<category,...>:<key>=<value>: restrict gRPC protocols (repeatable)");
  app.add_option("--http-bearer-token", f.bearer_token,
                 "require 'Authorization: Bearer <token>' on every non-health HTTP request");
  app.add_option("--http-server-cert", f.http_cert, "PEM certificate chain: serve HTTPS");
  app.add_option("--http-server-key", f.http_key, "PEM private key of --http-server-cert");
  app.add_option("--http-root-cert", f.http_client_ca,
                 "PEM CA: require client certificates it signed (mutual TLS)");
  app.add_option("--http-max-body-bytes", f.max_body, "largest HTTP request body");
  app.add_option("--http-max-header-bytes", f.max_header, "largest HTTP request header");
  app.add_option("--http-max-connections", f.max_connections,
                 "most open HTTP connections (at the limit, the one waiting longest for a request "
                 "is closed to make room)");
  app.add_option("--http-read-timeout-secs", f.read_timeout_secs,
                 "a request's header must arrive within this once it began; its body within this "
                 "plus its size at --http-min-body-bytes-per-sec")
      ->check(CLI::Range(1, 86400));
  app.add_option("--http-min-body-bytes-per-sec", f.min_body_rate,
                 "slowest average rate a request body may arrive at")
      ->check(CLI::Range(size_t{1}, SIZE_MAX));
  app.add_option("--http-max-response-bytes", f.max_response,
                 "largest HTTP response body (larger: refused before it is encoded)")
      ->check(CLI::Range(size_t{1024}, SIZE_MAX));
  app.add_option("--request-memory-bytes", f.request_memory,
                 "memory all requests in flight may hold together: bodies being read, requests "
                 "queued or running (0: a quarter of physical memory)");
  app.add_option("--shared-memory-max-regions", f.shm_max_regions,
                 "most shared memory regions (system and CUDA together) registered at once")
      ->check(CLI::Range(size_t{0}, size_t{1} << 20))
      ->capture_default_str();
  app.add_option("--shared-memory-max-bytes", f.shm_max_bytes,
                 "most bytes of system shared memory mapped at once, regions still used by "
                 "requests after unregistering included (0: physical memory)");
  app.add_option("--metrics-require-token", f.metrics_require_token,
                 "true: /metrics needs the --http-bearer-token too");
  app.add_option("--model-instance-budget", f.instance_budget,
                 "most model instances loaded at once, over all models and versions (default "
                 "from the machine)")
      ->check(CLI::Range(size_t{1}, size_t{1} << 20))
      ->capture_default_str();
  app.add_option("--thread-budget", f.thread_budget,
                 "most intra-op threads of all loaded instances together (instances x "
                 "intra_op_thread_count; default from the machine)")
      ->check(CLI::Range(size_t{1}, size_t{1} << 24))
      ->capture_default_str();
  app.add_option("--request-timeout-ms", f.request_timeout_ms,
                 "longest a request may take, queued and running (0: no limit); a request's "
                 "'timeout' parameter can shorten it")
      ->capture_default_str();
  app.add_option("--metrics-config", f.metrics_config,
                 "<setting>=<value>: counter_latencies, summary_latencies, summary_quantiles "
                 "(repeatable)");
  // The log (tritonserver's flags; /v2/logging and gRPC LogSettings change them at run time).
  app.add_option("--log-verbose", f.log.verbose_level,
                 "verbose level: 1 writes a line per request received and answered")
      ->capture_default_str();
  app.add_option("--log-info", f.log.info, "write information lines")->capture_default_str();
  app.add_option("--log-warning", f.log.warning, "write warnings")->capture_default_str();
  app.add_option("--log-error", f.log.error, "write errors")->capture_default_str();
  app.add_option("--log-format", f.log.format, "line format: default or ISO8601")
      ->check(CLI::IsMember({"default", "ISO8601"}))
      ->capture_default_str();
  app.add_option("--log-file", f.log.file, "write the log to this file (default: standard error)");
  // Request tracing (tritonserver's flags; /v2/trace/setting and gRPC TraceSetting change all
  // but the file at run time).
  app.add_option("--trace-config", f.trace.config,
                 "[triton,]<setting>=<value>: rate, level (OFF or TIMESTAMPS, repeatable), count, "
                 "mode (triton), triton,file=<path>, triton,log-frequency=<n> (repeatable)");
  app.add_option("--trace-file", f.trace.file, "deprecated: --trace-config triton,file=<path>");
  app.add_option("--trace-level", f.trace.level, "deprecated: --trace-config level=<level>");
  app.add_option("--trace-rate", f.trace.rate, "deprecated: --trace-config rate=<n>");
  app.add_option("--trace-count", f.trace.count, "deprecated: --trace-config count=<n>");
  app.add_option("--trace-log-frequency", f.trace.log_frequency,
                 "deprecated: --trace-config triton,log-frequency=<n>");
  app.add_option("--cache-config", f.cache_config,
                 "local,size=<bytes>: the response cache for models whose config enables "
                 "response_cache (default: none)");
  for (const char* name :
       {"--backend-config", "--pinned-memory-pool-byte-size", "--cuda-memory-pool-byte-size",
        "--min-supported-compute-capability", "--backend-directory", "--repoagent-directory",
        "--metrics-interval-ms", "--grpc-infer-allocation-pool-size"}) {
    app.add_option(name, f.ignored, "accepted for tritonserver compatibility; no effect");
  }
}

// Blocks until SIGTERM or SIGINT. The signals are blocked in every thread (set before any
// thread starts), so only this wait receives them.
int wait_for_signal(const sigset_t& set) {
  int sig = 0;
  sigwait(&set, &sig);
  return sig;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kiln-serve: Triton / KServe v2 compatible inference server"};
  Flags f;
  add_flags(app, f);
  kiln::server::grpc::GrpcFlags grpc_flags;
  kiln::server::grpc::add_grpc_flags(app, grpc_flags);
  CLI11_PARSE(app, argc, argv);

  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  try {
    kiln::server::ServerLog::instance().apply(f.log);
    kiln::server::ServerOptions options;
    options.server_id = f.id;
    options.repository.paths = f.repositories;
    options.repository.mode = kiln::server::parse_model_control_mode(f.model_control_mode);
    options.repository.startup_models = f.load_models;
    options.repository.poll_seconds = f.poll_secs;
    options.repository.autocomplete = !f.strict_model_config && !f.disable_auto_complete;
    options.repository.instance_budget = f.instance_budget;
    options.repository.thread_budget = f.thread_budget;
    // Saturating: a value near 2^64 ms means "no practical limit", not an overflow.
    options.repository.request_timeout_us =
        f.request_timeout_ms > UINT64_MAX / 1000 ? UINT64_MAX : f.request_timeout_ms * 1000;
    for (const std::string& spec : f.metrics_config) {
      kiln::server::apply_metrics_config(options.repository.metrics, spec);
    }
    options.repository.metrics.cpu = f.allow_cpu_metrics;
    options.repository.metrics.gpu = f.allow_metrics && f.allow_gpu_metrics;
    if (options.repository.metrics.gpu) {
      // Opened before any service: the first scrape does not pay for it, and the log says
      // at start whether GPU metrics will be there.
      const kiln::server::GpuMonitor& gpus = kiln::server::GpuMonitor::instance();
      if (gpus.library().empty()) {
        std::fprintf(stderr, "kiln-serve: no GPU metrics: %s\n", gpus.unavailable_reason().c_str());
      } else {
        std::fprintf(stderr, "kiln-serve: GPU metrics through %s\n", gpus.library().c_str());
      }
    }
    options.strict_readiness = f.strict_readiness;
    options.exit_timeout_secs = f.exit_timeout_secs;
    options.request_memory_bytes = f.request_memory;
    options.shared_memory.max_regions = f.shm_max_regions;
    options.shared_memory.max_mapped_bytes = f.shm_max_bytes;
    options.response_cache_bytes = kiln::server::parse_cache_config(f.cache_config);
    options.trace = kiln::server::trace_settings_from_flags(f.trace);
    options.repository.response_cache = options.response_cache_bytes > 0;
    KILN_CHECK_ARG(!f.metrics_require_token || !f.bearer_token.empty(),
                   "--metrics-require-token needs --http-bearer-token");
    InferenceServer core(options);
    const bool loaded = core.start();
    // What the startup loads left, before any service opens (tritonserver's table).
    std::fputs(kiln::server::model_table(core.repository().index(false)).c_str(), stderr);
    std::fflush(stderr);
    if (!loaded && f.exit_on_error) {
      std::fprintf(stderr, "kiln-serve: some models failed to load; exiting (--exit-on-error)\n");
      return 1;
    }

    std::unique_ptr<kiln::server::http::HttpServer> http, metrics;
    if (f.allow_http) {
      kiln::server::http::HttpOptions o;
      o.address = f.http_address;
      o.port = static_cast<uint16_t>(f.http_port);
      o.threads = f.http_threads;
      o.max_body_bytes = f.max_body;
      o.max_header_bytes = f.max_header;
      o.max_connections = f.max_connections;
      o.read_timeout_secs = f.read_timeout_secs;
      o.min_body_bytes_per_sec = f.min_body_rate;
      o.max_response_bytes = f.max_response;
      o.bearer_token = f.bearer_token;
      o.tls_cert = f.http_cert;
      o.tls_key = f.http_key;
      o.tls_client_ca = f.http_client_ca;
      for (const std::string& spec : f.http_restricted) o.restricted.add(spec);
      http = std::make_unique<kiln::server::http::HttpServer>(core, o);
      http->start();
      std::printf("Started %s at %s:%u\n", f.http_cert.empty() ? "HTTPService" : "HTTPSService",
                  f.http_address.c_str(), http->port());
    }
    if (f.allow_metrics) {
      kiln::server::http::HttpOptions o;
      o.address = f.metrics_address;
      o.port = static_cast<uint16_t>(f.metrics_port);
      o.threads = 1;
      o.metrics = true;
      o.metrics_auth = f.metrics_require_token;
      o.bearer_token = f.bearer_token;
      o.read_timeout_secs = f.read_timeout_secs;
      metrics = std::make_unique<kiln::server::http::HttpServer>(core, o);
      metrics->start();
      std::printf("Started Metrics Service at %s:%u\n", f.metrics_address.c_str(), metrics->port());
    }
    std::unique_ptr<kiln::server::grpc::GrpcServer> grpc;
    if (f.allow_grpc) {
      grpc = std::make_unique<kiln::server::grpc::GrpcServer>(
          core, kiln::server::grpc::grpc_options(grpc_flags, f.grpc_address, f.grpc_port,
                                                 f.grpc_restricted, f.bearer_token));
      grpc->start();
      std::printf("Started GRPCInferenceService at %s:%u\n", f.grpc_address.c_str(), grpc->port());
    }
    std::fflush(stdout);

    const int sig = wait_for_signal(signals);
    std::printf("kiln-serve: signal %d, draining (up to %d s)\n", sig, f.exit_timeout_secs);
    std::fflush(stdout);
    const kiln::server::DrainResult drained = core.drain();
    if (http) http->stop();
    if (grpc) grpc->stop();
    if (metrics) metrics->stop();
    if (drained.left > 0) {
      // The exit timeout is a promise: do not wait for the queues to run dry in destructors.
      std::fprintf(stderr,
                   "kiln-serve: exit timeout with %zu requests in flight; %zu did not stop when "
                   "cancelled\n",
                   drained.at_exit_timeout, drained.left);
      std::fflush(stderr);
      std::_Exit(1);
    }
    if (drained.at_exit_timeout > 0) {
      std::fprintf(stderr, "kiln-serve: exit timeout with %zu requests in flight; cancelled\n",
                   drained.at_exit_timeout);
      std::fflush(stderr);
      return 1;
    }
    std::printf("kiln-serve: stopped\n");
    std::fflush(stdout);
    return 0;
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "kiln-serve: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kiln-serve: fatal: %s\n", e.what());
    return 1;
  } catch (...) {
    std::fprintf(stderr, "kiln-serve: fatal: unknown error\n");
    return 1;
  }
}
