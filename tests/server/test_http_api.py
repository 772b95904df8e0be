"""KServe v2 / Triton HTTP API of kiln-serve, through the real tritonclient."""
import json

import ml_dtypes
import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

import models

NUMPY = {
    "BOOL": np.bool_, "UINT8": np.uint8, "UINT16": np.uint16, "UINT32": np.uint32,
    "UINT64": np.uint64, "INT8": np.int8, "INT16": np.int16, "INT32": np.int32, "INT64": np.int64,
    "FP16": np.float16, "FP32": np.float32, "FP64": np.float64, "BF16": ml_dtypes.bfloat16,
    "BYTES": np.object_,
}


@pytest.fixture(scope="module")
def server(serve, tmp_path_factory):
    repo = str(tmp_path_factory.mktemp("repo"))
    for dt in models.DATATYPES:
        models.add_sub(repo, f"add_sub_{dt.lower()}", dt)
    models.simple(repo)
    models.add_sub(repo, "nobatch", "FP32", batch=False)
    models.reshape_model(repo, "reshaped")
    models.add_constant(repo, "latest2", [1, 2, 3],
                        'version_policy: { latest: { num_versions: 2 } }\nbackend: "onnxruntime"')
    models.add_constant(repo, "allv", [1, 2, 3], 'version_policy: { all: {} }')
    models.add_constant(repo, "specific", [1, 2, 3], 'version_policy: { specific: { versions: [1, 3] } }')
    return serve(repo)


def values(dt, shape, seed):
    rng = np.random.default_rng(seed)
    if dt == "BOOL":
        return rng.integers(0, 2, shape).astype(bool)
    if dt == "BYTES":
        words = [b"a\x00b", "h\u00e9llo".encode(), "\u65e5\u672c".encode(), b"", b"\x00", b"x" * 300]
        return np.array([words[i % len(words)] for i in range(int(np.prod(shape)))],
                        dtype=np.object_).reshape(shape)
    if dt in ("FP16", "FP32", "FP64", "BF16"):
        return rng.integers(-50, 50, shape).astype(np.float32).astype(NUMPY[dt])
    lo = 0 if dt.startswith("UINT") else -20
    return rng.integers(lo, 40, shape).astype(NUMPY[dt])


def expected(dt, a, b):
    if dt == "BOOL":
        return a | b, a ^ b
    if dt == "BYTES":
        return a, b
    if dt.startswith("UINT"):
        return a + b, (a.astype(np.int64) - b.astype(np.int64)).astype(NUMPY[dt])
    return a + b, a - b


def infer(client, model, arrays, dt, binary_in, binary_out, version=""):
    inputs = []
    for i, arr in enumerate(arrays):
        inp = httpclient.InferInput(f"INPUT{i}", list(arr.shape), dt)
        inp.set_data_from_numpy(arr, binary_data=binary_in)
        inputs.append(inp)
    outputs = [httpclient.InferRequestedOutput(f"OUTPUT{i}", binary_data=binary_out)
               for i in range(2)]
    return client.infer(model, inputs, outputs=outputs, model_version=version)


def test_health_and_server_metadata(server):
    c = server.client()
    assert c.is_server_live() and c.is_server_ready()
    meta = c.get_server_metadata()
    assert meta["name"] == "kiln" and "binary_tensor_data" in meta["extensions"]
    assert c.is_model_ready("simple") and c.is_model_ready("simple", "1")
    assert not c.is_model_ready("simple", "7") and not c.is_model_ready("nope")


def test_model_metadata_and_config(server):
    c = server.client()
    meta = c.get_model_metadata("simple")
    assert meta["versions"] == ["1"] and meta["platform"] == "onnxruntime_onnx"
    assert meta["inputs"][0] == {"name": "INPUT0", "datatype": "INT32", "shape": [-1, 4]}
    assert c.get_model_metadata("simple", "1") == meta
    cfg = c.get_model_config("simple")
    assert cfg["max_batch_size"] == 8 and cfg["input"][1]["dims"] == [4]
    assert cfg["dynamic_batching"]["preferred_batch_size"] == [4, 8]
    assert cfg["instance_group"][0]["count"] == 2 and cfg["instance_group"][0]["kind"] == "KIND_CPU"
    assert cfg["parameters"]["intra_op_thread_count"]["string_value"] == "1"
    # Auto-completed from the model: no config.pbtxt at all.
    auto = c.get_model_config("add_sub_fp32")
    assert auto["max_batch_size"] == 4 and auto["backend"] == "onnxruntime"
    assert [i["name"] for i in auto["input"]] == ["INPUT0", "INPUT1"]
    assert auto["input"][0]["data_type"] == "TYPE_FP32" and auto["input"][0]["dims"] == [4]
    assert c.get_model_config("nobatch")["max_batch_size"] == 0
    with pytest.raises(InferenceServerException, match="unknown model"):
        c.get_model_metadata("nope")


