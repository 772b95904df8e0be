// ONNX ModelProto -> IR. Names are resolved through a scope chain (graph -> enclosing graphs) so
// subgraphs capture outer values and inlined function bodies get private names.
#include <filesystem>
#include <set>
#include <unordered_map>

#include <google/protobuf/io/coded_stream.h>
#include <onnx/onnx-ml.pb.h>

#include "core/regular_file.hpp"
#include "onnx/contrib_functions.hpp"
#include "onnx/graph_depth.hpp"
#include "onnx/onnx_io.hpp"
#include "onnx/shape_inference.hpp"
#include "ops/registry.hpp"

namespace kiln::onnx_io {
namespace {

// Function bodies can call functions; this bounds the nesting so a self-recursive model is an
// error instead of a stack overflow.
constexpr int kMaxInlineDepth = 32;

struct NameScope {
  std::unordered_map<std::string, ir::Value*> names;
  const NameScope* parent = nullptr;
  ir::Value* find(const std::string& name) const {
    for (const NameScope* s = this; s; s = s->parent) {
      auto it = s->names.find(name);
      if (it != s->names.end()) return it->second;
    }
    return nullptr;
  }
};

struct FunctionKey {
  std::string domain, name, overload;
  bool operator==(const FunctionKey&) const = default;
};
struct FunctionKeyHash {
  size_t operator()(const FunctionKey& k) const {
    return std::hash<std::string>()(k.domain + '\x1f' + k.name + '\x1f' + k.overload);
  }
};

// Attribute values a function call passes to its body (for ref_attr_name).
using AttrBindings = std::unordered_map<std::string, const onnx::AttributeProto*>;

class Importer {
 public:
  Importer(const onnx::ModelProto& model, const ImportOptions& options)
      : model_(model), options_(options) {
    for (const auto& f : model.functions()) {
      functions_[{f.domain(), f.name(), f.overload()}] = &f;
    }
  }

  ir::Model run() {
    ir::Model m;
    m.ir_version = model_.ir_version();
    m.producer_name = model_.producer_name();
    m.producer_version = model_.producer_version();
    m.domain = model_.domain();
    m.model_version = model_.model_version();
    m.doc_string = model_.doc_string();
    for (const auto& kv : model_.metadata_props()) m.metadata[kv.key()] = kv.value();
    KILN_CHECK_ARG(model_.has_graph(), "the model has no graph");
    auto opsets = read_opsets(model_.opset_import(), "model");
    // Models of IR version < 3 predate opset_import and mean ai.onnx version 1. Later models may
    // import only other domains (ai.onnx.ml, training); a node of an unimported domain is refused
    // where it is imported.
    if (!opsets.count("") && model_.ir_version() < 3) opsets[""] = 1;
    m.graph =
        std::make_shared<ir::Graph>(model_.graph().name().empty() ? "main" : model_.graph().name());
    m.graph->opsets() = opsets;
    NameScope scope;
    import_graph(model_.graph(), *m.graph, scope, opsets, 0);
    ir::validate_graph(*m.graph);
    return m;
  }

 private:
  using Opsets = std::map<std::string, int>;

  static Opsets read_opsets(
      const google::protobuf::RepeatedPtrField<onnx::OperatorSetIdProto>& list,
      std::string_view where) {
    Opsets opsets;
    for (const auto& o : list) {
      std::string domain = o.domain() == "ai.onnx" ? "" : o.domain();
      KILN_CHECK_ARG(o.version() > 0 && o.version() < (1 << 20),
                     "{} imports domain '{}' at invalid version {}", where, o.domain(),
                     o.version());
      if (domain.empty()) {
        KILN_CHECK(o.version() <= ops::kMaxOnnxOpset, ErrorCode::Unsupported,
                   "{} imports ai.onnx opset {}; Kiln supports opsets up to {}", where, o.version(),
                   ops::kMaxOnnxOpset);
      }
      opsets[domain] = static_cast<int>(o.version());
    }
    return opsets;
  }

