#include "cli/profile_report.hpp"

#include "cli/timing_stats.hpp"
#include "runtime/executor.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <fmt/format.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

namespace kiln::cli {

bool NodeRecord::is_fallback() const {
  return kernel == runtime::kReferenceKernel;
}

double ProfileData::median_run_us() const {
  return median(run_wall_us);
}

double ProfileData::nodes_us() const {
  double sum = 0;
  for (const NodeRecord& n : nodes) sum += n.median_us;
  return sum;
}

void ProfileData::take_medians() {
  for (size_t i = 0; i < nodes.size(); ++i) {
    std::vector<double> us;
    for (const std::vector<double>& run : runs_us) us.push_back(run[i]);
    nodes[i].median_us = median(us);
  }
}

std::vector<OpTypeRecord> ProfileData::by_op_type() const {
  std::map<std::string, OpTypeRecord> m;
  std::map<std::string, std::vector<double>> per_run;  // op type -> its time in each run
  for (size_t i = 0; i < nodes.size(); ++i) {
    const NodeRecord& n = nodes[i];
    std::string key = n.domain.empty() ? n.op_type : n.domain + "." + n.op_type;
    OpTypeRecord& r = m[key];
    r.op_type = key;
    r.count += 1;
    std::vector<double>& times = per_run[key];
    times.resize(runs_us.size(), 0.0);
    for (size_t k = 0; k < runs_us.size(); ++k) times[k] += runs_us[k][i];
  }
  std::vector<OpTypeRecord> out;
  for (auto& [k, r] : m) {
    r.median_us = median(per_run[k]);
    out.push_back(r);
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const auto& a, const auto& b) { return a.median_us > b.median_us; });
  return out;
}

// The trace: each profiled run is one span at its measured start and wall time, holding its
// nodes at their measured starts (names are node names, args the op type, kernel and shapes), plus
// a counter track of the live activation bytes. Times are microseconds from the first run's start.
std::string chrome_trace_json(const ProfileData& data) {
  rapidjson::StringBuffer sb;
  rapidjson::Writer<rapidjson::StringBuffer> w(sb);
  auto meta = [&](const char* name, int tid, const std::string& value) {
    w.StartObject();
    w.Key("name");
    w.String(name);
    w.Key("ph");
    w.String("M");
    w.Key("pid");
    w.Int(1);
    w.Key("tid");
    w.Int(tid);
    w.Key("args");
    w.StartObject();
    w.Key("name");
    w.String(value.c_str());
    w.EndObject();
    w.EndObject();
  };
  auto span = [&](const std::string& name, const std::string& cat, double ts, double dur) {
    w.Key("name");
    w.String(name.c_str());
    w.Key("cat");
    w.String(cat.c_str());
    w.Key("ph");
    w.String("X");
    w.Key("ts");
    w.Double(ts);
    w.Key("dur");
    w.Double(dur);
    w.Key("pid");
    w.Int(1);
    w.Key("tid");
    w.Int(1);
  };
  w.StartObject();
  w.Key("displayTimeUnit");
  w.String("ms");
  w.Key("otherData");
  w.StartObject();
  w.Key("model");
  w.String(data.model.c_str());
  w.Key("peak_live_activation_bytes");
  w.Uint64(data.peak_live_bytes);
  w.Key("weight_bytes");
  w.Uint64(data.weight_bytes);
  w.Key("timestamps");
  w.String("measured");
  w.EndObject();
  w.Key("traceEvents");
  w.StartArray();
  meta("process_name", 1, "kiln " + data.model);
  meta("thread_name", 1, "session run");
  for (size_t r = 0; r < data.runs_us.size(); ++r) {
    const std::vector<double>& us = data.runs_us[r];
    w.StartObject();
    span(fmt::format("run {}", r), "run", data.run_start_us[r], data.run_wall_us[r]);
    w.EndObject();
    for (size_t i = 0; i < us.size(); ++i) {
      const NodeRecord& n = data.nodes[i];
      const double ts = data.node_start_us[r][i];
      if (ts < 0) continue;  // did not run
      w.StartObject();
      span(n.name, n.op_type, ts, us[i]);
      w.Key("args");
      w.StartObject();
      w.Key("op_type");
      w.String(n.op_type.c_str());
      if (!n.domain.empty()) {
        w.Key("domain");
        w.String(n.domain.c_str());
      }
      w.Key("backend");
      w.String(n.backend.c_str());
      w.Key("kernel");
      w.String(n.kernel.c_str());
      w.Key("input_shapes");
      w.StartArray();
      for (const std::string& s : n.input_shapes) w.String(s.c_str());
      w.EndArray();
      w.Key("output_shapes");
      w.StartArray();
      for (const std::string& s : n.output_shapes) w.String(s.c_str());
      w.EndArray();
      w.Key("output_bytes");
      w.Uint64(n.output_bytes);
      w.EndObject();
      w.EndObject();
      w.StartObject();
      w.Key("name");
      w.String("live activation bytes");
      w.Key("ph");
      w.String("C");
      w.Key("ts");
      w.Double(ts);
      w.Key("pid");
      w.Int(1);
      w.Key("args");
      w.StartObject();
      w.Key("bytes");
      w.Uint64(n.live_bytes);
      w.EndObject();
      w.EndObject();
    }
  }
  w.EndArray();
  w.EndObject();
  return sb.GetString();
}