@pytest.mark.parametrize("dt", models.DATATYPES)
@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
def test_every_datatype(server, dt, binary):
    c = server.client()
    a, b = values(dt, (3, 4), 1), values(dt, (3, 4), 2)
    if not binary and dt in ("FP16", "BF16"):
        # JSON cannot carry half floats: the protocol's binary extension is the only way in.
        status, body, _ = server.request("POST", f"/v2/models/add_sub_{dt.lower()}/infer", json.dumps({
            "inputs": [{"name": f"INPUT{i}", "datatype": dt, "shape": [3, 4],
                        "data": x.astype(np.float32).ravel().tolist()} for i, x in enumerate((a, b))]}))
        assert status == 400 and b"binary" in body
        return
    if not binary and dt == "BYTES":
        # JSON strings must be text: keep the unicode and NUL elements, drop raw bytes.
        a = np.array([s.decode() for s in a.ravel()], dtype=np.object_).reshape(a.shape)
        b = np.array([s.decode() for s in b.ravel()], dtype=np.object_).reshape(b.shape)
    r = infer(c, f"add_sub_{dt.lower()}", [a, b], dt, binary, binary)
    want0, want1 = expected(dt, a, b)
    got0, got1 = r.as_numpy("OUTPUT0"), r.as_numpy("OUTPUT1")
    if dt == "BYTES":
        enc = lambda x: [s.encode() if isinstance(s, str) else s for s in x.ravel()]
        assert enc(got0) == enc(want0) and enc(got1) == enc(want1)
    else:
        assert got0.dtype == NUMPY[dt] and got0.shape == (3, 4)
        np.testing.assert_array_equal(got0, want0)
        np.testing.assert_array_equal(got1, want1)


def test_bytes_nul_and_unicode_roundtrip(server):
    c = server.client()
    data = np.array([b"\x00\x00", "\u00fc\u00df\u20ac".encode(), b"tail\x00", b"\xff\xfe raw",
                     "\U0001F600".encode(), b"", b"x", b"\x00y\x00"], dtype=np.object_).reshape(2, 4)
    r = infer(c, "add_sub_bytes", [data, data[::-1]], "BYTES", True, True)
    assert list(r.as_numpy("OUTPUT0").ravel()) == list(data.ravel())
    assert list(r.as_numpy("OUTPUT1").ravel()) == list(data[::-1].ravel())


def test_binary_json_parity(server):
    c = server.client()
    a, b = values("FP32", (4, 4), 3) / 7, values("FP32", (4, 4), 4) / 3
    results = [infer(c, "add_sub_fp32", [a, b], "FP32", bi, bo) for bi in (True, False)
               for bo in (True, False)]
    for r in results[1:]:
        assert np.array_equal(r.as_numpy("OUTPUT0"), results[0].as_numpy("OUTPUT0"))
        assert np.array_equal(r.as_numpy("OUTPUT1"), results[0].as_numpy("OUTPUT1"))


def test_nested_json_data_and_request_id(server):
    body = {"id": "req-7", "inputs": [
        {"name": "INPUT0", "datatype": "INT32", "shape": [2, 4], "data": [[1, 2, 3, 4], [5, 6, 7, 8]]},
        {"name": "INPUT1", "datatype": "INT32", "shape": [2, 4], "data": [1, 1, 1, 1, 1, 1, 1, 1]}],
        "outputs": [{"name": "OUTPUT1"}]}
    status, raw, headers = server.request("POST", "/v2/models/simple/infer", json.dumps(body))
    assert status == 200, raw
    out = json.loads(raw)
    assert out["id"] == "req-7" and out["model_name"] == "simple" and out["model_version"] == "1"
    assert [o["name"] for o in out["outputs"]] == ["OUTPUT1"]
    assert out["outputs"][0]["data"] == [0, 1, 2, 3, 4, 5, 6, 7]
    assert out["outputs"][0]["shape"] == [2, 4]


def test_binary_data_output_request_parameter(server):
    body = {"parameters": {"binary_data_output": True}, "inputs": [
        {"name": "INPUT0", "datatype": "INT32", "shape": [1, 4], "data": [1, 2, 3, 4]},
        {"name": "INPUT1", "datatype": "INT32", "shape": [1, 4], "data": [4, 3, 2, 1]}]}
    status, raw, headers = server.request("POST", "/v2/models/simple/infer", json.dumps(body))
    assert status == 200
    n = int(headers["Inference-Header-Content-Length"])
    header = json.loads(raw[:n])
    sizes = [o["parameters"]["binary_data_size"] for o in header["outputs"]]
    assert sizes == [16, 16] and len(raw) == n + 32
    assert np.frombuffer(raw[n:n + 16], np.int32).tolist() == [5, 5, 5, 5]


