#include "server/repository.hpp"
#include "server/server_log.hpp"

#include <algorithm>
#include <exception>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <system_error>

namespace kiln::server {
namespace fs = std::filesystem;
namespace {

constexpr uintmax_t kMaxConfigBytes = 4u << 20;

// A model name is one path component: no separators, no "." / ".." and nothing hidden, so a
// name can never address anything outside its repository.
void check_model_name(std::string_view name) {
  KILN_CHECK_ARG(!name.empty() && name.size() <= 255, "invalid model name '{}'", name);
  KILN_CHECK_ARG(name.front() != '.', "invalid model name '{}': it starts with '.'", name);
  for (char c : name) {
    KILN_CHECK_ARG(c != '/' && c != '\\' && c != '\0' && static_cast<unsigned char>(c) >= 0x20,
                   "invalid model name '{}'", name);
  }
}

// True when `path` (symlinks resolved) lies inside `root` (already canonical).
bool inside(const fs::path& path, const fs::path& root) {
  std::error_code ec;
  fs::path real = fs::weakly_canonical(path, ec);
  if (ec) return false;
  auto [r, p] = std::mismatch(root.begin(), root.end(), real.begin(), real.end());
  return r == root.end();
}

std::optional<int64_t> version_number(const std::string& name) {
  if (name.empty() || name.size() > 18) return std::nullopt;
  for (char c : name) {
    if (c < '0' || c > '9') return std::nullopt;
  }
  return std::stoll(name);
}

std::string read_small_file(const fs::path& path) {
  std::error_code ec;
  const uintmax_t size = fs::file_size(path, ec);
  KILN_CHECK_ARG(!ec, "cannot read '{}': {}", path.string(), ec.message());
  KILN_CHECK_ARG(size <= kMaxConfigBytes, "'{}' is larger than {} bytes", path.string(),
                 kMaxConfigBytes);
  std::ifstream in(path, std::ios::binary);
  KILN_CHECK_ARG(in.good(), "cannot open '{}'", path.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// What poll compares: names, sizes and modification times of the config and version folders.
std::string fingerprint(const fs::path& dir) {
  std::string out;
  std::error_code ec;
  std::vector<std::string> lines;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (it.depth() > 2) {
      it.disable_recursion_pending();
      continue;
    }
    std::error_code e2;
    const auto mtime = fs::last_write_time(it->path(), e2).time_since_epoch().count();
    const uintmax_t size = it->is_regular_file(e2) ? it->file_size(e2) : 0;
    lines.push_back(fmt::format("{}|{}|{}", it->path().string(), size, mtime));
  }
  std::sort(lines.begin(), lines.end());
  for (const std::string& l : lines) out += l + "\n";
  return out;
}

// The failure in flight, not a kiln::Error, as one naming `where`: running out of memory or
// threads is Unavailable (503: retry later, or load less); anything else the model raised is
// InvalidArgument (400: the model or its config is at fault).
Error classify_load_failure(const std::string& where) {
  try {
    throw;
  } catch (const std::bad_alloc&) {
    return Error(ErrorCode::Unavailable, fmt::format("{}: out of memory while loading", where));
  } catch (const std::system_error& e) {
    const bool exhausted = e.code() == std::errc::resource_unavailable_try_again ||
                           e.code() == std::errc::not_enough_memory ||
                           e.code() == std::errc::too_many_files_open;
    return Error(exhausted ? ErrorCode::Unavailable : ErrorCode::Internal,
                 fmt::format("{}: {}", where, e.what()));
  } catch (const std::exception& e) {
    return Error(ErrorCode::InvalidArgument,
                 fmt::format("{}: cannot be loaded: {}", where, e.what()));
  } catch (...) {
    return Error(ErrorCode::Internal, fmt::format("{}: unknown failure while loading", where));
  }
}

// Rethrows the failure in flight of loading `name` version `version` from `file` so that it
// names the model, the version and the file.
[[noreturn]] void rethrow_load_failure(const std::string& name, int64_t version,
                                       const std::string& file) {
  const std::string where = fmt::format("model '{}' version {} ('{}')", name, version, file);
  try {
    throw;
  } catch (const Error& e) {
    const std::string own = fmt::format("model '{}' version {}", name, version);
    const std::string bare = fmt::format("model '{}': ", name);
    const std::string& m = e.message();
    if (m.rfind(own, 0) == 0) throw;  // already says which model and version, and why
    if (m.rfind(bare, 0) == 0) throw Error(e.code(), where + ": " + m.substr(bare.size()));
    throw Error(e.code(), fmt::format("{}: {}", where, m));
  } catch (...) {
    throw classify_load_failure(where);
  }
}

}  // namespace

ModelControlMode parse_model_control_mode(std::string_view text) {
  if (text == "none") return ModelControlMode::None;
  if (text == "poll") return ModelControlMode::Poll;
  if (text == "explicit") return ModelControlMode::Explicit;
  fail(ErrorCode::InvalidArgument, "unknown model control mode '{}' (none, poll or explicit)",
       text);
}

std::string_view model_state_name(ModelState state) {
  switch (state) {
    case ModelState::Loading:
      return "LOADING";
    case ModelState::Ready:
      return "READY";
    case ModelState::Unloading:
      return "UNLOADING";
    case ModelState::Unavailable:
      return "UNAVAILABLE";
    case ModelState::NotLoaded:
      return "";
  }
  return "UNAVAILABLE";
}

// What ensembles find their composing versions through: the repository while it lives, an
// error after (a request may outlive it by a moment at shutdown).
struct ModelRepository::Lookup {
  std::mutex mutex;
  const ModelRepository* repository = nullptr;

