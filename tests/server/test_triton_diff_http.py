"""Differential tests, HTTP: the same requests to Kiln and the real Triton 2.51 (same models),
compared on status, content type and body (error texts normalized only where they name the server).
Skipped with the reason when tritonserver cannot be installed or started (tests/server/triton.py)."""
import json
import struct

import pytest

from triton_pair import errors_of, fp32_request, http_answer, pair, same  # noqa: F401

# (check, method, path, body): answers compared whole, error texts normalized.
PROBES = [
    ("live", "GET", "/v2/health/live", None),
    ("ready", "GET", "/v2/health/ready", None),
    ("live by POST", "POST", "/v2/health/live", None),
    ("unknown v2 path", "GET", "/v2/nothing", None),
    ("unknown top path", "GET", "/nothing", None),
    ("server metadata by DELETE", "DELETE", "/v2", None),
    ("model ready", "GET", "/v2/models/add_sub/ready", None),
    ("model version ready", "GET", "/v2/models/add_version/versions/2/ready", None),
    ("unknown model ready", "GET", "/v2/models/nope/ready", None),
    ("unknown version ready", "GET", "/v2/models/add_sub/versions/7/ready", None),
    ("unknown model metadata", "GET", "/v2/models/nope", None),
    ("unknown version metadata", "GET", "/v2/models/add_sub/versions/7", None),
    ("non-numeric version", "GET", "/v2/models/add_sub/versions/x", None),
    ("unknown model config", "GET", "/v2/models/nope/config", None),
    ("unknown version config", "GET", "/v2/models/add_sub/versions/7/config", None),
    ("unknown model stats", "GET", "/v2/models/nope/stats", None),
    ("unknown version stats", "GET", "/v2/models/add_sub/versions/7/stats", None),
    ("unknown model infer", "POST", "/v2/models/nope/infer", fp32_request()),
    ("unknown version infer", "POST", "/v2/models/add_sub/versions/7/infer", fp32_request()),
    ("infer by GET", "GET", "/v2/models/add_sub/infer", None),
    ("unknown model op", "GET", "/v2/models/add_sub/nothing", None),
    ("load in mode none", "POST", "/v2/repository/models/add_sub/load", None),
    ("unload in mode none", "POST", "/v2/repository/models/add_sub/unload", None),
    ("index by GET", "GET", "/v2/repository/index", None),
    ("log settings", "GET", "/v2/logging", None),
    ("log settings by DELETE", "DELETE", "/v2/logging", None),
    ("malformed JSON infer", "POST", "/v2/models/add_sub/infer", "{bad"),
    ("malformed JSON index", "POST", "/v2/repository/index", "{bad"),
    ("infer body not an object", "POST", "/v2/models/add_sub/infer", "[]"),
    ("data count below shape", "POST", "/v2/models/add_sub/infer",
     fp32_request(inputs=[{"name": "INPUT0", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3]},
                          {"name": "INPUT1", "shape": [1, 4], "datatype": "FP32",
                           "data": [1, 2, 3, 4]}])),
    ("data count above shape", "POST", "/v2/models/add_sub/infer",
     fp32_request(inputs=[{"name": "INPUT0", "shape": [1, 4], "datatype": "FP32",
                           "data": [1, 2, 3, 4]},
                          {"name": "INPUT1", "shape": [1, 4], "datatype": "FP32",
                           "data": [1, 2, 3, 4, 5]}])),
    ("missing input", "POST", "/v2/models/add_sub/infer", fp32_request(inputs=[
        {"name": "INPUT0", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}])),
    ("wrong datatype", "POST", "/v2/models/add_sub/infer", fp32_request(inputs=[
        {"name": "INPUT0", "shape": [1, 4], "datatype": "INT32", "data": [1, 2, 3, 4]},
        {"name": "INPUT1", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}])),
    ("wrong shape", "POST", "/v2/models/add_sub/infer", fp32_request(inputs=[
        {"name": "INPUT0", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]},
        {"name": "INPUT1", "shape": [1, 5], "datatype": "FP32", "data": [1, 2, 3, 4, 5]}])),
    ("unknown input name, right count", "POST", "/v2/models/add_sub/infer", fp32_request(inputs=[
        {"name": "INPUT0", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]},
        {"name": "X", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}])),
    ("number in BYTES data", "POST", "/v2/models/identity_bytes/infer", {"inputs": [
        {"name": n, "shape": [1, 4], "datatype": "BYTES", "data": ["a", 2, "c", "d"]}
        for n in ("INPUT0", "INPUT1")]}),
    ("empty infer object", "POST", "/v2/models/add_sub/infer", {}),
    ("input without datatype", "POST", "/v2/models/add_sub/infer", fp32_request(inputs=[
        {"name": "INPUT0", "shape": [1, 4], "data": [1, 2, 3, 4]},
        {"name": "INPUT1", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}])),
    ("inputs not an array", "POST", "/v2/models/add_sub/infer", {"inputs": 3}),
    ("input without name", "POST", "/v2/models/add_sub/infer", fp32_request(inputs=[
        {"shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}])),
    ("input without shape", "POST", "/v2/models/add_sub/infer", fp32_request(inputs=[
        {"name": "INPUT0", "datatype": "FP32", "data": [1, 2, 3, 4]}])),
    ("name not a string", "POST", "/v2/models/add_sub/infer", fp32_request(inputs=[
        {"name": 5, "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}])),
    ("index body not an object", "POST", "/v2/repository/index", "[]"),
    ("index ready not a bool", "POST", "/v2/repository/index", {"ready": 1}),
    ("batch above max", "POST", "/v2/models/add_sub/infer", fp32_request(rows=9)),
    ("unknown input", "POST", "/v2/models/add_sub/infer", fp32_request(
        inputs=fp32_request()["inputs"] + [
            {"name": "X", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}])),
    ("unknown output", "POST", "/v2/models/add_sub/infer",
     fp32_request(extra={"outputs": [{"name": "NOPE"}]})),
    ("string in FP32 data", "POST", "/v2/models/add_sub/infer", fp32_request(inputs=[
        {"name": "INPUT0", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, "a"]},
        {"name": "INPUT1", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}])),
    ("unknown datatype", "POST", "/v2/models/add_sub/infer", fp32_request(inputs=[
        {"name": "INPUT0", "shape": [1, 4], "datatype": "FP33", "data": [1, 2, 3, 4]},
        {"name": "INPUT1", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}])),
    ("infer with id", "POST", "/v2/models/add_sub/infer", fp32_request(extra={"id": "r1"})),
    ("infer one output", "POST", "/v2/models/add_sub/infer",
     fp32_request(rows=2, extra={"outputs": [{"name": "OUTPUT1"}]})),
    ("infer version 2", "POST", "/v2/models/add_version/versions/2/infer", {"inputs": [
        {"name": "INPUT0", "shape": [4], "datatype": "FP32", "data": [1, 2, 3, 4]}]}),
    ("infer bytes", "POST", "/v2/models/identity_bytes/infer", {"inputs": [
        {"name": n, "shape": [1, 4], "datatype": "BYTES", "data": ["a", "bb", "", "d d"]}
        for n in ("INPUT0", "INPUT1")]}),
    ("infer batched model", "POST", "/v2/models/add_sub_batch/infer", fp32_request(rows=3)),
]


@pytest.mark.parametrize("check,method,path,body", PROBES, ids=[p[0] for p in PROBES])
def test_same_answer(pair, check, method, path, body):
    k, t = errors_of(http_answer(pair.kiln, method, path, body),
                     http_answer(pair.triton, method, path, body))
    same(check, k, t)


def _server_metadata(server):
    a = http_answer(server, "GET", "/v2")
    body = a["body"]
    return a["status"], a["content_type"], sorted(body), body["extensions"]


def test_server_metadata(pair):
    """Same keys; Kiln's extensions are Triton's, in Triton's order, less what Kiln lacks
    (docs/SERVER.md lists them with the reason)."""
    absent = ["classification"]
    ks, kt, kkeys, kext = _server_metadata(pair.kiln)
    ts, tt, tkeys, text = _server_metadata(pair.triton)
    same("server metadata status, type, keys", (ks, kt, kkeys), (ts, tt, tkeys))
    same("server metadata extensions", kext, [e for e in text if e not in absent])


@pytest.mark.parametrize("path", ["/v2/models/add_sub", "/v2/models/add_version",
                                  "/v2/models/add_version/versions/1",
                                  "/v2/models/identity_bytes"])
def test_model_metadata(pair, path):
    """Everything but the platform: Triton's Python backend reports none, Kiln its ONNX one."""
    k, t = http_answer(pair.kiln, "GET", path), http_answer(pair.triton, "GET", path)
    k["body"].pop("platform")
    t["body"].pop("platform")
    same(f"model metadata {path}", k, t)


# Config fields that name what runs the model: Python backend on Triton, ONNX on Kiln.
_BACKEND_FIELDS = ("backend", "platform", "default_model_filename", "runtime")


@pytest.mark.parametrize("model", ["add_sub", "add_sub_batch", "identity_bytes", "add_version"])
def test_model_config(pair, model):
    k = http_answer(pair.kiln, "GET", f"/v2/models/{model}/config")
    t = http_answer(pair.triton, "GET", f"/v2/models/{model}/config")
    for a in (k, t):
        for f in _BACKEND_FIELDS:
            a["body"][f] = "<backend>" if f in a["body"] else None
    same(f"model config keys {model}", sorted(k["body"]), sorted(t["body"]))
    for key in sorted(t["body"]):
        same(f"model config {model}.{key}", k["body"].get(key), t["body"][key])
    same(f"model config status {model}", (k["status"], k["content_type"]),
         (t["status"], t["content_type"]))


def _zero_times(stats):
    """Statistics with durations and timestamps zeroed: the two servers differ in speed, not in
    what they count."""
    for m in stats["model_stats"]:
        m["last_inference"] = 1 if m["last_inference"] else 0
        for d in m["inference_stats"].values():
            d["ns"] = 0
        for b in m["batch_stats"]:
            for k, d in b.items():
                if isinstance(d, dict):
                    d["ns"] = 0
    return stats


def test_statistics(pair):
    """After the same inferences: the same counts in the same shape (durations zeroed)."""
    body = fp32_request(rows=2)
    for s in (pair.kiln, pair.triton):
        for _ in range(3):
            assert http_answer(s, "POST", "/v2/models/add_sub/infer", body)["status"] == 200
        assert http_answer(s, "POST", "/v2/models/add_sub/infer",
                           fp32_request(rows=1, inputs=[]))["status"] == 400
    for path in ("/v2/models/add_sub/stats", "/v2/models/add_sub/versions/1/stats",
                 "/v2/models/add_version/stats"):
        k, t = http_answer(pair.kiln, "GET", path), http_answer(pair.triton, "GET", path)
        same(f"statistics {path}", (k["status"], k["content_type"], _zero_times(k["body"])),
             (t["status"], t["content_type"], _zero_times(t["body"])))
    k = _zero_times(http_answer(pair.kiln, "GET", "/v2/models/stats")["body"])
    t = _zero_times(http_answer(pair.triton, "GET", "/v2/models/stats")["body"])
    same("statistics of all models: names and versions",
         [(m["name"], m["version"]) for m in k["model_stats"]],
         [(m["name"], m["version"]) for m in t["model_stats"]])


@pytest.mark.parametrize("body", [None, {}, {"ready": True}, {"ready": False}])
def test_repository_index(pair, body):
    k = http_answer(pair.kiln, "POST", "/v2/repository/index", body)
    t = http_answer(pair.triton, "POST", "/v2/repository/index", body)
    same(f"repository index {body}", k, t)



def _binary(sizes, data):
    header = json.dumps({"inputs": [
        {"name": f"INPUT{i}", "shape": [1, 4], "datatype": "FP32",
         "parameters": {"binary_data_size": n}} for i, n in enumerate(sizes)],
        "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": False}}]}).encode()
    return header + data, {"Inference-Header-Content-Length": str(len(header))}


@pytest.mark.parametrize("check,sizes,floats", [
    ("binary inputs", (16, 16), 8),
    ("binary size below shape", (12, 16), 7),
    ("binary data beyond the sizes", (16, 16), 9),
])
def test_binary_tensor_extension(pair, check, sizes, floats):
    body, headers = _binary(sizes, struct.pack(f"{floats}f", *range(floats)))
    k, t = errors_of(http_answer(pair.kiln, "POST", "/v2/models/add_sub/infer", body, headers),
                     http_answer(pair.triton, "POST", "/v2/models/add_sub/infer", body, headers))
    same(check, k, t)
