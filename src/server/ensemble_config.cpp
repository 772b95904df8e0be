#include "server/ensemble_config.hpp"

#include <algorithm>
#include <deque>
#include <set>
#include <unordered_map>

namespace kiln::server {
namespace {

// A protobuf map's entries sorted by key: its own order is unspecified, and the plan, the
// messages and the order of a step's inputs must not change from one load to the next.
std::vector<std::pair<std::string, std::string>> sorted_entries(
    const google::protobuf::Map<std::string, std::string>& map) {
  std::vector<std::pair<std::string, std::string>> out(map.begin(), map.end());
  std::sort(out.begin(), out.end());
  return out;
}

// A cycle between steps (step u comes before step v when v reads a tensor u writes), as the
// steps on it in order; empty when there is none. Iterative: a config from the load API may hold
// any number of steps.
std::vector<size_t> find_step_cycle(const EnsemblePlan& plan) {
  const size_t n = plan.steps.size();
  std::vector<std::vector<size_t>> next(n);
  for (size_t s = 0; s < n; ++s) {
    for (const EnsemblePlan::Binding& out : plan.steps[s].outputs) {
      for (size_t r : plan.readers[out.tensor]) next[s].push_back(r);
    }
  }
  enum : char { kNew, kOnPath, kDone };
  std::vector<char> color(n, kNew);
  std::vector<size_t> parent(n, n);
  for (size_t root = 0; root < n; ++root) {
    if (color[root] != kNew) continue;
    std::vector<std::pair<size_t, size_t>> stack{{root, 0}};  // (step, next edge to follow)
    color[root] = kOnPath;
    while (!stack.empty()) {
      auto& [s, edge] = stack.back();
      if (edge == next[s].size()) {
        color[s] = kDone;
        stack.pop_back();
        continue;
      }
      const size_t v = next[s][edge++];
      if (color[v] == kOnPath) {
        std::vector<size_t> cycle{v};
        for (size_t u = s; u != v; u = parent[u]) cycle.push_back(u);
        std::reverse(cycle.begin() + 1, cycle.end());
        return cycle;
      }
      if (color[v] == kNew) {
        color[v] = kOnPath;
        parent[v] = s;
        stack.emplace_back(v, 0);
      }
    }
  }
  return {};
}

// Triton's words for an output no step can write, naming the first tensor upstream that nothing
// connects (the same walk as Triton's, so the same tensor is named), then Kiln's note when the
// cause is a cycle between steps.
std::string not_written_message(const ModelConfig& config, const EnsemblePlan& plan,
                                const std::vector<std::vector<size_t>>& prev,
                                const std::vector<char>& ready, size_t output) {
  std::string message = fmt::format("output '{}' for ensemble '{}' is not written",
                                    plan.tensors[output], config.name());
  const std::vector<size_t>* nodes = &prev[output];
  size_t last = output;
  std::set<size_t> seen;  // a cycle would otherwise walk forever
  while (nodes != nullptr && !nodes->empty()) {
    const std::vector<size_t>& current = *nodes;
    nodes = nullptr;
    for (size_t node : current) {
      if (!ready[node] && seen.insert(node).second) {
        last = node;
        nodes = &prev[node];
        break;
      }
    }
  }
  if (last != output) {
    message += fmt::format(": at least one of its depending tensors, '{}', is not connected",
                           plan.tensors[last]);
  }
  const std::vector<size_t> cycle = find_step_cycle(plan);
  if (!cycle.empty()) {
    std::vector<std::string> names;
    for (size_t s : cycle) names.push_back(fmt::format("step {}", s));
    names.push_back(fmt::format("step {}", cycle.front()));
    message += fmt::format(
        " (the steps form a cycle, each waiting for a tensor the one before it writes: {})",
        fmt::join(names, " -> "));
  }
  return message;
}

// An ensemble tensor as one model sees it, for the consistency checks between models.
struct TensorNode {
  std::string model;
  int type = 0;
  std::vector<int64_t> dims, full_dims;  // full: with the batch dim (-1) when the model batches
};

template <typename Dims>
TensorNode tensor_node(const std::string& model, bool batching, int type, const Dims& dims) {
  TensorNode n;
  n.model = model;
  n.type = type;
  n.dims.assign(dims.begin(), dims.end());
  if (batching) n.full_dims.push_back(-1);
  n.full_dims.insert(n.full_dims.end(), dims.begin(), dims.end());
  return n;
}

bool dims_agree(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] != b[i] && a[i] != -1 && b[i] != -1) return false;
  }
  return true;
}

