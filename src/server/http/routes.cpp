#include "server/http/routes.hpp"

#include <cctype>
#include <charconv>

#include <rapidjson/error/en.h>

#include "server/http/metrics.hpp"
#include "server/json_memory.hpp"
#include "server/server_log.hpp"

namespace kiln::server::http {
namespace rj = rapidjson;
namespace bhttp = boost::beast::http;
namespace {

using Writer = JsonWriter;

void put(Writer& w, std::string_view s) {
  w.String(s.data(), static_cast<rj::SizeType>(s.size()));
}

// Health answers and the router's own refusals carry text/plain, whatever the body, as
// tritonserver's (clients read the status; the JSON error body is the same either way).
Response plain_response(unsigned status, std::string body = {}) {
  Response res{static_cast<bhttp::status>(status), 11};
  res.set(bhttp::field::content_type, "text/plain");
  res.body() = std::move(body);
  return res;
}

Response plain_error(unsigned status, std::string_view message) {
  return plain_response(status, error_json(message));
}

std::optional<std::string> percent_decode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out.push_back(s[i]);
      continue;
    }
    if (i + 2 >= s.size()) return std::nullopt;
    int value = 0;
    auto [p, ec] = std::from_chars(s.data() + i + 1, s.data() + i + 3, value, 16);
    if (ec != std::errc() || p != s.data() + i + 3) return std::nullopt;
    out.push_back(static_cast<char>(value));
    i += 2;
  }
  return out;
}

std::optional<std::vector<std::string>> split_path(std::string_view target) {
  target = target.substr(0, target.find('?'));
  std::vector<std::string> segments;
  size_t start = 0;
  while (start < target.size()) {
    size_t slash = target.find('/', start);
    if (slash == std::string_view::npos) slash = target.size();
    if (slash > start) {
      auto seg = percent_decode(target.substr(start, slash - start));
      if (!seg) return std::nullopt;
      segments.push_back(std::move(*seg));
    }
    start = slash + 1;
    if (segments.size() > 16) return std::nullopt;
  }
  return segments;
}

// A version segment that is not a number matches no route (404), as in tritonserver.
std::optional<int64_t> parse_version(const std::string& text) {
  int64_t v = -1;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || p != text.data() + text.size() || v < 0) return std::nullopt;
  return v;
}

std::string server_metadata_json(const ServerMetadata& m) {
  JsonBuffer b;
  Writer w(b);
  w.StartObject();
  w.Key("name");
  put(w, m.name);
  w.Key("version");
  put(w, m.version);
  w.Key("extensions");
  w.StartArray();
  for (const std::string& e : m.extensions) put(w, e);
  w.EndArray();
  w.EndObject();
  return b.GetString();
}

// /v2/logging's answer: every setting, in tritonserver's order.
std::string log_settings_json(const LogSettings& l) {
  JsonBuffer b;
  Writer w(b);
  w.StartObject();
  w.Key("log_file");
  put(w, l.file);
  w.Key("log_info");
  w.Bool(l.info);
  w.Key("log_warning");
  w.Bool(l.warning);
  w.Key("log_error");
  w.Bool(l.error);
  w.Key("log_verbose_level");
  w.Uint(l.verbose_level);
  w.Key("log_format");
  put(w, l.format);
  w.EndObject();
  return b.GetString();
}

// A POST /v2/logging member as a setting value (boolean, unsigned integer or string).
LogSettingValue log_setting_value(const JsonValue& v, std::string_view name) {
  if (v.IsBool()) return v.GetBool();
  if (v.IsUint64()) return v.GetUint64();
  if (v.IsString()) return std::string(v.GetString(), v.GetStringLength());
  fail(ErrorCode::InvalidArgument,
       "log setting '{}' must be a boolean, an unsigned integer or a string", name);
}

// The trace settings' answer: Triton's names and order, trace_level a list, the rest strings.
std::string trace_settings_json(const TraceSettings& settings) {
  JsonBuffer b;
  Writer w(b);
  w.StartObject();
  for (const auto& [name, values] : trace_settings_view(settings)) {
    w.Key(name.c_str());
    if (name == "trace_level") {
      w.StartArray();
      for (const std::string& v : values) put(w, v);
      w.EndArray();
    } else {
      put(w, values.front());
    }
  }
  w.EndObject();
  return b.GetString();
}