namespace {

std::string escape_html(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string bytes_text(double b) {
  if (b >= 1 << 20) return fmt::format("{:.2f} MiB", b / (1 << 20));
  if (b >= 1 << 10) return fmt::format("{:.1f} KiB", b / (1 << 10));
  return fmt::format("{:.0f} B", b);
}

// Horizontal bars: time per op type, most first.
std::string op_type_chart(const ProfileData& data) {
  std::vector<OpTypeRecord> ops = data.by_op_type();
  double top = ops.empty() ? 1 : std::max(ops[0].median_us, 1e-9);
  const int label_w = 220, bar_w = 440, row_h = 22, width = label_w + bar_w + 160;
  int height = static_cast<int>(ops.size()) * row_h + 10;
  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" role=\"img\" "
      "aria-label=\"time per op type\">\n",
      width, height);
  double sum = data.nodes_us();
  for (size_t i = 0; i < ops.size(); ++i) {
    double ms = ops[i].median_us / 1000;
    double w = bar_w * ops[i].median_us / top;
    int y = static_cast<int>(i) * row_h + 4;
    double pct = sum > 0 ? 100 * ops[i].median_us / sum : 0;
    svg += fmt::format(
        "<g><title>{} x{}: {:.3f} ms per run ({:.1f}%)</title>"
        "<text x=\"{}\" y=\"{}\" text-anchor=\"end\" class=\"lbl\">{}</text>"
        "<rect x=\"{}\" y=\"{}\" width=\"{:.1f}\" height=\"{}\" class=\"bar\"/>"
        "<text x=\"{:.1f}\" y=\"{}\" class=\"val\">{:.3f} ms ({:.1f}%)</text></g>\n",
        escape_html(ops[i].op_type), ops[i].count, ms, pct, label_w - 6, y + 14,
        escape_html(ops[i].op_type), label_w, y, std::max(w, 1.0), row_h - 6, label_w + w + 6,
        y + 14, ms, pct);
  }
  return svg + "</svg>\n";
}

// Live activation bytes against time within a mean run: a step line, one step per node.
std::string memory_chart(const ProfileData& data) {
  const double width = 800, height = 260, left = 70, bottom = 30, top = 10, right = 20;
  std::vector<double> start(data.nodes.size() + 1, 0);
  for (size_t i = 0; i < data.nodes.size(); ++i) start[i + 1] = start[i] + data.nodes[i].median_us;
  double t_end = std::max(start.back(), 1e-9);
  double peak = std::max<double>(1, static_cast<double>(data.peak_live_bytes));
  double pw = width - left - right, ph = height - top - bottom;
  auto x = [&](double us) { return left + pw * us / t_end; };
  auto y = [&](double b) { return top + ph * (1 - b / peak); };
  std::string pts = fmt::format("{:.1f},{:.1f}", x(0), y(0));
  for (size_t i = 0; i < data.nodes.size(); ++i) {
    double b = static_cast<double>(data.nodes[i].live_bytes);
    pts += fmt::format(" {:.1f},{:.1f} {:.1f},{:.1f}", x(start[i]), y(b), x(start[i + 1]), y(b));
  }
  pts += fmt::format(" {:.1f},{:.1f}", x(t_end), y(0));
  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" role=\"img\" "
      "aria-label=\"live activation memory over time\">\n",
      width, height);
  svg += fmt::format("<polygon points=\"{}\" class=\"area\"/>\n", pts);
  // Invisible columns carry a tooltip per node.
  for (size_t i = 0; i < data.nodes.size(); ++i) {
    const NodeRecord& n = data.nodes[i];
    svg += fmt::format(
        "<rect x=\"{:.1f}\" y=\"{}\" width=\"{:.2f}\" height=\"{}\" class=\"hit\"><title>{} "
        "({}): live {}, output {}</title></rect>\n",
        x(start[i]), top, std::max(x(start[i + 1]) - x(start[i]), 0.5), ph, escape_html(n.name),
        escape_html(n.op_type), bytes_text(static_cast<double>(n.live_bytes)),
        bytes_text(static_cast<double>(n.output_bytes)));
  }
  svg += fmt::format(
      "<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\" class=\"axis\"/>"
      "<line x1=\"{0}\" y1=\"{2}\" x2=\"{3}\" y2=\"{2}\" class=\"axis\"/>\n",
      left, top, top + ph, left + pw);
  for (int k = 0; k <= 4; ++k) {
    double b = peak * k / 4, t = t_end * k / 4;
    svg += fmt::format("<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\" class=\"tick\">{}</text>",
                       left - 4, y(b) + 4, bytes_text(b));
    svg += fmt::format(
        "<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\" class=\"tick\">{:.3g} "
        "ms</text>\n",
        x(t), top + ph + 16, t / 1000);
  }
  return svg + "</svg>\n";
}

}  // namespace