  void import_graph(const onnx::GraphProto& gp, ir::Graph& g, NameScope& scope,
                    const Opsets& opsets, int depth) {
    KILN_CHECK_ARG(depth <= kMaxGraphDepth, "subgraphs nest deeper than {} levels", kMaxGraphDepth);
    KILN_CHECK(gp.sparse_initializer_size() == 0, ErrorCode::Unsupported,
               "graph '{}': sparse initializers are not supported", g.name());
    std::unordered_map<std::string, const onnx::TensorProto*> inits;
    for (const auto& t : gp.initializer()) {
      KILN_CHECK_ARG(!t.name().empty(), "graph '{}': an initializer has no name", g.name());
      KILN_CHECK_ARG(inits.emplace(t.name(), &t).second,
                     "graph '{}': initializer '{}' is defined twice", g.name(), t.name());
    }
    // Before IR version 4 every initializer had to be listed among the main graph's inputs: such
    // a listing declares a weight, not an input a caller may override (onnxruntime reads it the
    // same way). Kept as inputs, they could not fold or fuse, and a GPU copied them every run.
    const bool initializers_listed_as_inputs = depth == 0 && model_.ir_version() < 4;
    for (const auto& in : gp.input()) {
      std::string ctx = fmt::format("graph '{}' input '{}'", g.name(), in.name());
      KILN_CHECK_ARG(!in.name().empty(), "graph '{}': an input has no name", g.name());
      if (initializers_listed_as_inputs && inits.count(in.name())) continue;
      ir::Value* v =
          g.add_input(in.name(), in.has_type() ? type_from_proto(in.type(), ctx) : TypeInfo{});
      auto it = inits.find(in.name());
      if (it != inits.end()) {  // an initializer that callers may override
        v->set_constant(tensor_from_proto(*it->second, options_.base_dir, "initializer"));
        inits.erase(it);
      }
      scope.names[in.name()] = v;
    }
    for (const auto& t : gp.initializer()) {
      if (!inits.count(t.name())) continue;
      ir::Value* v =
          g.add_initializer(t.name(), tensor_from_proto(t, options_.base_dir, "initializer"));
      scope.names[t.name()] = v;
    }
    for (const auto& vi : gp.value_info()) {
      if (vi.has_type()) {
        declared_[&g][vi.name()] =
            type_from_proto(vi.type(), fmt::format("value_info '{}'", vi.name()));
      }
    }
    for (int i : topological_order(gp)) import_node(gp.node(i), g, scope, opsets, {}, "", depth, 0);
    for (const auto& out : gp.output()) {
      ir::Value* v = scope.find(out.name());
      KILN_CHECK_ARG(v, "graph '{}': output '{}' is not produced by any node, input or initializer",
                     g.name(), out.name());
      if (out.has_type()) {
        TypeInfo declared =
            type_from_proto(out.type(), fmt::format("graph output '{}'", out.name()));
        v->set_type(
            merge_declared_type(v->type(), declared, fmt::format("graph output '{}'", out.name())));
      }
      g.add_output(v);
    }
  }

  // Names a node reads: its inputs and, recursively, whatever its subgraphs read.
  static void collect_reads(const onnx::NodeProto& n, std::vector<const std::string*>& out,
                            int depth) {
    KILN_CHECK_ARG(depth <= kMaxGraphDepth, "subgraphs nest deeper than {} levels", kMaxGraphDepth);
    for (const std::string& in : n.input()) out.push_back(&in);
    for (const auto& a : n.attribute()) {
      if (a.has_g()) {
        for (const auto& inner : a.g().node()) collect_reads(inner, out, depth + 1);
      }
      for (const auto& g : a.graphs()) {
        for (const auto& inner : g.node()) collect_reads(inner, out, depth + 1);
      }
    }
  }

  // ONNX requires nodes in topological order, but some exporters do not comply; this keeps the
  // given order where it is valid and otherwise sorts (stably), refusing cycles.
  static std::vector<int> topological_order(const onnx::GraphProto& gp) {
    const int n = gp.node_size();
    std::unordered_map<std::string, int> producer;
    for (int i = 0; i < n; ++i) {
      for (const std::string& out : gp.node(i).output()) {
        if (!out.empty()) producer.emplace(out, i);
      }
    }
    std::vector<std::vector<int>> users(static_cast<size_t>(n));
    std::vector<int> pending(static_cast<size_t>(n), 0);
    bool sorted = true;
    for (int i = 0; i < n; ++i) {
      std::vector<const std::string*> reads;
      collect_reads(gp.node(i), reads, 0);
      std::set<int> deps;
      for (const std::string* name : reads) {
        auto it = producer.find(*name);
        if (it != producer.end() && it->second != i) deps.insert(it->second);
      }
      for (int d : deps) {
        users[static_cast<size_t>(d)].push_back(i);
        ++pending[static_cast<size_t>(i)];
        if (d > i) sorted = false;
      }
    }
    std::vector<int> order;
    order.reserve(static_cast<size_t>(n));
    if (sorted) {
      for (int i = 0; i < n; ++i) order.push_back(i);
      return order;
    }
    std::set<int> ready;
    for (int i = 0; i < n; ++i) {
      if (pending[static_cast<size_t>(i)] == 0) ready.insert(i);
    }
    while (!ready.empty()) {
      int i = *ready.begin();
      ready.erase(ready.begin());
      order.push_back(i);
      for (int u : users[static_cast<size_t>(i)]) {
        if (--pending[static_cast<size_t>(u)] == 0) ready.insert(u);
      }
    }
    for (int i = 0; i < n && static_cast<int>(order.size()) < n; ++i) {
      KILN_CHECK_ARG(pending[static_cast<size_t>(i)] == 0,
                     "graph '{}': node {} ('{}') is part of a cycle", gp.name(),
                     gp.node(i).op_type(), gp.node(i).name());
    }
    return order;
  }

