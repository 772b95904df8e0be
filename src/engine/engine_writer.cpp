// IR -> engine file. The flatbuffer describes the graph; tensor data is gathered into the
// weights section, each tensor 64-byte aligned so the reader can hand out views in place.
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>

#include <unistd.h>

#include "engine/engine_format.hpp"
#include "engine/kiln_generated.h"
#include "engine/packed_layout.hpp"
#include "ir/node_reads.hpp"

namespace kiln::engine {
namespace {

namespace fbs = flatbuffers;
using detail::align_up;

class Writer {
 public:
  explicit Writer(const EngineInfo& info) : info_(info) {}

  void build(const ir::Model& m, const ExecutionPlan* plan) {
    main_graph_ = m.graph.get();
    if (plan) find_packed_only(*m.graph, *plan);
    auto graph = write_graph(*m.graph);
    auto stored_plan = plan ? write_plan(*plan, *m.graph) : 0;
    std::vector<fbs::Offset<fb::MetadataEntry>> metadata;
    for (const auto& [k, v] : m.metadata) {
      metadata.push_back(fb::CreateMetadataEntry(fbb_, str(k), str(v)));
    }
    std::vector<fbs::Offset<fbs::String>> features;
    for (const std::string& f : info_.target.features) features.push_back(str(f));
    auto target = fb::CreateTarget(fbb_, str(info_.target.device), fbb_.CreateVector(features));
    std::vector<fbs::Offset<fb::Target>> device_targets;
    for (const Target& d : info_.device_targets) {
      std::vector<fbs::Offset<fbs::String>> f;
      for (const std::string& x : d.features) f.push_back(str(x));
      device_targets.push_back(fb::CreateTarget(fbb_, str(d.device), fbb_.CreateVector(f)));
    }
    auto model = fb::CreateModel(
        fbb_, kFormatVersion, str(KILN_VERSION), target, info_.source_hash, m.ir_version,
        str(m.producer_name), str(m.producer_version), str(m.domain), str(m.doc_string),
        m.model_version, fbb_.CreateVector(metadata), str(m.source_path), graph, stored_plan,
        device_targets.empty() ? 0 : fbb_.CreateVector(device_targets));
    fb::FinishModelBuffer(fbb_, model);
  }

  void write_file(const std::string& path) const {
    // A temporary beside the target, renamed into place: a failed or interrupted compile never
    // leaves a truncated engine under the final name.
    std::string tmp = fmt::format("{}.tmp{}", path, static_cast<long>(::getpid()));
    std::FILE* f = std::fopen(tmp.c_str(), "wb");
    KILN_CHECK(f, ErrorCode::NotFound, "cannot write engine file '{}': {}", path,
               std::strerror(errno));
    try {
      write_to(f, path);
    } catch (...) {
      std::fclose(f);
      std::remove(tmp.c_str());
      throw;
    }
    bool closed = std::fclose(f) == 0;
    if (!closed || std::rename(tmp.c_str(), path.c_str()) != 0) {
      int err = errno;
      std::remove(tmp.c_str());
      fail(ErrorCode::Unavailable, "cannot write engine file '{}': {}", path, std::strerror(err));
    }
  }

 private:
  struct Blob {
    const void* data;
    size_t size;
    uint64_t offset;
  };

