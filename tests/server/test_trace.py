"""Triton's trace extension: --trace-config starts tracing, /v2[/models/NAME]/trace/setting and
gRPC TraceSetting read and change it, and every sampled request leaves its timestamps in the
trace file in tritonserver's JSON (one object naming the model, one a timestamp, all with the
trace's id), with the real tritonclient over HTTP and gRPC."""
import collections
import json
import os

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

import ensembles
import grpc_util
import models
import triton_models

CORE = ["REQUEST_START", "QUEUE_START", "COMPUTE_START", "COMPUTE_INPUT_END",
        "COMPUTE_OUTPUT_START", "COMPUTE_END", "INFER_RESPONSE_COMPLETE", "REQUEST_END"]
HTTP = ["HTTP_RECV_START", "HTTP_RECV_END", "HTTP_SEND_START", "HTTP_SEND_END"]
GRPC = ["GRPC_WAITREAD_START", "GRPC_WAITREAD_END", "GRPC_SEND_START", "GRPC_SEND_END"]


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("repo"))
    models.add_sub(path, "simple", "FP32")
    models.add_sub(path, "other", "FP32")
    return path


def traces(path):
    """{id: {"model": ..., "stamps": {name: ns}, "parent_id": ...}} from a finished trace file."""
    with open(path) as f:
        entries = json.load(f)
    out = collections.defaultdict(lambda: {"stamps": {}})
    for e in entries:
        t = out[e["id"]]
        if "timestamps" in e:
            for s in e["timestamps"]:
                assert s["name"] not in t["stamps"], e
                t["stamps"][s["name"]] = s["ns"]
        else:
            t.update(model=e["model_name"], version=e["model_version"],
                     request_id=e.get("request_id"), parent_id=e.get("parent_id"))
    return dict(out)


def infer(client, model="simple", request_id=""):
    a = np.arange(4, dtype=np.float32).reshape(1, 4)
    ins = [httpclient.InferInput(n, [1, 4], "FP32") for n in ("INPUT0", "INPUT1")]
    for i in ins:
        i.set_data_from_numpy(a)
    r = client.infer(model, ins, request_id=request_id)
    np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), a + a)


def settings(server, model=None):
    path = f"/v2/models/{model}/trace/setting" if model else "/v2/trace/setting"
    status, body, _ = server.request("GET", path)
    assert status == 200, body
    return json.loads(body)


def post(server, changes, model=None):
    path = f"/v2/models/{model}/trace/setting" if model else "/v2/trace/setting"
    status, body, _ = server.request("POST", path, body=json.dumps(changes))
    return status, json.loads(body)


def test_http_and_grpc_requests_leave_their_timestamps_in_order(serve, repo, tmp_path):
    trace_file = str(tmp_path / "trace.json")
    s = grpc_util.start(serve, repo, f"--trace-config=triton,file={trace_file}",
                        "--trace-config=level=TIMESTAMPS", "--trace-config=rate=1")
    assert "trace" in json.loads(s.request("GET", "/v2")[1])["extensions"]
    infer(s.client(), request_id="h1")
    with s.grpc_client() as c:
        r = c.infer("simple", grpc_util.ones_fp32(), request_id="g1")
        np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), np.full((1, 4), 2, np.float32))
    assert s.stop() == 0
    got = traces(trace_file)
    assert len(got) == 2, got
    by_request = {t["request_id"]: t for t in got.values()}
    for rid, frontend in (("h1", HTTP), ("g1", GRPC)):
        t = by_request[rid]
        assert (t["model"], t["version"], t["parent_id"]) == ("simple", 1, None)
        order = frontend[:2] + CORE + frontend[2:]
        assert sorted(t["stamps"]) == sorted(order), t
        times = [t["stamps"][n] for n in order]
        # Stamps from one steady clock, in the order the request went through the server.
        assert times == sorted(times), list(zip(order, times))