// Triton's consistency check: same datatype, and shapes that agree (-1 matching anything), with
// or without the batch dim (a batching and a non-batching model may share a tensor).
void check_consistent(const TensorNode& known, const TensorNode& model, const std::string& prefix) {
  KILN_CHECK_ARG(
      known.type == model.type,
      "{}inconsistent data type: {} is inferred from model {} while {} is inferred "
      "from model {}",
      prefix, inference::DataType_Name(static_cast<inference::DataType>(known.type)), known.model,
      inference::DataType_Name(static_cast<inference::DataType>(model.type)), model.model);
  KILN_CHECK_ARG(dims_agree(known.dims, model.dims) || dims_agree(known.full_dims, model.full_dims),
                 "{}inconsistent shape: [{}] is inferred from model {} while [{}] is inferred "
                 "from model {}",
                 prefix, fmt::join(known.full_dims, ","), known.model,
                 fmt::join(model.full_dims, ","), model.model);
}

}  // namespace

bool is_ensemble(const ModelConfig& config) {
  return config.platform() == kEnsemblePlatform || config.has_ensemble_scheduling();
}

EnsemblePlan plan_ensemble(const ModelConfig& config) {
  const std::string& name = config.name();
  KILN_CHECK_ARG(config.platform() == kEnsemblePlatform,
                 "ensemble scheduling cannot be set for model '{}' whose platform is not {}", name,
                 kEnsemblePlatform);
  KILN_CHECK_ARG(config.has_ensemble_scheduling(),
                 "ensemble scheduling must be set for ensemble {} whose platform is {}", name,
                 kEnsemblePlatform);
  KILN_CHECK_ARG(config.instance_group_size() == 0,
                 "instance group should not be specified for ensemble '{}'", name);
  KILN_CHECK_ARG(!config.has_optimization(),
                 "optimization should not be specified for ensemble '{}'", name);
  KILN_CHECK_ARG(config.model_warmup_size() == 0,
                 "model_warmup can not be specified for ensemble '{}'", name);
  const auto& steps = config.ensemble_scheduling().step();
  KILN_CHECK_ARG(!steps.empty(), "must specify 'step' for ensemble '{}'", name);
  KILN_CHECK(!config.ensemble_scheduling().has_max_inflight_requests(), ErrorCode::Unsupported,
             "ensemble '{}': max_inflight_requests is not supported (a newer Triton's setting)",
             name);

  EnsemblePlan plan;
  std::unordered_map<std::string, size_t> index;
  // Triton's data-flow graph between tensors: a step's outputs each depend on all its inputs.
  std::vector<std::vector<size_t>> prev, next;
  auto tensor = [&](const std::string& t) {
    auto [it, added] = index.emplace(t, plan.tensors.size());
    if (added) {
      plan.tensors.push_back(t);
      plan.producer.push_back(-1);
      plan.readers.emplace_back();
      prev.emplace_back();
      next.emplace_back();
    }
    return it->second;
  };
  for (int s = 0; s < steps.size(); ++s) {
    const inference::ModelEnsembling::Step& step = steps[s];
    KILN_CHECK_ARG(!step.model_name().empty(),
                   "must specify 'model_name' in step {} of ensemble '{}'", s, name);
    KILN_CHECK_ARG(!step.input_map().empty(),
                   "must specify 'input_map' in step {} of ensemble '{}'", s, name);
    KILN_CHECK_ARG(!step.output_map().empty(),
                   "must specify 'output_map' in step {} of ensemble '{}'", s, name);
    EnsemblePlan::Step planned;
    planned.model = step.model_name();
    planned.version = step.model_version();
    for (const auto& [model_output, ensemble_tensor] : sorted_entries(step.output_map())) {
      const size_t t = tensor(ensemble_tensor);
      KILN_CHECK_ARG(plan.producer[t] < 0,
                     "ensemble tensor '{}' can appear in an output map only once for ensemble "
                     "'{}' step {}",
                     ensemble_tensor, name, s);
      plan.producer[t] = s;
      planned.outputs.push_back({model_output, t});
    }
    for (const auto& [model_input, ensemble_tensor] : sorted_entries(step.input_map())) {
      const size_t t = tensor(ensemble_tensor);
      planned.inputs.push_back({model_input, t});
      if (plan.readers[t].empty() || plan.readers[t].back() != static_cast<size_t>(s)) {
        plan.readers[t].push_back(static_cast<size_t>(s));
      }
      for (const EnsemblePlan::Binding& out : planned.outputs) {
        prev[out.tensor].push_back(t);
        next[t].push_back(out.tensor);
      }
    }
    plan.steps.push_back(std::move(planned));
  }

  std::vector<char> ready(plan.tensors.size(), 0);
  std::deque<size_t> queue;
  for (const inference::ModelInput& in : config.input()) {
    auto it = index.find(in.name());
    // Triton's words, stray quote included (the differential tests compare them).
    KILN_CHECK_ARG(it != index.end(), "ensemble input '{}' for ensemble {}' is not used", in.name(),
                   name);
    // Triton lets a step write an ensemble input too, leaving which value a reader gets to
    // chance; Kiln refuses it.
    KILN_CHECK_ARG(plan.producer[it->second] < 0,
                   "ensemble tensor '{}' is an input of ensemble '{}' and also in the output map "
                   "of step {}: a tensor has one source",
                   in.name(), name, plan.producer[it->second]);
    ready[it->second] = 1;
    queue.push_back(it->second);
    plan.inputs.push_back(it->second);
  }
  while (!queue.empty()) {
    const size_t t = queue.front();
    queue.pop_front();
    for (size_t n : next[t]) {
      if (ready[n]) continue;
      bool all = true;
      for (size_t p : prev[n]) all = all && ready[p];
      if (all) {
        ready[n] = 1;
        queue.push_back(n);
      }
    }
  }
  std::vector<char> is_output(plan.tensors.size(), 0);
  for (const inference::ModelOutput& out : config.output()) {
    auto it = index.find(out.name());
    KILN_CHECK_ARG(it != index.end(), "ensemble output '{}' for ensemble {}' is not used",
                   out.name(), name);
    if (!ready[it->second]) {
      fail(ErrorCode::InvalidArgument, "{}",
           not_written_message(config, plan, prev, ready, it->second));
    }
    is_output[it->second] = 1;
    plan.outputs.push_back(it->second);
  }
  for (size_t t = 0; t < plan.tensors.size(); ++t) {
    KILN_CHECK_ARG(is_output[t] || (ready[t] && !next[t].empty()),
                   "ensemble tensor '{}' is unused in ensemble '{}'", plan.tensors[t], name);
  }
  return plan;
}

