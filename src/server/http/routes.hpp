#pragma once
// Request routing of the HTTP frontend, separate from the socket handling so it can be driven
// without a network (fuzzing, unit tests).
#include <boost/beast/http.hpp>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "server/http/http_server.hpp"
#include "server/http/request_parser.hpp"
#include "server/json_memory.hpp"
#include "server/trace.hpp"

namespace kiln::server::http {

using Response = boost::beast::http::response<boost::beast::http::string_body>;
// Delivers the response; called exactly once, from any thread.
using Reply = std::function<void(Response)>;

// A JSON error response {"error": message} with `status`.
Response error_response(unsigned status, std::string_view message, unsigned version = 11);

// Parses an optional JSON body (empty means {}); Internal (500) in tritonserver's words when it
// does not parse, InvalidArgument past the nesting and memory limits.
JsonDocument parse_body_json(const std::string& body);

// A JSON response with `status` ({"error": ...} bodies and answers alike).
Response json_response(std::string body, unsigned status = 200);

// An API route found: the restricted-API category it belongs to and what serves it.
struct ApiRoute {
  const char* category = nullptr;
  std::function<void()> action;
};

// The routes of /v2/systemsharedmemory/... and /v2/cudasharedmemory/... (`s`: the path's
// segments, s[1] naming which). nullopt when `reply` was already given (404, 405).
std::optional<ApiRoute> shared_memory_route(InferenceServer& core,
                                            const std::vector<std::string>& s, Request& request,
                                            const Reply& reply);

// What the connection knows of one exchange beyond its bytes, for request tracing: when the
// request began and finished arriving, and the trace the infer route started for it (the
// connection stamps the response's sending on it, then lets it go).
struct ExchangeTrace {
  Clock::time_point recv_start, recv_end;
  std::shared_ptr<RequestTrace> trace;
};

// Serves one API request (health, metadata, config, infer, statistics, repository, trace and
// log settings). `exchange`, when given, must outlive the call (not the reply).
void route_api(InferenceServer& core, const HttpOptions& options, Request& request, Reply reply,
               ExchangeTrace* exchange = nullptr);
// Serves one request on the metrics port (GET /metrics; the bearer token when
// `options.metrics_auth`).
void route_metrics(InferenceServer& core, const HttpOptions& options, Request& request,
                   Reply reply);

// Whether an Authorization header value carries `token` with the Bearer scheme (the scheme
// name is case-insensitive, RFC 9110 11.1); the token is compared in constant time.
bool bearer_matches(std::string_view authorization, std::string_view token);

}  // namespace kiln::server::http
