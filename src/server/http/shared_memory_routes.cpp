// The HTTP side of Triton's shared memory extensions: /v2/systemsharedmemory and
// /v2/cudasharedmemory (both served by server/shared_memory.hpp), with tritonserver 2.51's
// paths, methods, bodies and words.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>

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
    if (r.kind == SharedMemoryKind::Cuda) {
      w.Key("device_id");
      w.Uint64(static_cast<uint64_t>(r.device_id));
    } else {
      w.Key("key");
      put(w, r.key);
      w.Key("offset");
      w.Uint64(r.offset);
    }
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

// Strict base64 (RFC 4648's alphabet, '=' padding, no whitespace); nothing when `text` is not.
std::optional<std::string> decode_base64(std::string_view text) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  if (text.size() % 4 != 0) return std::nullopt;
  std::string out;
  out.reserve(text.size() / 4 * 3);
  for (size_t i = 0; i < text.size(); i += 4) {
    const bool last = i + 4 == text.size();
    const size_t pad = last ? (text[i + 3] == '=') + (text[i + 2] == '=' && text[i + 3] == '=') : 0;
    uint32_t bits = 0;
    for (size_t k = 0; k < 4; ++k) {
      const int v = k >= 4 - pad ? 0 : value(text[i + k]);
      if (v < 0) return std::nullopt;
      bits = bits << 6 | static_cast<uint32_t>(v);
    }
    out.push_back(static_cast<char>(bits >> 16));
    if (pad < 2) out.push_back(static_cast<char>(bits >> 8 & 0xff));
    if (pad < 1) out.push_back(static_cast<char>(bits & 0xff));
  }
  return out;
}

// POST /v2/cudasharedmemory/region/<name>/register: {"raw_handle": {"b64": ...}, "device_id",
// "byte_size"}, read in tritonserver's order and words. Every malformed body is a 400 naming
// the member (tritonserver answers a wrongly typed number with its JSON library's 500).
void register_cuda_region(InferenceServer& core, const std::string& name, const std::string& body) {
  JsonDocument d = parse_body_json(body);
  auto member = [](const JsonValue& object, const char* key) -> const JsonValue* {
    if (!object.IsObject()) return nullptr;
    auto it = object.FindMember(key);
    return it == object.MemberEnd() ? nullptr : &it->value;
  };
  auto unsigned_field = [&](const char* key) {
    const JsonValue* v = member(d, key);
    KILN_CHECK_ARG(v != nullptr, "Shared memory register request has no '{}' field", key);
    KILN_CHECK_ARG(v->IsUint64(),
                   "Shared memory register request's '{}' must be an unsigned integer of 64 bits "
                   "(attempt to access JSON non-unsigned-integer as unsigned-integer)",
                   key);
    return v->GetUint64();
  };
  const JsonValue* raw_handle = member(d, "raw_handle");
  KILN_CHECK_ARG(raw_handle != nullptr, "Shared memory register request has no 'raw_handle' field");
  const JsonValue* b64 = member(*raw_handle, "b64");
  KILN_CHECK_ARG(b64 != nullptr && b64->IsString(),
                 "Shared memory register request's 'raw_handle' has no 'b64' string field");
  const uint64_t byte_size = unsigned_field("byte_size");
  const uint64_t device_id = unsigned_field("device_id");
  const std::optional<std::string> handle =
      decode_base64({b64->GetString(), b64->GetStringLength()});
  KILN_CHECK_ARG(
      handle && handle->size() == kCudaIpcHandleBytes,
      "'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t ({})",
      handle ? fmt::format("{} bytes after decoding, not {}", handle->size(), kCudaIpcHandleBytes)
             : std::string("not base64"));
  core.shared_memory().register_cuda_region(
      name, std::as_bytes(std::span(*handle)),
      static_cast<int64_t>(std::min<uint64_t>(device_id, INT64_MAX)), byte_size);
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
  const SharedMemoryKind kind =
      s[1] == "cudasharedmemory" ? SharedMemoryKind::Cuda : SharedMemoryKind::System;
  route.action = [&core, &request, name, named, op, kind, reply] {
    SharedMemoryRegistry& registry = core.shared_memory();
    if (op == "status") {
      reply(json_response(status_json(registry.status(name, kind))));
      return;
    }
    if (op == "register") {
      if (kind == SharedMemoryKind::Cuda) {
        register_cuda_region(core, name, request.body());
      } else {
        register_region(core, name, request.body());
      }
    } else if (named) {
      registry.unregister(name, kind);
    } else {
      registry.unregister_all(kind);
    }
    reply(json_response({}));  // tritonserver: empty, labelled JSON
  };
  return route;
}

}  // namespace kiln::server::http
