#include "server/model_config.hpp"

#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>
#include <google/protobuf/util/json_util.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <set>

#include "server/ensemble_config.hpp"
#include "server/infer_types.hpp"
#include "server/latency_objective.hpp"
#include "server/sequence_config.hpp"

namespace kiln::server {
namespace pb = google::protobuf;
namespace {

// Collects the text parser's complaints with their positions (1-based, as editors count).
class TextErrors : public pb::io::ErrorCollector {
 public:
  void AddError(int line, pb::io::ColumnNumber column, const std::string& message) override {
    if (first_.empty())
      first_ = fmt::format("line {}, column {}: {}", line + 1, column + 1, message);
  }
  void AddWarning(int, pb::io::ColumnNumber, const std::string&) override {}
  const std::string& first() const { return first_; }

 private:
  std::string first_;
};

using JsonWriter = rapidjson::Writer<rapidjson::StringBuffer>;

void write_message(JsonWriter& w, const pb::Message& m);

void write_scalar(JsonWriter& w, const pb::Message& m, const pb::FieldDescriptor* f, int index) {
  const pb::Reflection* r = m.GetReflection();
  const bool rep = index >= 0;
  switch (f->cpp_type()) {
    case pb::FieldDescriptor::CPPTYPE_INT32:
      w.Int(rep ? r->GetRepeatedInt32(m, f, index) : r->GetInt32(m, f));
      break;
    case pb::FieldDescriptor::CPPTYPE_INT64:
      w.Int64(rep ? r->GetRepeatedInt64(m, f, index) : r->GetInt64(m, f));
      break;
    case pb::FieldDescriptor::CPPTYPE_UINT32:
      w.Uint(rep ? r->GetRepeatedUInt32(m, f, index) : r->GetUInt32(m, f));
      break;
    case pb::FieldDescriptor::CPPTYPE_UINT64:
      w.Uint64(rep ? r->GetRepeatedUInt64(m, f, index) : r->GetUInt64(m, f));
      break;
    case pb::FieldDescriptor::CPPTYPE_DOUBLE:
      w.Double(rep ? r->GetRepeatedDouble(m, f, index) : r->GetDouble(m, f));
      break;
    case pb::FieldDescriptor::CPPTYPE_FLOAT:
      w.Double(rep ? r->GetRepeatedFloat(m, f, index) : r->GetFloat(m, f));
      break;
    case pb::FieldDescriptor::CPPTYPE_BOOL:
      w.Bool(rep ? r->GetRepeatedBool(m, f, index) : r->GetBool(m, f));
      break;
    case pb::FieldDescriptor::CPPTYPE_ENUM: {
      const pb::EnumValueDescriptor* e = rep ? r->GetRepeatedEnum(m, f, index) : r->GetEnum(m, f);
      w.String(e->name().c_str(), static_cast<rapidjson::SizeType>(e->name().size()));
      break;
    }
    case pb::FieldDescriptor::CPPTYPE_STRING: {
      std::string s = rep ? r->GetRepeatedString(m, f, index) : r->GetString(m, f);
      w.String(s.c_str(), static_cast<rapidjson::SizeType>(s.size()));
      break;
    }
    case pb::FieldDescriptor::CPPTYPE_MESSAGE:
      write_message(w, rep ? r->GetRepeatedMessage(m, f, index) : r->GetMessage(m, f));
      break;
  }
}

// Map entries print as a JSON object keyed by the entry's key, as proto3 JSON does.
void write_map(JsonWriter& w, const pb::Message& m, const pb::FieldDescriptor* f) {
  const pb::Reflection* r = m.GetReflection();
  w.StartObject();
  for (int i = 0; i < r->FieldSize(m, f); ++i) {
    const pb::Message& entry = r->GetRepeatedMessage(m, f, i);
    const pb::Reflection* er = entry.GetReflection();
    const pb::FieldDescriptor* kf = entry.GetDescriptor()->FindFieldByNumber(1);
    const pb::FieldDescriptor* vf = entry.GetDescriptor()->FindFieldByNumber(2);
    std::string key;
    switch (kf->cpp_type()) {
      case pb::FieldDescriptor::CPPTYPE_STRING:
        key = er->GetString(entry, kf);
        break;
      case pb::FieldDescriptor::CPPTYPE_UINT64:
        key = std::to_string(er->GetUInt64(entry, kf));
        break;
      case pb::FieldDescriptor::CPPTYPE_INT64:
        key = std::to_string(er->GetInt64(entry, kf));
        break;
      case pb::FieldDescriptor::CPPTYPE_UINT32:
        key = std::to_string(er->GetUInt32(entry, kf));
        break;
      case pb::FieldDescriptor::CPPTYPE_INT32:
        key = std::to_string(er->GetInt32(entry, kf));
        break;
      default:
        key = er->GetBool(entry, kf) ? "true" : "false";
        break;
    }
    w.Key(key.c_str(), static_cast<rapidjson::SizeType>(key.size()));
    write_scalar(w, entry, vf, -1);
  }
  w.EndObject();
}

// Every non-oneof scalar and repeated field is printed (as protobuf's "always print primitive
// fields"), messages and oneof members only when set, and 64-bit integers as numbers, which is
// the JSON Triton's /config returns. The schema bounds the recursion depth.
void write_message(JsonWriter& w, const pb::Message& m) {
  const pb::Descriptor* d = m.GetDescriptor();
  const pb::Reflection* r = m.GetReflection();
  w.StartObject();
  for (int i = 0; i < d->field_count(); ++i) {
    const pb::FieldDescriptor* f = d->field(i);
    if (f->is_repeated()) {
      w.Key(f->name().c_str());
      if (f->is_map()) {
        write_map(w, m, f);
        continue;
      }
      w.StartArray();
      for (int k = 0; k < r->FieldSize(m, f); ++k) write_scalar(w, m, f, k);
      w.EndArray();
      continue;
    }
    // An unset `optional` scalar is left out too: such a field is one Triton 2.51's schema
    // lacks (ModelEnsembling.max_inflight_requests), or one completion always sets.
    const bool in_real_oneof = f->real_containing_oneof() != nullptr;
    const bool is_message = f->cpp_type() == pb::FieldDescriptor::CPPTYPE_MESSAGE;
    if ((in_real_oneof || is_message || f->has_presence()) && !r->HasField(m, f)) continue;
    w.Key(f->name().c_str());
    write_scalar(w, m, f, -1);
  }
  w.EndObject();
}

bool has_symbolic_batch(const IoInfo& io) {
  return io.type.is_tensor() && io.type.shape && io.type.shape->rank() >= 1 &&
         !(*io.type.shape)[0].is_static();
}

// Model dims as the config writes them: -1 for anything not static.
std::vector<int64_t> config_dims(const IoInfo& io, bool drop_batch) {
  std::vector<int64_t> dims;
  if (!io.type.shape) return dims;
  for (size_t i = drop_batch ? 1 : 0; i < io.type.shape->rank(); ++i) {
    const Dim& d = (*io.type.shape)[i];
    dims.push_back(d.is_static() ? d.value() : -1);
  }
  return dims;
}

template <typename ConfigTensor>
void complete_tensors(const std::string& model, const char* what,
                      pb::RepeatedPtrField<ConfigTensor>& config, const std::vector<IoInfo>& ios,
                      bool batching) {
  for (const IoInfo& io : ios) {
    ConfigTensor* found = nullptr;
    for (ConfigTensor& t : config) {
      if (t.name() == io.name) found = &t;
    }
    KILN_CHECK(io.type.is_tensor(), ErrorCode::Unsupported,
               "model '{}': {} '{}' is a {}, the server only carries tensors", model, what, io.name,
               io.type.to_string());
    const int type = datatype_to_config(io.type.dtype);
    if (found == nullptr) {
      found = config.Add();
      found->set_name(io.name);
      found->set_data_type(static_cast<inference::DataType>(type));
      for (int64_t d : config_dims(io, batching)) found->add_dims(d);
      continue;
    }
    if (found->data_type() == inference::TYPE_INVALID) {
      found->set_data_type(static_cast<inference::DataType>(type));
    }
    KILN_CHECK_ARG(found->data_type() == type,
                   "model '{}': {} '{}' is {} in the config but {} in the model", model, what,
                   io.name, inference::DataType_Name(found->data_type()),
                   inference::DataType_Name(static_cast<inference::DataType>(type)));
    if (found->dims_size() == 0 && !found->has_reshape()) {
      for (int64_t d : config_dims(io, batching)) found->add_dims(d);
    }
  }
  for (const ConfigTensor& t : config) {
    bool known = false;
    for (const IoInfo& io : ios) known |= io.name == t.name();
    KILN_CHECK_ARG(known, "model '{}': the config names {} '{}' that the model does not have",
                   model, what, t.name());
  }
}

void check_dims(const std::string& model, const std::string& tensor,
                const pb::RepeatedField<int64_t>& dims,
                const inference::ModelTensorReshape* reshape, bool has_reshape) {
  int64_t count = 1;
  bool dynamic = false;
  for (int64_t d : dims) {
    KILN_CHECK_ARG(d >= -1, "model '{}': '{}' has dim {}; dims are -1 (any) or >= 0", model, tensor,
                   d);
    if (d == -1) {
      dynamic = true;
    } else {
      KILN_CHECK_ARG(d == 0 || count <= INT64_MAX / d, "model '{}': '{}' dims overflow", model,
                     tensor);
      count *= d;
    }
  }
  if (!has_reshape) return;
  int64_t rcount = 1;
  int wild = 0;
  for (int64_t d : reshape->shape()) {
    KILN_CHECK_ARG(d >= -1, "model '{}': '{}' has reshape dim {}", model, tensor, d);
    if (d == -1) {
      ++wild;
    } else {
      KILN_CHECK_ARG(d == 0 || rcount <= INT64_MAX / d, "model '{}': '{}' reshape overflows", model,
                     tensor);
      rcount *= d;
    }
  }
  KILN_CHECK_ARG(wild <= 1, "model '{}': '{}' reshape has more than one -1", model, tensor);
  KILN_CHECK_ARG(dynamic || wild == 1 || rcount == count,
                 "model '{}': '{}' reshape has {} elements but dims have {}", model, tensor, rcount,
                 count);
}

}  // namespace

ModelConfig parse_config_text(std::string_view text, std::string_view source) {
  ModelConfig config;
  pb::TextFormat::Parser parser;
  TextErrors errors;
  parser.RecordErrorsTo(&errors);
  std::string owned(text);
  if (!parser.ParseFromString(owned, &config)) {
    fail(ErrorCode::InvalidArgument, "{}: {}", source,
         errors.first().empty() ? "malformed model configuration" : errors.first());
  }
  return config;
}

ModelConfig parse_config_json(std::string_view json, std::string_view source) {
  ModelConfig config;
  pb::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  pb::util::Status status =
      pb::util::JsonStringToMessage(pb::StringPiece(json.data(), json.size()), &config, options);
  if (!status.ok()) {
    fail(ErrorCode::InvalidArgument, "{}: {}", source, std::string(status.message()));
  }
  return config;
}

std::string config_to_json(const ModelConfig& config) {
  rapidjson::StringBuffer buffer;
  JsonWriter writer(buffer);
  write_message(writer, config);
  return std::string(buffer.GetString(), buffer.GetSize());
}

std::string config_backend(const ModelConfig& config) {
  const std::string& b = config.backend();
  const std::string& p = config.platform();
  if (b == "kiln" || (b.empty() && p == "kiln")) return "kiln";
  if (b == "onnxruntime" || (b.empty() && p == "onnxruntime_onnx")) return "onnxruntime";
  fail(ErrorCode::Unsupported,
       "model '{}': backend '{}' / platform '{}' is not supported (kiln serves 'kiln' engines and "
       "'onnxruntime' / 'onnxruntime_onnx' ONNX models)",
       config.name(), b, p);
}

std::string config_model_filename(const ModelConfig& config) {
  if (!config.default_model_filename().empty()) return config.default_model_filename();
  return config_backend(config) == "kiln" ? "model.kiln" : "model.onnx";
}

void autocomplete_config(ModelConfig& config, const std::vector<IoInfo>& inputs,
                         const std::vector<IoInfo>& outputs) {
  const std::string backend = config_backend(config);
  if (config.backend().empty()) config.set_backend(backend);
  if (config.platform().empty()) {
    config.set_platform(backend == "kiln" ? "kiln" : "onnxruntime_onnx");
  }
  if (!config.has_max_batch_size()) {
    bool batchable = !inputs.empty();
    for (const IoInfo& io : inputs) batchable &= has_symbolic_batch(io);
    for (const IoInfo& io : outputs) batchable &= has_symbolic_batch(io);
    // Triton's ONNX Runtime backend default (--backend-config default-max-batch-size).
    constexpr int kDefaultMaxBatch = 4;
    int max_batch = 0;
    if (batchable) {
      max_batch = kDefaultMaxBatch;
      const Dim& d = (*inputs.front().type.shape)[0];
      if (d.max() > 0 && d.max() < max_batch) max_batch = static_cast<int>(d.max());
    }
    config.set_max_batch_size(max_batch);
    if (max_batch > 0 &&
        config.scheduling_choice_case() == ModelConfig::SCHEDULING_CHOICE_NOT_SET) {
      config.mutable_dynamic_batching();
    }
  }
  const bool batching = config.max_batch_size() > 0;
  if (batching) {
    for (const IoInfo& io : inputs) {
      KILN_CHECK_ARG(io.type.shape && io.type.shape->rank() >= 1,
                     "model '{}': max_batch_size is {} but input '{}' has no batch dim",
                     config.name(), config.max_batch_size(), io.name);
    }
  }
  // A sequence model's control and state inputs are the server's to fill, and its state outputs
  // are the server's to read back (unless the config lists one for clients too): none is
  // completed as a client-visible tensor.
  const std::set<std::string> server_inputs = sequence_server_inputs(config);
  std::set<std::string> hidden_outputs = sequence_state_outputs(config);
  for (const inference::ModelOutput& out : config.output()) hidden_outputs.erase(out.name());
  std::vector<IoInfo> client_inputs, client_outputs;
  for (const IoInfo& io : inputs) {
    if (!server_inputs.count(io.name)) client_inputs.push_back(io);
  }
  for (const IoInfo& io : outputs) {
    if (!hidden_outputs.count(io.name)) client_outputs.push_back(io);
  }
  complete_tensors(config.name(), "input", *config.mutable_input(), client_inputs, batching);
  complete_tensors(config.name(), "output", *config.mutable_output(), client_outputs, batching);
  if (!config.has_version_policy()) config.mutable_version_policy()->mutable_latest();
  if (config.version_policy().has_latest() &&
      config.version_policy().latest().num_versions() == 0) {
    config.mutable_version_policy()->mutable_latest()->set_num_versions(1);
  }
  if (config.instance_group_size() == 0) {
    inference::ModelInstanceGroup* g = config.add_instance_group();
    g->set_count(1);
    g->set_kind(inference::ModelInstanceGroup::KIND_CPU);
  }
  for (int i = 0; i < config.instance_group_size(); ++i) {
    inference::ModelInstanceGroup* g = config.mutable_instance_group(i);
    if (g->name().empty()) g->set_name(fmt::format("{}_{}", config.name(), i));
    if (g->count() == 0) g->set_count(1);
    // Without a GPU, AUTO means CPU (as Triton decides on a machine with no GPU).
    if (g->kind() == inference::ModelInstanceGroup::KIND_AUTO && g->gpus_size() == 0) {
      g->set_kind(inference::ModelInstanceGroup::KIND_CPU);
    }
  }
  if (config.has_dynamic_batching()) {
    inference::ModelDynamicBatching* db = config.mutable_dynamic_batching();
    if (db->priority_levels() > 0 && db->default_priority_level() == 0) {
      db->set_default_priority_level(db->priority_levels());
    }
  }
}

void validate_config(const ModelConfig& config) {
  const std::string& name = config.name();
  KILN_CHECK_ARG(!name.empty(), "model configuration has no name");
  // An ensemble runs no model file of its own: its steps are checked instead (ensemble_config).
  if (is_ensemble(config)) {
    plan_ensemble(config);
  } else {
    config_backend(config);
  }
  KILN_CHECK_ARG(config.max_batch_size() >= 0, "model '{}': max_batch_size {} is negative", name,
                 config.max_batch_size());
  KILN_CHECK_ARG(config.input_size() > 0, "model '{}': the configuration has no inputs", name);
  KILN_CHECK_ARG(config.output_size() > 0, "model '{}': the configuration has no outputs", name);
  std::set<std::string> seen;
  for (const inference::ModelInput& in : config.input()) {
    KILN_CHECK_ARG(!in.name().empty(), "model '{}': an input has no name", name);
    KILN_CHECK_ARG(seen.insert(in.name()).second, "model '{}': input '{}' appears twice", name,
                   in.name());
    datatype_from_config(in.data_type());
    KILN_CHECK(!in.is_shape_tensor(), ErrorCode::Unsupported,
               "model '{}': shape tensor input '{}' is not supported", name, in.name());
    KILN_CHECK(!in.allow_ragged_batch(), ErrorCode::Unsupported,
               "model '{}': ragged batching of input '{}' is not supported", name, in.name());
    check_dims(name, in.name(), in.dims(), &in.reshape(), in.has_reshape());
  }
  seen.clear();
  for (const inference::ModelOutput& out : config.output()) {
    KILN_CHECK_ARG(!out.name().empty(), "model '{}': an output has no name", name);
    KILN_CHECK_ARG(seen.insert(out.name()).second, "model '{}': output '{}' appears twice", name,
                   out.name());
    datatype_from_config(out.data_type());
    KILN_CHECK(!out.is_shape_tensor(), ErrorCode::Unsupported,
               "model '{}': shape tensor output '{}' is not supported", name, out.name());
    check_dims(name, out.name(), out.dims(), &out.reshape(), out.has_reshape());
  }
  if (config.has_sequence_batching()) {
    KILN_CHECK(!is_ensemble(config), ErrorCode::Unsupported,
               "model '{}': an ensemble cannot have sequence_batching", name);
    validate_sequence_config(config);
  }
  KILN_CHECK(config.batch_input_size() == 0 && config.batch_output_size() == 0,
             ErrorCode::Unsupported, "model '{}': batch_input / batch_output are not supported",
             name);
  KILN_CHECK(!config.model_transaction_policy().decoupled(), ErrorCode::Unsupported,
             "model '{}': decoupled models are not supported", name);
  KILN_CHECK(!config.response_cache().enable() || !is_ensemble(config), ErrorCode::Unsupported,
             "model '{}': the response cache is not supported for ensembles (enable it on their "
             "steps)",
             name);
  KILN_CHECK(config.model_warmup_size() == 0, ErrorCode::Unsupported,
             "model '{}': model_warmup is not supported", name);
  KILN_CHECK(config.model_operations().op_library_filename_size() == 0, ErrorCode::Unsupported,
             "model '{}': custom op libraries are not supported", name);
  const inference::ModelVersionPolicy& vp = config.version_policy();
  if (vp.has_specific()) {
    KILN_CHECK_ARG(vp.specific().versions_size() > 0,
                   "model '{}': version_policy specific lists no versions", name);
  }
  for (const inference::ModelInstanceGroup& g : config.instance_group()) {
    KILN_CHECK_ARG(g.count() >= 0, "model '{}': instance_group '{}' count {} is negative", name,
                   g.name(), g.count());
    KILN_CHECK_ARG(g.kind() != inference::ModelInstanceGroup::KIND_CPU || g.gpus_size() == 0,
                   "model '{}': instance_group '{}' is KIND_CPU but lists gpus", name, g.name());
  }
  validate_latency_objective(config);
  if (config.has_dynamic_batching()) {
    const inference::ModelDynamicBatching& db = config.dynamic_batching();
    for (int size : db.preferred_batch_size()) {
      KILN_CHECK_ARG(size >= 1 && (config.max_batch_size() == 0 || size <= config.max_batch_size()),
                     "model '{}': preferred batch size {} must be in 1..max_batch_size ({})", name,
                     size, config.max_batch_size());
    }
    if (db.priority_levels() > 0) {
      KILN_CHECK_ARG(
          db.default_priority_level() >= 1 && db.default_priority_level() <= db.priority_levels(),
          "model '{}': default_priority_level {} must be in 1..priority_levels ({})", name,
          db.default_priority_level(), db.priority_levels());
      KILN_CHECK_ARG(db.priority_levels() <= 1024,
                     "model '{}': priority_levels {} is more than 1024", name,
                     db.priority_levels());
    } else {
      KILN_CHECK_ARG(db.default_priority_level() == 0 && db.priority_queue_policy_size() == 0,
                     "model '{}': priority settings need priority_levels", name);
    }
    for (const auto& entry : db.priority_queue_policy()) {
      KILN_CHECK_ARG(entry.first >= 1 && entry.first <= db.priority_levels(),
                     "model '{}': priority_queue_policy level {} is outside 1..{}", name,
                     entry.first, db.priority_levels());
    }
  }
}

}  // namespace kiln::server
