#include "server/json_memory.hpp"

#include <algorithm>
#include <cstdlib>
#include <new>

namespace kiln::server {
namespace {

thread_local JsonMemoryScope* current_scope = nullptr;

}  // namespace

void* JsonAllocator::Malloc(size_t size) {
  if (size == 0) return nullptr;  // RapidJSON's convention for an empty allocation
  if (current_scope != nullptr) current_scope->charge(size);
  void* p = std::malloc(size);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}

void* JsonAllocator::Realloc(void* original, size_t original_size, size_t new_size) {
  if (new_size == 0) {
    std::free(original);
    return nullptr;
  }
  if (current_scope != nullptr && new_size > original_size) {
    current_scope->charge(new_size - original_size);
  }
  void* p = std::realloc(original, new_size);
  if (p == nullptr) throw std::bad_alloc();  // `original` is still valid and still owned
  return p;
}

void JsonAllocator::Free(void* ptr) noexcept {
  std::free(ptr);
}

JsonMemoryScope::JsonMemoryScope(size_t limit, std::string what, ErrorCode code)
    : limit_(limit), what_(std::move(what)), code_(code), outer_(current_scope) {
  current_scope = this;
}

JsonMemoryScope::~JsonMemoryScope() {
  current_scope = outer_;
}

void JsonMemoryScope::charge(size_t bytes) {
  if (bytes > limit_ - used_) {
    fail(code_, "{} needs more than {} bytes of memory, its limit", what_, limit_);
  }
  used_ += bytes;
  if (outer_ != nullptr) outer_->charge(bytes);
}

size_t json_nesting_depth(std::string_view text) {
  size_t depth = 0, deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // the escaped character cannot end the string
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

}  // namespace kiln::server
