// Times what a user of kiln::Session waits for: opening a model (an engine: map, check, prepare
// kernels) until it is ready to run, the first run, then the latency of further runs; and the
// process's peak resident memory. One JSON line on stdout, for bench/cpu_backend.py.
//
//   kiln_session_bench MODEL [--threads N] [--runs N] [--warmup N] [--input F] [--output F]
//                      [--profile 1|all] [--executor kernels|interpreter]
//
// --input reads the first input's float32 data from F (raw, native order; its static shape, a
// symbolic dim taken as its minimum); otherwise a fixed pseudo-random pattern. --output writes
// the first output's float32 data to F, so the caller can compare it with another runtime's.
#include <sys/resource.h>

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "runtime/session.hpp"

namespace {

double ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

double rss_mb(bool peak) {
  if (peak) {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return static_cast<double>(u.ru_maxrss) / 1024.0;
  }
  std::ifstream f("/proc/self/statm");
  long pages = 0, resident = 0;
  f >> pages >> resident;
  return static_cast<double>(resident) * 4096.0 / (1024.0 * 1024.0);
}

double cpu_ms() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_nsec) / 1e6;
}

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5)];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: kiln_session_bench MODEL [--threads N] [--runs N] [--warmup N] "
                 "[--input F] [--output F] [--profile 1|all] [--executor kernels|interpreter]\n";
    return 2;
  }
  std::string model = argv[1], input_file, output_file, executor = "kernels";
  int threads = 0, runs = 20, warmup = 2;
  bool profile = false, profile_all = false;  // --profile 1: per op type; all: every node
  for (int i = 2; i + 1 < argc; i += 2) {
    std::string a = argv[i], v = argv[i + 1];
    if (a == "--profile")
      profile = v == "1" || v == "all", profile_all = v == "all";
    else if (a == "--executor")
      executor = v;
    else if (a == "--threads")
      threads = std::stoi(v);
    else if (a == "--runs")
      runs = std::stoi(v);
    else if (a == "--warmup")
      warmup = std::stoi(v);
    else if (a == "--input")
      input_file = v;
    else if (a == "--output")
      output_file = v;
    else {
      std::cerr << "unknown option " << a << "\n";
      return 2;
    }
  }
  try {
    const double rss_start = rss_mb(false);
    auto t0 = std::chrono::steady_clock::now();
    kiln::SessionOptions options;
    options.threads = threads;
    options.profiling = profile;
    options.config["executor"] = executor;
    kiln::Session session(model, options);
    const double open_ms = ms_since(t0);
    const double rss_open = rss_mb(false);

    const kiln::IoInfo& in = session.inputs().at(0);
    std::vector<int64_t> dims;
    for (const kiln::Dim& d : in.type.shape->dims())
      dims.push_back(d.is_static() ? d.value() : d.min() > 0 ? d.min() : 1);
    kiln::Tensor x(kiln::DataType::Float32, dims);
    float* px = x.data<float>();
    if (!input_file.empty()) {
      std::ifstream f(input_file, std::ios::binary);
      f.read(reinterpret_cast<char*>(px), static_cast<std::streamsize>(x.nbytes()));
      if (f.gcount() != static_cast<std::streamsize>(x.nbytes())) {
        std::cerr << "input file " << input_file << " is shorter than " << x.nbytes() << " bytes\n";
        return 1;
      }
    } else {
      for (int64_t i = 0; i < x.numel(); ++i)
        px[i] = static_cast<float>((i * 7919) % 1000) / 1000.0f;
    }
    std::map<std::string, kiln::RtValue> feeds = {{in.name, x}};

    if (runs == 0) {  // open only
      std::printf("{\"open_ms\": %.3f, \"rss_after_open_mb\": %.1f}\n", open_ms, rss_open);
      return 0;
    }
    auto t1 = std::chrono::steady_clock::now();
    std::vector<kiln::RtValue> out = session.run({}, feeds);
    const double first_ms = ms_since(t1);
    for (int i = 0; i < warmup; ++i) session.run({}, feeds);
    std::vector<double> lat;
    const double cpu_start = cpu_ms();
    for (int i = 0; i < runs; ++i) {
      auto t = std::chrono::steady_clock::now();
      session.run({}, feeds);
      lat.push_back(ms_since(t));
    }
    // CPU time of the process per run: on a shared machine, less disturbed by other jobs than
    // wall time (all threads counted).
    const double cpu_per_run = (cpu_ms() - cpu_start) / runs;
    if (profile) {
      // Time per op type (and kernel) of the last run, largest first, on stderr.
      std::map<const kiln::ir::Node*, std::string> kernel_of;
      if (const auto* ex = session.executor()) {
        for (size_t i = 0; i < ex->kernel_choices().size(); ++i) {
          kernel_of[ex->graph().nodes()[i]] = ex->kernel_choices()[i].kernel;
        }
      }
      std::map<std::string, std::pair<double, int>> by_op;
      for (const auto& t : session.last_profile()) {
        auto& e = by_op[t.node->op_type() + " " + kernel_of[t.node]];
        e.first += t.microseconds / 1000.0;
        ++e.second;
      }
      std::vector<std::pair<double, std::string>> rows;
      for (const auto& [op, e] : by_op)
        rows.push_back({e.first, fmt::format("{} x{}", op, e.second)});
      std::sort(rows.rbegin(), rows.rend());
      for (const auto& [ms, what] : rows) std::cerr << fmt::format("{:10.3f} ms  {}\n", ms, what);
      std::vector<std::pair<double, std::string>> nodes;
      for (const auto& t : session.last_profile())
        nodes.push_back({t.microseconds / 1000.0, t.node->label()});
      std::sort(nodes.rbegin(), nodes.rend());
      if (!profile_all) nodes.resize(std::min<size_t>(nodes.size(), 8));
      for (const auto& [ms, what] : nodes)
        std::cerr << fmt::format("{:10.3f} ms  node {}\n", ms, what);
    }
    if (!output_file.empty()) {
      const kiln::Tensor& y = out.at(0).tensor();
      std::ofstream f(output_file, std::ios::binary);
      f.write(static_cast<const char*>(y.raw_data()), static_cast<std::streamsize>(y.nbytes()));
    }
    std::printf(
        "{\"open_ms\": %.3f, \"first_run_ms\": %.3f, \"p50_ms\": %.3f, \"p90_ms\": %.3f, "
        "\"cpu_ms_per_run\": %.3f, "
        "\"rss_start_mb\": %.1f, \"rss_after_open_mb\": %.1f, \"peak_rss_mb\": %.1f}\n",
        open_ms, first_ms, percentile(lat, 0.5), percentile(lat, 0.9), cpu_per_run, rss_start,
        rss_open, rss_mb(true));
  } catch (const std::exception& e) {
    std::cerr << "kiln_session_bench: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
