#pragma once
// The table of models that kiln-serve prints once the startup loads are done, as tritonserver
// does, so that an operator reading the log sees at a glance what is served and why a model is
// not:
//
//   +--------+---------+---------------------------------------------+
//   | Model  | Version | Status                                      |
//   +--------+---------+---------------------------------------------+
//   | resnet | 1       | READY                                       |
//   | broken | -       | UNAVAILABLE: model 'broken': no backend ... |
//   +--------+---------+---------------------------------------------+
#include <string>
#include <vector>

#include "server/repository.hpp"

namespace kiln::server {

// The table of `index` (one row per entry, in its order); a line saying that no model is
// served when it is empty.
std::string model_table(const std::vector<RepositoryIndexEntry>& index);

}  // namespace kiln::server