  void write_to(std::FILE* f, const std::string& path) const {
    detail::Header h{};
    std::memcpy(h.magic, kMagic, sizeof h.magic);
    h.format_version = kFormatVersion;
    h.header_size = kHeaderSize;
    h.flatbuffer_offset = kHeaderSize;
    h.flatbuffer_size = fbb_.GetSize();
    h.weights_offset = align_up(h.flatbuffer_offset + h.flatbuffer_size, kWeightAlignment);
    h.weights_size = weights_size_;

    Hasher hasher;
    auto put = [&](const void* p, size_t n) {
      if (n && std::fwrite(p, 1, n, f) != n) {
        fail(ErrorCode::Unavailable, "cannot write engine file '{}': {}", path,
             std::strerror(errno));
      }
      hasher.update(p, n);
    };
    static const unsigned char zeros[kWeightAlignment] = {};
    put(&h, sizeof h);  // placeholder; rewritten with the checksum below
    hasher = Hasher();
    put(fbb_.GetBufferPointer(), fbb_.GetSize());
    uint64_t at = h.flatbuffer_offset + h.flatbuffer_size;
    put(zeros, h.weights_offset - at);
    at = 0;
    for (const Blob& b : blobs_) {
      put(zeros, b.offset - at);
      put(b.data, b.size);
      at = b.offset + b.size;
    }
    h.checksum = hasher.finish();
    if (std::fseek(f, 0, SEEK_SET) != 0 || std::fwrite(&h, sizeof h, 1, f) != 1) {
      fail(ErrorCode::Unavailable, "cannot write engine file '{}': {}", path, std::strerror(errno));
    }
  }

  fbs::Offset<fb::ExecutionPlan> write_plan(const ExecutionPlan& plan, const ir::Graph& g) {
    std::vector<fbs::Offset<fb::Arena>> arenas;
    for (const StoredArena& a : plan.arenas) {
      std::vector<fbs::Offset<fb::PlannedBuffer>> buffers;
      for (const StoredBuffer& b : a.buffers) {
        KILN_CHECK(g.find_local_value(b.value), ErrorCode::Internal,
                   "execution plan names value '{}', which is not in the main graph", b.value);
        KILN_CHECK(b.offset <= a.bytes && b.size <= a.bytes - b.offset, ErrorCode::Internal,
                   "execution plan: value '{}' at [{}, +{}) lies outside its {}-byte arena",
                   b.value, b.offset, b.size, a.bytes);
        buffers.push_back(fb::CreatePlannedBuffer(fbb_, str(b.value), b.offset, b.size));
      }
      arenas.push_back(fb::CreateArena(fbb_, str(a.device), a.bytes, fbb_.CreateVector(buffers)));
    }
    std::vector<fbs::Offset<fb::KernelChoice>> kernels;
    for (const StoredKernel& k : plan.kernels) {
      KILN_CHECK(k.node < g.node_count(), ErrorCode::Internal,
                 "execution plan: kernel choice for node #{} of a {}-node graph", k.node,
                 g.node_count());
      kernels.push_back(fb::CreateKernelChoice(fbb_, k.node, str(k.backend), str(k.kernel)));
    }
    std::vector<fbs::Offset<fb::PackedWeight>> packed;
    const std::vector<ir::Node*> nodes = g.nodes();
    for (const StoredPackedWeight& w : plan.packed) {
      KILN_CHECK(w.node < nodes.size() && w.input < nodes[w.node]->inputs().size() &&
                     w.data.dtype() == DataType::UInt8 && w.data.rank() == 1,
                 ErrorCode::Internal,
                 "execution plan: packed weight for input {} of node #{} of a {}-node graph, {}",
                 w.input, w.node, g.node_count(), w.data.describe());
      auto data = write_tensor(w.data);
      packed.push_back(
          fb::CreatePackedWeight(fbb_, w.node, w.input, str(w.backend), str(w.format), data));
    }
    std::vector<fbs::Offset<fb::KernelTactics>> tactics;
    for (const StoredTactics& t : plan.tactics) {
      KILN_CHECK(t.node < nodes.size(), ErrorCode::Internal,
                 "execution plan: tactics for node #{} of a {}-node graph", t.node, g.node_count());
      std::vector<fbs::Offset<fbs::String>> libraries;
      for (const std::string& l : t.libraries) libraries.push_back(str(l));
      tactics.push_back(fb::CreateKernelTactics(fbb_, t.node, str(t.backend),
                                                fbb_.CreateVector(libraries), str(t.text)));
    }
    return fb::CreateExecutionPlan(fbb_, fbb_.CreateVector(arenas), fbb_.CreateVector(kernels),
                                   packed.empty() ? 0 : fbb_.CreateVector(packed),
                                   tactics.empty() ? 0 : fbb_.CreateVector(tactics));
  }