def test_reshape(server):
    c = server.client()
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    inp = httpclient.InferInput("INPUT0", [3, 4], "FP32")
    inp.set_data_from_numpy(a)
    r = c.infer("reshaped", [inp])
    np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), a)


def test_no_batch_model(server):
    c = server.client()
    a, b = np.ones(4, np.float32), np.arange(4, dtype=np.float32)
    r = infer(c, "nobatch", [a, b], "FP32", True, True)
    np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), a + b)


def run_constant(c, model, version=""):
    inp = httpclient.InferInput("INPUT0", [4], "FP32")
    inp.set_data_from_numpy(np.zeros(4, np.float32))
    return c.infer(model, [inp], model_version=version).as_numpy("OUTPUT0")[0]


def test_version_policy(server):
    c = server.client()
    assert c.get_model_metadata("latest2")["versions"] == ["2", "3"]
    assert c.get_model_metadata("allv")["versions"] == ["1", "2", "3"]
    assert c.get_model_metadata("specific")["versions"] == ["1", "3"]
    assert run_constant(c, "latest2") == 3 and run_constant(c, "latest2", "2") == 2
    assert run_constant(c, "allv", "1") == 1 and run_constant(c, "specific") == 3
    with pytest.raises(InferenceServerException, match="version 1"):
        run_constant(c, "latest2", "1")
    with pytest.raises(InferenceServerException, match="version 2"):
        run_constant(c, "specific", "2")
    assert not c.is_model_ready("specific", "2") and c.is_model_ready("specific", "1")


def test_statistics(server):
    c = server.client()
    before = c.get_inference_statistics("add_sub_int16")["model_stats"][0]
    a = values("INT16", (2, 4), 5)
    for _ in range(3):
        infer(c, "add_sub_int16", [a, a], "INT16", True, True)
    stats = c.get_inference_statistics("add_sub_int16")["model_stats"][0]
    assert stats["name"] == "add_sub_int16" and stats["version"] == "1"
    assert stats["inference_count"] - before["inference_count"] == 6
    assert stats["inference_stats"]["success"]["count"] - before["inference_stats"]["success"]["count"] == 3
    for key in ("queue", "compute_input", "compute_infer", "compute_output"):
        assert stats["inference_stats"][key]["count"] >= 3 and stats["inference_stats"][key]["ns"] > 0
    assert any(b["batch_size"] == 2 for b in stats["batch_stats"])
    assert stats["last_inference"] > 0
    every = c.get_inference_statistics()["model_stats"]
    assert {"simple", "add_sub_int16", "allv"} <= {s["name"] for s in every}
    assert len([s for s in every if s["name"] == "allv"]) == 3
    versioned = c.get_inference_statistics("allv", "2")["model_stats"]
    assert [(s["name"], s["version"]) for s in versioned] == [("allv", "2")]


def test_metrics(server):
    c = server.client()
    a = values("UINT8", (1, 4), 6)
    infer(c, "add_sub_uint8", [a, a], "UINT8", True, True)
    status, body, headers = server.request("GET", "/metrics", port=server.metrics_port)
    assert status == 200 and headers["Content-Type"].startswith("text/plain")
    text = body.decode()
    for name in ("nv_inference_request_success", "nv_inference_request_failure",
                 "nv_inference_count", "nv_inference_exec_count",
                 "nv_inference_request_duration_us", "nv_inference_queue_duration_us",
                 "nv_inference_compute_input_duration_us", "nv_inference_compute_infer_duration_us",
                 "nv_inference_compute_output_duration_us", "nv_inference_pending_request_count",
                 "nv_model_load_duration_secs", "nv_cpu_utilization", "nv_cpu_memory_total_bytes",
                 "nv_cpu_memory_used_bytes"):
        assert f"# TYPE {name} " in text, name
    stats = c.get_inference_statistics("add_sub_uint8")["model_stats"][0]
    line = f'nv_inference_request_success{{model="add_sub_uint8",version="1"}} '
    value = int(next(l for l in text.splitlines() if l.startswith(line)).split()[-1])
    assert value == stats["inference_stats"]["success"]["count"] >= 1


def test_repository_index(server):
    c = server.client()
    index = c.get_model_repository_index()
    rows = {(m["name"], m.get("version")): m["state"] for m in index}
    assert rows[("simple", "1")] == "READY" and rows[("allv", "2")] == "READY"
    # Loading and unloading need explicit mode (tested in test_repository.py).
    with pytest.raises(InferenceServerException, match="not allowed"):
        c.unload_model("simple")


def test_unknown_routes(server):
    assert server.request("GET", "/v2/nothing")[0] == 404
    assert server.request("GET", "/v1/models")[0] == 404
    assert server.request("DELETE", "/v2/health/live")[0] == 405
    assert server.request("GET", "/v2/models/simple/infer")[0] == 405
    assert server.request("GET", "/v2/models/simple/versions/x")[0] == 404  # no route, as Triton
