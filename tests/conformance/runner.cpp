// Runs the ONNX backend node tests through import and the reference interpreter, compares with
// the test's outputs and checks the result against expected_failures.txt.
//
//   kiln_conformance --data DIR [--expected FILE] [--write-expected FILE] [--filter REGEX] [-v]
//                    [--via-engine] [--device NAME]
//
// --optimize runs the default pass pipeline first, so every pass is held to the node tests too.
// --via-engine prepares each imported model as `kiln compile` does (kernel choices and memory
// plan), writes it to a .kiln engine file and runs what reads back on the executor with the
// stored plan, so the engine format, the executor and its fast kernels are held to the same
// expected results as the reference interpreter.
// --device NAME (gpu, gpu,cpu) runs each model on the executor with that device's backends (and
// its device passes with --optimize): nodes the device cannot run fall back to the CPU, so the
// device is held to the same expected results (on a machine with the device).
// Each test runs in a forked child, so a crash or a hang is one failed test, not a lost run.
// --jobs N keeps N children running at once (a GPU child spends most of its time opening the
// device; the lent GPU machine has 16 cores).
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <regex>
#include <set>
#include <thread>

#include "backends/backend_registry.hpp"
#include "engine/engine_file.hpp"
#include "onnx/onnx_io.hpp"
#include "passes/pass_manager.hpp"
#include "passes/passes.hpp"
#include "runtime/compare.hpp"
#include "runtime/executor.hpp"
#include "runtime/interpreter.hpp"

namespace fs = std::filesystem;
using namespace kiln;

