#include "server/model.hpp"

#include <cerrno>
#include <cstdlib>
#include <limits>

namespace kiln::server {
namespace {

// The intra_op_thread_count parameter (the ONNX Runtime backend's name); 0 when absent, which
// means one thread per CPU.
int intra_op_threads(const ModelConfig& config, const std::string& model) {
  auto it = config.parameters().find("intra_op_thread_count");
  if (it == config.parameters().end()) return 0;
  const std::string& text = it->second.string_value();
  char* end = nullptr;
  errno = 0;
  const long long n = std::strtoll(text.c_str(), &end, 10);
  KILN_CHECK_ARG(!text.empty() && end != nullptr && *end == '\0' && errno == 0 && n >= 0 &&
                     n <= std::numeric_limits<int>::max(),
                 "model '{}': parameter intra_op_thread_count '{}' is not a thread count", model,
                 text);
  return static_cast<int>(n);
}

// Session options from the config: the instance's device, Kiln's passes unless the graph
// optimization level is -1, and the intra-op threads.
SessionOptions session_options(const ModelConfig& config,
                               const inference::ModelInstanceGroup& group, int gpu) {
  SessionOptions o;
  if (group.kind() == inference::ModelInstanceGroup::KIND_GPU ||
      (group.kind() == inference::ModelInstanceGroup::KIND_AUTO && gpu >= 0)) {
    o.device = fmt::format("gpu:{}", gpu < 0 ? 0 : gpu);
  }
  o.optimize = config.optimization().graph().level() != -1;
  o.threads = intra_op_threads(config, config.name());
  return o;
}

// The instance list: count per group, times each listed GPU for GPU groups; passive groups
// take no requests and are not created.
using InstanceList = std::vector<std::pair<const inference::ModelInstanceGroup*, int>>;
InstanceList instance_list(const ModelConfig& config, const std::string& model,
                           const inference::ModelInstanceGroup& default_group) {
  InstanceList instances;
  if (config.instance_group_size() == 0) instances.emplace_back(&default_group, -1);
  for (const inference::ModelInstanceGroup& g : config.instance_group()) {
    if (g.passive()) continue;
    const int count = g.count() > 0 ? g.count() : 1;
    KILN_CHECK_ARG(count <= 256, "model '{}': instance_group count {} is more than 256", model,
                   count);
    const int copies = g.gpus_size() == 0 ? 1 : g.gpus_size();
    for (int c = 0; c < copies; ++c) {
      const int gpu = g.gpus_size() == 0 ? -1 : g.gpus(c);
      for (int i = 0; i < count; ++i) instances.emplace_back(&g, gpu);
    }
  }
  KILN_CHECK_ARG(!instances.empty(), "model '{}': every instance group is passive", model);
  return instances;
}

inference::ModelInstanceGroup cpu_group() {
  inference::ModelInstanceGroup g;
  g.set_count(1);
  g.set_kind(inference::ModelInstanceGroup::KIND_CPU);
  return g;
}

}  // namespace

std::vector<TensorMetadata> tensor_metadata(const ModelConfig& config, bool inputs) {
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
  if (is_ensemble(config_)) {
    load_ensemble(spec);
  } else {
    load_model(spec);
  }
  load_seconds_ = std::chrono::duration<double>(Clock::now() - start).count();
}

void ModelVersion::load_model(ModelLoadSpec& spec) {
  // Nothing is created before the budget holds it: a thread the OS refuses inside OpenMP ends
  // the process.
  if (spec.budget) {
    lease_ = spec.budget->reserve(fmt::format("model '{}' version {}", name_, version_),
                                  budget_demand(config_, name_));
  }
  const inference::ModelInstanceGroup default_group = cpu_group();
  const InstanceList instances = instance_list(config_, name_, default_group);
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
  complete_sequence_config(config_);
  validate_config(config_);
  // Triton's normalization reports pinned input and output memory on unless the config says
  // otherwise; Kiln's CPU path has nothing to pin, but the config reads the same.
  inference::ModelOptimizationPolicy* opt = config_.mutable_optimization();
  if (!opt->has_input_pinned_memory()) opt->mutable_input_pinned_memory()->set_enable(true);
  if (!opt->has_output_pinned_memory()) opt->mutable_output_pinned_memory()->set_enable(true);
  for (size_t i = 1; i < instances.size(); ++i) {
    sessions.push_back(std::make_unique<Session>(
        spec.model_path, session_options(config_, *instances[i].first, instances[i].second)));
  }
  input_metadata_ = tensor_metadata(config_, true);
  output_metadata_ = tensor_metadata(config_, false);
  SchedulerOptions so = SchedulerOptions::from_config(config_, version_);
  so.request_timeout_us = spec.request_timeout_us;
  so.cancel = spec.cancel;
  if (config_.has_sequence_batching()) {
    SequenceOptions sequence = plan_sequence(
        config_, sessions.front()->inputs(), sessions.front()->outputs(), spec.model_dir,
        sessions.size(), spec.request_memory ? spec.request_memory->limit() : SIZE_MAX);
    sequence_ = std::make_unique<SequenceBatcher>(
        std::move(so), std::move(sequence), std::move(sessions), statistics_, spec.request_memory);
    return;
  }
  scheduler_ = std::make_unique<Scheduler>(std::move(so), std::move(sessions), statistics_);
}

BudgetDemand budget_demand(const ModelConfig& config, const std::string& model) {
  // Counted, not listed: the list of a config with very many groups is itself a cost.
  size_t instances = config.instance_group_size() == 0 ? 1 : 0;
  for (const inference::ModelInstanceGroup& g : config.instance_group()) {
    if (g.passive()) continue;
    const int count = g.count() > 0 ? g.count() : 1;
    KILN_CHECK_ARG(count <= 256, "model '{}': instance_group count {} is more than 256", model,
                   count);
    instances += static_cast<size_t>(count) * static_cast<size_t>(std::max(1, g.gpus_size()));
  }
  const int per_instance = intra_op_threads(config, model);
  const size_t threads = per_instance > 0 ? static_cast<size_t>(per_instance) : online_cpus();
  BudgetDemand d;
  d.instances = instances;
  d.threads = instances * threads;
  const size_t groups = std::max(1, config.instance_group_size());
  d.detail = fmt::format("{} instance group{} ({} instance{} x {} intra-op thread{}{})", groups,
                         groups == 1 ? "" : "s", d.instances, d.instances == 1 ? "" : "s", threads,
                         threads == 1 ? "" : "s", per_instance > 0 ? "" : ", one per CPU");
  return d;
}

ModelVersion::~ModelVersion() = default;

void ModelVersion::infer_async(const std::shared_ptr<ModelVersion>& self,
                               std::unique_ptr<InferRequest> request, InferCallback done) {
  if (self->ensemble_) {
    self->ensemble_->enqueue(std::move(request), std::move(done), self);
  } else if (self->sequence_) {
    self->sequence_->enqueue(std::move(request), std::move(done), self);
  } else {
    self->scheduler_->enqueue(std::move(request), std::move(done), self);
  }
}

}  // namespace kiln::server
