// Engine file -> IR. The file is mapped read-only; every offset, size, name and code in it is
// checked before use, because an engine file is input like any other: a bad one is a
// kiln::Error, never a crash. Initializers become views into the mapping (no copies).
#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/engine_format.hpp"
#include "engine/kiln_generated.h"
#include "engine/packed_layout.hpp"

namespace kiln::engine {
namespace {

namespace fbs = flatbuffers;

// Subgraph and type nesting the reader follows; deeper files are refused, not recursed into.
constexpr int kMaxDepth = 64;
constexpr int kLastDataType = static_cast<int>(DataType::Int2);

[[noreturn]] void corrupt(const std::string& what) {
  fail(ErrorCode::InvalidArgument, "corrupt engine file: {}", what);
}

std::string text(const fbs::String* s) {
  return s ? s->str() : std::string();
}

std::string bytes_of(const fbs::Vector<uint8_t>* v) {
  return v ? std::string(reinterpret_cast<const char*>(v->data()), v->size()) : std::string();
}

// The Verifier checks a vector's length prefix for 4-byte alignment only, so a damaged file can
// hold a vector of 8-byte elements at a 4-byte boundary: copy them out bytewise, never load them
// in place.
template <typename T>
std::vector<T> copy_vector(const fbs::Vector<T>* v) {
  if (!v || v->size() == 0) return {};
  std::vector<T> out(v->size());
  std::memcpy(out.data(), v->Data(), v->size() * sizeof(T));
  return out;
}

std::string bytes_of(const fb::Bytes* b) {
  return b ? bytes_of(b->data()) : std::string();
}

class Reader {
 public:
  Reader(const unsigned char* weights, size_t weights_size, std::shared_ptr<void> owner)
      : weights_(weights), weights_size_(weights_size), owner_(std::move(owner)) {}

  ir::Model read_model(const fb::Model& m) {
    ir::Model model;
    model.ir_version = m.ir_version();
    model.producer_name = text(m.producer_name());
    model.producer_version = text(m.producer_version());
    model.domain = text(m.domain());
    model.doc_string = text(m.doc_string());
    model.model_version = m.model_version();
    if (m.metadata()) {
      for (const fb::MetadataEntry* e : *m.metadata()) {
        std::string key = text(e->key());
        if (!model.metadata.emplace(key, text(e->value())).second) {
          corrupt(fmt::format("metadata key '{}' appears twice", key));
        }
      }
    }
    model.source_path = text(m.source_path());
    model.graph = std::make_shared<ir::Graph>(text(m.graph()->name()));
    read_graph(*m.graph(), *model.graph, 0);
    return model;
  }

  // A constant of the main graph stored packed only (format 3): its name, the packed weight
  // it is the plain form of, and its storage, to fill once the plan is read.
  struct PackedOnly {
    std::string value;
    int packed = -1;
    Tensor plain;
  };
  std::vector<PackedOnly>& packed_only() { return packed_only_; }

