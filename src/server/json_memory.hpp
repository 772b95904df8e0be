#pragma once
// RapidJSON with memory that cannot run away. RapidJSON's own allocators return null when memory
// runs out and RapidJSON then writes through the null pointer (a SIGSEGV under a memory limit).
// JsonAllocator throws std::bad_alloc instead, and charges every allocation to the calling
// thread's innermost JsonMemoryScope, which throws a kiln::Error naming what was being parsed or
// written once the scope's limit is passed. So a client-controlled document (a request body, a
// response sized by a client's input) costs at most what its scope allows.
#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <cstddef>
#include <string>

#include "core/error.hpp"

namespace kiln::server {

struct JsonAllocator {
  static const bool kNeedFree = true;
  void* Malloc(size_t size);
  void* Realloc(void* original, size_t original_size, size_t new_size);
  static void Free(void* ptr) noexcept;
};

// While alive, allocations through JsonAllocator on this thread count against `limit` bytes
// (a running total of what was asked for, frees not subtracted: an upper bound of the peak).
// Past it, the allocation throws Error(code, "<what> needs more than <limit> bytes ...").
class JsonMemoryScope {
 public:
  JsonMemoryScope(size_t limit, std::string what, ErrorCode code = ErrorCode::InvalidArgument);
  ~JsonMemoryScope();
  JsonMemoryScope(const JsonMemoryScope&) = delete;
  JsonMemoryScope& operator=(const JsonMemoryScope&) = delete;

  size_t used() const { return used_; }
  void charge(size_t bytes);  // throws past the limit

 private:
  size_t limit_;
  size_t used_ = 0;
  std::string what_;
  ErrorCode code_;
  JsonMemoryScope* outer_;
};

using JsonDocument =
    rapidjson::GenericDocument<rapidjson::UTF8<>, rapidjson::MemoryPoolAllocator<JsonAllocator>,
                               JsonAllocator>;
using JsonValue = JsonDocument::ValueType;
using JsonBuffer = rapidjson::GenericStringBuffer<rapidjson::UTF8<>, JsonAllocator>;
using JsonWriter = rapidjson::Writer<JsonBuffer, rapidjson::UTF8<>, rapidjson::UTF8<>,
                                     JsonAllocator, rapidjson::kWriteNanAndInfFlag>;

// The deepest nesting of arrays and objects in `text` (strings skipped), without allocating:
// documents nested past a limit are refused before a parser builds anything for them.
size_t json_nesting_depth(std::string_view text);

}  // namespace kiln::server
