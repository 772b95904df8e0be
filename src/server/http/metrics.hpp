#pragma once
// Prometheus text exposition of the server's statistics under Triton's metric names and labels
// (model, version), so dashboards and autoscaling rules written for Triton read Kiln unchanged.
#include <string>

#include "server/server.hpp"

namespace kiln::server::http {

std::string render_metrics(const InferenceServer& core);

}  // namespace kiln::server::http