  // Converts one attribute; `bindings` resolves ref_attr_name inside function bodies.
  std::optional<ir::Attribute> import_attribute(const onnx::AttributeProto& a, ir::Graph& g,
                                                NameScope& scope, const Opsets& opsets,
                                                const AttrBindings& bindings,
                                                const std::string& node_label, int depth) {
    if (!a.ref_attr_name().empty()) {
      auto it = bindings.find(a.ref_attr_name());
      if (it == bindings.end()) return std::nullopt;  // caller did not set it: body default applies
      onnx::AttributeProto renamed = *it->second;
      renamed.set_name(a.name());
      return import_attribute(renamed, g, scope, opsets, {}, node_label, depth);
    }
    std::string ctx = fmt::format("node {}: attribute '{}'", node_label, a.name());
    using AP = onnx::AttributeProto;
    AP::AttributeType type = a.type();
    if (type == AP::UNDEFINED) {  // very old models leave the discriminator out
      if (a.has_f())
        type = AP::FLOAT;
      else if (a.has_i())
        type = AP::INT;
      else if (a.has_s())
        type = AP::STRING;
      else if (a.has_t())
        type = AP::TENSOR;
      else if (a.has_g())
        type = AP::GRAPH;
      else if (a.floats_size())
        type = AP::FLOATS;
      else if (a.ints_size())
        type = AP::INTS;
      else if (a.strings_size())
        type = AP::STRINGS;
      else if (a.tensors_size())
        type = AP::TENSORS;
      else if (a.graphs_size())
        type = AP::GRAPHS;
      else
        fail(ErrorCode::InvalidArgument, "{} has no type and no value", ctx);
    }
    switch (type) {
      case AP::FLOAT:
        return ir::Attribute(a.f());
      case AP::INT:
        return ir::Attribute(static_cast<int64_t>(a.i()));
      case AP::STRING:
        return ir::Attribute(a.s());
      case AP::TENSOR:
        return ir::Attribute(tensor_from_proto(a.t(), options_.base_dir, ctx));
      case AP::GRAPH:
        return ir::Attribute(import_subgraph(a.g(), g, scope, opsets, depth));
      case AP::TYPE_PROTO:
        return ir::Attribute(type_from_proto(a.tp(), ctx));
      case AP::FLOATS:
        return ir::Attribute(std::vector<float>(a.floats().begin(), a.floats().end()));
      case AP::INTS:
        return ir::Attribute(std::vector<int64_t>(a.ints().begin(), a.ints().end()));
      case AP::STRINGS:
        return ir::Attribute(std::vector<std::string>(a.strings().begin(), a.strings().end()));
      case AP::TENSORS: {
        std::vector<Tensor> ts;
        for (const auto& t : a.tensors())
          ts.push_back(tensor_from_proto(t, options_.base_dir, ctx));
        return ir::Attribute(std::move(ts));
      }
      case AP::GRAPHS: {
        std::vector<ir::GraphPtr> gs;
        for (const auto& sg : a.graphs())
          gs.push_back(import_subgraph(sg, g, scope, opsets, depth));
        return ir::Attribute(std::move(gs));
      }
      case AP::SPARSE_TENSOR:
      case AP::SPARSE_TENSORS:
        fail(ErrorCode::Unsupported, "{}: sparse tensor attributes are not supported", ctx);
      default:
        fail(ErrorCode::InvalidArgument, "{} has unknown type {}", ctx, static_cast<int>(type));
    }
  }