void tensor_metadata(Writer& w, const std::vector<TensorMetadata>& tensors) {
  w.StartArray();
  for (const TensorMetadata& t : tensors) {
    w.StartObject();
    w.Key("name");
    put(w, t.name);
    w.Key("datatype");
    put(w, t.datatype);
    w.Key("shape");
    w.StartArray();
    for (int64_t d : t.shape) w.Int64(d);
    w.EndArray();
    w.EndObject();
  }
  w.EndArray();
}

std::string model_metadata_json(const ModelMetadata& m) {
  JsonBuffer b;
  Writer w(b);
  w.StartObject();
  w.Key("name");
  put(w, m.name);
  w.Key("versions");
  w.StartArray();
  for (const std::string& v : m.versions) put(w, v);
  w.EndArray();
  w.Key("platform");
  put(w, m.platform);
  w.Key("inputs");
  tensor_metadata(w, m.inputs);
  w.Key("outputs");
  tensor_metadata(w, m.outputs);
  w.EndObject();
  return b.GetString();
}

void duration(Writer& w, const char* key, const DurationStat& d) {
  w.Key(key);
  w.StartObject();
  w.Key("count");
  w.Uint64(d.count);
  w.Key("ns");
  w.Uint64(d.ns);
  w.EndObject();
}