  std::shared_ptr<ModelVersion> get(std::string_view name, int64_t version) {
    std::lock_guard lock(mutex);
    KILN_CHECK(repository != nullptr, ErrorCode::Unavailable, "Server is shutting down");
    return repository->get(name, version);
  }
};

struct ModelRepository::Reaper {
  std::mutex mutex;
  std::condition_variable cv;
  std::deque<ModelVersion*> doomed;
  size_t alive = 0;
  bool stopped = false;
  std::thread thread;

  void doom(ModelVersion* v) {
    {
      std::lock_guard lock(mutex);
      if (!stopped) {
        doomed.push_back(v);
        cv.notify_all();
        return;
      }
    }
    delete v;  // the repository is gone: nobody can be waiting on this version's threads
  }
  void loop() {
    std::unique_lock lock(mutex);
    for (;;) {
      cv.wait(lock, [&] { return stopped || !doomed.empty(); });
      if (doomed.empty()) return;
      ModelVersion* v = doomed.front();
      doomed.pop_front();
      lock.unlock();
      delete v;  // finishes nothing (no request holds it) and joins its idle workers
      lock.lock();
      --alive;
      cv.notify_all();
    }
  }
};

ModelRepository::ModelRepository(RepositoryOptions options)
    : options_(std::move(options)),
      budget_(std::make_shared<ResourceBudget>(options_.instance_budget, options_.thread_budget)),
      reaper_(std::make_shared<Reaper>()) {
  KILN_CHECK_ARG(!options_.paths.empty(), "no model repository given (--model-repository)");
  lookup_ = std::make_shared<Lookup>();
  lookup_->repository = this;
  for (std::string& p : options_.paths) {
    std::error_code ec;
    fs::path canonical = fs::canonical(p, ec);
    KILN_CHECK_ARG(!ec && fs::is_directory(canonical), "model repository '{}' is not a directory",
                   p);
    p = canonical.string();
  }
  KILN_CHECK_ARG(options_.poll_seconds >= 1, "repository poll interval must be >= 1 s");
  reaper_->thread = std::thread([r = reaper_] { r->loop(); });
}

ModelRepository::~ModelRepository() {
  {
    std::lock_guard lock(lookup_->mutex);
    lookup_->repository = nullptr;
  }
  {
    std::lock_guard lock(poll_mutex_);
    stopping_ = true;
  }
  poll_cv_.notify_all();
  if (poll_thread_.joinable()) poll_thread_.join();
  {
    std::lock_guard lock(map_mutex_);
    models_.clear();
  }
  // Versions still held by requests are destroyed when those complete; wait a bounded time.
  {
    std::unique_lock lock(reaper_->mutex);
    reaper_->cv.wait_for(lock, std::chrono::seconds(60),
                         [&] { return reaper_->alive == 0 && reaper_->doomed.empty(); });
    reaper_->stopped = true;
  }
  reaper_->cv.notify_all();
  reaper_->thread.join();
  std::deque<ModelVersion*> left;
  {
    std::lock_guard lock(reaper_->mutex);
    left.swap(reaper_->doomed);
  }
  for (ModelVersion* v : left) delete v;
}

std::shared_ptr<ModelVersion> ModelRepository::adopt(ModelVersion* version) {
  {
    std::lock_guard lock(reaper_->mutex);
    ++reaper_->alive;
  }
  return std::shared_ptr<ModelVersion>(version, [r = reaper_](ModelVersion* v) { r->doom(v); });
}

std::vector<std::string> ModelRepository::list_models() const {
  std::set<std::string> names;
  for (const std::string& root : options_.paths) {
    std::error_code ec;
    for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
      const std::string name = it->path().filename().string();
      if (name.empty() || name.front() == '.') continue;
      std::error_code e2;
      if (!fs::is_directory(it->path(), e2)) continue;
      if (!inside(it->path(), root)) continue;
      names.insert(name);
    }
  }
  return {names.begin(), names.end()};
}

std::optional<std::string> ModelRepository::find_model_dir(const std::string& name) const {
  for (const std::string& root : options_.paths) {
    fs::path dir = fs::path(root) / name;
    std::error_code ec;
    if (fs::is_directory(dir, ec) && inside(dir, root)) return dir.string();
  }
  return std::nullopt;
}

void ModelRepository::begin_operation() {
  attempted_.clear();
  failed_.clear();
}

ModelResolver ModelRepository::resolver() const {
  return [lookup = lookup_](std::string_view name, int64_t version) {
    return lookup->get(name, version);
  };
}

bool ModelRepository::start() {
  std::lock_guard load_lock(load_mutex_);
  begin_operation();
  std::vector<std::string> wanted;
  if (options_.mode == ModelControlMode::Explicit) {
    for (const std::string& m : options_.startup_models) {
      if (m == "*") {
        for (const std::string& n : list_models()) wanted.push_back(n);
      } else {
        wanted.push_back(m);
      }
    }
  } else {
    KILN_CHECK_ARG(options_.startup_models.empty(),
                   "--load-model needs --model-control-mode=explicit");
    wanted = list_models();
  }
  bool ok = true;
  for (const std::string& name : wanted) {
    // An ensemble loads its composing models first; each model loads once.
    if (attempted_.count(name)) continue;
    try {
      load_locked(name, std::nullopt);
    } catch (const Error&) {
      // load_locked printed why
    }
  }
  for (const std::string& name : wanted) ok = ok && !failed_.count(name);
  {
    std::lock_guard lock(map_mutex_);
    start_failed_ = !ok;
  }
  if (options_.mode == ModelControlMode::Poll) {
    poll_thread_ = std::thread([this] { poll_loop(); });
  }
  return ok;
}

void ModelRepository::poll_loop() {
  std::unique_lock lock(poll_mutex_);
  while (!stopping_) {
    poll_cv_.wait_for(lock, std::chrono::seconds(options_.poll_seconds));
    if (stopping_) return;
    lock.unlock();
    poll();
    lock.lock();
  }
}

void ModelRepository::poll() {
  std::lock_guard load_lock(load_mutex_);
  begin_operation();
  const std::vector<std::string> present = list_models();
  bool loaded = false;
  for (const std::string& name : present) {
    std::string stamp;
    if (auto dir = find_model_dir(name)) stamp = fingerprint(*dir);
    {
      std::lock_guard lock(map_mutex_);
      auto it = models_.find(name);
      if (it != models_.end() && it->second->fingerprint == stamp) continue;
    }
    if (attempted_.count(name)) continue;  // loaded already, as an ensemble's composing model
    try {
      load_locked(name, std::nullopt);
      loaded = true;
    } catch (const Error&) {
      // load_locked printed why; poll retries once the model's files change.
    }
  }
  std::vector<std::string> gone;
  {
    std::lock_guard lock(map_mutex_);
    for (const auto& [name, entry] : models_) {
      if (!std::binary_search(present.begin(), present.end(), name) && !entry->versions.empty()) {
        gone.push_back(name);
      }
    }
  }
  for (const std::string& name : gone) unload_locked(name, "removed from the repository");
  if (loaded) retry_ensembles_locked();
}

void ModelRepository::load(const std::string& name, const std::optional<std::string>& config_json) {
  KILN_CHECK(options_.mode == ModelControlMode::Explicit, ErrorCode::Unavailable,
             "explicit model load / unload is not allowed if polling is enabled");
  std::lock_guard load_lock(load_mutex_);
  begin_operation();
  load_locked(name, config_json);
}

void ModelRepository::unload(const std::string& name) {
  KILN_CHECK(options_.mode == ModelControlMode::Explicit, ErrorCode::Unavailable,
             "explicit model load / unload is not allowed if polling is enabled");
  check_model_name(name);
  std::lock_guard load_lock(load_mutex_);
  begin_operation();
  unload_locked(name, "unloaded");
}

void ModelRepository::unload_locked(const std::string& name, const std::string& reason) {
  std::map<int64_t, std::shared_ptr<ModelVersion>> dropped;
  {
    std::lock_guard lock(map_mutex_);
    auto it = models_.find(name);
    if (it == models_.end()) return;
    Entry& e = *it->second;
    e.unloaded_with_step = false;  // unload_dependents_locked sets it for the cascade
    e.last_versions.clear();
    for (const auto& v : e.versions) e.last_versions.push_back(v.first);
    dropped.swap(e.versions);
    for (auto& [number, version] : dropped) version->release_budget();
    e.state = ModelState::Unavailable;
    e.reason = reason;
    e.fingerprint.clear();
  }
  for (const auto& [number, version] : dropped)
    log_info("kiln-serve: unloaded '{}' version {} ({})", name, number, reason);
  // As Triton: an ensemble cannot serve without the models its steps run.
  if (!dropped.empty()) unload_dependents_locked(name, reason);
  // `dropped` goes out of scope here: each version lives on while requests hold it.
}

void ModelRepository::load_locked(const std::string& name,
                                  const std::optional<std::string>& config_json) {
  std::exception_ptr failure;
  try {
    load_one_locked(name, config_json);
  } catch (...) {
    failure = std::current_exception();
  }
  // Ensembles that come back with a model load once nothing is half loaded any more.
  if (loading_.empty()) {
    while (!returning_.empty()) {
      const std::string model = returning_.front();
      returning_.erase(returning_.begin());
      if (attempted_.count(model)) continue;
      try {
        load_locked(model, std::nullopt);
      } catch (const Error&) {
        // load_locked printed why.
      }
    }
  }
  if (failure) std::rethrow_exception(failure);
}

void ModelRepository::load_one_locked(const std::string& name,
                                      const std::optional<std::string>& config_json) {
  attempted_.insert(name);
  // The ensembles being loaded, outermost first: the cycle check's path.
  struct Loading {
    std::vector<std::string>& stack;
    bool pushed = false;
    ~Loading() {
      if (pushed) stack.pop_back();
    }
  } loading{loading_};
  bool ensemble = false;
  try {
    check_model_name(name);
    std::optional<std::string> dir_opt = find_model_dir(name);
    // Internal (500 / INTERNAL) is tritonserver's status for a model the repository lacks.
    KILN_CHECK(dir_opt.has_value(), ErrorCode::Internal,
               "failed to load '{}', failed to poll from model repository", name);
    const fs::path dir = *dir_opt;
    const std::string stamp = fingerprint(dir);
    fs::path root;
    for (const std::string& r : options_.paths) {
      if (inside(dir, r)) root = r;
    }
    ModelConfig config;
    if (config_json) {
      config = parse_config_json(*config_json, fmt::format("load configuration of '{}'", name));
    } else {
      const fs::path cfg = dir / "config.pbtxt";
      std::error_code ec;
      if (fs::exists(cfg, ec)) {
        KILN_CHECK_ARG(inside(cfg, root), "'{}' points outside the model repository", cfg.string());
        config = parse_config_text(read_small_file(cfg), cfg.string());
      } else {
        KILN_CHECK_ARG(options_.autocomplete,
                       "model '{}' has no config.pbtxt and auto-complete is off", name);
      }
    }
    if (config.name().empty()) config.set_name(name);
    ensemble = is_ensemble(config);
    if (ensemble) {
      loading_.push_back(name);
      loading.pushed = true;
      // The config on its own first (as Triton, before it looks for the composing models), then
      // its composing models: the checks against them need their completed configs.
      plan_ensemble(config);
      load_dependencies_locked(name, config);
    }
    // Version folders: numeric names only, as Triton reads them.
    std::vector<int64_t> available;
    std::error_code ec;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      std::error_code e2;
      if (!fs::is_directory(it->path(), e2)) continue;
      if (auto v = version_number(it->path().filename().string())) available.push_back(*v);
    }
    std::sort(available.begin(), available.end());
    // Without backend and platform, the model file decides (model.kiln before model.onnx).
    if (!ensemble && config.backend().empty() && config.platform().empty() && !available.empty()) {
      const fs::path vdir = dir / std::to_string(available.back());
      const std::string file = config.default_model_filename();
      if ((!file.empty() && file.ends_with(".kiln")) ||
          (file.empty() && fs::exists(vdir / "model.kiln", ec))) {
        config.set_backend("kiln");
      } else if ((!file.empty() && file.ends_with(".onnx")) ||
                 (file.empty() && fs::exists(vdir / "model.onnx", ec))) {
        config.set_backend("onnxruntime");
      }
      KILN_CHECK_ARG(!config.backend().empty(),
                     "model '{}': no backend or platform in the configuration and no model.kiln "
                     "or model.onnx in version {}",
                     name, available.back());
    }
    std::vector<int64_t> selected;
    const inference::ModelVersionPolicy& policy = config.version_policy();
    if (policy.has_all()) {
      selected = available;
    } else if (policy.has_specific()) {
      for (int64_t v : policy.specific().versions()) {
        KILN_CHECK_ARG(std::binary_search(available.begin(), available.end(), v),
                       "model '{}': version {} named by the version policy is not in the "
                       "repository",
                       name, v);
        selected.push_back(v);
      }
      std::sort(selected.begin(), selected.end());
      selected.erase(std::unique(selected.begin(), selected.end()), selected.end());
    } else {
      const size_t n = policy.has_latest() && policy.latest().num_versions() > 0
                           ? policy.latest().num_versions()
                           : 1;
      const size_t skip = available.size() > n ? available.size() - n : 0;
      selected.assign(available.begin() + static_cast<std::ptrdiff_t>(skip), available.end());
    }
    KILN_CHECK_ARG(!selected.empty(), "failed to load '{}', no version is available", name);
    std::map<int64_t, std::shared_ptr<ModelVersion>> built;
    for (int64_t v : selected) {
      ModelLoadSpec spec;
      spec.name = name;
      spec.version = v;
      spec.model_dir = dir.string();
      spec.config = config;
      spec.autocomplete = options_.autocomplete;
      spec.metrics = options_.metrics;
      spec.budget = budget_;
      spec.request_timeout_us = options_.request_timeout_us;
      spec.cancel = cancel_;
      spec.request_memory = options_.request_memory;
      if (ensemble) {
        // No model file: the version folder only says which versions exist.
        spec.resolve = resolver();
        built.emplace(v, adopt(new ModelVersion(std::move(spec))));
        continue;
      }
      const fs::path file = dir / std::to_string(v) / config_model_filename(config);
      KILN_CHECK_ARG(fs::is_regular_file(file, ec),
                     "model '{}' version {}: '{}' is missing or not a file", name, v,
                     file.string());
      KILN_CHECK_ARG(inside(file, root),
                     "model '{}' version {}: '{}' points outside the model "
                     "repository",
                     name, v, file.string());
      spec.model_path = file.string();
      try {
        built.emplace(v, adopt(new ModelVersion(std::move(spec))));
      } catch (...) {
        rethrow_load_failure(name, v, file.string());
      }
    }
    std::map<int64_t, std::shared_ptr<ModelVersion>> old;
    {
      std::lock_guard lock(map_mutex_);
      std::shared_ptr<Entry>& slot = models_[name];
      if (!slot) slot = std::make_shared<Entry>();
      old.swap(slot->versions);
      slot->versions = std::move(built);
      // The replaced versions leave the served set: their instances and threads are free for
      // the next load even while requests they hold finish.
      for (auto& [number, version] : old) version->release_budget();
      slot->state = ModelState::Ready;
      slot->reason.clear();
      slot->fingerprint = stamp;
      slot->composing = ensemble ? ensemble_composing_models(config) : std::vector<std::string>{};
      slot->ensemble_failed = false;
      slot->unloaded_with_step = false;
    }
    // One line per version, whichever way the load came (startup, poll, the load API), as
    // tritonserver logs it.
    for (int64_t v : selected) {
      if (ensemble) {
        log_info("kiln-serve: successfully loaded '{}' version {} (ensemble)", name, v);
      } else {
        log_info("kiln-serve: successfully loaded '{}' version {} ({})", name, v,
                 (dir / std::to_string(v) / config_model_filename(config)).string());
      }
    }
    if (config.response_cache().enable() && !options_.response_cache) {
      log_warning(
          "kiln-serve: '{}' enables response_cache but the server has no cache "
          "(--cache-config local,size=<bytes>): every request runs",
          name);
    }
    // The ensembles using this model run its new versions from now on: check they still fit.
    recheck_dependents_locked(name);
  } catch (...) {
    Error e = [&] {
      try {
        throw;
      } catch (const Error& error) {
        return error;
      } catch (...) {
        return classify_load_failure(fmt::format("model '{}'", name));
      }
    }();
    std::optional<fs::path> dir;
    try {
      check_model_name(name);
      dir = find_model_dir(name);
    } catch (const Error&) {
    }
    log_error("kiln-serve: failed to load '{}': {}", name, e.message());
    failed_.insert(name);
    std::lock_guard lock(map_mutex_);
    // A name the repository does not hold leaves no entry (Triton's index lists none), so load
    // requests for made-up names cannot grow the index.
    if (!dir && !models_.count(name)) throw e;
    std::shared_ptr<Entry>& slot = models_[name];
    if (!slot) slot = std::make_shared<Entry>();
    if (slot->versions.empty()) {
      // Triton refuses an ensemble before it has a version to be UNAVAILABLE: its index lists
      // the name alone and its model APIs answer as for a model never loaded.
      slot->state = ensemble ? ModelState::NotLoaded : ModelState::Unavailable;
      if (ensemble) slot->last_versions.clear();
    }
    slot->ensemble_failed = ensemble;
    slot->reason = e.message();
    // Poll retries a failed model only once its files change.
    if (dir) slot->fingerprint = fingerprint(*dir);
    throw e;
  }
}

