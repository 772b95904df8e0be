#include "engine/target.hpp"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.hpp"

namespace kiln::engine {
namespace {

std::string base_isa() {
#if defined(__x86_64__)
  return "x86-64";
#elif defined(__aarch64__)
  return "aarch64";
#else
  return "generic";
#endif
}

void normalize(std::vector<std::string>& features) {
  std::sort(features.begin(), features.end());
  features.erase(std::unique(features.begin(), features.end()), features.end());
}

bool valid_token(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.';
  });
}

}  // namespace

Target Target::cpu_baseline() {
  return Target{"cpu", {base_isa()}};
}

Target Target::host() {
  Target t = cpu_baseline();
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  // The extensions kernels may be compiled for; extend as kernels start assuming more (names
  // both GCC 12 and clang 14 know).
  if (__builtin_cpu_supports("sse4.2")) t.features.push_back("sse4.2");
  if (__builtin_cpu_supports("avx")) t.features.push_back("avx");
  if (__builtin_cpu_supports("avx2")) t.features.push_back("avx2");
  if (__builtin_cpu_supports("fma")) t.features.push_back("fma");
  if (__builtin_cpu_supports("avx512f")) t.features.push_back("avx512f");
  if (__builtin_cpu_supports("avx512bw")) t.features.push_back("avx512bw");
  if (__builtin_cpu_supports("avx512vl")) t.features.push_back("avx512vl");
  if (__builtin_cpu_supports("avx512vnni")) t.features.push_back("avx512vnni");
  if (__builtin_cpu_supports("avx512bf16")) t.features.push_back("avx512bf16");
#endif
  normalize(t.features);
  return t;
}

std::string Target::to_string() const {
  if (features.empty()) return device;
  return fmt::format("{}:{}", device, fmt::join(features, ","));
}

Target Target::parse(std::string_view text) {
  Target t;
  size_t colon = text.find(':');
  t.device = std::string(text.substr(0, colon));
  KILN_CHECK_ARG(valid_token(t.device),
                 "target '{}': expected DEVICE[:FEATURE,...] such as 'cpu:x86-64,avx2'", text);
  if (colon != std::string_view::npos) {
    std::string_view rest = text.substr(colon + 1);
    while (true) {
      size_t comma = rest.find(',');
      std::string_view f = rest.substr(0, comma);
      KILN_CHECK_ARG(valid_token(f), "target '{}': empty or malformed feature '{}'", text, f);
      t.features.emplace_back(f);
      if (comma == std::string_view::npos) break;
      rest = rest.substr(comma + 1);
    }
  }
  normalize(t.features);
  return t;
}

bool Target::runs_on(const Target& machine) const {
  if (device != machine.device) return false;
  return std::all_of(features.begin(), features.end(), [&](const std::string& f) {
    return std::find(machine.features.begin(), machine.features.end(), f) != machine.features.end();
  });
}

}  // namespace kiln::engine