std::string statistics_json(const std::vector<ModelStatisticsEntry>& entries) {
  JsonBuffer b;
  Writer w(b);
  w.StartObject();
  w.Key("model_stats");
  w.StartArray();
  for (const ModelStatisticsEntry& e : entries) {
    const StatisticsSnapshot& s = e.stats;
    w.StartObject();
    w.Key("name");
    put(w, e.name);
    w.Key("version");
    put(w, std::to_string(e.version));
    w.Key("last_inference");
    w.Uint64(s.last_inference_ms);
    w.Key("inference_count");
    w.Uint64(s.inference_count);
    w.Key("execution_count");
    w.Uint64(s.execution_count);
    w.Key("inference_stats");
    w.StartObject();
    duration(w, "success", s.inference.success);
    duration(w, "fail", s.inference.fail);
    duration(w, "queue", s.inference.queue);
    duration(w, "compute_input", s.inference.compute_input);
    duration(w, "compute_infer", s.inference.compute_infer);
    duration(w, "compute_output", s.inference.compute_output);
    duration(w, "cache_hit", s.inference.cache_hit);
    duration(w, "cache_miss", s.inference.cache_miss);
    w.EndObject();
    w.Key("response_stats");
    w.StartObject();
    w.EndObject();
    w.Key("batch_stats");
    w.StartArray();
    for (const auto& [size, bs] : s.batches) {
      w.StartObject();
      w.Key("batch_size");
      w.Uint64(size);
      duration(w, "compute_input", bs.compute_input);
      duration(w, "compute_infer", bs.compute_infer);
      duration(w, "compute_output", bs.compute_output);
      w.EndObject();
    }
    w.EndArray();
    w.Key("memory_usage");
    w.StartArray();
    w.EndArray();
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  return b.GetString();
}

std::string index_json(const std::vector<RepositoryIndexEntry>& entries) {
  JsonBuffer b;
  Writer w(b);
  w.StartArray();
  for (const RepositoryIndexEntry& e : entries) {
    w.StartObject();
    w.Key("name");
    put(w, e.name);
    if (!e.version.empty()) {
      w.Key("version");
      put(w, e.version);
    }
    // Triton leaves the state out for a model never loaded.
    if (e.state != ModelState::NotLoaded) {
      w.Key("state");
      put(w, model_state_name(e.state));
    }
    // Triton leaves the reason out when there is none (a ready version), and for a model never
    // loaded (an ensemble refused at load: the load answer and the log say why).
    if (!e.reason.empty() && e.state != ModelState::NotLoaded) {
      w.Key("reason");
      put(w, e.reason);
    }
    w.EndObject();
  }
  w.EndArray();
  return b.GetString();
}

// An optional JSON object body; InvalidArgument when it parses but is not an object.
JsonDocument parse_body_object(const std::string& body) {
  JsonDocument d = parse_body_json(body);
  KILN_CHECK_ARG(d.IsObject(), "the request JSON must be an object");
  return d;
}

void handle_load(InferenceServer& core, const std::string& model, const std::string& body) {
  JsonDocument d = parse_body_object(body);
  std::optional<std::string> config;
  auto params = d.FindMember("parameters");
  if (params != d.MemberEnd()) {
    KILN_CHECK_ARG(params->value.IsObject(), "'parameters' must be a JSON object");
    for (auto it = params->value.MemberBegin(); it != params->value.MemberEnd(); ++it) {
      std::string_view key(it->name.GetString(), it->name.GetStringLength());
      if (key == "config") {
        KILN_CHECK_ARG(it->value.IsString(), "load parameter 'config' must be a JSON string");
        config = std::string(it->value.GetString(), it->value.GetStringLength());
      } else if (key.starts_with("file:")) {
        fail(ErrorCode::Unsupported, "file overrides in a load request are not supported ({})",
             key);
      }
    }
  }
  core.repository().load(model, config);
}

// The API category of a route, for the restricted-API check.
struct Route {
  const char* category;
  std::function<void()> run;
};

// With a bearer token set: the request's Authorization header (never a trailer field: the
// parser keeps only header fields) must carry it; otherwise `refusal` is the 401.
bool bearer_authorized(const HttpOptions& options, const Request& request, Response& refusal) {
  if (options.bearer_token.empty()) return true;
  auto it = request.find(bhttp::field::authorization);
  if (it != request.end() &&
      bearer_matches(std::string_view(it->value().data(), it->value().size()),
                     options.bearer_token)) {
    return true;
  }
  refusal = error_response(401, "Unauthorized");
  refusal.set(bhttp::field::www_authenticate, "Bearer");
  return false;
}

bool authorized(const HttpOptions& options, const Request& request, const char* category,
                Response& refusal) {
  auto restricted = options.restricted.by_category.find(category);
  if (restricted != options.restricted.by_category.end()) {
    const auto& [key, value] = restricted->second;
    auto it = request.find(key);
    if (it == request.end() || it->value() != value) {
      refusal =
          error_response(403, fmt::format("This API is restricted, expecting header '{}'", key));
      return false;
    }
  }
  if (std::string_view(category) != "health") return bearer_authorized(options, request, refusal);
  return true;
}

// GET or POST /v2[/models/NAME]/trace/setting: a POST's members (a string, a list of strings,
// or null to clear) are applied together or not at all; the answer is the settings after it.
std::string handle_trace_setting(InferenceServer& core, const Request& request, bool post,
                                 const std::string& model) {
  if (!model.empty()) {
    // In Triton's words (a 400, not the 404 of the model APIs).
    KILN_CHECK_ARG(!core.repository().versions(model).empty(), "Request for unknown model : {}",
                   model);
  }
  if (!post) return trace_settings_json(core.tracer().settings(model));
  JsonDocument d = parse_body_object(request.body());
  TraceSettingsUpdate update;
  for (const auto& m : d.GetObject()) {
    const std::string name(m.name.GetString(), m.name.GetStringLength());
    if (m.value.IsNull()) {
      update[name] = std::nullopt;
      continue;
    }
    std::vector<std::string> values;
    if (m.value.IsString()) {
      values.emplace_back(m.value.GetString(), m.value.GetStringLength());
    } else if (m.value.IsArray()) {
      for (const auto& v : m.value.GetArray()) {
        KILN_CHECK_ARG(v.IsString(),
                       "trace setting '{}' must be a string, a list of strings or "
                       "null",
                       name);
        values.emplace_back(v.GetString(), v.GetStringLength());
      }
    } else {
      fail(ErrorCode::InvalidArgument,
           "trace setting '{}' must be a string, a list of strings or null", name);
    }
    update[name] = std::move(values);
  }
  return trace_settings_json(core.tracer().update(model, update));
}

void handle_infer(InferenceServer& core, const HttpOptions& options, Request& request,
                  const std::string& model, int64_t version, Reply reply, ExchangeTrace* exchange) {
  std::optional<size_t> header_length;
  auto hl = request.find("Inference-Header-Content-Length");
  if (hl != request.end()) {
    size_t n = 0;
    std::string_view text(hl->value().data(), hl->value().size());
    auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
    KILN_CHECK_ARG(ec == std::errc() && p == text.data() + text.size(),
                   "invalid Inference-Header-Content-Length '{}'", text);
    header_length = n;
  }
  auto enc = request.find(bhttp::field::content_encoding);
  KILN_CHECK(enc == request.end() || enc->value() == "identity", ErrorCode::Unsupported,
             "unsupported Content-Encoding '{}'",
             std::string_view(enc->value().data(), enc->value().size()));
  std::unique_ptr<InferRequest> infer =
      decode_infer_request(request.body(), header_length, options.codec, model);
  infer->model_name = model;
  infer->model_version = version;
  infer->trace = core.tracer().start(model);
  if (infer->trace && exchange) {
    infer->trace->stamp(TraceActivity::HttpRecvStart, exchange->recv_start);
    infer->trace->stamp(TraceActivity::HttpRecvEnd, exchange->recv_end);
    exchange->trace = infer->trace;
  }
  OutputEncoding encoding = output_encoding_of(*infer);
  encoding.max_bytes = options.max_response_bytes;
  // The body is no longer needed once decoded; free it before the request waits in a queue.
  std::string().swap(request.body());
  core.infer_async(std::move(infer), [reply = std::move(reply), encoding = std::move(encoding)](
                                         Status status, std::unique_ptr<InferResponse> response) {
    if (!status) {
      // tritonserver answers an unknown model's infer text/plain, every other refusal (an
      // unknown shared memory region's 404 too) JSON.
      const unsigned code = http_status(status.code());
      const bool unknown_model = status.code() == ErrorCode::NotFound &&
                                 !status.message().starts_with("Unable to find shared memory");
      Response res = unknown_model ? plain_error(code, status.message())
                                   : error_response(code, status.message());
      // Retry-After counts whole seconds (RFC 9110); the message gives the milliseconds.
      if (status.retry_after_ms() > 0) {
        res.set(bhttp::field::retry_after, std::to_string((status.retry_after_ms() + 999) / 1000));
      }
      reply(std::move(res));
      return;
    }
    try {
      EncodedResponse encoded = encode_infer_response(*response, encoding);
      Response res{bhttp::status::ok, 11};
      if (encoded.header_length) {
        res.set(bhttp::field::content_type, "application/octet-stream");
        res.set("Inference-Header-Content-Length", std::to_string(*encoded.header_length));
      } else {
        res.set(bhttp::field::content_type, "application/json");
      }
      res.body() = std::move(encoded.body);
      reply(std::move(res));
    } catch (const Error& e) {
      reply(error_response(http_status(e.code()), e.message()));
    } catch (const std::bad_alloc&) {
      reply(error_response(503, "out of memory while encoding the response"));
    } catch (const std::exception& e) {
      reply(error_response(500, e.what()));
    }
  });
}

}  // namespace

