#include "compiler/task_metric.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <thread>

#include "core/error.hpp"

extern char** environ;

namespace kiln::compiler {
namespace fs = std::filesystem;

TaskMetric parse_task_metric(std::string_view text) {
  TaskMetric m;
  if (text == "cosine") {
    m.kind = MetricKind::Cosine;
  } else if (text == "top1") {
    m.kind = MetricKind::Top1;
  } else if (text == "max-abs-steps") {
    m.kind = MetricKind::MaxAbsSteps;
  } else if (text.starts_with("script:")) {
    m.kind = MetricKind::Script;
    m.script = std::string(text.substr(7));
    KILN_CHECK_ARG(!m.script.empty(), "--metric script:PATH: give the script's path");
    KILN_CHECK_ARG(fs::is_regular_file(m.script), "--metric {}: no such file '{}'", text, m.script);
  } else {
    fail(ErrorCode::InvalidArgument,
         "--metric '{}': choose cosine, top1, max-abs-steps or script:PATH", text);
  }
  return m;
}

std::string metric_name(const TaskMetric& m) {
  switch (m.kind) {
    case MetricKind::Cosine:
      return "cosine";
    case MetricKind::Top1:
      return "top1";
    case MetricKind::MaxAbsSteps:
      return "max-abs-steps";
    case MetricKind::Script:
      return "script:" + m.script;
  }
  return "";
}

// ---- .npz ----------------------------------------------------------------------------------

namespace {

template <class T>
void put(std::string& out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.append(b, sizeof(T));
}

std::string npy_bytes(const std::vector<Tensor>& parts, const std::string& name) {
  KILN_CHECK_ARG(!parts.empty(), "write_npz: '{}' has no tensors", name);
  std::vector<int64_t> shape;
  const std::vector<int64_t>& first = parts.front().dims();
  if (first.empty()) {
    shape = {static_cast<int64_t>(parts.size())};  // scalars: stacked
  } else {
    shape = first;
    shape[0] = 0;
    for (const Tensor& t : parts) {
      KILN_CHECK_ARG(t.dims().size() == first.size() &&
                         std::equal(t.dims().begin() + 1, t.dims().end(), first.begin() + 1),
                     "the input sets' '{}' outputs differ beyond the first axis ({} and {}): a "
                     "script metric gets them concatenated along it",
                     name, fmt::join(first, "x"), fmt::join(t.dims(), "x"));
      shape[0] += t.dims()[0];
    }
  }
  // "(2, 3)" but "(2,)".
  const std::string dims =
      shape.size() == 1 ? fmt::format("{},", shape[0]) : fmt::format("{}", fmt::join(shape, ", "));
  std::string header =
      fmt::format("{{'descr': '<f4', 'fortran_order': False, 'shape': ({}), }}", dims);
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string out("\x93NUMPY\x01\x00", 8);
  put<uint16_t>(out, static_cast<uint16_t>(header.size()));
  out += header;
  for (const Tensor& t : parts) {
    KILN_CHECK_ARG(t.dtype() == DataType::Float32, "write_npz: '{}' is not float32", name);
    out.append(static_cast<const char*>(t.raw_data()), t.nbytes());
  }
  return out;
}

}  // namespace

void write_npz(const std::string& path, const OutputSets& arrays) {
  std::string zip, central;
  uint16_t entries = 0;
  for (const auto& [name, parts] : arrays) {
    const std::string data = npy_bytes(parts, name);
    const std::string member = name + ".npy";
    KILN_CHECK_ARG(data.size() < 0xffffffffu && zip.size() < 0xffffffffu - data.size() &&
                       member.size() < 0xffff,
                   "write_npz: '{}' is past 4 GiB", path);
    const uint32_t crc = static_cast<uint32_t>(
        crc32(0, reinterpret_cast<const Bytef*>(data.data()), static_cast<uInt>(data.size())));
    const auto offset = static_cast<uint32_t>(zip.size());
    auto common = [&](std::string& out) {
      put<uint16_t>(out, 0);     // flags
      put<uint16_t>(out, 0);     // stored
      put<uint16_t>(out, 0);     // time
      put<uint16_t>(out, 0x21);  // date: 1980-01-01
      put<uint32_t>(out, crc);
      put<uint32_t>(out, static_cast<uint32_t>(data.size()));
      put<uint32_t>(out, static_cast<uint32_t>(data.size()));
      put<uint16_t>(out, static_cast<uint16_t>(member.size()));
      put<uint16_t>(out, 0);  // extra
    };
    put<uint32_t>(zip, 0x04034b50);
    put<uint16_t>(zip, 20);
    common(zip);
    zip += member;
    zip += data;
    put<uint32_t>(central, 0x02014b50);
    put<uint16_t>(central, 20);
    put<uint16_t>(central, 20);
    common(central);
    put<uint16_t>(central, 0);  // comment
    put<uint16_t>(central, 0);  // disk
    put<uint16_t>(central, 0);  // internal attributes
    put<uint32_t>(central, 0);  // external attributes
    put<uint32_t>(central, offset);
    central += member;
    ++entries;
  }
  const auto cd_offset = static_cast<uint32_t>(zip.size());
  zip += central;
  put<uint32_t>(zip, 0x06054b50);
  put<uint16_t>(zip, 0);
  put<uint16_t>(zip, 0);
  put<uint16_t>(zip, entries);
  put<uint16_t>(zip, entries);
  put<uint32_t>(zip, static_cast<uint32_t>(central.size()));
  put<uint32_t>(zip, cd_offset);
  put<uint16_t>(zip, 0);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  KILN_CHECK(out.good(), ErrorCode::NotFound, "cannot write '{}'", path);
  out.write(zip.data(), static_cast<std::streamsize>(zip.size()));
  KILN_CHECK(out.good(), ErrorCode::Internal, "cannot write '{}'", path);
}

// ---- the metrics ---------------------------------------------------------------------------

namespace {

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string tail(std::string s, size_t n = 600) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\r')) s.pop_back();
  if (s.size() > n) s = "..." + s.substr(s.size() - n);
  return s;
}

// Runs the script on two .npz files within its time limit; returns its score.
double run_script(const TaskMetric& m, const std::string& dir, const std::string& reference,
                  const std::string& candidate) {
  const std::string script = fs::absolute(m.script).string();
  std::vector<std::string> args;
  if (script.ends_with(".py") && access(script.c_str(), X_OK) != 0) {
    const char* env = std::getenv("KILN_PYTHON");
    args.push_back(env && *env ? env : "python3");
  }
  args.push_back(script);
  args.push_back(reference);
  args.push_back(candidate);
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const std::string out_path = dir + "/stdout.txt", err_path = dir + "/stderr.txt";
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0600);
  posix_spawn_file_actions_addopen(&actions, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0600);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  // Its own process group, so that a time limit stops what it started too.
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, argv[0], &actions, &attr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  KILN_CHECK_ARG(rc == 0, "cannot start the metric script '{}' ({}): {}", m.script, args[0],
                 std::strerror(rc));
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration<double>(std::max(m.timeout_seconds, 0.001));
  int status = 0;
  bool timed_out = false;
  for (;;) {
    const pid_t w = waitpid(pid, &status, WNOHANG);
    if (w == pid) break;
    if (w < 0 && errno != EINTR) break;
    if (std::chrono::steady_clock::now() > deadline) {
      kill(-pid, SIGKILL);
      while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      timed_out = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  const std::string out = read_all(out_path), err = read_all(err_path);
  KILN_CHECK_ARG(!timed_out,
                 "the metric script '{}' ran past its time limit of {} s (--metric-timeout) and "
                 "was stopped",
                 m.script, m.timeout_seconds);
  if (WIFSIGNALED(status)) {
    fail(ErrorCode::InvalidArgument, "the metric script '{}' died of signal {} ({}){}", m.script,
         WTERMSIG(status), strsignal(WTERMSIG(status)),
         err.empty() ? "" : fmt::format("; its stderr: {}", tail(err)));
  }
  KILN_CHECK_ARG(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                 "the metric script '{}' exited with status {}{}", m.script,
                 WIFEXITED(status) ? WEXITSTATUS(status) : -1,
                 err.empty() ? "" : fmt::format("; its stderr: {}", tail(err)));
  std::string line = tail(out, std::numeric_limits<size_t>::max());
  if (const size_t nl = line.rfind('\n'); nl != std::string::npos) line = line.substr(nl + 1);
  while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.erase(0, 1);
  while (!line.empty() && (line.back() == ' ' || line.back() == '\t' || line.back() == '\r')) {
    line.pop_back();
  }
  char* end = nullptr;
  const double v = line.empty() ? NAN : std::strtod(line.c_str(), &end);
  KILN_CHECK_ARG(!line.empty() && end == line.c_str() + line.size() && std::isfinite(v),
                 "the metric script '{}' must print its score (a finite number) as the last line "
                 "of its stdout; its last line was '{}'",
                 m.script, tail(line, 200));
  return v;
}

struct Cos {
  double dot = 0, aa = 0, bb = 0;
  double value() const {
    if (aa == 0 && bb == 0) return 1;
    return aa > 0 && bb > 0 ? dot / std::sqrt(aa * bb) : 0;
  }
};

}  // namespace

MetricEvaluator::MetricEvaluator(TaskMetric metric, OutputSets reference)
    : metric_(std::move(metric)), reference_(std::move(reference)) {
  if (metric_.kind == MetricKind::Top1) {
    bool any = false;
    for (const auto& [name, parts] : reference_) {
      any |= !parts.empty() && parts.front().dims().size() == 2 && parts.front().dims()[1] > 1;
    }
    KILN_CHECK_ARG(any,
                   "--metric top1 needs an output shaped [N, classes]; this model has none (try "
                   "cosine, max-abs-steps or a script)");
  }
}

double MetricEvaluator::reference_score() {
  if (!have_reference_score_) {
    reference_score_ = metric_.kind == MetricKind::MaxAbsSteps ? 0.0
                       : metric_.kind == MetricKind::Script    ? score(reference_)
                                                               : 1.0;
    have_reference_score_ = true;
  }
  return reference_score_;
}

double MetricEvaluator::drop(const OutputSets& candidate) {
  const double ref = reference_score();
  const double s = score(candidate);
  return higher_is_better() ? ref - s : s - ref;
}

double MetricEvaluator::score(const OutputSets& candidate) {
  if (metric_.kind == MetricKind::Script) {
    std::string pattern = (fs::temp_directory_path() / "kiln-metric-XXXXXX").string();
    KILN_CHECK(mkdtemp(pattern.data()) != nullptr, ErrorCode::Unavailable,
               "cannot create a temporary directory under {}", fs::temp_directory_path().string());
    struct Remove {
      std::string dir;
      ~Remove() {
        std::error_code ec;
        fs::remove_all(dir, ec);
      }
    } remove{pattern};
    const std::string ref = pattern + "/reference.npz";
    write_npz(ref, reference_);
    std::string cand = ref;
    if (&candidate != &reference_) {
      cand = pattern + "/candidate.npz";
      write_npz(cand, candidate);
    }
    return run_script(metric_, pattern, ref, cand);
  }
  double worst = metric_.kind == MetricKind::MaxAbsSteps ? 0.0 : 1.0;
  for (const auto& [name, ref_parts] : reference_) {
    const auto it = candidate.find(name);
    if (it == candidate.end()) continue;
    const std::vector<Tensor>& cand_parts = it->second;
    const size_t sets = std::min(ref_parts.size(), cand_parts.size());
    if (metric_.kind == MetricKind::Cosine) {
      Cos c;
      for (size_t s = 0; s < sets; ++s) {
        const auto a = ref_parts[s].values<float>();
        const auto b = cand_parts[s].values<float>();
        for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
          c.dot += double(a[i]) * b[i];
          c.aa += double(a[i]) * a[i];
          c.bb += double(b[i]) * b[i];
        }
      }
      worst = std::min(worst, c.value());
    } else if (metric_.kind == MetricKind::Top1) {
      size_t agree = 0, rows = 0;
      for (size_t s = 0; s < sets; ++s) {
        const std::vector<int64_t>& d = ref_parts[s].dims();
        if (d.size() != 2 || d[1] <= 1 || cand_parts[s].dims() != d) continue;
        const float* a = ref_parts[s].data<float>();
        const float* b = cand_parts[s].data<float>();
        for (int64_t r = 0; r < d[0]; ++r) {
          agree += std::max_element(a + r * d[1], a + (r + 1) * d[1]) - (a + r * d[1]) ==
                   std::max_element(b + r * d[1], b + (r + 1) * d[1]) - (b + r * d[1]);
          ++rows;
        }
      }
      if (rows > 0) worst = std::min(worst, static_cast<double>(agree) / static_cast<double>(rows));
    } else {
      float lo = INFINITY, hi = -INFINITY;
      for (const Tensor& t : ref_parts) {
        for (float x : t.values<float>()) {
          if (std::isfinite(x)) lo = std::min(lo, x), hi = std::max(hi, x);
        }
      }
      const double step = hi > lo ? (double(hi) - lo) / 255.0 : 0.0;
      double most = 0;
      for (size_t s = 0; s < sets; ++s) {
        const auto a = ref_parts[s].values<float>();
        const auto b = cand_parts[s].values<float>();
        for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
          most = std::max(most, std::fabs(double(a[i]) - b[i]));
        }
      }
      worst = std::max(worst, most == 0 ? 0.0 : step > 0 ? most / step : INFINITY);
    }
  }
  return worst;
}

}  // namespace kiln::compiler
