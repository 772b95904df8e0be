// Loading an ensemble version (platform "ensemble"): no model file, no instances and nothing
// reserved from the instance budget; its config is checked on its own and against the versions
// of the composing models its steps run (which the repository loads first), and its nesting is
// bounded.
#include "server/model.hpp"

namespace kiln::server {

void ModelVersion::load_ensemble(ModelLoadSpec& spec) {
  complete_ensemble_config(config_);
  validate_config(config_);
  EnsemblePlan plan = plan_ensemble(config_);
  KILN_CHECK(static_cast<bool>(spec.resolve), ErrorCode::Internal,
             "ensemble '{}': no way to find its composing models", name_);
  // Holding the versions keeps their configs alive while the steps are checked against them.
  std::vector<std::shared_ptr<ModelVersion>> held;
  std::vector<const ModelConfig*> configs;
  int deepest = 0;
  for (const EnsemblePlan::Step& step : plan.steps) {
    held.push_back(spec.resolve(step.model, step.version));
    configs.push_back(&held.back()->config());
    deepest = std::max(deepest, held.back()->ensemble_depth());
  }
  check_ensemble_steps(config_, plan, configs);
  ensemble_depth_ = deepest + 1;
  KILN_CHECK_ARG(ensemble_depth_ <= kMaxEnsembleDepth,
                 "ensemble '{}' nests ensembles {} deep (itself included); at most {} levels "
                 "are allowed",
                 name_, ensemble_depth_, kMaxEnsembleDepth);
  input_metadata_ = tensor_metadata(config_, true);
  output_metadata_ = tensor_metadata(config_, false);
  const SchedulerOptions tensors = SchedulerOptions::from_config(config_, version_);
  EnsembleOptions options;
  options.model_name = name_;
  options.model_version = version_;
  options.max_batch_size = config_.max_batch_size();
  options.inputs = tensors.inputs;
  options.outputs = tensors.outputs;
  options.plan = std::move(plan);
  options.resolve = std::move(spec.resolve);
  options.memory = std::move(spec.request_memory);
  options.request_timeout_us = spec.request_timeout_us;
  ensemble_ = std::make_unique<EnsembleScheduler>(std::move(options), statistics_);
}

}  // namespace kiln::server
