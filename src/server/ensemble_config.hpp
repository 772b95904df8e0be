#pragma once
// Ensembles (platform "ensemble", Triton's `ensemble_scheduling`): the checks of an ensemble's
// configuration and the plan its scheduler runs. The checks and their words are tritonserver
// 2.51's (the differential tests compare them), with Kiln's detail after them in parentheses
// where Triton's words alone leave the cause to guess (a cycle between steps).
//
// Two stages, as in Triton: plan_ensemble checks the config on its own (when it is read);
// check_ensemble_steps checks it against the completed configs of the composing models (when
// they are loaded).
#include <string>
#include <vector>

#include "server/model_config.hpp"

namespace kiln::server {

inline constexpr const char* kEnsemblePlatform = "ensemble";

// How deeply ensembles may nest (a step running an ensemble whose step runs an ensemble ...).
// Triton has no bound; each level holds its steps' tensors and a callback frame, so Kiln refuses
// deeper nesting at load.
inline constexpr int kMaxEnsembleDepth = 8;

// True for a config that asks for an ensemble (its platform, or ensemble_scheduling).
bool is_ensemble(const ModelConfig& config);

struct EnsemblePlan {
  struct Binding {
    std::string model_tensor;  // the composing model's input or output
    size_t tensor = 0;         // the ensemble tensor (index into `tensors`)
  };
  struct Step {
    std::string model;
    int64_t version = -1;                  // -1: the highest ready version at run time
    std::vector<Binding> inputs, outputs;  // sorted by model tensor name
  };
  std::vector<std::string> tensors;  // every ensemble tensor, in order of first mention
  std::vector<Step> steps;
  std::vector<int> producer;                 // per tensor: the step writing it, -1 for none
  std::vector<std::vector<size_t>> readers;  // per tensor: the steps reading it, each once
  std::vector<size_t> inputs, outputs;       // the ensemble's inputs / outputs, config order
};

// Checks an ensemble config on its own (steps complete, every input used, every output written,
// no tensor written twice, no cycle, no unused tensor) and returns its plan; InvalidArgument in
// Triton's words otherwise.
EnsemblePlan plan_ensemble(const ModelConfig& config);

// Checks an ensemble against the completed configs of the versions its steps run (`steps[i]`
// for step i): every mapped name exists, every required input is fed, datatypes and shapes agree
// along each tensor, and no step's model batches less than the ensemble. InvalidArgument in
// Triton's words otherwise.
void check_ensemble_steps(const ModelConfig& config, const EnsemblePlan& plan,
                          const std::vector<const ModelConfig*>& steps);

// What Triton's normalization fills in for an ensemble (max_batch_size 0, version policy
// latest 1, the transaction policy), so /config reads as Triton's.
void complete_ensemble_config(ModelConfig& config);

// The models an ensemble's steps name, each once, sorted.
std::vector<std::string> ensemble_composing_models(const ModelConfig& config);

}  // namespace kiln::server
