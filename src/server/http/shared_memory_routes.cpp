// The HTTP side of Triton's shared memory extensions: /v2/systemsharedmemory (served by
// server/shared_memory.hpp) and /v2/cudasharedmemory (answered: not supported), with
// tritonserver 2.51's paths, methods, bodies and words.
#include "core/error.hpp"
#include "server/http/routes.hpp"

namespace kiln::server::http {
namespace {

using Writer = JsonWriter;

void put(Writer& w, std::string_view s) {
  w.String(s.data(), static_cast<rapidjson::SizeType>(s.size()));
}

std::string status_json(const std::vector<SharedMemoryRegionStatus>& regions) {
  JsonBuffer b;
  Writer w(b);
  w.StartArray();
  for (const SharedMemoryRegionStatus& r : regions) {
    w.StartObject();
    w.Key("name");
    put(w, r.name);
    w.Key("key");
    put(w, r.key);
    w.Key("offset");
    w.Uint64(r.offset);
    w.Key("byte_size");
    w.Uint64(r.byte_size);
    w.EndObject();
  }
  w.EndArray();
  return b.GetString();
}

// A register body's unsigned member, in tritonserver's words when it is something else.
uint64_t unsigned_member(const JsonValue& v) {
  KILN_CHECK(v.IsUint64(), ErrorCode::Internal,
             "attempt to access JSON non-unsigned-integer as unsigned-integer");
  return v.GetUint64();
}

void register_region(InferenceServer& core, const std::string& name, const std::string& body) {
  JsonDocument d = parse_body_json(body);
  // tritonserver reads the members of anything; a body that is no object has none.
  auto member = [&](const char* key) -> const JsonValue* {
    if (!d.IsObject()) return nullptr;
    auto it = d.FindMember(key);
    return it == d.MemberEnd() ? nullptr : &it->value;
  };
  const JsonValue* key = member("key");
  KILN_CHECK_ARG(key != nullptr, "Shared memory register request has no 'key' field");
  KILN_CHECK(key->IsString(), ErrorCode::Internal, "attempt to access JSON non-string as string");
  const JsonValue* offset = member("offset");
  const JsonValue* byte_size = member("byte_size");
  KILN_CHECK_ARG(byte_size != nullptr, "Shared memory register request has no 'byte_size' field");
  core.shared_memory().register_region(name, std::string(key->GetString(), key->GetStringLength()),
                                       offset ? unsigned_member(*offset) : 0,
                                       unsigned_member(*byte_size));
}

}  // namespace

std::optional<ApiRoute> shared_memory_route(InferenceServer& core,
                                            const std::vector<std::string>& s, Request& request,
                                            const Reply& reply) {
  // /v2/<kind>/status | /v2/<kind>/unregister | /v2/<kind>/region/<name>/<op>
  std::string name, op;
  if (s.size() == 3) {
    op = s[2];
  } else if (s.size() == 5 && s[2] == "region") {
    name = s[3];
    op = s[4];
  }
  const bool named = !name.empty();
  const bool known = op == "status" || op == "unregister" || (op == "register" && named);
  if (!known) {
    // The router's own 404, labelled text/plain as tritonserver's.
    Response res = error_response(404, "Not Found");
    res.set(boost::beast::http::field::content_type, "text/plain");
    reply(std::move(res));
    return std::nullopt;
  }
  const bool post = request.method() == boost::beast::http::verb::post;
  const bool get = request.method() == boost::beast::http::verb::get;
  if (op == "status" ? !get : !post) {
    reply(error_response(405, "Method Not Allowed"));  // labelled JSON, as tritonserver's
    return std::nullopt;
  }
  ApiRoute route;
  route.category = "shared-memory";
  if (s[1] == "cudasharedmemory") {
    route.action = [name, op, reply] {
      if (op == "status") {
        // Nothing can be registered: the list is empty and a name is tritonserver's 404.
        KILN_CHECK(name.empty(), ErrorCode::NotFound,
                   "Unable to find cuda shared memory region: '{}'", name);
        reply(json_response("[]"));
      } else if (op == "register") {
        fail(ErrorCode::Unsupported, "{}", kCudaSharedMemoryUnsupported);
      } else {
        reply(json_response({}));  // unregistering an unknown name is no error (tritonserver)
      }
    };
    return route;
  }
  route.action = [&core, &request, name, named, op, reply] {
    SharedMemoryRegistry& registry = core.shared_memory();
    if (op == "status") {
      reply(json_response(status_json(registry.status(name))));
      return;
    }
    if (op == "register") {
      register_region(core, name, request.body());
    } else if (named) {
      registry.unregister(name);
    } else {
      registry.unregister_all();
    }
    reply(json_response({}));  // tritonserver: empty, labelled JSON
  };
  return route;
}

}  // namespace kiln::server::http
