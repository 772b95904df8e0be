// Runs a model (ONNX or .kiln engine) on every data set of an ONNX-test-case directory through
// kiln::Session and compares each output with the expected one by relative L2 error
// (||actual - expected|| / ||expected||), the measure the real-model acceptance uses.
//
//   kiln_model_check MODEL CASE_DIR [--max-rel-l2 1e-4] [--no-optimize] [--interpreter]
//                    [--repeat N] [--device NAME]
//
// --device runs the session on that device (SessionOptions::device: "cpu", "gpu", "gpu,cpu").
// --interpreter runs the reference interpreter (every node on its reference kernel, the oracle)
// instead of the executor's prepared fast kernels.
//
// Prints one line per output and data set, then one line
//   RESULT {"max_rel_l2": ..., "open_ms": ..., "first_run_ms": ..., "median_run_ms": ...,
//           "set_ms": [median run of each set], "set_cpu_ms": [median process CPU time of a
//           run, each set], "sets": N, "ok": true|false}
// for scripts. Exit status 0 when every output is within the bound, 1 when one is not or a run
// fails, 2 on bad usage.
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "onnx/onnx_io.hpp"
#include "runtime/session.hpp"

namespace fs = std::filesystem;
using namespace kiln;

namespace {

struct Options {
  std::string model, cases;
  double max_rel_l2 = 1e-4;
  bool optimize = true;
  bool interpreter = false;  // the reference interpreter (the oracle) instead of the executor
  int repeat = 1;
  std::string device;  // empty: SessionOptions' default (the CPU)
};

struct OutputError {
  double rel_l2 = 0;
  double max_abs = 0;
};

// Float outputs: relative L2 and max abs. Anything else must be equal, else rel_l2 is infinite.
OutputError tensor_error(const Tensor& a, const Tensor& e) {
  OutputError err;
  if (a.dtype() != e.dtype() || a.dims() != e.dims()) return {INFINITY, INFINITY};
  if (!dtype_is_float(a.dtype())) {
    for (int64_t i = 0; i < a.numel(); ++i) {
      if (a.int_at(i) != e.int_at(i)) return {INFINITY, INFINITY};
    }
    return err;
  }
  double diff2 = 0, ref2 = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    double x = a.double_at(i), y = e.double_at(i);
    double d = x - y;
    if (std::isnan(d)) d = INFINITY;
    diff2 += d * d;
    ref2 += y * y;
    err.max_abs = std::max(err.max_abs, std::fabs(d));
  }
  // An all-zero reference makes the relative error the absolute one.
  err.rel_l2 = std::sqrt(diff2) / (ref2 > 0 ? std::sqrt(ref2) : 1.0);
  return err;
}

std::vector<fs::path> data_sets(const fs::path& dir) {
  std::vector<fs::path> sets;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.is_directory() && e.path().filename().string().rfind("test_data_set_", 0) == 0) {
      sets.push_back(e.path());
    }
  }
  std::sort(sets.begin(), sets.end());
  KILN_CHECK(!sets.empty(), ErrorCode::NotFound, "no test_data_set_* directory in '{}'",
             dir.string());
  return sets;
}

// CPU time of the whole process: on a shared machine it says what a run costs where wall time
// mostly says how busy the other processes were.
double cpu_ms() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_nsec) / 1e6;
}

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

