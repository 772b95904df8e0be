#include "server/model_table.hpp"

#include <algorithm>
#include <array>

#include <fmt/format.h>

namespace kiln::server {
namespace {

// A load failure's message on one line: the table keeps one row per model version.
std::string one_line(std::string s) {
  std::replace(s.begin(), s.end(), '\n', ' ');
  std::replace(s.begin(), s.end(), '\r', ' ');
  return s;
}

}  // namespace

std::string model_table(const std::vector<RepositoryIndexEntry>& index) {
  if (index.empty()) return "No models in the model repository\n";
  using Row = std::array<std::string, 3>;
  std::vector<Row> rows{{"Model", "Version", "Status"}};
  for (const RepositoryIndexEntry& e : index) {
    // A model never loaded has no state in the index; the table says it is not served.
    std::string status(
        model_state_name(e.state == ModelState::NotLoaded ? ModelState::Unavailable : e.state));
    if (!e.reason.empty()) status += ": " + one_line(e.reason);
    rows.push_back({e.name, e.version.empty() ? "-" : e.version, status});
  }
  std::array<size_t, 3> width{};
  for (const Row& r : rows)
    for (size_t c = 0; c < 3; ++c) width[c] = std::max(width[c], r[c].size());
  std::string rule = "+";
  for (size_t w : width) rule += std::string(w + 2, '-') + "+";
  rule += "\n";
  auto line = [&](const Row& r) {
    return fmt::format("| {:<{}} | {:<{}} | {:<{}} |\n", r[0], width[0], r[1], width[1], r[2],
                       width[2]);
  };
  std::string out = rule + line(rows[0]) + rule;
  for (size_t i = 1; i < rows.size(); ++i) out += line(rows[i]);
  return out + rule;
}

}  // namespace kiln::server