namespace {

constexpr int kTimeoutSeconds = 60;
bool g_via_engine = false;
bool g_optimize = false;
std::string g_device;  // empty: the reference interpreter (or the engine path)

// Write `model` and its execution plan as an engine and read both back (the file is unlinked;
// its mapping stays valid).
engine::LoadedEngine through_engine(const ir::Model& model) {
  std::string path =
      (fs::temp_directory_path() / fmt::format("kiln_conformance_{}.kiln", ::getpid())).string();
  engine::ExecutionPlan plan = runtime::Executor(model.graph).execution_plan();
  engine::write_engine(model, {}, path, &plan);
  engine::LoadedEngine loaded = engine::read_engine(path);
  fs::remove(path);
  return loaded;
}

std::string one_line(std::string s) {
  std::replace(s.begin(), s.end(), '\n', ' ');
  if (s.size() > 300) s = s.substr(0, 297) + "...";
  return s;
}

// A test may carry its own tolerance in data.json ({"rtol": ..., "atol": ...}), as the ONNX
// loader reads it; the defaults are the loader's.
runtime::Tolerance read_tolerance(const fs::path& dir) {
  runtime::Tolerance tol;
  std::ifstream in(dir / "data.json");
  if (!in) return tol;
  std::string text((std::istreambuf_iterator<char>(in)), {});
  auto number_after = [&](const std::string& key, double fallback) {
    std::smatch m;
    std::regex re("\"" + key + "\"\\s*:\\s*([-+0-9.eE]+)");
    return std::regex_search(text, m, re) ? std::stod(m[1].str()) : fallback;
  };
  tol.rtol = number_after("rtol", tol.rtol);
  tol.atol = number_after("atol", tol.atol);
  return tol;
}

bool has_random_op(const ir::Graph& g) {
  for (const ir::Node* n : g.nodes()) {
    if (passes::is_nondeterministic(*n)) return true;
  }
  return false;
}

// Without a seed a random op's expected data is one draw of numpy's generator: values cannot be
// compared (a chance match would make the test flaky), only kind, type and shape.
bool has_unseeded_random_op(const ir::Graph& g) {
  for (const ir::Node* n : g.nodes()) {
    if (passes::is_nondeterministic(*n) && !n->attribute("seed")) return true;
  }
  return false;
}

// Empty string on success, else the reason.
std::string run_test(const fs::path& dir) {
  const runtime::Tolerance tolerance = read_tolerance(dir);
  ir::Model model = onnx_io::import_model_file((dir / "model.onnx").string());
  if (g_optimize) {
    passes::PassManager pm;
    passes::add_default_passes(pm);
    if (!g_device.empty()) passes::add_device_passes(pm, g_device);
    pm.run(*model.graph);
  }
  std::unique_ptr<runtime::Interpreter> interp;
  std::unique_ptr<runtime::Executor> executor;
  if (g_via_engine) {
    engine::LoadedEngine loaded = through_engine(model);
    model = std::move(loaded.model);
    executor = std::make_unique<runtime::Executor>(model.graph, runtime::ExecutorOptions{},
                                                   loaded.plan ? &*loaded.plan : nullptr);
  } else if (!g_device.empty()) {
    runtime::ExecutorOptions options;
    options.backends = backends::backends_for(g_device);
    executor = std::make_unique<runtime::Executor>(model.graph, options);
  } else {
    interp = std::make_unique<runtime::Interpreter>(model.graph);
  }
  std::vector<const ir::Value*> feeds;
  for (const ir::Value* v : model.graph->inputs()) {
    if (!v->is_constant()) feeds.push_back(v);
  }
  std::vector<fs::path> sets;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.is_directory() && e.path().filename().string().rfind("test_data_set_", 0) == 0) {
      sets.push_back(e.path());
    }
  }
  std::sort(sets.begin(), sets.end());
  if (sets.empty()) return "no test data sets";
  for (const fs::path& set : sets) {
    std::vector<RtValue> inputs(model.graph->inputs().size());
    size_t fed = 0;
    for (size_t i = 0; i < model.graph->inputs().size(); ++i) {
      const ir::Value* v = model.graph->inputs()[i];
      if (v->is_constant()) continue;
      fs::path file = set / fmt::format("input_{}.pb", fed++);
      if (!fs::exists(file)) continue;  // optional input left out
      inputs[i] = onnx_io::read_value_file(file.string(), v->type());
    }
    std::vector<RtValue> outputs = executor ? executor->run(inputs) : interp->run(inputs);
    for (size_t i = 0; i < outputs.size(); ++i) {
      fs::path file = set / fmt::format("output_{}.pb", i);
      if (!fs::exists(file)) continue;
      RtValue expected = onnx_io::read_value_file(file.string(), model.graph->outputs()[i]->type());
      if (has_unseeded_random_op(*model.graph)) {
        const RtValue& a = outputs[i];
        bool same_form = a.is_tensor() && expected.is_tensor() &&
                         a.tensor().dtype() == expected.tensor().dtype() &&
                         a.tensor().dims() == expected.tensor().dims();
        return same_form ? std::string(
                               "why: unseeded random op; type and shape match, values are "
                               "a draw of numpy's generator and cannot be compared")
                         : fmt::format("random op output {} has the wrong type or shape: {} vs {}",
                                       i, a.describe(), expected.describe());
      }
      if (auto diff = runtime::compare_values(outputs[i], expected, tolerance)) {
        if (has_random_op(*model.graph)) {
          return fmt::format("output {} of a random op differs from the generator's stream: {}", i,
                             *diff);
        }
        return fmt::format("output {} '{}' mismatch: {}", i, model.graph->outputs()[i]->name(),
                           *diff);
      }
    }
  }
  return "";
}

std::string run_isolated(const fs::path& dir) {
  int fds[2];
  if (pipe(fds) != 0) return "pipe failed";
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    std::string result;
    try {
      result = run_test(dir);
    } catch (const std::exception& e) {
      result = e.what();
      if (result.empty()) result = "exception";
    }
    (void)!write(fds[1], result.data(), result.size());
    close(fds[1]);
    _exit(0);
  }
  close(fds[1]);
  std::string result;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(kTimeoutSeconds);
  bool timed_out = false;
  char buf[4096];
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    int r = poll(&p, 1, static_cast<int>(left.count()));
    if (r <= 0) continue;
    ssize_t n = read(fds[0], buf, sizeof buf);
    if (n <= 0) break;
    result.append(buf, static_cast<size_t>(n));
  }
  close(fds[0]);
  if (timed_out) kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  if (timed_out) return fmt::format("timed out after {} s", kTimeoutSeconds);
  if (WIFSIGNALED(status)) return fmt::format("crashed with signal {}", WTERMSIG(status));
  return result;
}

