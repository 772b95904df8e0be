// The repository's side of ensembles: what depends on what. Loading an ensemble loads its
// composing models first, and its failures say which model is missing, failed, lacks a version
// or closes a cycle, in tritonserver 2.51's words; unloading a model unloads the ensembles that
// use it; reloading one checks them again. All under load_mutex_.
#include <algorithm>

#include "server/repository.hpp"
#include "server/server_log.hpp"

namespace kiln::server {
namespace {

constexpr std::string_view kCircular = "circular dependency between ensembles: ";

// How many loads may nest (each ensemble loads its composing models inside its own load): far
// above kMaxEnsembleDepth, which the versions check, so only a runaway chain meets it, before it
// meets the thread's stack.
constexpr size_t kMaxLoadNesting = 64;

bool contains(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

}  // namespace

void ModelRepository::load_dependencies_locked(const std::string& name, const ModelConfig& config) {
  KILN_CHECK_ARG(loading_.size() <= kMaxLoadNesting,
                 "ensemble '{}' nests more than {} ensembles; at most {} levels are allowed",
                 loading_.front(), kMaxLoadNesting, kMaxEnsembleDepth);
  // (loading_ ends with `name` itself: its own name in a step is a cycle of one.)
  const std::vector<std::string> deps = ensemble_composing_models(config);
  // A cycle through models being loaded now, or through served ensembles (a reload may close
  // one): a request would recurse forever.
  for (const std::string& dep : deps) {
    if (contains(loading_, dep)) {
      fail(ErrorCode::InvalidArgument, "{}{} -> ... -> {} -> {}", kCircular, dep, name, dep);
    }
  }
  {
    std::lock_guard lock(map_mutex_);
    std::vector<std::string> queue = deps;
    std::set<std::string> seen(deps.begin(), deps.end());
    while (!queue.empty()) {
      const std::string current = queue.back();
      queue.pop_back();
      auto it = models_.find(current);
      if (it == models_.end() || it->second->versions.empty()) continue;
      for (const std::string& next : it->second->composing) {
        if (next == name) {
          fail(ErrorCode::InvalidArgument, "{}{} -> ... -> {} -> {}", kCircular, name, current,
               name);
        }
        if (seen.insert(next).second) queue.push_back(next);
      }
    }
  }
  auto served = [&](const std::string& model) { return !versions(model).empty(); };
  std::vector<std::string> missing;
  for (const std::string& dep : deps) {
    if (!served(dep) && !find_model_dir(dep)) missing.push_back(dep);
  }
  KILN_CHECK_ARG(missing.empty(),
                 "ensemble {} contains models that are not available or ambiguous: {}", name,
                 fmt::join(missing, ", "));
  for (const std::string& dep : deps) {
    if (served(dep)) continue;
    if (!attempted_.count(dep)) {
      try {
        load_locked(dep, std::nullopt);
      } catch (const Error&) {
        // Said below, in the ensemble's words.
      }
    }
    if (served(dep)) continue;
    std::string reason;
    ModelState state = ModelState::Unavailable;
    {
      std::lock_guard lock(map_mutex_);
      auto it = models_.find(dep);
      if (it != models_.end()) {
        reason = it->second->reason;
        state = it->second->state;
      }
    }
    // Every ensemble on a cycle fails with the cycle's words, as in Triton.
    if (reason.rfind(kCircular, 0) == 0) fail(ErrorCode::InvalidArgument, "{}", reason);
    if (state == ModelState::NotLoaded) {
      fail(ErrorCode::InvalidArgument,
           "ensemble '{}' depends on '{}' which is not valid. Model '{}' failed with error: {}",
           name, dep, dep, reason);
    }
    fail(ErrorCode::InvalidArgument,
         "ensemble '{}' depends on '{}' which has no loaded version. Model '{}' loading failed "
         "with error: {}",
         name, dep, dep, reason);
  }
  for (const inference::ModelEnsembling::Step& step : config.ensemble_scheduling().step()) {
    if (step.model_version() < 0) continue;
    const std::vector<int64_t> have = versions(step.model_name());
    KILN_CHECK_ARG(std::binary_search(have.begin(), have.end(), step.model_version()),
                   "ensemble '{}' depends on '{}' whose required version {} is not loaded.", name,
                   step.model_name(), step.model_version());
  }
}

void ModelRepository::unload_dependents_locked(const std::string& name, const std::string& reason) {
  std::vector<std::string> users;
  {
    std::lock_guard lock(map_mutex_);
    for (const auto& [model, entry] : models_) {
      if (!entry->versions.empty() && contains(entry->composing, name)) users.push_back(model);
    }
  }
  // Each unload unloads the ensembles using that ensemble in turn; cycles are refused at load.
  for (const std::string& user : users) {
    unload_locked(user, reason);
    std::lock_guard lock(map_mutex_);
    auto it = models_.find(user);
    if (it != models_.end()) it->second->unloaded_with_step = true;
  }
}

void ModelRepository::recheck_dependents_locked(const std::string& name) {
  std::vector<std::pair<std::string, std::vector<std::shared_ptr<ModelVersion>>>> users;
  {
    std::lock_guard lock(map_mutex_);
    for (const auto& [model, entry] : models_) {
      if (entry->versions.empty() || !contains(entry->composing, name)) continue;
      std::vector<std::shared_ptr<ModelVersion>> served;
      for (const auto& [number, version] : entry->versions) served.push_back(version);
      users.emplace_back(model, std::move(served));
    }
  }
  for (const auto& [user, served] : users) {
    try {
      // Loading the same config again runs every check against what serves now; an ensemble
      // version holds no instances, so the probe costs nothing but the checks.
      for (const std::shared_ptr<ModelVersion>& version : served) {
        ModelLoadSpec spec;
        spec.name = user;
        spec.version = version->version();
        spec.config = version->config();
        spec.metrics = options_.metrics;
        spec.resolve = resolver();
        ModelVersion probe(std::move(spec));
      }
    } catch (const Error& e) {
      log_warning("kiln-serve: ensemble '{}' no longer fits '{}': {}", user, name, e.message());
      unload_locked(user, e.message());
      continue;
    }
    recheck_dependents_locked(user);  // its nesting depth may have changed
  }
  // The ensembles that went when `name` went come back with it, as in Triton.
  std::vector<std::string> returning;
  {
    std::lock_guard lock(map_mutex_);
    auto served = [&](const std::string& model) {
      auto it = models_.find(model);
      return it != models_.end() && !it->second->versions.empty();
    };
    for (const auto& [model, entry] : models_) {
      if (!entry->unloaded_with_step || !entry->versions.empty() ||
          !contains(entry->composing, name)) {
        continue;
      }
      if (std::all_of(entry->composing.begin(), entry->composing.end(), served)) {
        returning.push_back(model);
      }
    }
  }
  // Loaded by load_locked once the loads under way are done: the ensembles being loaded now
  // are not cycles of theirs.
  for (const std::string& model : returning) {
    if (std::find(returning_.begin(), returning_.end(), model) == returning_.end()) {
      returning_.push_back(model);
    }
  }
}

void ModelRepository::retry_ensembles_locked() {
  std::vector<std::string> failed;
  {
    std::lock_guard lock(map_mutex_);
    for (const auto& [model, entry] : models_) {
      if (entry->ensemble_failed && entry->versions.empty()) failed.push_back(model);
    }
  }
  for (const std::string& model : failed) {
    if (attempted_.count(model) || !find_model_dir(model)) continue;
    try {
      load_locked(model, std::nullopt);
    } catch (const Error&) {
      // load_locked printed why; the next poll that loads something tries again.
    }
  }
}

}  // namespace kiln::server