  // `value`: the name of the main graph's constant being read, the only place a tensor may be
  // stored packed only.
  Tensor read_tensor(const fb::Tensor* t, const std::string& ctx,
                     const std::string* value = nullptr) {
    if (!t || t->dtype() == 0) return {};
    if (t->packed() >= 0) return read_packed_only(*t, ctx, value);
    DataType type = dtype(t->dtype(), ctx);
    if (!dtype_is_supported(type)) {
      corrupt(fmt::format("{}: tensor of unsupported element type {}", ctx, dtype_name(type)));
    }
    std::vector<int64_t> dims = copy_vector(t->dims());
    int64_t numel;
    try {
      numel = shape_numel(dims);
    } catch (const Error& e) {
      corrupt(fmt::format("{}: tensor dims {}: {}", ctx, dims_to_string(dims), e.message()));
    }
    if (type == DataType::String) {
      size_t count = t->strings() ? t->strings()->size() : 0;
      if (static_cast<uint64_t>(numel) != count) {
        corrupt(
            fmt::format("{}: string tensor {} holds {} strings", ctx, dims_to_string(dims), count));
      }
      Tensor out(type, dims);
      auto* p = out.data<std::string>();
      for (size_t i = 0; i < count; ++i) p[i] = bytes_of(t->strings()->Get(i));
      return out;
    }
    // numel is at most INT64_MAX and element sizes at most 8: compare in 128 bits.
    unsigned __int128 need = static_cast<unsigned __int128>(numel) * dtype_size(type);
    if (need != t->size()) {
      corrupt(fmt::format("{}: {}{} needs {} bytes but the file gives {}", ctx, dtype_name(type),
                          dims_to_string(dims), static_cast<uint64_t>(need), t->size()));
    }
    if (t->offset() % kWeightAlignment != 0) {
      corrupt(fmt::format("{}: weights at offset {} are not {}-byte aligned", ctx, t->offset(),
                          kWeightAlignment));
    }
    if (t->offset() > weights_size_ || t->size() > weights_size_ - t->offset()) {
      corrupt(fmt::format("{}: weights [{}, +{}) lie outside the weights section ({} bytes)", ctx,
                          t->offset(), t->size(), weights_size_));
    }
    const unsigned char* bytes = weights_ + t->offset();
    // A bool other than 0 or 1 is undefined behaviour for every kernel that reads it.
    if (type == DataType::Bool &&
        std::any_of(bytes, bytes + t->size(), [](unsigned char b) { return b > 1; })) {
      corrupt(fmt::format("{}: bool tensor holds a byte other than 0 or 1", ctx));
    }
    // Read-only mapping: the IR never writes to initializers (passes make new tensors).
    void* data = const_cast<unsigned char*>(bytes);
    return Tensor::view(type, std::move(dims), data, owner_);
  }

 private:
  DataType dtype(int32_t code, const std::string& ctx) {
    if (code < 0 || code > kLastDataType) corrupt(fmt::format("{}: bad dtype code {}", ctx, code));
    return static_cast<DataType>(code);
  }

  TypeInfo read_type(const fb::Type* t, const std::string& ctx, int depth) {
    TypeInfo out;
    if (!t) return out;
    if (depth > kMaxDepth) corrupt(fmt::format("{}: types nest too deep", ctx));
    auto kind = static_cast<int>(t->kind());
    if (kind > static_cast<int>(TypeInfo::Kind::Optional)) {
      corrupt(fmt::format("{}: unknown type kind {}", ctx, kind));
    }
    out.kind = static_cast<TypeInfo::Kind>(kind);
    out.dtype = dtype(t->dtype(), ctx);
    if (t->has_shape()) {
      std::vector<Dim> dims;
      if (t->dims()) {
        dims.reserve(t->dims()->size());
        for (const fb::Dim* d : *t->dims()) {
          std::string symbol = text(d->symbol());
          bool plain =
              symbol.empty() && d->min() == 0 && d->max() == std::numeric_limits<int64_t>::max();
          dims.push_back(d->value() >= 0 || plain ? Dim(d->value())
                                                  : Dim::symbol(symbol, d->min(), d->max()));
        }
      }
      out.shape = Shape(std::move(dims));
    }
    if (t->elem())
      out.elem = std::make_shared<const TypeInfo>(read_type(t->elem(), ctx, depth + 1));
    return out;
  }

  ir::Value* resolve(const ir::Graph& g, const fbs::String* name, bool local_only,
                     const std::string& ctx) {
    if (!name || name->size() == 0) return nullptr;
    std::string n = name->str();
    ir::Value* v = local_only ? g.find_local_value(n) : g.find_value(n);
    if (!v) {
      corrupt(fmt::format("{}: names value '{}', which is not defined in graph '{}'{}", ctx, n,
                          g.name(), local_only ? "" : " or its enclosing graphs"));
    }
    return v;
  }