void check_ensemble_steps(const ModelConfig& config, const EnsemblePlan& plan,
                          const std::vector<const ModelConfig*>& steps) {
  const std::string& name = config.name();
  KILN_CHECK(steps.size() == plan.steps.size(), ErrorCode::Internal,
             "ensemble '{}': {} step configs for {} steps", name, steps.size(), plan.steps.size());
  const bool batching = config.max_batch_size() > 0;
  std::unordered_map<std::string, TensorNode> nodes;
  for (const inference::ModelInput& in : config.input()) {
    nodes.emplace(in.name(), in.has_reshape()
                                 ? tensor_node(name, batching, in.data_type(), in.reshape().shape())
                                 : tensor_node(name, batching, in.data_type(), in.dims()));
  }
  for (const inference::ModelOutput& out : config.output()) {
    nodes.emplace(out.name(),
                  out.has_reshape()
                      ? tensor_node(name, batching, out.data_type(), out.reshape().shape())
                      : tensor_node(name, batching, out.data_type(), out.dims()));
  }
  for (size_t s = 0; s < plan.steps.size(); ++s) {
    const EnsemblePlan::Step& step = plan.steps[s];
    const ModelConfig& model = *steps[s];
    const std::string& model_name = step.model;
    KILN_CHECK_ARG(model.max_batch_size() == 0 || model.max_batch_size() >= config.max_batch_size(),
                   "ensemble {} allows maximum batch size {}, but it contains model {} which only "
                   "allows maximum batch size to be {}",
                   name, config.max_batch_size(), model_name, model.max_batch_size());
    const bool model_batching = model.max_batch_size() > 0;
    for (const EnsemblePlan::Binding& b : step.inputs) {
      bool known = false;
      for (const inference::ModelInput& in : model.input())
        known = known || in.name() == b.model_tensor;
      KILN_CHECK_ARG(known,
                     "in ensemble {}, ensemble tensor {} is mapping to non-existing input {} in "
                     "model {}",
                     name, plan.tensors[b.tensor], b.model_tensor, model_name);
    }
    for (const inference::ModelInput& in : model.input()) {
      const EnsemblePlan::Binding* feed = nullptr;
      for (const EnsemblePlan::Binding& b : step.inputs) {
        if (b.model_tensor == in.name()) feed = &b;
      }
      if (feed == nullptr) {
        KILN_CHECK_ARG(in.optional(),
                       "in ensemble {}, input {} in model {} is not mapped to any ensemble tensors",
                       name, in.name(), model_name);
        continue;
      }
      const std::string& tensor = plan.tensors[feed->tensor];
      TensorNode seen = tensor_node(model_name, model_batching, in.data_type(), in.dims());
      auto it = nodes.find(tensor);
      if (it == nodes.end()) {
        nodes.emplace(tensor, std::move(seen));
      } else {
        check_consistent(it->second, seen,
                         fmt::format("in ensemble {}, ensemble tensor {}: ", name, tensor));
      }
    }
    for (const EnsemblePlan::Binding& b : step.outputs) {
      const inference::ModelOutput* found = nullptr;
      for (const inference::ModelOutput& out : model.output()) {
        if (out.name() == b.model_tensor) found = &out;
      }
      const std::string& tensor = plan.tensors[b.tensor];
      KILN_CHECK_ARG(found != nullptr,
                     "in ensemble {}, ensemble tensor {} is mapped from non-existing output {} in "
                     "model {}",
                     name, tensor, b.model_tensor, model_name);
      TensorNode seen = tensor_node(model_name, model_batching, found->data_type(), found->dims());
      auto it = nodes.find(tensor);
      if (it == nodes.end()) {
        nodes.emplace(tensor, std::move(seen));
      } else {
        check_consistent(it->second, seen,
                         fmt::format("in ensemble {}, ensemble tensor {}: ", name, tensor));
      }
    }
  }
}

void complete_ensemble_config(ModelConfig& config) {
  if (!config.has_max_batch_size()) config.set_max_batch_size(0);
  if (!config.has_version_policy()) config.mutable_version_policy()->mutable_latest();
  if (config.version_policy().has_latest() &&
      config.version_policy().latest().num_versions() == 0) {
    config.mutable_version_policy()->mutable_latest()->set_num_versions(1);
  }
  config.mutable_model_transaction_policy();
}

std::vector<std::string> ensemble_composing_models(const ModelConfig& config) {
  std::set<std::string> names;
  for (const inference::ModelEnsembling::Step& step : config.ensemble_scheduling().step()) {
    names.insert(step.model_name());
  }
  return {names.begin(), names.end()};
}

}  // namespace kiln::server
