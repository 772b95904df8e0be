#pragma once
// Triton's local response cache: successful responses of models whose config enables
// `response_cache`, keyed on the model, its version, the inputs (names, datatypes, shapes,
// bytes) and the outputs asked for, kept in a least-recently-used list within a byte budget
// (--cache-config local,size=N). A key holds the request's whole identity, not only its hash,
// so two requests that hash alike never share an answer. Cached outputs share their tensors
// with every response served from them (responses are read-only once made).
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "server/infer_types.hpp"

namespace kiln::server {

struct CacheKey {
  std::string bytes;  // the request's identity, serialized
  size_t hash = 0;
};

// The key of `request` for the model version that serves it.
CacheKey response_cache_key(const InferRequest& request, std::string_view model, int64_t version);

// "--cache-config" values: "local,size=<bytes>" (tritonserver's syntax; the only cache here).
// Returns the local cache's size; InvalidArgument naming what is wrong otherwise.
size_t parse_cache_config(const std::vector<std::string>& specs);

class ResponseCache {
 public:
  explicit ResponseCache(size_t capacity_bytes) : capacity_(capacity_bytes) {}

  // A response carrying the cached outputs (null: not cached); the entry becomes the most
  // recently used.
  std::unique_ptr<InferResponse> lookup(const CacheKey& key);
  // Keeps the response's outputs under `key`, evicting the least recently used entries to make
  // room; a response that alone exceeds the capacity is not kept. Returns the bytes the entry
  // takes, 0 when it was not kept.
  size_t insert(const CacheKey& key, const InferResponse& response);

  // Whether `request`'s key could ever be kept: false where its inputs' bytes alone pass the
  // capacity (a key holds them, and an entry counts its key), so that such a request is never
  // copied into a key only to miss.
  bool may_hold(const InferRequest& request) const;

  size_t capacity() const { return capacity_; }
  size_t bytes() const;
  size_t entries() const;

 private:
  struct Entry {
    std::string key;
    size_t hash = 0;  // key's, to find its index entry when evicted
    std::string model_name;
    int64_t model_version = 0;
    std::vector<InferOutput> outputs;
    size_t bytes = 0;
  };
  using Lru = std::list<Entry>;

  Lru::iterator find_locked(const CacheKey& key);

  const size_t capacity_;
  mutable std::mutex mutex_;
  Lru lru_;  // most recently used first
  std::unordered_multimap<size_t, Lru::iterator> index_;
  size_t bytes_ = 0;
};

}  // namespace kiln::server