Response json_response(std::string body, unsigned status) {
  Response res{static_cast<bhttp::status>(status), 11};
  res.set(bhttp::field::content_type, "application/json");
  res.body() = std::move(body);
  return res;
}

JsonDocument parse_body_json(const std::string& body) {
  JsonDocument d;
  if (body.empty()) {
    d.SetObject();
    return d;
  }
  KILN_CHECK_ARG(json_nesting_depth(body) <= 64,
                 "the request JSON is nested deeper than 64 levels");
  JsonMemoryScope memory(16 * body.size() + (size_t{1} << 20), "parsing the request JSON");
  d.Parse<rj::kParseIterativeFlag>(body.data(), body.size());
  // Internal (500) is tritonserver's status for a body that does not parse; its text too.
  KILN_CHECK(!d.HasParseError(), ErrorCode::Internal,
             "failed to parse the request JSON buffer: {} at {}",
             rj::GetParseError_En(d.GetParseError()), d.GetErrorOffset());
  return d;
}

Response error_response(unsigned status, std::string_view message, unsigned version) {
  Response res{static_cast<bhttp::status>(status), version};
  res.set(bhttp::field::content_type, "application/json");
  res.body() = error_json(message);
  return res;
}

void route_api(InferenceServer& core, const HttpOptions& options, Request& request, Reply reply,
               ExchangeTrace* exchange) {
  auto segments = split_path(std::string_view(request.target().data(), request.target().size()));
  if (!segments || segments->empty() || (*segments)[0] != "v2") {
    reply(plain_error(404, "Not Found"));
    return;
  }
  const std::vector<std::string>& s = *segments;
  const bool get = request.method() == bhttp::verb::get;
  const bool post = request.method() == bhttp::verb::post;
  const char* category = nullptr;
  std::function<void()> action;
  // tritonserver labels the 405 of server metadata and the repository index JSON, the others
  // text/plain.
  auto method_ok = [&](bool ok, bool json = false) {
    if (!ok) {
      reply(json ? error_response(405, "Method Not Allowed")
                 : plain_error(405, "Method Not Allowed"));
    }
    return ok;
  };
  try {
    if (s.size() == 1) {
      if (!method_ok(get, true)) return;
      category = "metadata";
      action = [&] { reply(json_response(server_metadata_json(core.metadata()))); };
    } else if (s[1] == "health" && s.size() == 3 && (s[2] == "live" || s[2] == "ready")) {
      if (!method_ok(get)) return;
      category = "health";
      action = [&] {
        const bool ok = s[2] == "live" ? core.live() : core.ready();
        reply(plain_response(ok ? 200 : 400));
      };
    } else if (s[1] == "repository" && s.size() == 3 && s[2] == "index") {
      if (!method_ok(post, true)) return;
      category = "model-repository";
      action = [&] {
        // As tritonserver: a body that parses but is no object is no filter, and a `ready` that
        // is not a bool is Internal in its words.
        JsonDocument d = parse_body_json(request.body());
        bool ready = false;
        auto it = d.IsObject() ? d.FindMember("ready") : d.MemberEnd();
        if (d.IsObject() && it != d.MemberEnd()) {
          KILN_CHECK(it->value.IsBool(), ErrorCode::Internal,
                     "attempt to access JSON non-boolean as boolean");
          ready = it->value.GetBool();
        }
        reply(json_response(index_json(core.repository().index(ready))));
      };
    } else if (s[1] == "repository" && s.size() == 5 && s[2] == "models" &&
               (s[4] == "load" || s[4] == "unload")) {
      if (!method_ok(post)) return;
      category = "model-repository";
      action = [&] {
        if (s[4] == "load") {
          handle_load(core, s[3], request.body());
        } else {
          parse_body_object(request.body());
          core.repository().unload(s[3]);
        }
        reply(json_response({}, 200));  // tritonserver: empty, labelled JSON
      };
    } else if (s[1] == "trace" && s.size() == 3 && s[2] == "setting") {
      if (!method_ok(get || post, true)) return;
      category = "trace";
      action = [&] { reply(json_response(handle_trace_setting(core, request, post, ""))); };
    } else if (s[1] == "models" && s.size() == 5 && s[3] == "trace" && s[4] == "setting") {
      if (!method_ok(get || post, true)) return;
      category = "trace";
      action = [&] { reply(json_response(handle_trace_setting(core, request, post, s[2]))); };
    } else if (s[1] == "logging" && s.size() == 2) {
      if (!method_ok(get || post, true)) return;
      category = "logging";
      action = [&] {
        if (post) {
          // All or nothing: every member checked into a copy, then applied at once.
          JsonDocument d = parse_body_object(request.body());
          LogSettings next = ServerLog::instance().settings();
          for (const auto& m : d.GetObject()) {
            const std::string_view name(m.name.GetString(), m.name.GetStringLength());
            set_log_setting(next, name, log_setting_value(m.value, name));
          }
          ServerLog::instance().apply(next);
        }
        reply(json_response(log_settings_json(ServerLog::instance().settings())));
      };
    } else if (s[1] == "systemsharedmemory" || s[1] == "cudasharedmemory") {
      std::optional<ApiRoute> route = shared_memory_route(core, s, request, reply);
      if (!route) return;
      category = route->category;
      action = std::move(route->action);
    } else if (s[1] == "models" && s.size() == 3 && s[2] == "stats") {
      if (!method_ok(get)) return;
      category = "statistics";
      action = [&] { reply(json_response(statistics_json(core.statistics()))); };
    } else if (s[1] == "models" && s.size() >= 3) {
      const std::string& model = s[2];
      int64_t version = -1;
      size_t next = 3;
      if (s.size() >= 5 && s[3] == "versions") {
        std::optional<int64_t> v = parse_version(s[4]);
        if (!v) {
          reply(plain_error(404, "Not Found"));
          return;
        }
        version = *v;
        next = 5;
      }
      const std::string op = next < s.size() ? s[next] : "";
      if (next + 1 < s.size()) {
        reply(plain_error(404, "Not Found"));
        return;
      }
      if (op.empty()) {
        if (!method_ok(get)) return;
        category = "metadata";
        action = [&, version] {
          reply(json_response(model_metadata_json(core.model_metadata(model, version))));
        };
      } else if (op == "ready") {
        if (!method_ok(get)) return;
        category = "health";
        action = [&, version] {
          reply(core.model_ready(model, version) ? plain_response(200)
                                                 : plain_error(400, "Model version not ready"));
        };
      } else if (op == "config") {
        if (!method_ok(get)) return;
        category = "model-config";
        action = [&, version] {
          std::shared_ptr<ModelVersion> hold;
          reply(json_response(config_to_json(core.model_config(model, version, hold))));
        };
      } else if (op == "stats") {
        if (!method_ok(get)) return;
        category = "statistics";
        action = [&, version] {
          reply(json_response(statistics_json(core.statistics(model, version))));
        };
      } else if (op == "infer") {
        if (!method_ok(post)) return;
        category = "inference";
        action = [&, version] {
          handle_infer(core, options, request, model, version, reply, exchange);
        };
      } else {
        reply(plain_error(404, "Not Found"));
        return;
      }
    } else {
      reply(plain_error(404, "Not Found"));
      return;
    }
    Response refusal;
    if (!authorized(options, request, category, refusal)) {
      reply(std::move(refusal));
      return;
    }
    action();
  } catch (const Error& e) {
    reply(error_response(http_status(e.code()), e.message()));
  } catch (const std::bad_alloc&) {
    reply(error_response(503, "out of memory while serving the request"));
  }
}

