"""Differential tests, the metrics port: the same scrapes of Kiln and the real Triton 2.51 after
the same requests, compared on status, content type, body of other paths, metric families (type
and help) and each per-model series (labels and, for counts, values).
Skipped with the reason when tritonserver cannot be installed or started (tests/server/triton.py)."""
import re

import pytest

from triton_pair import fp32_request, http_answer, pair, same  # noqa: F401

# Families one server has and the other has not, with the reason (docs/SERVER.md):
# Kiln has no pinned memory pool, and Triton 2.51 reports no model load time.
TRITON_ONLY = {"nv_pinned_memory_pool_total_bytes", "nv_pinned_memory_pool_used_bytes"}
KILN_ONLY = {"nv_model_load_duration_secs"}
# Families whose values are counts (equal after the same requests); the rest are durations or
# machine gauges, compared on their labels only.
COUNTS = {"nv_inference_request_success", "nv_inference_request_failure", "nv_inference_count",
          "nv_inference_exec_count", "nv_inference_pending_request_count"}
_SERIES = re.compile(r"^(\w+)(\{[^}]*\})? (\S+)$")


def _scrape(server):
    a = http_answer(server, "GET", "/metrics", port=server.metrics_port)
    families, series = {}, {}
    for line in a["body"].splitlines():
        if line.startswith("# HELP ") or line.startswith("# TYPE "):
            _, kind, name, text = line.split(" ", 3)
            families.setdefault(name, {})[kind] = text
        elif line:
            m = _SERIES.match(line)
            assert m, line
            series[(m.group(1), m.group(2) or "")] = m.group(3)
    return a["status"], a["content_type"], families, series


@pytest.mark.parametrize("method,path", [("GET", "/"), ("GET", "/nothing"),
                                         ("GET", "/metrics/x"), ("POST", "/metrics"),
                                         ("PUT", "/nothing")])
def test_metrics_port_other_requests(pair, method, path):
    k = http_answer(pair.kiln, method, path, port=pair.kiln.metrics_port)
    t = http_answer(pair.triton, method, path, port=pair.triton.metrics_port)
    same(f"metrics port {method} {path}", k, t)


def test_metrics_after_the_same_requests(pair):
    for _, s in pair.both():
        for rows in (1, 2, 3):
            assert http_answer(s, "POST", "/v2/models/add_sub/infer",
                               fp32_request(rows=rows))["status"] == 200
        assert http_answer(s, "POST", "/v2/models/add_sub/infer",
                           fp32_request(rows=9))["status"] == 400
    ks, kt, kfam, kseries = _scrape(pair.kiln)
    ts, tt, tfam, tseries = _scrape(pair.triton)
    same("metrics status and content type", (ks, kt), (ts, tt))
    same("metric family names", sorted(set(kfam) - KILN_ONLY - {"nv_gpu_utilization"}),
         sorted(set(tfam) - TRITON_ONLY))
    for name in sorted(set(kfam) & set(tfam)):
        same(f"metric family {name}", kfam[name], tfam[name])
    model = re.compile(r'model="add_sub"')
    kmodel = {key: v for key, v in kseries.items() if model.search(key[1])}
    tmodel = {key: v for key, v in tseries.items() if model.search(key[1])}
    same("series of add_sub", sorted(k for k in kmodel if k[0] not in KILN_ONLY),
         sorted(tmodel))
    for key in sorted(tmodel):
        if key[0] in COUNTS:
            same(f"series {key[0]}{key[1]}", float(kmodel[key]), float(tmodel[key]))