  // The constants of the main graph whose every read is by a node input that has a packed
  // weight, which decodes back to exactly the constant: stored once, packed (format 3).
  void find_packed_only(const ir::Graph& g, const ExecutionPlan& plan) {
    std::map<std::pair<uint32_t, uint32_t>, int> packed_at;  // (node, input) -> packed weight
    for (size_t k = 0; k < plan.packed.size(); ++k)
      packed_at[{plan.packed[k].node, plan.packed[k].input}] = static_cast<int>(k);
    std::map<const ir::Value*, size_t> reads, packed_reads;
    std::map<const ir::Value*, int> first;
    const std::vector<ir::Node*> nodes = g.nodes();
    for (uint32_t i = 0; i < nodes.size(); ++i) {
      ir::visit_reads(*nodes[i], [&](const ir::Value* v) { ++reads[v]; });
      for (uint32_t s = 0; s < nodes[i]->inputs().size(); ++s) {
        auto it = packed_at.find({i, s});
        if (it == packed_at.end()) continue;
        const ir::Value* v = nodes[i]->input(s);
        ++packed_reads[v];
        first.emplace(v, it->second);
      }
    }
    for (const auto& [v, k] : first) {
      if (!v->is_constant() || g.is_input(v) || g.is_output(v) || reads[v] != packed_reads[v])
        continue;
      const StoredPackedWeight& w = plan.packed[static_cast<size_t>(k)];
      if (unpacks_to(w.format, w.data, v->constant())) packed_only_[v] = k;
    }
  }

  fbs::Offset<fbs::String> str(const std::string& s) { return fbb_.CreateSharedString(s); }