std::string html_report(const ProfileData& data) {
  double sum = data.nodes_us();
  std::string h;
  h += "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  h += fmt::format("<title>kiln profile: {}</title>\n", escape_html(data.model));
  h += R"(<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 24px; color: #222; }
h1 { font-size: 20px; } h2 { font-size: 16px; margin-top: 28px; }
table { border-collapse: collapse; } td, th { padding: 2px 10px; text-align: right; }
th { border-bottom: 1px solid #999; } td:first-child, th:first-child { text-align: left; }
tr:nth-child(even) td { background: #f4f4f4; }
.bar { fill: #d2691e; } .lbl, .val, .tick { font-size: 12px; fill: #333; }
.area { fill: #6a9fd4; fill-opacity: 0.6; stroke: #2a5f94; } .axis { stroke: #666; }
.hit { fill: transparent; } .hit:hover { fill: #000; fill-opacity: 0.08; }
tr.fallback td { color: #a00; }
</style>
</head>
<body>
)";
  h += fmt::format("<h1>kiln profile: {}</h1>\n", escape_html(data.model));
  h += fmt::format(
      "<p>{} nodes, {} profiled runs: {:.3f} ms per run, median ({:.3f} ms in nodes). Weights "
      "{}, inputs {}, peak live activations {}.</p>\n",
      data.nodes.size(), data.run_count(), data.median_run_us() / 1000, sum / 1000,
      bytes_text(static_cast<double>(data.weight_bytes)),
      bytes_text(static_cast<double>(data.input_bytes)),
      bytes_text(static_cast<double>(data.peak_live_bytes)));
  h += "<h2>Time per op type (median per run)</h2>\n" + op_type_chart(data);
  h += "<h2>Live activation memory over a run</h2>\n" + memory_chart(data);
  h += "<h2>Op types</h2>\n<table>\n<tr><th>op type</th><th>count</th><th>median ms</th>"
       "<th>per node us</th><th>% run</th></tr>\n";
  for (const OpTypeRecord& r : data.by_op_type()) {
    h += fmt::format(
        "<tr><td>{}</td><td>{}</td><td>{:.3f}</td><td>{:.1f}</td><td>{:.1f}</td></tr>\n",
        escape_html(r.op_type), r.count, r.median_us / 1000,
        r.median_us / static_cast<double>(r.count), sum > 0 ? 100 * r.median_us / sum : 0);
  }
  size_t fallbacks = 0;
  for (const NodeRecord& n : data.nodes) fallbacks += n.is_fallback();
  h += fmt::format(
      "</table>\n<h2>Nodes in execution order</h2>\n<p>{} of {} nodes ran on reference kernels "
      "(no fast kernel took them; in red).</p>\n<table>\n<tr><th>node</th><th>op type</th>"
      "<th>kernel</th><th>median us</th><th>% run</th><th>outputs</th><th>output bytes</th>"
      "<th>live bytes</th></tr>\n",
      fallbacks, data.nodes.size());
  for (const NodeRecord& n : data.nodes) {
    std::string outs;
    for (const std::string& s : n.output_shapes) outs += (outs.empty() ? "" : ", ") + s;
    h += fmt::format(
        "<tr{}><td>{}</td><td>{}</td><td>{}</td><td>{:.1f}</td><td>{:.1f}</td><td>{}</td>"
        "<td>{}</td><td>{}</td></tr>\n",
        n.is_fallback() ? " class=\"fallback\"" : "", escape_html(n.name), escape_html(n.op_type),
        escape_html(n.backend + ":" + n.kernel), n.median_us, sum > 0 ? 100 * n.median_us / sum : 0,
        escape_html(outs), n.output_bytes, n.live_bytes);
  }
  h += "</table>\n</body>\n</html>\n";
  return h;
}

}  // namespace kiln::cli