  ir::GraphPtr import_subgraph(const onnx::GraphProto& gp, ir::Graph& parent, NameScope& scope,
                               const Opsets& opsets, int depth) {
    auto sub = std::make_shared<ir::Graph>(
        gp.name().empty() ? parent.unique_name(parent.name() + "_body") : gp.name(), &parent);
    sub->opsets() = opsets;
    NameScope inner;
    inner.parent = &scope;
    import_graph(gp, *sub, inner, opsets, depth + 1);
    return sub;
  }

  void import_node(const onnx::NodeProto& n, ir::Graph& g, NameScope& scope, const Opsets& opsets,
                   const AttrBindings& bindings, const std::string& prefix, int depth,
                   int inline_depth) {
    std::string label =
        n.name().empty() ? n.op_type() : fmt::format("{} '{}'", n.op_type(), n.name());
    KILN_CHECK_ARG(!n.op_type().empty(), "graph '{}': a node has no op_type", g.name());
    std::string domain = n.domain() == "ai.onnx" ? "" : n.domain();

    std::vector<ir::Value*> inputs;
    for (const std::string& name : n.input()) {
      if (name.empty()) {
        inputs.push_back(nullptr);
        continue;
      }
      ir::Value* v = scope.find(name);
      KILN_CHECK_ARG(v,
                     "node {}: input '{}' is not defined by any earlier node, graph input or "
                     "initializer",
                     label, name);
      inputs.push_back(v);
    }

    auto fn = functions_.find({n.domain(), n.op_type(), n.overload()});
    if (fn != functions_.end()) {
      inline_function(*fn->second, n, inputs, g, scope, bindings, label, depth, inline_depth);
      return;
    }
    // onnxruntime's quantized contrib ops, as functions of standard ops.
    if (std::optional<onnx::FunctionProto> contrib = contrib_function(n)) {
      inline_function(*contrib, n, inputs, g, scope, bindings, label, depth, inline_depth);
      return;
    }

    auto op = opsets.find(domain);
    KILN_CHECK_ARG(op != opsets.end(), "node {}: domain '{}' is not imported by the model", label,
                   n.domain());
    std::vector<ir::Value*> outputs;
    for (const std::string& name : n.output()) {
      if (name.empty()) {
        outputs.push_back(nullptr);
        continue;
      }
      std::string ir_name = prefix.empty() ? name : g.unique_name(prefix + name);
      ir::Value* v = g.add_value(ir_name);
      scope.names[name] = v;
      outputs.push_back(v);
    }
    ir::Node* node = g.add_node(n.op_type(), domain, n.name(), inputs, outputs);
    node->set_opset(op->second);
    for (const auto& a : n.attribute()) {
      KILN_CHECK_ARG(!a.name().empty(), "node {}: an attribute has no name", label);
      if (auto attr = import_attribute(a, g, scope, opsets, bindings, label, depth)) {
        node->set_attribute(a.name(), std::move(*attr));
      }
    }
    if (options_.infer_shapes) infer_node(*node, declared_[&g]);
  }

