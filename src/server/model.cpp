#include "server/model.hpp"

#include <cstdlib>

namespace kiln::server {
namespace {

std::vector<TensorMetadata> metadata_of(const ModelConfig& config, bool inputs) {
  std::vector<TensorMetadata> out;
  auto add = [&](const std::string& name, int type, const auto& dims) {
    TensorMetadata t;
    t.name = name;
    t.datatype = std::string(datatype_name(datatype_from_config(type)));
    if (config.max_batch_size() > 0) t.shape.push_back(-1);
    t.shape.insert(t.shape.end(), dims.begin(), dims.end());
    out.push_back(std::move(t));
  };
  if (inputs) {
    for (const inference::ModelInput& in : config.input())
      add(in.name(), in.data_type(), in.dims());
  } else {
    for (const inference::ModelOutput& o : config.output()) add(o.name(), o.data_type(), o.dims());
  }
  return out;
}

// Session options from the config: the instance's device, Kiln's passes unless the graph
// optimization level is -1, and intra-op threads from the ONNX Runtime backend's parameter name.
SessionOptions session_options(const ModelConfig& config,
                               const inference::ModelInstanceGroup& group, int gpu) {
  SessionOptions o;
  if (group.kind() == inference::ModelInstanceGroup::KIND_GPU ||
      (group.kind() == inference::ModelInstanceGroup::KIND_AUTO && gpu >= 0)) {
    o.device = fmt::format("gpu:{}", gpu < 0 ? 0 : gpu);
  }
  o.optimize = config.optimization().graph().level() != -1;
  auto it = config.parameters().find("intra_op_thread_count");
  if (it != config.parameters().end()) {
    char* end = nullptr;
    const long n = std::strtol(it->second.string_value().c_str(), &end, 10);
    KILN_CHECK_ARG(end != nullptr && *end == '\0' && n >= 0 && n <= 4096,
                   "model '{}': parameter intra_op_thread_count '{}' is not a thread count",
                   config.name(), it->second.string_value());
    o.threads = static_cast<int>(n);
  }
  return o;
}

}  // namespace

ModelVersion::ModelVersion(ModelLoadSpec spec)
    : name_(std::move(spec.name)),
      version_(spec.version),
      config_(std::move(spec.config)),
      statistics_(spec.metrics) {
  const Clock::time_point start = Clock::now();
  if (config_.name().empty()) config_.set_name(name_);
  KILN_CHECK_ARG(config_.name() == name_,
                 "model '{}': the configuration names the model '{}'; the two must agree", name_,
                 config_.name());
  // The instance list: count per group, times each listed GPU for GPU groups; passive groups
  // take no requests and are not created.
  std::vector<std::pair<const inference::ModelInstanceGroup*, int>> instances;
  inference::ModelInstanceGroup default_group;
  default_group.set_count(1);
  default_group.set_kind(inference::ModelInstanceGroup::KIND_CPU);
  if (config_.instance_group_size() == 0) instances.emplace_back(&default_group, -1);
  for (const inference::ModelInstanceGroup& g : config_.instance_group()) {
    if (g.passive()) continue;
    const int count = g.count() > 0 ? g.count() : 1;
    KILN_CHECK_ARG(count <= 256, "model '{}': instance_group count {} is more than 256", name_,
                   count);
    if (g.gpus_size() == 0) {
      for (int i = 0; i < count; ++i) instances.emplace_back(&g, -1);
    } else {
      for (int gpu : g.gpus()) {
        for (int i = 0; i < count; ++i) instances.emplace_back(&g, gpu);
      }
    }
  }
  KILN_CHECK_ARG(!instances.empty(), "model '{}': every instance group is passive", name_);
  std::vector<std::unique_ptr<Session>> sessions;
  sessions.push_back(std::make_unique<Session>(
      spec.model_path,
      session_options(config_, *instances.front().first, instances.front().second)));
  if (spec.autocomplete) {
    autocomplete_config(config_, sessions.front()->inputs(), sessions.front()->outputs());
  } else {
    // Strict mode still checks the config against the model; it only fills nothing in.
    ModelConfig probe = config_;
    autocomplete_config(probe, sessions.front()->inputs(), sessions.front()->outputs());
    KILN_CHECK_ARG(
        config_.input_size() == probe.input_size() && config_.output_size() == probe.output_size(),
        "model '{}': with a strict model config every input and output must be listed", name_);
    if (!config_.has_max_batch_size()) config_.set_max_batch_size(0);
    if (config_.platform().empty()) config_.set_platform(probe.platform());
    if (config_.backend().empty()) config_.set_backend(probe.backend());
  }
  validate_config(config_);
  for (size_t i = 1; i < instances.size(); ++i) {
    sessions.push_back(std::make_unique<Session>(
        spec.model_path, session_options(config_, *instances[i].first, instances[i].second)));
  }
  input_metadata_ = metadata_of(config_, true);
  output_metadata_ = metadata_of(config_, false);
  scheduler_ = std::make_unique<Scheduler>(SchedulerOptions::from_config(config_, version_),
                                           std::move(sessions), statistics_);
  load_seconds_ = std::chrono::duration<double>(Clock::now() - start).count();
}

ModelVersion::~ModelVersion() = default;

void ModelVersion::infer_async(const std::shared_ptr<ModelVersion>& self,
                               std::unique_ptr<InferRequest> request, InferCallback done) {
  self->scheduler_->enqueue(std::move(request), std::move(done), self);
}

}  // namespace kiln::server