  ir::Attribute read_attribute(const fb::Attribute& a, ir::Graph& g, const std::string& ctx,
                               int depth) {
    using K = fb::AttrKind;
    auto subgraph = [&](const fb::Graph* sg) {
      if (!sg) corrupt(fmt::format("{}: graph attribute without a graph", ctx));
      auto out = std::make_shared<ir::Graph>(text(sg->name()), &g);
      read_graph(*sg, *out, depth + 1);
      return out;
    };
    switch (a.kind()) {
      case K::Float:
        return ir::Attribute(a.f());
      case K::Int:
        return ir::Attribute(a.i());
      case K::String:
        return ir::Attribute(bytes_of(a.s()));
      case K::Tensor:
        return ir::Attribute(read_tensor(a.t(), ctx));
      case K::Graph:
        return ir::Attribute(ir::GraphPtr(subgraph(a.g())));
      case K::Type:
        return ir::Attribute(read_type(a.tp(), ctx, 0));
      case K::Floats:
        return ir::Attribute(copy_vector(a.floats()));
      case K::Ints:
        return ir::Attribute(copy_vector(a.ints()));
      case K::Strings: {
        std::vector<std::string> out;
        if (a.strings()) {
          for (const fb::Bytes* b : *a.strings()) out.push_back(bytes_of(b));
        }
        return ir::Attribute(std::move(out));
      }
      case K::Tensors: {
        std::vector<Tensor> out;
        if (a.tensors()) {
          for (const fb::Tensor* t : *a.tensors()) out.push_back(read_tensor(t, ctx));
        }
        return ir::Attribute(std::move(out));
      }
      case K::Graphs: {
        std::vector<ir::GraphPtr> out;
        if (a.graphs()) {
          for (const fb::Graph* sg : *a.graphs()) out.push_back(subgraph(sg));
        }
        return ir::Attribute(std::move(out));
      }
    }
    corrupt(fmt::format("{}: unknown attribute kind {}", ctx, static_cast<int>(a.kind())));
  }

  // Storage for a constant stored packed only: anonymous zero pages, which take no memory until
  // something writes them, so a runtime that never needs the plain form never pays for it.
  Tensor read_packed_only(const fb::Tensor& t, const std::string& ctx, const std::string* value) {
    if (!value)
      corrupt(fmt::format("{}: only a constant of the main graph can be stored packed", ctx));
    DataType type = dtype(t.dtype(), ctx);
    std::vector<int64_t> dims = copy_vector(t.dims());
    int64_t numel;
    try {
      numel = shape_numel(dims);
    } catch (const Error& e) {
      corrupt(fmt::format("{}: tensor dims {}: {}", ctx, dims_to_string(dims), e.message()));
    }
    if ((type != DataType::Float32 && type != DataType::Int8 && type != DataType::UInt8) ||
        numel == 0 || t.size() != 0 || t.offset() != 0) {
      corrupt(fmt::format(
          "{}: {}{} stored packed only must be a non-empty float32, int8 or uint8 tensor "
          "with no plain bytes",
          ctx, dtype_name(type), dims_to_string(dims)));
    }
    const size_t element_bytes = dtype_size(type);
    // Bounded by the packed form, which lies in the file, once the plan is read (resolve).
    if (static_cast<uint64_t>(numel) > weights_size_ / element_bytes) {
      corrupt(fmt::format("{}: {}{} is larger than the file's weights", ctx, dtype_name(type),
                          dims_to_string(dims)));
    }
    const size_t bytes = static_cast<size_t>(numel) * element_bytes;
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    KILN_CHECK(p != MAP_FAILED, ErrorCode::Unavailable, "{}: cannot reserve {} bytes: {}", ctx,
               bytes, std::strerror(errno));
    std::shared_ptr<void> owner(p, [bytes](void* q) { ::munmap(q, bytes); });
    Tensor plain = Tensor::view(type, std::move(dims), p, std::move(owner));
    packed_only_.push_back({*value, t.packed(), plain});
    return plain;
  }