  void inline_function(const onnx::FunctionProto& f, const onnx::NodeProto& call,
                       const std::vector<ir::Value*>& inputs, ir::Graph& g, NameScope& scope,
                       const AttrBindings& outer_bindings, const std::string& label, int depth,
                       int inline_depth) {
    KILN_CHECK_ARG(inline_depth < kMaxInlineDepth,
                   "node {}: functions nest deeper than {} levels (recursive function?)", label,
                   kMaxInlineDepth);
    KILN_CHECK_ARG(call.input_size() <= f.input_size() && call.output_size() <= f.output_size(),
                   "node {}: function '{}' takes {} inputs and {} outputs, the call has {} and {}",
                   label, f.name(), f.input_size(), f.output_size(), call.input_size(),
                   call.output_size());
    Opsets fn_opsets = read_opsets(f.opset_import(), fmt::format("function '{}'", f.name()));
    for (const auto& [dom, ver] : g.opsets()) fn_opsets.emplace(dom, ver);
    // Attribute values: the call's, else the function's declared defaults.
    AttrBindings bindings;
    std::vector<onnx::AttributeProto> resolved;
    resolved.reserve(static_cast<size_t>(call.attribute_size()));
    for (const auto& a : call.attribute()) {
      if (!a.ref_attr_name().empty()) {  // a call inside another function body
        auto it = outer_bindings.find(a.ref_attr_name());
        if (it == outer_bindings.end()) continue;
        resolved.push_back(*it->second);
        resolved.back().set_name(a.name());
      } else {
        resolved.push_back(a);
      }
    }
    for (const auto& a : resolved) bindings[a.name()] = &a;
    for (const auto& a : f.attribute_proto()) bindings.emplace(a.name(), &a);

    NameScope body;  // function bodies see only their formal parameters
    for (int i = 0; i < f.input_size(); ++i) {
      body.names[f.input(i)] =
          static_cast<size_t>(i) < inputs.size() ? inputs[static_cast<size_t>(i)] : nullptr;
    }
    std::string prefix = fmt::format("{}/{}/", f.name(), ++inline_counter_);
    for (const auto& n : f.node()) {
      // Missing optional formals stay empty: rewrite those input names to "".
      onnx::NodeProto copy = n;
      for (int i = 0; i < copy.input_size(); ++i) {
        auto it = body.names.find(copy.input(i));
        if (it != body.names.end() && it->second == nullptr) copy.set_input(i, "");
      }
      import_node(copy, g, body, fn_opsets, bindings, prefix, depth, inline_depth + 1);
    }
    // Bind the call's outputs to the body's values through Identity nodes, so the IR keeps the
    // caller's names.
    for (int i = 0; i < call.output_size(); ++i) {
      if (call.output(i).empty()) continue;
      ir::Value* produced = body.find(f.output(i));
      KILN_CHECK_ARG(produced, "function '{}': output '{}' is never produced", f.name(),
                     f.output(i));
      ir::Value* out = g.add_value(prefix.empty() ? call.output(i) : g.unique_name(call.output(i)));
      ir::Node* id = g.add_node("Identity", "", "", {produced}, {out});
      id->set_opset(g.opsets().count("") ? g.opsets().at("") : ops::kMaxOnnxOpset);
      out->set_type(produced->type());
      scope.names[call.output(i)] = out;
    }
  }

  const onnx::ModelProto& model_;
  const ImportOptions& options_;
  std::unordered_map<FunctionKey, const onnx::FunctionProto*, FunctionKeyHash> functions_;
  std::unordered_map<const ir::Graph*, std::unordered_map<std::string, TypeInfo>> declared_;
  int inline_counter_ = 0;
};

}  // namespace

ir::Model import_model_proto(const onnx::ModelProto& proto, const ImportOptions& options) {
  return Importer(proto, options).run();
}

ir::Model import_model_bytes(std::string_view bytes, const ImportOptions& options) {
  onnx::ModelProto proto;
  KILN_CHECK_ARG(bytes.size() < static_cast<size_t>(INT32_MAX),
                 "model of {} bytes is over protobuf's 2 GiB limit: store weights as external data",
                 bytes.size());
  google::protobuf::io::CodedInputStream in(reinterpret_cast<const uint8_t*>(bytes.data()),
                                            static_cast<int>(bytes.size()));
  in.SetRecursionLimit(kProtoRecursionLimit);
  if (!proto.ParseFromCodedStream(&in) || !in.ConsumedEntireMessage()) {
    // Protobuf reports nesting past its recursion limit as corruption; say which it was.
    KILN_CHECK_ARG(subgraph_depth(bytes, kMaxGraphDepth) <= kMaxGraphDepth,
                   "subgraphs nest deeper than {} levels", kMaxGraphDepth);
    fail(ErrorCode::InvalidArgument,
         "not a valid ONNX model: the protobuf is truncated or corrupt ({} bytes)", bytes.size());
  }
  return import_model_proto(proto, options);
}

ir::Model import_model_file(const std::string& path, ImportOptions options) {
  RegularFile file(path, "model file");
  KILN_CHECK_ARG(file.size() < static_cast<uint64_t>(INT32_MAX),
                 "{}: model of {} bytes is over protobuf's 2 GiB limit: store weights as external "
                 "data",
                 path, file.size());
  std::string bytes = file.read_all(INT32_MAX);
  if (options.base_dir.empty()) {
    options.base_dir = std::filesystem::absolute(path).parent_path().string();
  }
  try {
    ir::Model m = import_model_bytes(bytes, options);
    m.source_path = path;
    return m;
  } catch (const Error& e) {
    throw Error(e.code(), fmt::format("{}: {}", path, e.message()));
  }
}

}  // namespace kiln::onnx_io