  fbs::Offset<fbs::Vector<uint8_t>> bytes(const std::string& s) {
    return fbb_.CreateVector(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  }

  fbs::Offset<fbs::Vector<fbs::Offset<fb::Bytes>>> byte_strings(const std::string* first,
                                                                size_t count) {
    std::vector<fbs::Offset<fb::Bytes>> out;
    out.reserve(count);
    for (size_t i = 0; i < count; ++i) out.push_back(fb::CreateBytes(fbb_, bytes(first[i])));
    return fbb_.CreateVector(out);
  }

  fbs::Offset<fb::Type> write_type(const TypeInfo& t) {
    fbs::Offset<fbs::Vector<fbs::Offset<fb::Dim>>> dims = 0;
    if (t.shape) {
      std::vector<fbs::Offset<fb::Dim>> ds;
      for (const Dim& d : t.shape->dims()) {
        // Dim keeps value -1 for every non-static dim, so these four fields restore it exactly.
        auto symbol = d.symbol_name().empty() ? 0 : str(d.symbol_name());
        int64_t lo = d.is_static() ? 0 : d.min();
        int64_t hi = d.is_static() ? std::numeric_limits<int64_t>::max() : d.max();
        ds.push_back(fb::CreateDim(fbb_, d.value(), symbol, lo, hi));
      }
      dims = fbb_.CreateVector(ds);
    }
    auto elem = t.elem ? write_type(*t.elem) : 0;
    return fb::CreateType(fbb_, static_cast<fb::TypeKind>(t.kind), static_cast<int32_t>(t.dtype),
                          t.shape.has_value(), dims, elem);
  }

  fbs::Offset<fb::Tensor> write_tensor(const Tensor& t) {
    if (!t.defined()) return fb::CreateTensor(fbb_);
    auto dims = fbb_.CreateVector(t.dims());
    auto dtype = static_cast<int32_t>(t.dtype());
    if (t.dtype() == DataType::String) {
      auto strings = byte_strings(t.data<std::string>(), static_cast<size_t>(t.numel()));
      return fb::CreateTensor(fbb_, dtype, dims, 0, 0, strings);
    }
    size_t size = t.nbytes();
    if (size == 0) return fb::CreateTensor(fbb_, dtype, dims, 0, 0);
    // Tensors sharing storage (an initializer and its copy in an attribute, say) are stored once.
    auto key = std::make_pair(t.raw_data(), size);
    auto it = offsets_.find(key);
    uint64_t offset;
    if (it != offsets_.end()) {
      offset = it->second;
    } else {
      offset = align_up(weights_size_, kWeightAlignment);
      blobs_.push_back({t.raw_data(), size, offset});
      weights_size_ = offset + size;
      offsets_.emplace(key, offset);
    }
    return fb::CreateTensor(fbb_, dtype, dims, offset, size);
  }

  fbs::Offset<fb::Attribute> write_attribute(const std::string& name, const ir::Attribute& a,
                                             const ir::Node& node) {
    // Children first: a flatbuffer table cannot be built while another one is open.
    auto name_off = str(name);
    float f = 0;
    int64_t i = 0;
    fbs::Offset<fbs::Vector<uint8_t>> s = 0;
    fbs::Offset<fb::Tensor> t = 0;
    fbs::Offset<fb::Graph> g = 0;
    fbs::Offset<fb::Type> tp = 0;
    fbs::Offset<fbs::Vector<float>> floats = 0;
    fbs::Offset<fbs::Vector<int64_t>> ints = 0;
    fbs::Offset<fbs::Vector<fbs::Offset<fb::Bytes>>> strings = 0;
    fbs::Offset<fbs::Vector<fbs::Offset<fb::Tensor>>> tensors = 0;
    fbs::Offset<fbs::Vector<fbs::Offset<fb::Graph>>> graphs = 0;
    auto subgraph = [&](const ir::GraphPtr& sg) {
      // The reader nests a body in the graph of the node holding it and resolves captured
      // names through that chain, so the writer insists on the same nesting.
      KILN_CHECK(sg && sg->parent() == node.owner(), ErrorCode::Internal,
                 "node {}: subgraph attribute '{}' is missing or not nested in graph '{}'",
                 node.label(), name, node.owner()->name());
      return write_graph(*sg);
    };
    std::visit(
        [&](const auto& v) {
          using T = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<T, float>) {
            f = v;
          } else if constexpr (std::is_same_v<T, int64_t>) {
            i = v;
          } else if constexpr (std::is_same_v<T, std::string>) {
            s = bytes(v);
          } else if constexpr (std::is_same_v<T, Tensor>) {
            t = write_tensor(v);
          } else if constexpr (std::is_same_v<T, ir::GraphPtr>) {
            g = subgraph(v);
          } else if constexpr (std::is_same_v<T, TypeInfo>) {
            tp = write_type(v);
          } else if constexpr (std::is_same_v<T, std::vector<float>>) {
            floats = fbb_.CreateVector(v);
          } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
            ints = fbb_.CreateVector(v);
          } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
            strings = byte_strings(v.data(), v.size());
          } else if constexpr (std::is_same_v<T, std::vector<Tensor>>) {
            std::vector<fbs::Offset<fb::Tensor>> ts;
            for (const Tensor& x : v) ts.push_back(write_tensor(x));
            tensors = fbb_.CreateVector(ts);
          } else if constexpr (std::is_same_v<T, std::vector<ir::GraphPtr>>) {
            std::vector<fbs::Offset<fb::Graph>> gs;
            for (const ir::GraphPtr& x : v) gs.push_back(subgraph(x));
            graphs = fbb_.CreateVector(gs);
          }
        },
        a.storage());
    return fb::CreateAttribute(fbb_, name_off, static_cast<fb::AttrKind>(a.kind()), f, i, s, t, g,
                               tp, floats, ints, strings, tensors, graphs);
  }

