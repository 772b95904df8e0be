#pragma once
// A model's latency objective (docs/SERVER.md "Latency objective (SLA)"): the p99 end-to-end
// latency the scheduler keeps its requests under. It is a config.pbtxt `parameters` entry, so a
// repository that sets it still loads on Triton, which ignores parameters it does not know:
//
//   parameters { key: "latency_objective_p99_ms" value { string_value: "50" } }
#include <cstdint>
#include <optional>

#include "server/model_config.hpp"

namespace kiln::server {

inline constexpr const char* kLatencyObjectiveParameter = "latency_objective_p99_ms";
// The range accepted, in milliseconds: below 10 us no server round trip fits; above an hour it
// is no objective.
inline constexpr double kLatencyObjectiveMinMs = 0.01;
inline constexpr double kLatencyObjectiveMaxMs = 3600000;

// The objective in nanoseconds, nullopt without the parameter. InvalidArgument naming the model
// when the value is not a decimal number of milliseconds in range.
std::optional<uint64_t> latency_objective_ns(const ModelConfig& config);

// The load-time checks: the value (above), and Unsupported for models whose requests the
// dynamic batcher does not schedule (ensembles, sequence_batching), naming the model.
void validate_latency_objective(const ModelConfig& config);

}  // namespace kiln::server
