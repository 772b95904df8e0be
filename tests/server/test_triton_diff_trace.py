"""Differential tests, the trace extension: the settings' answers over HTTP and gRPC, the
refusals Kiln shares with Triton 2.51, and the trace files' shape (which records, which
timestamps) for the same requests. Skipped with the reason when tritonserver cannot run
(tests/server/triton.py). The differences kept on purpose are in docs/SERVER.md ("Trace")."""
import collections
import json

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

import triton_pair
from triton_pair import errors_of, error_text, http_answer, same


def _args(path):
    return (f"--trace-config=triton,file={path}", "--trace-config=level=TIMESTAMPS",
            "--trace-config=rate=1")


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("traces")
    return str(d / "kiln.json"), str(d / "triton.json")


@pytest.fixture(scope="module")
def pair(serve, tmp_path_factory, files):
    p, triton = triton_pair.start_pair(serve, tmp_path_factory, _args(files[0]), _args(files[1]))
    p.files = files
    yield p
    triton.stop()


def _file_neutral(answer):
    """The trace_file setting names each server's own file: compared as a placeholder."""
    body = answer.get("body")
    if isinstance(body, dict) and "trace_file" in body:
        answer = dict(answer, body=dict(body, trace_file="FILE"))
    return answer


def _both(pair, method, path, body=None):
    k, t = errors_of(http_answer(pair.kiln, method, path, body),
                     http_answer(pair.triton, method, path, body))
    return _file_neutral(k), _file_neutral(t)


CHANGES = [
    ("/v2/trace/setting", {"trace_rate": "5"}),
    ("/v2/models/add_sub/trace/setting", {"trace_rate": "7", "trace_level": ["OFF"]}),
    ("/v2/models/add_sub/trace/setting", {"trace_rate": None}),
    ("/v2/models/add_sub/trace/setting", {"trace_level": None}),
    ("/v2/trace/setting", {"trace_rate": None}),
    ("/v2/trace/setting", {"log_frequency": "0"}),
    # Refusals with Triton's words.
    ("/v2/trace/setting", {"trace_rate": "abc"}),
    ("/v2/trace/setting", {"trace_rate": "0"}),
    ("/v2/trace/setting", {"trace_count": "-2"}),
    ("/v2/trace/setting", {"trace_level": ["OFF", "TIMESTAMPS"]}),
    ("/v2/trace/setting", {"trace_file": "/tmp/elsewhere.json"}),
]


def test_settings_answers(pair):
    same("trace settings", *_both(pair, "GET", "/v2/trace/setting"))
    same("model trace settings", *_both(pair, "GET", "/v2/models/add_sub/trace/setting"))
    same("unknown model trace settings", *_both(pair, "GET", "/v2/models/nope/trace/setting"))
    for path, body in CHANGES:
        same(f"POST {path} {body}", *_both(pair, "POST", path, body))
        same(f"GET after {body}", *_both(pair, "GET", path))


def _grpc(server, call):
    with grpcclient.InferenceServerClient(server.grpc_url) as c:
        try:
            got = call(c)["settings"]
            got["trace_file"] = "FILE"
            return {"result": got}
        except InferenceServerException as e:
            return {"status": e.status(), "message": e.message()}


@pytest.mark.parametrize("name,call", [
    ("get", lambda c: c.get_trace_settings(as_json=True)),
    ("get model", lambda c: c.get_trace_settings(model_name="add_sub", as_json=True)),
    ("update model", lambda c: c.update_trace_settings(
        model_name="add_sub", settings={"trace_rate": "3"}, as_json=True)),
    ("clear model", lambda c: c.update_trace_settings(
        model_name="add_sub", settings={"trace_rate": None}, as_json=True)),
    ("bad rate", lambda c: c.update_trace_settings(settings={"trace_rate": "0"}, as_json=True)),
    ("unknown model", lambda c: c.get_trace_settings(model_name="nope", as_json=True)),
])
def test_grpc_settings_answers(pair, name, call):
    k, t = _grpc(pair.kiln, call), _grpc(pair.triton, call)
    if "message" in k and "message" in t:
        k["message"], t["message"] = error_text(k["message"], t["message"])
    same(f"grpc trace {name}", k, t)


def _shape(path):
    """Per request id: the record's keys and the sorted timestamp names."""
    with open(path) as f:
        entries = json.load(f)
    by_id = collections.defaultdict(lambda: {"keys": None, "stamps": []})
    for e in entries:
        if "timestamps" in e:
            by_id[e["id"]]["stamps"] += [s["name"] for s in e["timestamps"]]
        else:
            by_id[e["id"]]["keys"] = sorted(e)
            by_id[e["id"]]["request_id"] = e.get("request_id")
    return {t["request_id"]: (t["keys"], sorted(t["stamps"])) for t in by_id.values()}


def test_trace_files_have_the_same_shape(serve, tmp_path_factory, tmp_path):
    files = str(tmp_path / "kiln.json"), str(tmp_path / "triton.json")
    p, triton = triton_pair.start_pair(serve, tmp_path_factory, _args(files[0]), _args(files[1]))
    try:
        a = np.ones((1, 4), np.float32)
        for name, server in p.both():
            ins = [httpclient.InferInput(n, [1, 4], "FP32") for n in ("INPUT0", "INPUT1")]
            for i in ins:
                i.set_data_from_numpy(a)
            httpclient.InferenceServerClient(server.url).infer("add_sub", ins, request_id="h")
            gins = [grpcclient.InferInput(n, [1, 4], "FP32") for n in ("INPUT0", "INPUT1")]
            for i in gins:
                i.set_data_from_numpy(a)
            with grpcclient.InferenceServerClient(server.grpc_url) as c:
                c.infer("add_sub", gins, request_id="g")
    finally:
        triton.stop()
        p.kiln.stop()
    same("trace file shape", _shape(files[0]), _shape(files[1]))