std::map<std::string, std::string> read_expected(const std::string& path) {
  std::map<std::string, std::string> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    auto hash = line.find('#');
    std::string name = line.substr(0, hash);
    name.erase(name.find_last_not_of(" \t\r") + 1);
    name.erase(0, name.find_first_not_of(" \t"));
    if (name.empty()) continue;
    out[name] = hash == std::string::npos ? "" : line.substr(hash + 1);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string data, expected_path, write_path, filter = ".*";
  bool verbose = false;
  int jobs = 1;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::cerr << a << " needs a value\n";
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--data")
      data = next();
    else if (a == "--expected")
      expected_path = next();
    else if (a == "--write-expected")
      write_path = next();
    else if (a == "--filter")
      filter = next();
    else if (a == "-v" || a == "--verbose")
      verbose = true;
    else if (a == "--via-engine")
      g_via_engine = true;
    else if (a == "--device")
      g_device = next();
    else if (a == "--optimize")
      g_optimize = true;
    else if (a == "--jobs")
      jobs = std::max(1, std::atoi(next().c_str()));
    else {
      std::cerr << "usage: kiln_conformance --data DIR [--expected FILE] [--write-expected FILE] "
                   "[--filter REGEX] [-v] [--via-engine] [--optimize] [--device NAME] [--jobs N]\n";
      return 2;
    }
  }
  if (data.empty() || !fs::is_directory(data)) {
    std::cerr << "conformance: test data directory '" << data << "' not found\n";
    return 2;
  }
  std::regex re(filter);
  std::vector<fs::path> tests;
  for (const auto& e : fs::directory_iterator(data)) {
    if (e.is_directory() && std::regex_search(e.path().filename().string(), re))
      tests.push_back(e.path());
  }
  std::sort(tests.begin(), tests.end());

  // The children, `jobs` at a time: worker threads of this process only fork, read and wait.
  std::vector<std::string> reasons(tests.size());
  std::atomic<size_t> next_test{0};
  auto work = [&] {
    for (size_t i; (i = next_test++) < tests.size();) reasons[i] = run_isolated(tests[i]);
  };
  std::vector<std::thread> workers;
  for (int j = 1; j < jobs; ++j) workers.emplace_back(work);
  work();
  for (std::thread& w : workers) w.join();

  std::map<std::string, std::string> failures;
  size_t passed = 0;
  for (size_t i = 0; i < tests.size(); ++i) {
    const fs::path& t = tests[i];
    std::string name = t.filename().string();
    std::string reason = std::move(reasons[i]);
    // Paths make the list machine-specific: keep the reason, drop the data directory.
    for (size_t pos; (pos = reason.find(t.string() + "/")) != std::string::npos;) {
      reason.erase(pos, t.string().size() + 1);
    }
    if (reason.empty()) {
      ++passed;
      if (verbose) std::cout << "PASS " << name << "\n";
    } else {
      failures[name] = one_line(reason);
      if (verbose) std::cout << "FAIL " << name << ": " << failures[name] << "\n";
    }
  }
  std::cout << fmt::format("conformance: {} passed, {} failed", passed, failures.size())
            << std::endl;

  if (!write_path.empty()) {
    // Reasons a person wrote ("why: ...") survive regeneration while the test still fails.
    auto previous = read_expected(write_path);
    for (auto& [name, reason] : failures) {
      auto it = previous.find(name);
      if (it != previous.end() && it->second.find("why:") != std::string::npos) reason = it->second;
    }
    std::ofstream out(write_path);
    out << "# ONNX backend node tests that Kiln fails today, each with its reason.\n"
           "# Regenerate: make conformance-update. CI fails on any change in either direction.\n";
    for (const auto& [name, reason] : failures) {
      std::string r = reason;
      r.erase(0, r.find_first_not_of(' '));
      out << name << "  # " << r << "\n";
    }
  }
  if (expected_path.empty()) return 0;
  auto expected = read_expected(expected_path);
  int problems = 0;
  for (const auto& [name, reason] : failures) {
    if (!expected.count(name)) {
      std::cout << "UNEXPECTED FAILURE " << name << ": " << reason << "\n";
      ++problems;
    }
  }
  std::set<std::string> ran;
  for (const fs::path& t : tests) ran.insert(t.filename().string());
  for (const auto& [name, reason] : expected) {
    if (ran.count(name) && !failures.count(name)) {
      std::cout << "UNEXPECTED PASS " << name << " (remove it from " << expected_path << ")\n";
      ++problems;
    }
  }
  if (problems) {
    std::cout << "conformance: " << problems << " tests disagree with " << expected_path << "\n";
    return 1;
  }
  return 0;
}
