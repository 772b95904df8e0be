"""kiln bench (latency percentiles, throughput, JSON) and kiln profile (trace, HTML report)."""
import json
import re

import cli_models


def test_bench_json_reports_percentiles_and_throughput(kiln, demo):
    r = kiln("bench", demo, "--batch", 4, "--warmup", 2, "--iterations", 25, "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["batch"] == 4 and data["iterations"] == 25 and data["warmup"] == 2
    assert data["inputs"] == {"image": "float[4,3,8,8]"}
    lat = data["latency_ms"]
    assert 0 < lat["min"] <= lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["max"]
    assert lat["min"] <= lat["mean"] <= lat["max"]
    expected = 4 * 25 / data["total_s"]
    assert abs(data["throughput_per_s"] - expected) <= 1e-6 * expected


def test_bench_text_and_duration(kiln, demo, tmp_path):
    r = kiln("bench", demo, "--duration", "0.2", "--threads", 1)
    assert r.returncode == 0, r.stderr
    assert re.search(r"latency ms: mean [\d.]+  min [\d.]+  p50 [\d.]+  p90 [\d.]+  p99 [\d.]+",
                     r.stdout)
    runs = int(re.search(r"(\d+) timed runs", r.stdout).group(1))
    assert runs >= 1
    assert "throughput: " in r.stdout and "inferences/s" in r.stdout
    # An engine benches the same way.
    assert kiln("compile", demo, "-o", tmp_path / "d.kiln").returncode == 0
    assert kiln("bench", tmp_path / "d.kiln", "--iterations", 3).returncode == 0


def test_bench_batch_needs_a_dynamic_first_dim(kiln, tmp_path):
    model = cli_models.conv_bn(tmp_path / "m.onnx")  # x: float[1,2,6,6]
    r = kiln("bench", model, "--batch", 8)
    assert r.returncode == 1 and "fixed batch dim of 1" in r.stderr
    r = kiln("bench", model, "--batch", 1, "--iterations", 2)
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
    r = kiln("bench", model, "--no-optimize", "--iterations", 2)
    assert r.returncode == 0, r.stderr
