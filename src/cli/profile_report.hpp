#pragma once
// What `kiln profile` measures, and the files it writes from it: a Chrome-trace JSON (opens in
// Perfetto or chrome://tracing) and a self-contained HTML report (inline SVG, no scripts).
#include <cstddef>
#include <map>
#include <string>
#include <vector>

namespace kiln::cli {

struct NodeRecord {
  std::string name;  // the node's name, or its label when it has none
  std::string op_type;
  std::string domain;
  std::vector<std::string> input_shapes, output_shapes;
  size_t output_bytes = 0;  // bytes of the values it produces
  size_t live_bytes = 0;    // activation bytes alive while it runs (inputs, outputs, others)
  double total_us = 0;      // summed over the profiled runs
};

struct OpTypeRecord {
  std::string op_type;
  size_t count = 0;  // nodes of this type
  double total_us = 0;
};

struct ProfileData {
  std::string model;
  std::vector<NodeRecord> nodes;             // execution order
  std::vector<std::vector<double>> runs_us;  // per profiled run: each node's time, same order
  std::vector<double> run_wall_us;           // per profiled run: the whole run, wall clock
  size_t weight_bytes = 0;
  size_t input_bytes = 0;
  size_t peak_live_bytes = 0;

  size_t run_count() const { return runs_us.size(); }
  double mean_run_us() const;
  double node_sum_us() const;  // summed over nodes and runs
  // By op type, most time first.
  std::vector<OpTypeRecord> by_op_type() const;
};

std::string chrome_trace_json(const ProfileData& data);
std::string html_report(const ProfileData& data);

}  // namespace kiln::cli