int check(const Options& o) {
  SessionOptions session_options;
  session_options.optimize = o.optimize;
  if (o.interpreter) session_options.config["executor"] = "interpreter";
  if (!o.device.empty()) session_options.device = o.device;
  auto open_start = std::chrono::steady_clock::now();
  Session session(o.model, session_options);
  double open_ms = ms_since(open_start);
  double worst = 0, first_run_ms = -1;
  std::vector<double> times, set_ms, set_cpu_ms;  // every run; the median run of each set
  bool ok = true;
  std::vector<fs::path> sets = data_sets(o.cases);
  for (const fs::path& set : sets) {
    std::map<std::string, RtValue> feeds;
    for (size_t k = 0; k < session.inputs().size(); ++k) {
      fs::path file = set / fmt::format("input_{}.pb", k);
      if (!fs::exists(file)) continue;  // an optional input left out
      const IoInfo& in = session.inputs()[k];
      feeds[in.name] = onnx_io::read_value_file(file.string(), in.type);
    }
    std::vector<RtValue> outputs;
    std::vector<double> runs, cpu_runs;
    for (int r = 0; r < o.repeat; ++r) {
      auto start = std::chrono::steady_clock::now();
      double cpu_start = cpu_ms();
      outputs = session.run({}, feeds);
      runs.push_back(ms_since(start));
      cpu_runs.push_back(cpu_ms() - cpu_start);
      if (first_run_ms < 0) first_run_ms = runs.back();
    }
    times.insert(times.end(), runs.begin(), runs.end());
    std::sort(runs.begin(), runs.end());
    std::sort(cpu_runs.begin(), cpu_runs.end());
    set_ms.push_back(runs[runs.size() / 2]);
    set_cpu_ms.push_back(cpu_runs[cpu_runs.size() / 2]);
    for (size_t k = 0; k < outputs.size(); ++k) {
      fs::path file = set / fmt::format("output_{}.pb", k);
      if (!fs::exists(file)) continue;
      const IoInfo& out = session.outputs()[k];
      RtValue expected = onnx_io::read_value_file(file.string(), out.type);
      OutputError err{INFINITY, INFINITY};
      if (outputs[k].is_tensor() && expected.is_tensor()) {
        err = tensor_error(outputs[k].tensor(), expected.tensor());
      }
      bool good = err.rel_l2 <= o.max_rel_l2;
      ok &= good;
      // A nan error (an output of inf or nan) must not vanish in the maximum.
      worst = std::isnan(err.rel_l2) || err.rel_l2 > worst ? err.rel_l2 : worst;
      std::cout << fmt::format("{} {} '{}' {}: relative L2 {:.3g}, max abs {:.3g}{}\n",
                               set.filename().string(), good ? "ok  " : "FAIL", out.name,
                               outputs[k].describe(), err.rel_l2, err.max_abs,
                               good ? "" : fmt::format(" (expected {})", expected.describe()));
    }
  }
  std::sort(times.begin(), times.end());
  // JSON has no inf or nan: a non-finite error (an output that overflowed) is null.
  const std::string worst_json = std::isfinite(worst) ? fmt::format("{:.6g}", worst) : "null";
  std::cout << fmt::format(
      "RESULT {{\"max_rel_l2\": {}, \"open_ms\": {:.3f}, \"first_run_ms\": {:.3f}, "
      "\"median_run_ms\": {:.3f}, \"set_ms\": [{:.3f}], \"set_cpu_ms\": [{:.3f}], \"sets\": {}, "
      "\"ok\": {}}}\n",
      worst_json, open_ms, first_run_ms, times[times.size() / 2], fmt::join(set_ms, ", "),
      fmt::join(set_cpu_ms, ", "), sets.size(), ok ? "true" : "false");
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  std::vector<std::string> positional;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    bool has_value = i + 1 < argc;
    try {
      if (a == "--max-rel-l2" && has_value) {
        o.max_rel_l2 = std::stod(argv[++i]);
      } else if (a == "--repeat" && has_value) {
        o.repeat = std::max(1, std::stoi(argv[++i]));
      } else if (a == "--device" && has_value) {
        o.device = argv[++i];
      } else if (a == "--no-optimize") {
        o.optimize = false;
      } else if (a == "--interpreter") {
        o.interpreter = true;
      } else if (a.rfind("--", 0) == 0) {
        positional.clear();
        break;
      } else {
        positional.push_back(a);
      }
    } catch (const std::exception&) {
      std::cerr << "kiln_model_check: bad value for " << a << "\n";
      return 2;
    }
  }
  if (positional.size() != 2) {
    std::cerr << "usage: kiln_model_check MODEL CASE_DIR [--max-rel-l2 X] [--no-optimize] "
                 "[--interpreter] [--repeat N] [--device NAME]\n";
    return 2;
  }
  o.model = positional[0];
  o.cases = positional[1];
  try {
    return check(o);
  } catch (const std::exception& e) {
    std::cout << "error: " << e.what() << "\n";
    return 1;
  }
}