  // A value name as the reader will resolve it from graph `g` (here, then outwards); a name
  // that would resolve to another value (shadowing) cannot be written faithfully.
  fbs::Offset<fbs::String> ref(const ir::Graph& g, const ir::Value* v, const ir::Node* node) {
    if (!v) return str("");
    if (g.find_value(v->name()) != v) {
      fail(ErrorCode::Internal,
           "graph '{}'{}: value '{}' is shadowed by another value of that name", g.name(),
           node ? fmt::format(" node {}", node->label()) : "", v->name());
    }
    return str(v->name());
  }

  fbs::Offset<fbs::Vector<fbs::Offset<fbs::String>>> refs(const ir::Graph& g,
                                                          const std::vector<ir::Value*>& vs,
                                                          const ir::Node* node) {
    std::vector<fbs::Offset<fbs::String>> out;
    out.reserve(vs.size());
    for (const ir::Value* v : vs) out.push_back(ref(g, v, node));
    return fbb_.CreateVector(out);
  }

  fbs::Offset<fb::Graph> write_graph(const ir::Graph& g) {
    std::vector<fbs::Offset<fb::OpsetEntry>> opsets;
    for (const auto& [domain, version] : g.opsets()) {
      opsets.push_back(fb::CreateOpsetEntry(fbb_, str(domain), version));
    }
    std::vector<fbs::Offset<fb::Value>> values;
    values.reserve(g.values().size());
    for (const auto& v : g.values()) {
      auto type = write_type(v->type());
      fbs::Offset<fb::Tensor> constant = 0;
      if (auto p = packed_only_.find(v.get()); &g == main_graph_ && p != packed_only_.end()) {
        const Tensor& t = v->constant();
        constant = fb::CreateTensor(fbb_, static_cast<int32_t>(t.dtype()),
                                    fbb_.CreateVector(t.dims()), 0, 0, 0, p->second);
      } else if (v->is_constant()) {
        constant = write_tensor(v->constant());
      }
      values.push_back(fb::CreateValue(fbb_, str(v->name()), type, constant));
    }
    auto inputs = refs(g, g.inputs(), nullptr);
    auto initializers = refs(g, g.initializers(), nullptr);
    auto outputs = refs(g, g.outputs(), nullptr);
    std::vector<fbs::Offset<fb::Node>> nodes;
    for (const ir::Node* n : g.nodes()) {
      auto node_inputs = refs(g, n->inputs(), n);
      auto node_outputs = refs(g, n->outputs(), n);
      std::vector<fbs::Offset<fb::Attribute>> attrs;
      for (const auto& [name, a] : n->attributes()) attrs.push_back(write_attribute(name, a, *n));
      nodes.push_back(fb::CreateNode(fbb_, str(n->op_type()), str(n->domain()), str(n->name()),
                                     n->opset(), node_inputs, node_outputs,
                                     fbb_.CreateVector(attrs)));
    }
    return fb::CreateGraph(fbb_, str(g.name()), fbb_.CreateVector(opsets),
                           fbb_.CreateVector(values), inputs, initializers, outputs,
                           fbb_.CreateVector(nodes));
  }

  EngineInfo info_;
  const ir::Graph* main_graph_ = nullptr;
  std::map<const ir::Value*, int> packed_only_;  // constant -> the packed weight it is stored as
  fbs::FlatBufferBuilder fbb_{1 << 16};
  std::vector<Blob> blobs_;
  std::map<std::pair<const void*, size_t>, uint64_t> offsets_;
  uint64_t weights_size_ = 0;
};

}  // namespace

void write_engine(const ir::Model& model, const EngineInfo& info, const std::string& path,
                  const ExecutionPlan* plan) {
  KILN_CHECK_ARG(model.graph, "cannot write engine file '{}': the model has no graph", path);
  ir::validate_graph(*model.graph);
  Writer w(info);
  w.build(model, plan);
  w.write_file(path);
}

}  // namespace kiln::engine
