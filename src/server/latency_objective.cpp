#include "server/latency_objective.hpp"

#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "server/ensemble_config.hpp"

namespace kiln::server {

std::optional<uint64_t> latency_objective_ns(const ModelConfig& config) {
  auto it = config.parameters().find(kLatencyObjectiveParameter);
  if (it == config.parameters().end()) return std::nullopt;
  const std::string& text = it->second.string_value();
  char* end = nullptr;
  errno = 0;
  const double ms = text.empty() ? NAN : std::strtod(text.c_str(), &end);
  // strtod also reads "inf", "nan" and hex floats; only plain decimals are objectives.
  const bool plain = text.find_first_not_of("0123456789.eE+-") == std::string::npos;
  KILN_CHECK_ARG(plain && std::isfinite(ms) && errno == 0 && end != nullptr && *end == '\0',
                 "model '{}': parameter {} '{}' is not a number of milliseconds (write it as a "
                 "decimal string, e.g. string_value: \"50\" or \"2.5\")",
                 config.name(), kLatencyObjectiveParameter, text);
  KILN_CHECK_ARG(ms >= kLatencyObjectiveMinMs && ms <= kLatencyObjectiveMaxMs,
                 "model '{}': parameter {} is {} ms; it must be in {}..{} ms", config.name(),
                 kLatencyObjectiveParameter, text, kLatencyObjectiveMinMs, kLatencyObjectiveMaxMs);
  return static_cast<uint64_t>(std::llround(ms * 1e6));
}

void validate_latency_objective(const ModelConfig& config) {
  if (!latency_objective_ns(config)) return;
  KILN_CHECK(!is_ensemble(config), ErrorCode::Unsupported,
             "model '{}': parameter {} is not supported on an ensemble (set it on the models its "
             "steps run)",
             config.name(), kLatencyObjectiveParameter);
  KILN_CHECK(!config.has_sequence_batching(), ErrorCode::Unsupported,
             "model '{}': parameter {} is not supported with sequence_batching (the dynamic "
             "batcher and the default scheduler keep it)",
             config.name(), kLatencyObjectiveParameter);
}

}  // namespace kiln::server