  void read_graph(const fb::Graph& fg, ir::Graph& g, int depth) {
    if (depth > kMaxDepth) corrupt(fmt::format("subgraphs nest deeper than {} levels", kMaxDepth));
    std::string gctx = fmt::format("graph '{}'", g.name());
    if (fg.opsets()) {
      for (const fb::OpsetEntry* o : *fg.opsets()) {
        if (!g.opsets().emplace(text(o->domain()), o->version()).second) {
          corrupt(fmt::format("{}: domain '{}' is imported twice", gctx, text(o->domain())));
        }
      }
    }
    // Values by name; inputs and initializers are created first so they land in their lists
    // in order, then every other value in the file's order.
    std::map<std::string, const fb::Value*> declared;
    std::vector<const fb::Value*> order;
    if (fg.values()) {
      for (const fb::Value* v : *fg.values()) {
        std::string name = v->name()->str();
        if (name.empty()) corrupt(fmt::format("{}: a value has no name", gctx));
        if (!declared.emplace(name, v).second) {
          corrupt(fmt::format("{}: value '{}' is declared twice", gctx, name));
        }
        order.push_back(v);
      }
    }
    auto value_ctx = [&](const std::string& name) {
      return fmt::format("{} value '{}'", gctx, name);
    };
    auto find_declared = [&](const fbs::String* name, const char* role) {
      auto it = declared.find(text(name));
      if (it == declared.end()) {
        corrupt(fmt::format("{}: {} '{}' is not one of its values", gctx, role, text(name)));
      }
      return it->second;
    };
    if (fg.inputs()) {
      for (const fbs::String* name : *fg.inputs()) {
        const fb::Value* fv = find_declared(name, "input");
        std::string n = name->str();
        if (g.find_local_value(n)) corrupt(fmt::format("{}: input '{}' is listed twice", gctx, n));
        ir::Value* v = g.add_input(n, read_type(fv->type(), value_ctx(n), 0));
        if (fv->constant()) v->set_constant(read_tensor(fv->constant(), value_ctx(n)));
      }
    }
    if (fg.initializers()) {
      for (const fbs::String* name : *fg.initializers()) {
        const fb::Value* fv = find_declared(name, "initializer");
        std::string n = name->str();
        if (g.find_local_value(n)) {
          corrupt(fmt::format("{}: initializer '{}' is listed twice", gctx, n));
        }
        if (!fv->constant()) corrupt(fmt::format("{}: initializer '{}' has no data", gctx, n));
        ir::Value* v = g.add_initializer(
            n, read_tensor(fv->constant(), value_ctx(n), depth == 0 ? &n : nullptr));
        v->set_type(read_type(fv->type(), value_ctx(n), 0));
      }
    }
    for (const fb::Value* fv : order) {
      std::string n = fv->name()->str();
      if (g.find_local_value(n)) continue;
      ir::Value* v = g.add_value(n, read_type(fv->type(), value_ctx(n), 0));
      if (fv->constant())
        v->set_constant(read_tensor(fv->constant(), value_ctx(n), depth == 0 ? &n : nullptr));
    }

    if (fg.nodes()) {
      size_t index = 0;
      for (const fb::Node* fn : *fg.nodes()) {
        std::string nctx = fmt::format("{} node #{} ({} '{}')", gctx, index++, fn->op_type()->str(),
                                       text(fn->name()));
        std::vector<ir::Value*> inputs, outputs;
        if (fn->inputs()) {
          for (const fbs::String* s : *fn->inputs()) inputs.push_back(resolve(g, s, false, nctx));
        }
        if (fn->outputs()) {
          for (const fbs::String* s : *fn->outputs()) outputs.push_back(resolve(g, s, true, nctx));
        }
        ir::Node* node = g.add_node(fn->op_type()->str(), text(fn->domain()), text(fn->name()),
                                    std::move(inputs), std::move(outputs));
        node->set_opset(fn->opset());
        if (fn->attributes()) {
          for (const fb::Attribute* fa : *fn->attributes()) {
            std::string name = fa->name()->str();
            if (node->attribute(name)) {
              corrupt(fmt::format("{}: attribute '{}' appears twice", nctx, name));
            }
            node->set_attribute(
                name, read_attribute(*fa, g, fmt::format("{} attribute '{}'", nctx, name), depth));
          }
        }
      }
    }
    if (fg.outputs()) {
      for (const fbs::String* s : *fg.outputs()) {
        ir::Value* v = resolve(g, s, false, gctx + " output");
        if (!v) corrupt(fmt::format("{}: an output has no name", gctx));
        g.add_output(v);
      }
    }
  }

