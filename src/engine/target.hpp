#pragma once
// What an engine is compiled for, as data: a device ("cpu", later a GPU arch such as "gfx90a")
// and the features the compiled code assumes ("x86-64", "avx2", ...). Written into the engine
// file; a reader refuses an engine that needs a device or a feature the machine lacks.
#include <string>
#include <string_view>
#include <vector>

namespace kiln::engine {

struct Target {
  std::string device = "cpu";
  std::vector<std::string> features;  // sorted, no duplicates

  // The portable CPU target the writer assumes today: the base ISA of the build's architecture.
  static Target cpu_baseline();
  // This machine: the base ISA plus the extensions the CPU reports.
  static Target host();
  // "cpu:x86-64,avx2" <-> Target; parse throws InvalidArgument on malformed text.
  std::string to_string() const;
  static Target parse(std::string_view text);

  // True when an engine compiled for `*this` can run on `machine`.
  bool runs_on(const Target& machine) const;
  bool operator==(const Target&) const = default;
};

}  // namespace kiln::engine