std::shared_ptr<ModelVersion> ModelRepository::get(std::string_view name, int64_t version) const {
  std::lock_guard lock(map_mutex_);
  auto it = models_.find(name);
  KILN_CHECK(it != models_.end(), ErrorCode::NotFound,
             "Request for unknown model: '{}' is not found", name);
  KILN_CHECK(!it->second->versions.empty() || it->second->state != ModelState::NotLoaded,
             ErrorCode::NotFound, "Request for unknown model: '{}' is not found", name);
  // Known (unloaded, or its load failed) but serving nothing: Triton's other words.
  KILN_CHECK(!it->second->versions.empty(), ErrorCode::NotFound,
             "Request for unknown model: '{}' has no available versions", name);
  const auto& versions = it->second->versions;
  if (version < 0) return versions.rbegin()->second;
  auto v = versions.find(version);
  KILN_CHECK(v != versions.end(), ErrorCode::NotFound,
             "Request for unknown model: '{}' version {} is not found", name, version);
  return v->second;
}

bool ModelRepository::model_ready(std::string_view name, int64_t version) const {
  std::lock_guard lock(map_mutex_);
  auto it = models_.find(name);
  if (it == models_.end() || it->second->versions.empty()) return false;
  return version < 0 || it->second->versions.count(version) > 0;
}