  std::vector<PackedOnly> packed_only_;
  const unsigned char* weights_;
  size_t weights_size_;
  std::shared_ptr<void> owner_;
};

// The plan's names and bounds are checked against the graph; whether each slot is big enough
// for its value is the runtime's check (it knows the sizes it will write).
ExecutionPlan read_plan(const fb::ExecutionPlan& p, const ir::Graph& g, Reader& reader) {
  ExecutionPlan plan;
  if (p.arenas()) {
    std::set<std::string> devices;
    for (const fb::Arena* a : *p.arenas()) {
      StoredArena arena;
      arena.device = text(a->device());
      arena.bytes = a->bytes();
      if (!devices.insert(arena.device).second) {
        corrupt(fmt::format("plan: two arenas for device '{}'", arena.device));
      }
      std::set<std::string> seen;
      if (a->buffers()) {
        for (const fb::PlannedBuffer* b : *a->buffers()) {
          StoredBuffer buf{b->value()->str(), b->offset(), b->size()};
          if (!g.find_local_value(buf.value)) {
            corrupt(fmt::format("plan: value '{}' is not in the main graph", buf.value));
          }
          if (!seen.insert(buf.value).second) {
            corrupt(fmt::format("plan: value '{}' is planned twice", buf.value));
          }
          if (buf.offset > arena.bytes || buf.size > arena.bytes - buf.offset) {
            corrupt(fmt::format("plan: value '{}' at [{}, +{}) lies outside its {}-byte arena",
                                buf.value, buf.offset, buf.size, arena.bytes));
          }
          arena.buffers.push_back(std::move(buf));
        }
      }
      plan.arenas.push_back(std::move(arena));
    }
  }
  if (p.kernels()) {
    std::set<uint32_t> nodes;
    for (const fb::KernelChoice* k : *p.kernels()) {
      if (k->node() >= g.node_count() || !nodes.insert(k->node()).second) {
        corrupt(fmt::format("plan: kernel choice for node #{} of a {}-node graph", k->node(),
                            g.node_count()));
      }
      plan.kernels.push_back({k->node(), text(k->backend()), text(k->kernel())});
    }
  }
  if (p.packed()) {
    const std::vector<ir::Node*> nodes = g.nodes();
    std::set<std::pair<uint32_t, uint32_t>> seen;
    for (const fb::PackedWeight* w : *p.packed()) {
      const std::string ctx =
          fmt::format("plan: packed weight for input {} of node #{}", w->input(), w->node());
      if (w->node() >= nodes.size() || w->input() >= nodes[w->node()]->inputs().size()) {
        corrupt(fmt::format("{} of a {}-node graph", ctx, nodes.size()));
      }
      const ir::Value* in = nodes[w->node()]->input(w->input());
      if (!in || !in->is_constant()) corrupt(ctx + ": that input is not a constant");
      if (!seen.insert({w->node(), w->input()}).second) corrupt(ctx + ": given twice");
      Tensor data = reader.read_tensor(w->data(), ctx);
      if (data.dtype() != DataType::UInt8 || data.rank() != 1) {
        corrupt(fmt::format("{}: data is {}, not uint8 bytes", ctx, data.describe()));
      }
      plan.packed.push_back(
          {w->node(), w->input(), text(w->backend()), text(w->format()), std::move(data)});
    }
  }
  if (p.tactics()) {
    std::set<std::pair<uint32_t, std::string>> seen;
    for (const fb::KernelTactics* t : *p.tactics()) {
      StoredTactics st{t->node(), text(t->backend()), {}, text(t->text())};
      if (st.node >= g.node_count() || !seen.insert({st.node, st.backend}).second) {
        corrupt(fmt::format("plan: tactics for node #{} of a {}-node graph{}", st.node,
                            g.node_count(), st.node < g.node_count() ? ", given twice" : ""));
      }
      if (t->libraries()) {
        for (const fbs::String* l : *t->libraries()) st.libraries.push_back(text(l));
      }
      plan.tactics.push_back(std::move(st));
    }
  }
  return plan;
}

// Gives back the whole pages inside [data, data + size) of a read-only file mapping: they leave
// the process's resident memory and are read from the file again when touched.
void give_back_pages(const void* data, size_t size) {
  static const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<uintptr_t>(data);
  const uintptr_t first = (begin + page - 1) / page * page;
  const uintptr_t last = (begin + size) / page * page;
  // Advice only: a failure leaves the pages resident, which is harmless.
  if (last > first) ::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
}

// The checksum reads every byte of the file. On a mapping each chunk is given back once hashed,
// so that what stays resident is only what the runtime then reads: the weights kernels use, not
// the whole file (an engine with packed weights keeps plain copies the CPU kernels skip).
uint64_t checksum(const unsigned char* data, size_t size, bool mapping) {
  if (!mapping) return hash_bytes(data, size);
  constexpr size_t kChunk = size_t{4} << 20;
  Hasher h;
  for (size_t at = 0; at < size; at += kChunk) {
    const size_t n = std::min(kChunk, size - at);
    h.update(data + at, n);
    give_back_pages(data + at, n);
  }
  return h.finish();
}

// Ties each constant stored packed only to its packed weight, which must pack that very
// constant in a layout this reader decodes into at most the packed bytes, then fills it (or, with
// defer_unpacking, leaves that to the runtime).
void resolve_packed_only(std::vector<Reader::PackedOnly>& pending, LoadedEngine& out,
                         const ReadOptions& options) {
  if (pending.empty()) return;
  out.packed_only = pending.size();
  const std::vector<ir::Node*> nodes = out.model.graph->nodes();
  for (Reader::PackedOnly& p : pending) {
    const std::string ctx =
        fmt::format("value '{}', stored as packed weight #{}", p.value, p.packed);
    if (!out.plan || static_cast<size_t>(p.packed) >= out.plan->packed.size())
      corrupt(ctx + ": the plan has no such packed weight");
    const StoredPackedWeight& w = out.plan->packed[static_cast<size_t>(p.packed)];
    const ir::Value* in = nodes[w.node]->input(w.input);
    if (!in || in->name() != p.value)
      corrupt(fmt::format("{}: that packed weight packs input {} of node #{}, not this value", ctx,
                          w.input, w.node));
    std::optional<BlockedLayout> layout = parse_blocked_layout(w.format);
    int64_t numel = 1;
    if (layout) {
      for (int64_t d : layout->dims) numel *= d;
    }
    if (!layout || layout->plain_type() != p.plain.dtype() || numel != p.plain.numel() ||
        p.plain.nbytes() > w.data.nbytes())
      corrupt(fmt::format("{}: its layout '{}' does not decode into {}", ctx, w.format,
                          p.plain.describe()));
    DeferredWeight d{p.value, p.plain, w.data, w.format};
    // A shifted plain form (an int8 kernel's w - z) is filled now: the kernel reads the
    // constant's values to decide how it folds the zero points.
    if (options.defer_unpacking && layout->shift.empty()) {
      out.deferred.push_back(std::move(d));
      continue;
    }
    try {
      unpack_deferred(d);
    } catch (const Error& e) {
      corrupt(fmt::format("{}: {}", ctx, e.message()));
    }
  }
}

LoadedEngine parse(std::shared_ptr<void> owner, size_t size, const ReadOptions& options,
                   bool mapping) {
  const auto* base = static_cast<const unsigned char*>(owner.get());
  if (size < sizeof kMagic || std::memcmp(base, kMagic, sizeof kMagic) != 0) {
    fail(ErrorCode::InvalidArgument, "{}",
         engine_magic_problem(std::string_view(reinterpret_cast<const char*>(base), size)));
  }
  if (size < kHeaderSize) {
    fail(ErrorCode::InvalidArgument, "truncated engine file: {} bytes, shorter than its header",
         size);
  }
  detail::Header h;
  std::memcpy(&h, base, sizeof h);
  if (h.format_version < kOldestFormatVersion || h.format_version > kFormatVersion) {
    fail(ErrorCode::Unsupported,
         "engine file format version {}, this Kiln reads {} to {}: recompile the model",
         h.format_version, kOldestFormatVersion, kFormatVersion);
  }
  if (h.header_size != kHeaderSize) corrupt(fmt::format("header size {}", h.header_size));
  // Sections must lie in the file, in order, flatbuffer 8-aligned and weights 64-aligned.
  if (h.weights_offset % kWeightAlignment != 0) {
    corrupt(fmt::format("weights section at {} is misaligned", h.weights_offset));
  }
  uint64_t end = h.weights_offset + h.weights_size;
  if (end < h.weights_offset || end > size) {
    fail(ErrorCode::InvalidArgument,
         "truncated engine file: {} bytes, but its sections end at byte {}", size,
         end < h.weights_offset ? UINT64_MAX : end);
  }
  if (end != size) corrupt(fmt::format("{} bytes after the weights section", size - end));
  uint64_t fb_end = h.flatbuffer_offset + h.flatbuffer_size;
  if (h.flatbuffer_offset < kHeaderSize || h.flatbuffer_offset % 8 != 0 ||
      fb_end < h.flatbuffer_offset || fb_end > h.weights_offset) {
    corrupt(fmt::format("flatbuffer section at {} (+{}) is misplaced", h.flatbuffer_offset,
                        h.flatbuffer_size));
  }
  if (options.verify_checksum) {
    uint64_t sum = checksum(base + kHeaderSize, size - kHeaderSize, mapping);
    if (sum != h.checksum) {
      corrupt(fmt::format("checksum mismatch (header {:016x}, contents {:016x})", h.checksum, sum));
    }
  }
  if (h.flatbuffer_size >= FLATBUFFERS_MAX_BUFFER_SIZE) corrupt("flatbuffer over 2 GiB");
  const uint8_t* fb_data = base + h.flatbuffer_offset;
  // Every table takes at least 4 bytes, so this bound never rejects a well-formed file.
  fbs::Verifier::Options vopts;
  vopts.max_depth = 4 * kMaxDepth + 16;  // a subgraph level is a few tables deep
  vopts.max_tables = static_cast<fbs::uoffset_t>(h.flatbuffer_size / 4 + 16);
  fbs::Verifier verifier(fb_data, h.flatbuffer_size, vopts);
  if (!fb::VerifyModelBuffer(verifier)) corrupt("the model description fails verification");
  const fb::Model* m = fb::GetModel(fb_data);

  LoadedEngine out;
  out.info.format_version = m->format_version();
  out.info.kiln_version = text(m->kiln_version());
  out.info.source_hash = m->source_hash();
  out.info.source_path = text(m->source_path());
  out.info.target = Target{};
  if (const fb::Target* t = m->target()) {
    out.info.target.device = text(t->device());
    if (t->features()) {
      for (const fbs::String* f : *t->features()) out.info.target.features.push_back(text(f));
    }
  }
  if (m->device_targets()) {
    for (const fb::Target* t : *m->device_targets()) {
      Target d;
      d.device = text(t->device());
      if (t->features()) {
        for (const fbs::String* f : *t->features()) d.features.push_back(text(f));
      }
      out.info.device_targets.push_back(std::move(d));
    }
  }
  if (out.info.format_version != h.format_version) {
    corrupt(fmt::format("the header says format version {} and the model {}", h.format_version,
                        out.info.format_version));
  }
  if (options.check_target) {
    Target host = options.host ? *options.host : Target::host();
    if (!out.info.target.runs_on(host)) {
      fail(ErrorCode::Unsupported,
           "engine compiled for target '{}' cannot run on this machine ('{}'): recompile the "
           "model for it",
           out.info.target.to_string(), host.to_string());
    }
  }
  Reader reader(base + h.weights_offset, h.weights_size, owner);
  out.model = reader.read_model(*m);
  try {
    ir::validate_graph(*out.model.graph);
  } catch (const Error& e) {
    corrupt(e.message());
  }
  if (m->plan()) out.plan = read_plan(*m->plan(), *out.model.graph, reader);
  resolve_packed_only(reader.packed_only(), out, options);
  out.bytes = owner;
  out.size = size;
  out.weights_offset = h.weights_offset;
  out.weights_size = h.weights_size;
  return out;
}

}  // namespace

LoadedEngine read_engine(const std::string& path, const ReadOptions& options) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  KILN_CHECK(fd >= 0, ErrorCode::NotFound, "cannot open engine file '{}': {}", path,
             std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(ErrorCode::InvalidArgument, "'{}' is not a regular file", path);
  }
  auto size = static_cast<size_t>(st.st_size);
  if (size == 0) {
    ::close(fd);
    fail(ErrorCode::InvalidArgument, "'{}': empty file, not a Kiln engine file", path);
  }
  void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  int err = errno;
  ::close(fd);
  KILN_CHECK(p != MAP_FAILED, ErrorCode::Unavailable, "cannot map engine file '{}': {}", path,
             std::strerror(err));
  std::shared_ptr<void> mapping(p, [size](void* q) { ::munmap(q, size); });
  try {
    LoadedEngine e = parse(std::move(mapping), size, options, true);
    e.model.source_path = path;
    return e;
  } catch (const Error& e) {
    throw Error(e.code(), fmt::format("{}: {}", path, e.message()));
  }
}

