// IR -> ONNX ModelProto, so any graph Kiln holds can be saved and opened in Netron.
#include <algorithm>
#include <fstream>
#include <set>

#include <onnx/onnx-ml.pb.h>

#include "onnx/onnx_io.hpp"

namespace kiln::onnx_io {
namespace {

void export_graph(const ir::Graph& g, onnx::GraphProto* gp);

void export_attribute(const std::string& name, const ir::Attribute& a, onnx::AttributeProto* ap) {
  using AP = onnx::AttributeProto;
  ap->set_name(name);
  std::visit(
      [&](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, float>) {
          ap->set_type(AP::FLOAT);
          ap->set_f(v);
        } else if constexpr (std::is_same_v<T, int64_t>) {
          ap->set_type(AP::INT);
          ap->set_i(v);
        } else if constexpr (std::is_same_v<T, std::string>) {
          ap->set_type(AP::STRING);
          ap->set_s(v);
        } else if constexpr (std::is_same_v<T, Tensor>) {
          ap->set_type(AP::TENSOR);
          *ap->mutable_t() = tensor_to_proto(v, "");
        } else if constexpr (std::is_same_v<T, ir::GraphPtr>) {
          ap->set_type(AP::GRAPH);
          export_graph(*v, ap->mutable_g());
        } else if constexpr (std::is_same_v<T, TypeInfo>) {
          ap->set_type(AP::TYPE_PROTO);
          type_to_proto(v, ap->mutable_tp());
        } else if constexpr (std::is_same_v<T, std::vector<float>>) {
          ap->set_type(AP::FLOATS);
          for (float x : v) ap->add_floats(x);
        } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
          ap->set_type(AP::INTS);
          for (int64_t x : v) ap->add_ints(x);
        } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
          ap->set_type(AP::STRINGS);
          for (const auto& x : v) ap->add_strings(x);
        } else if constexpr (std::is_same_v<T, std::vector<Tensor>>) {
          ap->set_type(AP::TENSORS);
          for (const auto& x : v) *ap->add_tensors() = tensor_to_proto(x, "");
        } else if constexpr (std::is_same_v<T, std::vector<ir::GraphPtr>>) {
          ap->set_type(AP::GRAPHS);
          for (const auto& x : v) export_graph(*x, ap->add_graphs());
        }
      },
      a.storage());
}

void add_value_info(const ir::Value& v, onnx::ValueInfoProto* vi) {
  vi->set_name(v.name());
  if (v.type().kind != TypeInfo::Kind::Unknown) type_to_proto(v.type(), vi->mutable_type());
}

void export_graph(const ir::Graph& g, onnx::GraphProto* gp) {
  gp->set_name(g.name());
  std::set<const ir::Value*> listed;
  for (const ir::Value* v : g.inputs()) {
    add_value_info(*v, gp->add_input());
    if (v->is_constant()) *gp->add_initializer() = tensor_to_proto(v->constant(), v->name());
    listed.insert(v);
  }
  for (const ir::Value* v : g.initializers()) {
    if (listed.insert(v).second) *gp->add_initializer() = tensor_to_proto(v->constant(), v->name());
  }
  for (const ir::Node* n : g.nodes()) {
    auto* np = gp->add_node();
    np->set_op_type(n->op_type());
    np->set_domain(n->domain());
    np->set_name(n->name());
    for (const ir::Value* in : n->inputs()) np->add_input(in ? in->name() : "");
    for (const ir::Value* out : n->outputs()) np->add_output(out ? out->name() : "");
    for (const auto& [name, a] : n->attributes()) export_attribute(name, a, np->add_attribute());
  }
  std::set<const ir::Value*> outputs(g.outputs().begin(), g.outputs().end());
  for (const ir::Value* v : g.outputs()) add_value_info(*v, gp->add_output());
  for (const auto& v : g.values()) {
    if (v->producer() && !outputs.count(v.get()) && v->type().kind != TypeInfo::Kind::Unknown) {
      add_value_info(*v, gp->add_value_info());
    }
  }
}

}  // namespace

onnx::ModelProto export_model(const ir::Model& m) {
  onnx::ModelProto p;
  // IR version 4 is the first whose initializers need not be listed as inputs (the importer
  // reads older models' listed initializers as weights, so they are written unlisted).
  p.set_ir_version(m.ir_version ? std::max<int64_t>(m.ir_version, 4) : 8);
  p.set_producer_name(m.producer_name.empty() ? "kiln" : m.producer_name);
  p.set_producer_version(m.producer_version.empty() ? KILN_VERSION : m.producer_version);
  p.set_domain(m.domain);
  p.set_model_version(m.model_version);
  p.set_doc_string(m.doc_string);
  for (const auto& [k, v] : m.metadata) {
    auto* kv = p.add_metadata_props();
    kv->set_key(k);
    kv->set_value(v);
  }
  for (const auto& [domain, version] : m.graph->opsets()) {
    auto* o = p.add_opset_import();
    o->set_domain(domain);
    o->set_version(version);
  }
  export_graph(*m.graph, p.mutable_graph());
  return p;
}

void save_model_file(const ir::Model& model, const std::string& path) {
  onnx::ModelProto p = export_model(model);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  KILN_CHECK(out.good(), ErrorCode::NotFound, "cannot write '{}'", path);
  KILN_CHECK(p.SerializeToOstream(&out), ErrorCode::Internal,
             "cannot serialize the model to '{}' (over 2 GiB?)", path);
}

}  // namespace kiln::onnx_io
