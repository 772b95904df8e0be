#pragma once
// The .kiln engine file: the contract between `kiln compile` and the runtime. A fixed header,
// a FlatBuffers description of the whole IR (src/engine/kiln.fbs), then the weights, each
// 64-byte aligned, which a reader maps into memory and hands out as zero-copy tensor views.
// docs/ENGINE_FORMAT.md describes the layout and what a reader checks.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/target.hpp"
#include "ir/model.hpp"

namespace kiln::engine {

// Bumped whenever a reader of the previous version could misread a new file.
// 2: the execution plan (memory plan and kernel choices) after the graph.
inline constexpr uint32_t kFormatVersion = 3;
// The oldest format this reader still opens: a format-2 file is a format-3 file in which every
// tensor is stored plain.
inline constexpr uint32_t kOldestFormatVersion = 2;
inline constexpr char kMagic[8] = {'K', 'I', 'L', 'N', 'E', 'N', 'G', '1'};
inline constexpr size_t kHeaderSize = 64;
inline constexpr size_t kWeightAlignment = 64;

// The stamp of an engine file. The writer takes `target` and `source_hash` from the caller and
// fills in the format and Kiln versions itself.
struct EngineInfo {
  Target target = Target::cpu_baseline();
  uint64_t source_hash = 0;  // hash_bytes() of the source model file; 0 when unknown
  uint32_t format_version = kFormatVersion;
  std::string kiln_version = KILN_VERSION;
  // The source model's path when it was compiled (informational; the writer takes it from
  // ir::Model::source_path, and the reader sets that field to the engine file's own path).
  std::string source_path;
  // The devices besides the CPU the stored plan was made for (`kiln compile --device gpu` on
  // an H200: {"cuda:sm_90"} with features {"cublasLt 13.1.0", "cudnn 9.14.0"}); empty for a
  // CPU engine.
  std::vector<Target> device_targets;
};

// The execution plan `kiln compile` stores beside the graph, as plain data (engine/ knows
// nothing of the runtime): per device, an arena size and each planned value's slot in it; per
// node of the main graph, the backend and kernel chosen for it.
struct StoredBuffer {
  std::string value;
  uint64_t offset = 0;
  uint64_t size = 0;
};
struct StoredArena {
  std::string device;
  uint64_t bytes = 0;
  std::vector<StoredBuffer> buffers;
};
struct StoredKernel {
  uint32_t node = 0;  // index in the main graph's node order
  std::string backend;
  std::string kernel;
};
// A node's constant input in its kernel's own layout (see kiln.fbs PackedWeight).
struct StoredPackedWeight {
  uint32_t node = 0;   // index in the main graph's node order
  uint32_t input = 0;  // the node input it packs
  std::string backend;
  std::string format;  // the kernel's description of the layout
  Tensor data;         // UInt8, 1-D
};
// A node's kernel's timed choices (see kiln.fbs KernelTactics).
struct StoredTactics {
  uint32_t node = 0;  // index in the main graph's node order
  std::string backend;
  std::vector<std::string> libraries;  // the backend's library_versions when they were timed
  std::string text;                    // the kernel's own form
};
struct ExecutionPlan {
  std::vector<StoredArena> arenas;
  std::vector<StoredKernel> kernels;
  std::vector<StoredPackedWeight> packed;
  std::vector<StoredTactics> tactics;
};

struct ReadOptions {
  // The fuzzer turns this off: the checksum would reject nearly every mutated input before the
  // parser sees it.
  bool verify_checksum = true;
  // Refuse engines whose target this machine cannot run. `host` overrides the detected target.
  bool check_target = true;
  std::optional<Target> host;
  // Leave the plain form of weights stored packed only (format 3) unwritten: their constants are
  // zero pages that take no memory until unpack_deferred fills them. For the runtime, which hands
  // the packed form to the kernels that made it and unpacks only what something else reads;
  // every other reader wants them filled (the default).
  bool defer_unpacking = false;
};

// A constant of the main graph stored only packed, whose plain form is not filled yet.
struct DeferredWeight {
  std::string value;  // the constant's name in the main graph
  Tensor plain;       // the constant itself: its storage, to fill
  Tensor packed;      // UInt8, the packed form (a view of the file)
  std::string format;
};
// Fills `w.plain` from its packed form (engine/packed_layout.hpp).
void unpack_deferred(DeferredWeight& w);

struct LoadedEngine {
  ir::Model model;  // initializers and tensor attributes are views into the file's bytes
  EngineInfo info;
  // Set when the engine carries one; checked against the graph (names, bounds) but not trusted
  // further: the runtime checks each slot against its value's size before using it.
  std::optional<ExecutionPlan> plan;
  // With ReadOptions::defer_unpacking, the constants still to unpack before anything but their
  // packing kernels reads them.
  std::vector<DeferredWeight> deferred;
  size_t packed_only = 0;  // constants stored only packed (format 3), deferred or filled
  // The file's bytes (the mapping, or a copy for read_engine_bytes); tensors keep it alive too.
  std::shared_ptr<const void> bytes;
  size_t size = 0;
  size_t weights_offset = 0;  // where the weights section starts, from the beginning of the file
  size_t weights_size = 0;
};

// Writes `model` (validated first) and, when given, its execution plan to `path`, via a
// temporary file renamed into place.
void write_engine(const ir::Model& model, const EngineInfo& info, const std::string& path,
                  const ExecutionPlan* plan = nullptr);
// Maps `path` read-only and rebuilds the model; pages are resident only while the checksum reads
// them and once the runtime touches them again. Any malformed, corrupt, mismatched or
// incompatible file is a kiln::Error naming the file and the problem.
LoadedEngine read_engine(const std::string& path, const ReadOptions& options = {});
// Same on bytes in memory (copied into an aligned buffer first).
LoadedEngine read_engine_bytes(std::string_view bytes, const ReadOptions& options = {});
// True when `bytes` starts with the engine file magic.
bool has_engine_magic(std::string_view bytes);
// True when `bytes` start with an engine header's layout (format version, header size, section
// alignment), whatever the magic: a file whose magic alone is damaged is an engine to refuse as
// such, not ONNX bytes to call corrupt protobuf.
bool has_engine_layout(std::string_view bytes);
// has_engine_magic or has_engine_layout: the bytes are for the engine reader to accept or refuse.
bool looks_like_engine(std::string_view bytes);
// What is wrong with the first bytes of a file that lacks the magic, for the error message:
// "not a Kiln engine file (bad magic '...', expected 'KILNENG1')".
std::string engine_magic_problem(std::string_view bytes);
// looks_like_engine() on the first bytes of the file at `path` (false when unreadable).
bool is_engine_file(const std::string& path);

// The checksum and source-model hash: word-wise multiply-xorshift over little-endian 8-byte
// words in four independent lanes, so it runs at memory speed. Not cryptographic.
uint64_t hash_bytes(const void* data, size_t size);

class Hasher {
 public:
  void update(const void* data, size_t size);
  uint64_t finish() const;

 private:
  void consume_block(const unsigned char* block);
  uint64_t lanes_[4] = {0x9e3779b97f4a7c15ull, 0xc2b2ae3d27d4eb4full, 0x165667b19e3779f9ull,
                        0x27d4eb2f165667c5ull};
  unsigned char pending_[32] = {};
  size_t pending_size_ = 0;
  uint64_t total_ = 0;
};

}  // namespace kiln::engine
