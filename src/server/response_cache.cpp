#include "server/response_cache.hpp"

#include <algorithm>
#include <charconv>
#include <functional>

#include "core/error.hpp"

namespace kiln::server {
namespace {

void put_u64(std::string& out, uint64_t v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}
void put_text(std::string& out, std::string_view s) {
  put_u64(out, s.size());
  out.append(s);
}

// The bytes put_tensor appends for `t`.
size_t tensor_key_bytes(const Tensor& t) {
  if (t.dtype() != DataType::String) return t.nbytes();
  size_t n = 0;
  for (const std::string& s : t.values<std::string>()) n += sizeof(uint64_t) + s.size();
  return n;
}

// A tensor's elements as bytes: fixed-size types as stored, BYTES as length-prefixed strings.
void put_tensor(std::string& out, const Tensor& t) {
  if (t.dtype() == DataType::String) {
    for (const std::string& s : t.values<std::string>()) put_text(out, s);
  } else {
    out.append(static_cast<const char*>(t.raw_data()), t.nbytes());
  }
}

// What an entry holds in memory: the key, the outputs' elements and their names and shapes.
size_t response_bytes(const std::string& key, const std::vector<InferOutput>& outputs) {
  size_t n = key.size() + sizeof(InferOutput) * outputs.size() + 256;
  for (const InferOutput& o : outputs) {
    n += o.name.size() + o.shape.size() * sizeof(int64_t);
    if (o.data.dtype() == DataType::String) {
      for (const std::string& s : o.data.values<std::string>()) n += sizeof(std::string) + s.size();
    } else {
      n += o.data.nbytes();
    }
  }
  return n;
}

}  // namespace

CacheKey response_cache_key(const InferRequest& request, std::string_view model, int64_t version) {
  CacheKey key;
  std::string& b = key.bytes;
  put_text(b, model);
  put_u64(b, static_cast<uint64_t>(version));
  // Inputs and outputs by name: the order a client lists them in does not change the answer.
  std::vector<const InferInput*> inputs;
  for (const InferInput& in : request.inputs) inputs.push_back(&in);
  std::sort(inputs.begin(), inputs.end(),
            [](const InferInput* a, const InferInput* c) { return a->name < c->name; });
  put_u64(b, inputs.size());
  for (const InferInput* in : inputs) {
    put_text(b, in->name);
    put_u64(b, static_cast<uint64_t>(in->datatype));
    put_u64(b, in->shape.size());
    for (int64_t d : in->shape) put_u64(b, static_cast<uint64_t>(d));
    put_tensor(b, in->data);
  }
  std::vector<std::string_view> outputs;
  for (const RequestedOutput& o : request.outputs) outputs.push_back(o.name);
  std::sort(outputs.begin(), outputs.end());
  put_u64(b, outputs.size());
  for (std::string_view o : outputs) put_text(b, o);
  key.hash = std::hash<std::string_view>{}(b);
  return key;
}

size_t parse_cache_config(const std::vector<std::string>& specs) {
  size_t size = 0;
  for (const std::string& spec : specs) {
    const size_t comma = spec.find(',');
    const std::string_view cache = std::string_view(spec).substr(0, comma);
    KILN_CHECK_ARG(cache == "local",
                   "--cache-config '{}': only the local cache is available (local,size=<bytes>)",
                   spec);
    KILN_CHECK_ARG(comma != std::string::npos, "--cache-config '{}': expected local,size=<bytes>",
                   spec);
    const std::string_view setting = std::string_view(spec).substr(comma + 1);
    const size_t eq = setting.find('=');
    KILN_CHECK_ARG(eq != std::string_view::npos && setting.substr(0, eq) == "size",
                   "--cache-config '{}': the local cache takes size=<bytes>", spec);
    const std::string_view value = setting.substr(eq + 1);
    uint64_t n = 0;
    auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
    KILN_CHECK_ARG(ec == std::errc() && p == value.data() + value.size(),
                   "--cache-config '{}': size '{}' is not a number of bytes", spec, value);
    size = static_cast<size_t>(n);
  }
  return size;
}

bool ResponseCache::may_hold(const InferRequest& request) const {
  size_t n = 0;
  for (const InferInput& in : request.inputs) {
    n += tensor_key_bytes(in.data);
    if (n > capacity_) return false;
  }
  return true;
}

ResponseCache::Lru::iterator ResponseCache::find_locked(const CacheKey& key) {
  auto [first, last] = index_.equal_range(key.hash);
  for (auto it = first; it != last; ++it) {
    if (it->second->key == key.bytes) return it->second;
  }
  return lru_.end();
}

std::unique_ptr<InferResponse> ResponseCache::lookup(const CacheKey& key) {
  std::lock_guard lock(mutex_);
  auto it = find_locked(key);
  if (it == lru_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it);
  auto response = std::make_unique<InferResponse>();
  response->model_name = it->model_name;
  response->model_version = it->model_version;
  response->outputs = it->outputs;  // the tensors are shared, not copied
  return response;
}

size_t ResponseCache::insert(const CacheKey& key, const InferResponse& response) {
  const size_t need = response_bytes(key.bytes, response.outputs);
  if (need > capacity_) return 0;
  std::lock_guard lock(mutex_);
  if (find_locked(key) != lru_.end()) return need;  // a concurrent miss of the same request
  while (bytes_ + need > capacity_ && !lru_.empty()) {
    Entry& victim = lru_.back();
    auto [first, last] = index_.equal_range(victim.hash);
    for (auto it = first; it != last; ++it) {
      if (it->second == std::prev(lru_.end())) {
        index_.erase(it);
        break;
      }
    }
    bytes_ -= victim.bytes;
    lru_.pop_back();
  }
  lru_.push_front(Entry{key.bytes, key.hash, response.model_name, response.model_version,
                        response.outputs, need});
  index_.emplace(key.hash, lru_.begin());
  bytes_ += need;
  return need;
}

size_t ResponseCache::bytes() const {
  std::lock_guard lock(mutex_);
  return bytes_;
}

size_t ResponseCache::entries() const {
  std::lock_guard lock(mutex_);
  return lru_.size();
}

}  // namespace kiln::server
