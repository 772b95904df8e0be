#pragma once
// Backends are looked up by device name, not hard-wired: "cpu" is always there; "gpu" (aliases
// "cuda", "hip") is the GPU backend library (backends/gpu/loader.hpp), loaded only when first
// asked for, so a machine without a GPU or driver never loads it and says why it cannot. A session,
// `kiln compile --target` and the server ask for a device and get the backends to place nodes on,
// preferred first, with the CPU last for the nodes the device cannot run. A device with several
// units is named with an index as Triton's instance groups number GPUs: "gpu:1" is the second GPU,
// "gpu:0" the same backend as "gpu".
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "backends/backend.hpp"

namespace kiln::backends {

class BackendRegistry {
 public:
  // Opens a device's backend (process lifetime) or throws Unavailable saying why.
  using Opener = std::function<Backend*()>;
  // Opens unit `index` (1 and up; unit 0 is the Opener's) of a device with several.
  using IndexedOpener = std::function<Backend*(int index)>;

  static BackendRegistry& instance();
  // `device` is a name ("gpu"); `aliases` other names for it ("cuda", "hip").
  void add(std::string device, Opener open, std::vector<std::string> aliases = {},
           IndexedOpener open_index = {});
  // The backend of `device` (opened on first use; a failure is remembered and said again).
  // Unsupported names the known devices; Unavailable says why a known one cannot open.
  Backend& get(std::string_view device);
  // "gpu:N" is unit N of "gpu" (or of an alias); a device registered without an IndexedOpener
  // has unit 0 only.
  // Known device names, in registration order (aliases not listed).
  std::vector<std::string> devices() const;

 private:
  // One unit's backend once opened, or why it could not open once tried.
  struct Opened {
    Backend* backend = nullptr;
    std::string failure;
  };
  struct Entry {
    std::string device;
    std::vector<std::string> aliases;
    Opener open;
    IndexedOpener open_index;
    std::map<int, Opened> units;  // by index; 0 is `open`'s
  };
  Entry* find(std::string_view device);

  mutable std::mutex mutex_;
  std::vector<Entry> entries_;
};

// The backends to place a model on for a device list ("cpu", "gpu", "gpu,cpu"): the named
// devices in order, the CPU appended when absent.
std::vector<Backend*> backends_for(std::string_view devices);

struct BackendRegistrar {
  BackendRegistrar(std::string device, BackendRegistry::Opener open,
                   std::vector<std::string> aliases = {}) {
    BackendRegistry::instance().add(std::move(device), std::move(open), std::move(aliases));
  }
};

}  // namespace kiln::backends