std::vector<int64_t> ModelRepository::versions(std::string_view name) const {
  std::lock_guard lock(map_mutex_);
  std::vector<int64_t> out;
  auto it = models_.find(name);
  if (it == models_.end()) return out;
  for (const auto& v : it->second->versions) out.push_back(v.first);
  return out;
}

std::vector<std::shared_ptr<ModelVersion>> ModelRepository::all_versions() const {
  std::lock_guard lock(map_mutex_);
  std::vector<std::shared_ptr<ModelVersion>> out;
  for (const auto& [name, entry] : models_) {
    for (const auto& v : entry->versions) out.push_back(v.second);
  }
  return out;
}

std::vector<RepositoryIndexEntry> ModelRepository::index(bool ready_only) const {
  std::vector<RepositoryIndexEntry> out;
  std::set<std::string> listed;
  {
    std::lock_guard lock(map_mutex_);
    for (const auto& [name, entry] : models_) {
      listed.insert(name);
      if (!entry->versions.empty()) {
        for (const auto& v : entry->versions) {
          out.push_back({name, std::to_string(v.first), ModelState::Ready, ""});
        }
      } else if (!ready_only) {
        if (entry->last_versions.empty()) {
          out.push_back({name, "", entry->state, entry->reason});
        }
        for (int64_t v : entry->last_versions) {
          out.push_back({name, std::to_string(v), entry->state, entry->reason});
        }
      }
    }
  }
  if (!ready_only) {
    for (const std::string& name : list_models()) {
      if (!listed.count(name)) out.push_back({name, "", ModelState::NotLoaded, ""});
    }
  }
  std::stable_sort(
      out.begin(), out.end(),
      [](const RepositoryIndexEntry& a, const RepositoryIndexEntry& b) { return a.name < b.name; });
  return out;
}

bool ModelRepository::all_loaded() const {
  std::lock_guard lock(map_mutex_);
  return !start_failed_;
}

}  // namespace kiln::server
