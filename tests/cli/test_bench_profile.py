"""kiln bench (latency percentiles, throughput, JSON) and kiln profile (trace, HTML report)."""
import json
import statistics
import re

import cli_models


ORDERED = ("min", "median", "p90", "p95", "p99", "max")


def check_stats(stats):
    values = [stats[k] for k in ORDERED]
    assert values == sorted(values) and values[0] >= 0, stats
    assert stats["min"] <= stats["mean"] <= stats["max"]
    assert stats["p50"] == stats["median"] and stats["stddev"] >= 0
    assert abs(stats["cv"] - (stats["stddev"] / stats["mean"] if stats["mean"] else 0)) < 1e-9


def check_noise_verdict(data, stderr):
    """The warning is given exactly when the spread passes a limit, and says which."""
    lat = data["latency_ms"]
    tail = lat["median"] > 0 and lat["p99"] / lat["median"] > 1.5
    spread = lat["cv"] > 0.15
    assert data["noisy"] == (tail or spread) == bool(data["warnings"])
    assert any("p99 is" in w for w in data["warnings"]) == tail
    assert any("coefficient of variation" in w for w in data["warnings"]) == spread
    assert ("kiln: warning: these timings are noisy" in stderr) == data["noisy"]


def test_bench_json_reports_percentiles_and_throughput(kiln, demo):
    r = kiln("bench", demo, "--batch", 4, "--warmup", 2, "--iterations", 25, "--duration", 0,
             "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["batch"] == 4 and data["iterations"] == 25 and data["warmup"] == 2
    assert data["min_iterations"] == 25 and data["min_duration_s"] == 0
    assert data["inputs"] == {"image": "float[4,3,8,8]"}
    check_stats(data["latency_ms"])
    check_stats(data["cpu_ms"])
    expected = 4 * 25 / data["total_s"]
    assert abs(data["throughput_per_s"] - expected) <= 1e-6 * expected
    assert data["total_s"] <= data["elapsed_s"]
    assert data["cpu_per_wall"] >= 0
    machine = data["machine"]
    assert machine["cpu"] and machine["available_cpus"] >= 1 and machine["threads"] >= 1
    assert machine["kiln_version"] and re.fullmatch(r"\d+\.\d+\.\d+.*", machine["onednn_version"])
    assert machine["thread_wait_policy"]
    # The kernels run on LLVM's libomp (oneDNN's regions too), whose idle threads yield while
    # they spin; the line names the runtime.
    assert machine["openmp_runtime"].startswith("libomp"), machine
    assert machine["thread_wait_policy"].startswith(machine["openmp_runtime"] + ": idle threads "
                                                    "spin, yielding"), machine
    check_noise_verdict(data, r.stderr)


def test_bench_runs_at_least_the_duration_and_the_count(kiln, demo):
    r = kiln("bench", demo, "--duration", "0.5", "--iterations", 2, "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["elapsed_s"] >= 0.5 and data["iterations"] >= 2
    assert data["iterations"] > 2  # the demo runs in well under 0.25 s: the duration decides
    r = kiln("bench", demo, "--duration", "0.01", "--iterations", 60, "--json")
    data = json.loads(r.stdout)
    assert data["iterations"] >= 60 and data["elapsed_s"] >= 0.01
    check_noise_verdict(data, r.stderr)


def test_bench_default_duration_is_three_seconds(kiln, demo):
    r = kiln("bench", demo, "--warmup", 0, "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["min_duration_s"] == 3 and data["min_iterations"] == 10
    assert data["elapsed_s"] >= 3 and data["iterations"] >= 10


def test_bench_text_header_and_duration(kiln, demo, tmp_path):
    r = kiln("bench", demo, "--duration", "0.2", "--threads", 1,
             env={"OMP_WAIT_POLICY": "PASSIVE"})
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert re.search(r"^cpu: .+ \(\d+ CPUs available\)$", out, re.M), out
    assert re.search(r"^threads: 1$", out, re.M)
    assert re.search(r"^thread wait policy: libomp\S*: idle threads spin, yielding, 0 ms, then "
                     r"sleep \(OMP_WAIT_POLICY=PASSIVE\)$", out, re.M), out
    assert re.search(r"^versions: kiln \S+, oneDNN \d+\.\d+\.\d+", out, re.M)
    number = r"([\d.]+)"
    for label in ("latency ms: ", "cpu time ms: "):
        m = re.search(label + r" *" + "  ".join(f"{k} {number}" for k in
                      ("min", "mean", "median", "p90", "p95", "p99", "max")), out)
        assert m, out
        v = [float(x) for x in m.groups()]
        assert v[0] <= v[2] <= v[3] <= v[4] <= v[5] <= v[6] and v[0] <= v[1] <= v[6]
    m = re.search(r"(\d+) timed runs in ([\d.]+) s \(at least 10 runs and 0.2 s\)", out)
    assert m and int(m.group(1)) >= 10 and float(m.group(2)) >= 0.2
    assert re.search(r"^cpu / wall: [\d.]+", out, re.M)
    assert "throughput: " in out and "inferences/s" in out
    # Unset, the policy is said to be the runtime's default.
    r = kiln("bench", demo, "--duration", 0, "--iterations", 2, env={"OMP_WAIT_POLICY": ""})
    assert re.search(r"^thread wait policy: libomp\S*: idle threads spin, yielding, \d+ ms, "
                     r"then sleep \(default\)$", r.stdout, re.M), r.stdout
    # An engine benches the same way.
    assert kiln("compile", demo, "-o", tmp_path / "d.kiln").returncode == 0
    assert kiln("bench", tmp_path / "d.kiln", "--iterations", 3, "--duration", 0).returncode == 0


def test_bench_batch_needs_a_dynamic_first_dim(kiln, tmp_path):
    model = cli_models.conv_bn(tmp_path / "m.onnx")  # x: float[1,2,6,6]
    r = kiln("bench", model, "--batch", 8)
    assert r.returncode == 1 and "fixed batch dim of 1" in r.stderr
    r = kiln("bench", model, "--batch", 1, "--iterations", 2, "--duration", 0)
    assert r.returncode == 0, r.stderr


def test_bench_batch_respects_declared_range(kiln, demo, tmp_path):
    assert kiln("compile", demo, "-o", tmp_path / "d.kiln", "--shape-range",
                "image:1..4x3x8x8").returncode == 0
    r = kiln("bench", tmp_path / "d.kiln", "--batch", 8)
    assert r.returncode == 1 and "outside the range" in r.stderr


def test_profile_trace_and_html(kiln, tmp_path):
    model = cli_models.mlp(tmp_path / "mlp.onnx")
    trace, html = tmp_path / "t.json", tmp_path / "r.html"
    # As imported: the fusion passes would merge the nodes this test follows by name.
    r = kiln("profile", model, "--no-optimize", "--dim", "n=6", "--iterations", 3, "--trace", trace,
             "--html", html)
    assert r.returncode == 0, r.stderr
    for op in ("MatMul", "Add", "Tanh"):
        assert op in r.stdout
    # Alive while fc1 runs: x and h; bias1: h and hb; act: hb and t; fc2: t and y.
    x, h, y = 6 * 4 * 4, 6 * 5 * 4, 6 * 3 * 4
    peak = re.search(r"peak live activations [\d.]+ MiB \((\d+) bytes\)", r.stdout)
    assert peak and int(peak.group(1)) == max(x + h, h + h, h + h, h + y)

    events = json.loads(trace.read_text())["traceEvents"]
    spans = [e for e in events if e["ph"] == "X" and e.get("cat") != "run"]
    # Every node, once per profiled run, named by its node name.
    assert sorted({e["name"] for e in spans}) == ["act", "bias1", "fc1", "fc2"]
    assert len(spans) == 4 * 3
    for e in spans:
        assert isinstance(e["ts"], (int, float)) and e["dur"] >= 0
        assert e["args"]["op_type"] in ("MatMul", "Add", "Tanh")
    fc1 = next(e for e in spans if e["name"] == "fc1")
    assert fc1["args"]["output_shapes"] == ["float[6,5]"]
    assert fc1["args"]["output_bytes"] == 6 * 5 * 4
    # Within a run the nodes follow each other.
    first_run = sorted(spans, key=lambda e: e["ts"])[:4]
    assert [e["name"] for e in first_run] == ["fc1", "bias1", "act", "fc2"]
    counters = [e for e in events if e["ph"] == "C"]
    assert counters and all(e["args"]["bytes"] > 0 for e in counters)

    text = html.read_text()
    assert text.startswith("<!DOCTYPE html>") and text.rstrip().endswith("</html>")
    assert text.count("<svg") == 2
    # Self-contained: no scripts, stylesheets or images fetched from anywhere.
    assert "<script" not in text and "<link" not in text and "<img" not in text
    assert not re.search(r"(src|href)\s*=", text)
    assert re.findall(r"https?://[^\"' ]+", text) == ["http://www.w3.org/2000/svg"] * 2
    for name in ("fc1", "bias1", "act", "fc2", "Time per op type", "memory"):
        assert name in text


def test_profile_escapes_names_in_html(kiln, tmp_path):
    model = cli_models.odd_output_name(tmp_path / "odd.onnx")
    html = tmp_path / "r.html"
    r = kiln("profile", model, "--iterations", 1, "--html", html, "--trace", tmp_path / "t.json")
    assert r.returncode == 0, r.stderr
    json.loads((tmp_path / "t.json").read_text())
    assert "double" in html.read_text()


def test_profile_and_bench_of_the_optimized_graph(kiln, tmp_path):
    model = cli_models.mlp(tmp_path / "mlp.onnx")
    plain = kiln("profile", model, "--no-optimize", "--iterations", 1)
    optimized = kiln("profile", model, "--iterations", 1)
    assert plain.returncode == 0 and optimized.returncode == 0, plain.stderr + optimized.stderr
    nodes = [int(re.search(r"^(\d+) nodes", r.stdout, re.M).group(1)) for r in (plain, optimized)]
    assert nodes[0] == 4 and nodes[1] <= 4
    r = kiln("bench", model, "--no-optimize", "--iterations", 2, "--duration", 0)
    assert r.returncode == 0, r.stderr


def test_profile_trace_has_measured_timestamps_and_kernels(kiln, tmp_path):
    model = cli_models.mlp(tmp_path / "mlp.onnx")
    trace = tmp_path / "t.json"
    r = kiln("profile", model, "--no-optimize", "--iterations", 5, "--trace", trace)
    assert r.returncode == 0, r.stderr
    doc = json.loads(trace.read_text())
    assert doc["otherData"]["timestamps"] == "measured"
    events = doc["traceEvents"]
    runs = sorted((e for e in events if e.get("cat") == "run"), key=lambda e: e["ts"])
    nodes = [e for e in events if e["ph"] == "X" and e.get("cat") != "run"]
    assert len(runs) == 5 and len(nodes) == 4 * 5
    eps = 1.0  # us: clock reads at the run's edges and rounding
    for a, b in zip(runs, runs[1:]):
        assert a["ts"] + a["dur"] <= b["ts"] + eps  # runs follow each other, never overlap
    for run in runs:
        inside = sorted((e for e in nodes if run["ts"] - eps <= e["ts"] <= run["ts"] + run["dur"]),
                        key=lambda e: e["ts"])
        assert [e["name"] for e in inside] == ["fc1", "bias1", "act", "fc2"]
        for a, b in zip(inside, inside[1:]):
            assert a["ts"] + a["dur"] <= b["ts"] + eps
        assert inside[-1]["ts"] + inside[-1]["dur"] <= run["ts"] + run["dur"] + eps
        # The run's span is its wall time: node times plus what happens between them.
        assert run["dur"] + eps >= sum(e["dur"] for e in inside)
    for e in nodes:
        assert e["args"]["backend"] == "cpu" and e["args"]["kernel"]


def node_rows(stdout):
    """node name -> (op type, kernel, median us) from profile's node table."""
    rows = {}
    table = stdout.split("\nnode ", 1)[1].split("\n\n", 1)[0]
    for line in table.splitlines()[1:]:
        m = re.match(r"(.+?)\s{2,}(\S+)\s+(\S+)\s+([\d.]+)\s+[\d.]+%", line)
        if m:
            rows[m.group(1).strip()] = (m.group(2), m.group(3), float(m.group(4)))
    return rows


def test_profile_times_are_medians_and_name_kernels(kiln, tmp_path):
    model = cli_models.mlp(tmp_path / "mlp.onnx")
    trace = tmp_path / "t.json"
    r = kiln("profile", model, "--no-optimize", "--iterations", 6, "--trace", trace)
    assert r.returncode == 0, r.stderr
    assert "medians over the runs" in r.stdout
    rows = node_rows(r.stdout)
    assert set(rows) == {"fc1", "bias1", "act", "fc2"}, r.stdout
    spans = [e for e in json.loads(trace.read_text())["traceEvents"]
             if e["ph"] == "X" and e.get("cat") != "run"]
    for name, (op, kernel, median_us) in rows.items():
        durs = [e["dur"] for e in spans if e["name"] == name]
        assert len(durs) == 6
        assert abs(median_us - statistics.median(durs)) <= 0.051, (name, median_us, durs)
        assert kernel.startswith("cpu:")
        assert kernel == "cpu:" + next(e for e in spans if e["name"] == name)["args"]["kernel"]
    assert rows["fc1"][1] != "cpu:reference"  # a MatMul has a fast kernel


def test_profile_and_compile_list_reference_fallbacks(kiln, tmp_path):
    model = cli_models.random_noise(tmp_path / "noise.onnx")  # RandomUniformLike: no fast kernel
    trace = tmp_path / "t.json"
    r = kiln("profile", model, "--iterations", 3, "--trace", trace)
    assert r.returncode == 0, r.stderr
    m = re.search(r"reference kernels \(fallbacks\): (\d+) of (\d+) nodes, ([\d.]+)% of the time "
                  r"in nodes:\n((?:  .*\n)+)", r.stdout)
    assert m, r.stdout
    listed = [line.split()[0] for line in m.group(4).splitlines()]
    assert int(m.group(1)) == len(listed) >= 1 and "noise" in listed
    assert 0 <= float(m.group(3)) <= 100
    rows = node_rows(r.stdout)
    assert rows["noise"][1] == "cpu:reference"
    kernels = {e["name"]: e["args"]["kernel"] for e in json.loads(trace.read_text())["traceEvents"]
               if e["ph"] == "X" and e.get("cat") != "run"}
    assert sorted(n for n, k in kernels.items() if k == "reference") == sorted(listed)

    r = kiln("compile", model, "-o", tmp_path / "n.kiln", "--no-verify")
    assert r.returncode == 0, r.stderr
    m = re.search(r"reference kernels \(no fast kernel\): (\d+) of (\d+) nodes, ([\d.]+)% of "
                  r"(\S+(?: \S)?) FLOPs:\n((?:  .*\n)+)", r.stdout)
    assert m, r.stdout
    assert int(m.group(1)) == len(listed) and int(m.group(2)) == int(re.search(
        r"nodes: \d+ -> (\d+)", r.stdout).group(1))
    assert 0 < float(m.group(3)) <= 100
    assert "RandomUniformLike 'noise': 4 FLOPs" in m.group(5)


def test_compile_says_when_nothing_falls_back(kiln, demo, tmp_path):
    r = kiln("compile", demo, "-o", tmp_path / "d.kiln", "--no-verify")
    assert r.returncode == 0, r.stderr
    assert re.search(r"^reference kernels \(no fast kernel\): 0 of \d+ nodes, 0.0% of [\d.]+ \S+ "
                     r"FLOPs$", r.stdout, re.M), r.stdout