def test_rate_count_and_log_frequency(serve, repo, tmp_path):
    """rate 2: every second request; count 3: three traces, then none; log_frequency 2: files
    of two traces each, numbered."""
    trace_file = str(tmp_path / "t.json")
    s = serve(repo, "--trace-config", f"triton,file={trace_file}", "--trace-config",
              "level=TIMESTAMPS", "--trace-config", "rate=2", "--trace-config", "count=3",
              "--trace-config", "triton,log-frequency=2")
    client = s.client()
    for k in range(10):
        infer(client, request_id=str(k))
    assert settings(s)["trace_count"] == "0"
    assert s.stop() == 0
    assert sorted(f for f in os.listdir(tmp_path) if f.startswith("t.json")) == [
        "t.json.0", "t.json.1"]
    first, second = traces(trace_file + ".0"), traces(trace_file + ".1")
    assert len(first) == 2 and len(second) == 1
    assert sorted(t["request_id"] for t in [*first.values(), *second.values()]) == ["1", "3", "5"]


def test_settings_change_at_run_time_per_model_and_clear(serve, repo, tmp_path):
    trace_file = str(tmp_path / "trace.json")
    s = serve(repo, f"--trace-config=triton,file={trace_file}")
    start = settings(s)
    assert start == {"trace_level": ["OFF"], "trace_rate": "1000", "trace_count": "-1",
                     "log_frequency": "0", "trace_file": trace_file, "trace_mode": "triton"}
    client = s.client()
    infer(client, request_id="untraced")
    # A model's override: only its requests are traced.
    status, body = post(s, {"trace_level": ["TIMESTAMPS"], "trace_rate": "1"}, model="other")
    assert status == 200 and body == dict(start, trace_level=["TIMESTAMPS"], trace_rate="1")
    assert settings(s) == start and settings(s, "simple") == start
    infer(client, "simple", request_id="simple-off")
    infer(client, "other", request_id="other-on")
    # Cleared (null): the model follows the server's settings again.
    status, body = post(s, {"trace_level": None, "trace_rate": None}, model="other")
    assert status == 200 and body == start
    infer(client, "other", request_id="other-off")
    # The server's settings, then back to their start values.
    assert post(s, {"trace_level": ["TIMESTAMPS"], "trace_rate": "1"})[0] == 200
    infer(client, "simple", request_id="simple-on")
    assert post(s, {"trace_level": None, "trace_rate": None}) == (200, start)
    infer(client, "simple", request_id="simple-off-again")
    assert s.stop() == 0
    assert sorted(t["request_id"] for t in traces(trace_file).values()) == ["other-on", "simple-on"]


@pytest.mark.parametrize("changes, message", [
    ({"trace_rate": "abc"}, "Unable to parse 'trace_rate', got: abc"),
    ({"trace_rate": "0"}, "sample rate must be non-zero"),
    ({"trace_count": "-2"}, "Unable to parse 'trace_count'. Expecting value >= -1, got:-2"),
    ({"log_frequency": "-1"}, "Unable to parse 'log_frequency'"),
    ({"trace_level": ["OFF", "TIMESTAMPS"]}, "Expect only one trace level 'OFF' is specified"),
    ({"trace_level": ["FOO"]}, "unknown level 'FOO'"),
    ({"trace_level": ["TENSORS"]}, "only TIMESTAMPS is traced"),
    ({"trace_file": "/tmp/elsewhere.json"},
     "trace file location can not be updated through network protocol"),
    ({"trace_mode": "opentelemetry"}, "trace mode can not be updated"),
    ({"trace_rat": "5"}, "unknown trace setting 'trace_rat'; did you mean 'trace_rate'?"),
    ({"trace_rate": 5}, "must be a string, a list of strings or null"),
    ({"trace_rate": ["1", "2"]}, "takes one value, got 2"),
    # All or nothing: the valid rate is not applied beside the refused count.
    ({"trace_rate": "7", "trace_count": "x"}, "Unable to parse 'trace_count'"),
])
def test_bad_settings_are_refused_and_change_nothing(serve, repo, tmp_path, changes, message):
    s = serve(repo, f"--trace-config=triton,file={tmp_path / 'trace.json'}")
    before = settings(s)
    status, body = post(s, changes)
    assert status in (400, 501) and message in body["error"], body
    assert settings(s) == before


def test_unknown_model_and_no_trace_file(serve, repo):
    s = serve(repo)
    status, body, _ = s.request("GET", "/v2/models/nope/trace/setting")
    assert status == 400 and json.loads(body) == {"error": "Request for unknown model : nope"}
    status, body = post(s, {"trace_level": ["TIMESTAMPS"]})
    assert status == 400 and "no trace file" in body["error"]
    assert settings(s)["trace_level"] == ["OFF"]


