#pragma once
// What `kiln profile` measures, and the files it writes from it: a Chrome-trace JSON (opens in
// Perfetto or chrome://tracing) at the measured times, and a self-contained HTML report (inline
// SVG, no scripts). Times per node and op type are medians over the profiled runs: one preempted
// run moves a mean, not a median.
#include <cstddef>
#include <map>
#include <string>
#include <vector>

namespace kiln::cli {

struct NodeRecord {
  std::string name;  // the node's name, or its label when it has none
  std::string op_type;
  std::string domain;
  std::string backend;  // where it ran ("cpu")
  std::string kernel;   // the kernel that ran it ("onednn.conv", "view", "reference")
  std::vector<std::string> input_shapes, output_shapes;
  size_t output_bytes = 0;  // bytes of the values it produces
  size_t live_bytes = 0;    // activation bytes alive while it runs (inputs, outputs, others)
  double median_us = 0;     // over the profiled runs

  // Run by a reference kernel: no fast kernel took it.
  bool is_fallback() const;
};

struct OpTypeRecord {
  std::string op_type;
  size_t count = 0;      // nodes of this type
  double median_us = 0;  // median over the runs of the time its nodes took in a run
};

struct ProfileData {
  std::string model;
  std::vector<NodeRecord> nodes;  // execution order
  // Per profiled run, measured from the first run's start: each node's start and time (same
  // order as nodes; a start < 0 for a node that did not run), the run's start and wall time.
  std::vector<std::vector<double>> runs_us;
  std::vector<std::vector<double>> node_start_us;
  std::vector<double> run_start_us;
  std::vector<double> run_wall_us;
  size_t weight_bytes = 0;
  size_t input_bytes = 0;
  size_t peak_live_bytes = 0;

  size_t run_count() const { return runs_us.size(); }
  double median_run_us() const;
  // The sum of the nodes' medians: the base of each node's and op type's share.
  double nodes_us() const;
  // By op type, most time first.
  std::vector<OpTypeRecord> by_op_type() const;
  // Fills each node's median_us from runs_us.
  void take_medians();
};

std::string chrome_trace_json(const ProfileData& data);
std::string html_report(const ProfileData& data);

}  // namespace kiln::cli
