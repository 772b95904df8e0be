"""Prometheus metrics beyond the per-model counters: latency summaries (`--metrics-config
summary_latencies=true`, Triton's nv_inference_*_summary_us plus Kiln's overhead summary),
`counter_latencies=false`, and the CPU and model-load gauges, parsed with prometheus_client's
text parser (so the exposition format itself is checked too)."""
import subprocess

import numpy as np
import pytest
import tritonclient.http as httpclient
from prometheus_client.parser import text_string_to_metric_families

import models

QUANTILES = "0.5:0.05,0.9:0.01,0.99:0.001"
TRITON_SUMMARIES = ("nv_inference_request_summary_us", "nv_inference_queue_summary_us",
                    "nv_inference_compute_input_summary_us",
                    "nv_inference_compute_infer_summary_us",
                    "nv_inference_compute_output_summary_us")
OVERHEAD = "kiln_inference_overhead_summary_us"
LATENCY_COUNTERS = ("nv_inference_request_duration_us", "nv_inference_queue_duration_us",
                    "nv_inference_compute_input_duration_us",
                    "nv_inference_compute_infer_duration_us",
                    "nv_inference_compute_output_duration_us")
REQUESTS = 40


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("repo"))
    models.add_sub(path, "add_sub", "FP32")
    return path


@pytest.fixture(scope="module")
def summary_server(serve, repo):
    return serve(repo, "--metrics-config", "summary_latencies=true",
                 "--metrics-config", f"summary_quantiles={QUANTILES}")


def scrape(server):
    status, body, headers = server.request("GET", "/metrics", port=server.metrics_port)
    assert status == 200 and headers["Content-Type"].startswith("text/plain")
    return {f.name: f for f in text_string_to_metric_families(body.decode())}


def samples(family, model="add_sub"):
    """{sample name or quantile: value} of one model's series in a family."""
    out = {}
    for s in family.samples:
        if s.labels.get("model") != model:
            continue
        assert s.labels["version"] == "1"
        key = s.labels["quantile"] if "quantile" in s.labels else s.name
        out[key] = s.value
    return out


def send(server, n):
    c = server.client()
    a = np.arange(8, dtype=np.float32).reshape(2, 4)
    inputs = []
    for name in ("INPUT0", "INPUT1"):
        i = httpclient.InferInput(name, list(a.shape), "FP32")
        i.set_data_from_numpy(a)
        inputs.append(i)
    for _ in range(n):
        assert np.array_equal(c.infer("add_sub", inputs).as_numpy("OUTPUT0"), a + a)


def test_latency_summaries(summary_server):
    send(summary_server, REQUESTS)
    fams = scrape(summary_server)
    for name in TRITON_SUMMARIES + (OVERHEAD,):
        assert fams[name].type == "summary", name
        s = samples(fams[name])
        assert set(s) == {"0.5", "0.9", "0.99", f"{name}_count", f"{name}_sum"}, (name, s)
        assert s[f"{name}_count"] == REQUESTS, name
        assert 0 <= s["0.5"] <= s["0.9"] <= s["0.99"], (name, s)
        assert s["0.99"] <= s[f"{name}_sum"], name
    assert fams["nv_inference_request_summary_us"].documentation.startswith(
        "Summary of inference request duration in microseconds")
    # The summaries' sums are the counters' values (the counters truncate to whole us).
    counters = {n: samples(fams[n]) for n in LATENCY_COUNTERS}
    for counter, summary in zip(LATENCY_COUNTERS, TRITON_SUMMARIES):
        total = counters[counter]
        total = total.get(counter, total.get(counter + "_total"))
        assert abs(samples(fams[summary])[f"{summary}_sum"] - total) <= 1.0, counter
    request = samples(fams["nv_inference_request_summary_us"])
    infer = samples(fams["nv_inference_compute_infer_summary_us"])
    queue = samples(fams["nv_inference_queue_summary_us"])
    overhead = samples(fams[OVERHEAD])
    # Overhead is request minus compute infer, request by request.
    want = request["nv_inference_request_summary_us_sum"] - infer[
        "nv_inference_compute_infer_summary_us_sum"]
    assert overhead[f"{OVERHEAD}_sum"] == pytest.approx(want, rel=1e-6, abs=1e-3)
    # Each request's overhead includes its queue time and is part of its request duration.
    assert queue["0.5"] <= request["0.5"] and overhead["0.5"] <= request["0.5"]
    assert overhead["0.99"] <= request["0.99"]


def test_summaries_off_by_default(serve, repo):
    server = serve(repo)
    send(server, 2)
    fams = scrape(server)
    assert not [n for n in fams if n.endswith("_summary_us")]
    for name in LATENCY_COUNTERS:
        assert fams[name].type in ("counter", "unknown"), name


def test_counter_latencies_off(serve, repo):
    server = serve(repo, "--metrics-config=counter_latencies=false",
                   "--metrics-config=summary_latencies=true")
    send(server, 3)
    fams = scrape(server)
    for name in LATENCY_COUNTERS:
        assert name not in fams, name
    # Request counts stay; the summaries still count every request.
    assert samples(fams["nv_inference_request_success"]) != {}
    s = samples(fams["nv_inference_request_summary_us"])
    assert s["nv_inference_request_summary_us_count"] == 3
    # Triton's default quantiles when none are given.
    assert {"0.5", "0.9", "0.95", "0.99", "0.999"} <= set(s)


@pytest.mark.parametrize("spec, needle", [
    ("summary_latencies=maybe", "is not true or false"),
    ("summary_quantiles=0.5", "is not <quantile>:<error>"),
    ("summary_quantiles=1.5:0.01", "is not a number in (0, 1)"),
    ("no_such_setting=1", "unknown setting 'no_such_setting'"),
    ("summary_latencies", "is not <setting>=<value>"),
])
def test_bad_metrics_config_is_refused(request, repo, spec, needle):
    binary = request.config.getoption("--kiln-serve")
    r = subprocess.run([binary, f"--model-repository={repo}", "--http-port=0", "--grpc-port=0",
                        "--metrics-port=0", f"--metrics-config={spec}"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert needle in r.stderr, r.stderr


def test_cpu_and_load_metrics(summary_server):
    fams = scrape(summary_server)
    expected = {
        "nv_cpu_utilization": "CPU utilization rate [0.0 - 1.0]",
        "nv_cpu_memory_total_bytes": "CPU total memory (RAM), in bytes",
        "nv_cpu_memory_used_bytes": "CPU used memory (RAM), in bytes",
        "nv_model_load_duration_secs": "Model load time in seconds",
    }
    for name, help_text in expected.items():
        assert fams[name].type == "gauge" and fams[name].documentation == help_text, name
    # Two scrapes: the second utilization covers the time between them.
    for fams in (fams, scrape(summary_server)):
        util = fams["nv_cpu_utilization"].samples[0].value
        total = fams["nv_cpu_memory_total_bytes"].samples[0].value
        used = fams["nv_cpu_memory_used_bytes"].samples[0].value
        assert 0.0 <= util <= 1.0
        assert 0 < used <= total
    with open("/proc/meminfo") as f:
        mem_total_kib = int(next(l for l in f if l.startswith("MemTotal:")).split()[1])
    assert total == mem_total_kib * 1024
    load = samples(fams["nv_model_load_duration_secs"])["nv_model_load_duration_secs"]
    assert 0 < load < 120
    # No GPU backend: no GPU metrics.
    assert not [n for n in fams if n.startswith("nv_gpu_")]