LoadedEngine read_engine_bytes(std::string_view bytes, const ReadOptions& options) {
  KILN_CHECK_ARG(!bytes.empty(), "empty input, not a Kiln engine file");
  // A copy at the alignment the mapping would have, so weights views stay 64-byte aligned.
  size_t rounded = detail::align_up(bytes.size(), kWeightAlignment);
  void* p = std::aligned_alloc(kWeightAlignment, rounded);
  KILN_CHECK(p, ErrorCode::Unavailable, "out of memory copying a {}-byte engine", bytes.size());
  std::memcpy(p, bytes.data(), bytes.size());
  std::shared_ptr<void> copy(p, [](void* q) { std::free(q); });
  return parse(std::move(copy), bytes.size(), options, false);
}

void unpack_deferred(DeferredWeight& w) {
  std::optional<BlockedLayout> layout = parse_blocked_layout(w.format);
  KILN_CHECK_ARG(layout, "packed weight of '{}': layout '{}' cannot be decoded", w.value, w.format);
  unpack_plain(*layout, w.packed, w.plain.raw_data(), w.plain.nbytes());
}

bool has_engine_magic(std::string_view bytes) {
  return bytes.size() >= sizeof kMagic && std::memcmp(bytes.data(), kMagic, sizeof kMagic) == 0;
}

