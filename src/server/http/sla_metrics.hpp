#pragma once
// Kiln's own metric families for models with a latency objective (docs/SERVER.md "Latency
// objective (SLA)"): the objective, the adaptive queue delay, the admission limit, the measured
// p99 and the refusals per priority level. Only models with an objective have series, and a
// family without series is left out, so a server without objectives prints exactly Triton's.
#include <string>

#include "server/server.hpp"

namespace kiln::server::http {

std::string render_sla_metrics(const InferenceServer& core);

}  // namespace kiln::server::http