bool bearer_matches(std::string_view authorization, std::string_view token) {
  constexpr std::string_view kScheme = "bearer";
  if (token.empty()) return false;
  if (authorization.size() <= kScheme.size()) return false;
  for (size_t i = 0; i < kScheme.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(authorization[i])) != kScheme[i]) return false;
  }
  std::string_view credentials = authorization.substr(kScheme.size());
  if (credentials.front() != ' ' && credentials.front() != '\t') return false;
  while (!credentials.empty() && (credentials.front() == ' ' || credentials.front() == '\t')) {
    credentials.remove_prefix(1);
  }
  // Constant time in the token's content: a client learns nothing from how long a refusal took.
  unsigned char diff = credentials.size() == token.size() ? 0 : 1;
  for (size_t i = 0; i < credentials.size(); ++i) {
    diff |= static_cast<unsigned char>(credentials[i] ^ token[i % token.size()]);
  }
  return diff == 0;
}

void route_metrics(InferenceServer& core, const HttpOptions& options, Request& request,
                   Reply reply) {
  // As tritonserver's metrics port: any method but GET is 405, and a GET of any other path is
  // 200 with an empty body (Prometheus scrapes only /metrics).
  if (request.method() != bhttp::verb::get) {
    reply(plain_error(405, "Method Not Allowed"));
    return;
  }
  auto segments = split_path(std::string_view(request.target().data(), request.target().size()));
  const bool metrics = segments && segments->size() == 1 && (*segments)[0] == "metrics";
  Response refusal;
  if (options.metrics_auth && !bearer_authorized(options, request, refusal)) {
    reply(std::move(refusal));
    return;
  }
  Response res{bhttp::status::ok, 11};
  res.set(bhttp::field::content_type, "text/plain; charset=utf-8");
  if (metrics) res.body() = render_metrics(core);
  reply(std::move(res));
}

}  // namespace kiln::server::http