bool has_engine_layout(std::string_view bytes) {
  if (bytes.size() < kHeaderSize) return false;
  detail::Header h;
  std::memcpy(&h, bytes.data(), sizeof h);
  // Any format version a writer could have stamped; the flatbuffer always follows the header.
  return h.header_size == kHeaderSize && h.format_version >= 1 && h.format_version < 1024 &&
         h.flatbuffer_offset >= kHeaderSize && h.flatbuffer_offset % 8 == 0 &&
         h.weights_offset % kWeightAlignment == 0 && h.reserved == 0;
}

bool looks_like_engine(std::string_view bytes) {
  return has_engine_magic(bytes) || has_engine_layout(bytes);
}

std::string engine_magic_problem(std::string_view bytes) {
  const std::string_view want(kMagic, sizeof kMagic);
  if (bytes.size() < sizeof kMagic) {
    return fmt::format("not a Kiln engine file ({} bytes, shorter than the '{}' magic)",
                       bytes.size(), want);
  }
  std::string found;
  for (char c : bytes.substr(0, sizeof kMagic)) {
    const auto u = static_cast<unsigned char>(c);
    found += u >= 0x20 && u < 0x7f && c != '\\' && c != '\'' ? std::string(1, c)
                                                             : fmt::format("\\x{:02x}", u);
  }
  return fmt::format("not a Kiln engine file (bad magic '{}', expected '{}')", found, want);
}

bool is_engine_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char head[kHeaderSize] = {};
  in.read(head, sizeof head);
  return looks_like_engine(std::string_view(head, static_cast<size_t>(in.gcount())));
}

}  // namespace kiln::engine