def test_grpc_trace_settings(serve, repo, tmp_path):
    s = grpc_util.start(serve, repo, f"--trace-config=triton,file={tmp_path / 'trace.json'}")
    with s.grpc_client() as c:
        got = c.get_trace_settings(as_json=True)["settings"]
        assert got["trace_level"] == {"value": ["OFF"]} and got["trace_rate"] == {"value": ["1000"]}
        got = c.update_trace_settings(model_name="simple", settings={"trace_rate": "3"},
                                      as_json=True)["settings"]
        assert got["trace_rate"] == {"value": ["3"]}
        assert c.get_trace_settings(model_name="simple", as_json=True)["settings"][
            "trace_rate"] == {"value": ["3"]}
        assert c.get_trace_settings(as_json=True)["settings"]["trace_rate"] == {"value": ["1000"]}
        # tritonclient sends None as a setting with no value: the override is cleared.
        got = c.update_trace_settings(model_name="simple", settings={"trace_rate": None},
                                      as_json=True)["settings"]
        assert got["trace_rate"] == {"value": ["1000"]}
        with pytest.raises(InferenceServerException, match="sample rate must be non-zero"):
            c.update_trace_settings(settings={"trace_rate": "0"})
        with pytest.raises(InferenceServerException, match="Request for unknown model : nope"):
            c.get_trace_settings(model_name="nope")


def test_an_ensemble_traces_its_steps_as_children(serve, tmp_path):
    repo = str(tmp_path / "repo")
    triton_models.kiln_repo(repo)
    ensembles.write(repo, ensembles.CHAIN)
    trace_file = str(tmp_path / "trace.json")
    s = serve(repo, f"--trace-config=triton,file={trace_file}", "--trace-config=level=TIMESTAMPS",
              "--trace-config=rate=1")
    a = np.ones((1, 4), np.float32)
    ins = [httpclient.InferInput(n, [1, 4], "FP32") for n in ("IN0", "IN1")]
    for i in ins:
        i.set_data_from_numpy(a)
    r = s.client().infer("ens_chain", ins, request_id="e1")
    np.testing.assert_array_equal(r.as_numpy("OUT0"), 2 * a)
    assert s.stop() == 0
    got = traces(trace_file)
    parent = [k for k, t in got.items() if t["model"] == "ens_chain"]
    assert len(parent) == 1, got
    children = [t for t in got.values() if t["parent_id"] == parent[0]]
    assert [t["model"] for t in children] == ["add_sub", "add_sub"], got
    p = got[parent[0]]["stamps"]
    for c in children:
        assert p["REQUEST_START"] <= c["stamps"]["REQUEST_START"] <= c["stamps"]["REQUEST_END"]
        assert c["stamps"]["REQUEST_END"] <= p["REQUEST_END"]


def test_bad_trace_flags_stop_the_server_with_a_clear_error(serve, repo):
    for args, message in ((["--trace-config=opentelemetry,url=localhost"],
                           "opentelemetry trace mode is not supported"),
                          (["--trace-config=level=TIMESTAMPS"], "needs a trace file"),
                          (["--trace-config=rat=3"], "did you mean 'rate'?")):
        s = serve(repo, *args, wait=False)
        assert s.proc.wait(60) != 0
        assert message in s.output(), s.output()


def test_http_tritonclient_trace_settings(serve, repo, tmp_path):
    s = serve(repo, f"--trace-config=triton,file={tmp_path / 'trace.json'}")
    c = s.client()
    assert c.get_trace_settings()["trace_rate"] == "1000"
    got = c.update_trace_settings(model_name="simple", settings={"trace_rate": "9",
                                                                 "trace_level": ["TIMESTAMPS"]})
    assert got["trace_rate"] == "9" and got["trace_level"] == ["TIMESTAMPS"]
    assert c.get_trace_settings(model_name="simple")["trace_rate"] == "9"
    assert c.get_trace_settings()["trace_level"] == ["OFF"]
    got = c.update_trace_settings(model_name="simple", settings={"trace_rate": None,
                                                                 "trace_level": None})
    assert got["trace_rate"] == "1000" and got["trace_level"] == ["OFF"]
    with pytest.raises(InferenceServerException, match="Expect only one trace level 'OFF'"):
        c.update_trace_settings(settings={"trace_level": ["OFF", "TIMESTAMPS"]})
