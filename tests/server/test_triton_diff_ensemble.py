"""Differential tests, ensembles: the same ensembles (tests/server/ensembles.py, one config.pbtxt
for both servers) over the same composing models (Python backend on Triton 2.51, ONNX on Kiln),
the same requests, compared on status and body over HTTP and gRPC, model metadata and config,
statistics and metrics, the load errors of broken configs, and the repository index as composing
models unload. Kept differences, each with its reason in docs/SERVER.md, are normalized here and
nowhere else. Skipped with the reason when tritonserver cannot be installed or started."""
import json
import os
import re
import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

import ensembles
import triton_pair
from triton_pair import error_text, errors_of, http_answer, same

LOADED = ["ens_chain", "ens_dag", "ens_bytes", "ens_v1", "ens_v2", "ens_vlatest", "ens_mixed",
          "ens_loose", "ens_outer"]
ARGS = ("--model-control-mode=explicit", *[f"--load-model={m}" for m in LOADED])


def _repo(repo):
    for config in ensembles.WORKING:
        ensembles.write(repo, config)
    ensembles.write(repo, ensembles.bad_configs("ens_missing")["missing model"][0])
    os.makedirs(os.path.join(repo, "ens_bad", "1"))  # loaded through the API with a config


@pytest.fixture(scope="module")
def pair(serve, tmp_path_factory):
    p, triton = triton_pair.start_pair(serve, tmp_path_factory, ARGS, ARGS, extra=_repo)
    yield p
    triton.stop()


def _answer(server, method, path, body=None):
    """The HTTP answer, with the kept differences of an ensemble's answer taken out: Triton's
    ensembles return the sequence parameters of their Python steps' responses (sequence_id 0,
    twice over for two steps) and their outputs in hash order, and Triton labels an error that
    comes back from a step `text/plain` though its body is the usual JSON."""
    a = http_answer(server, method, path, body)
    b = a["body"]
    if isinstance(b, dict) and "outputs" in b:
        b.pop("parameters", None)
        b["outputs"] = sorted(b["outputs"], key=lambda o: o["name"])
    if isinstance(b, dict) and "error" in b and a["content_type"] == "text/plain":
        a["content_type"] = "application/json"
    return a


def _fp32(names=("IN0", "IN1"), rows=1, cols=4, extra=None):
    req = {"inputs": [{"name": n, "shape": [rows, cols], "datatype": "FP32",
                       "data": [float(i + k) for i in range(rows * cols)]}
                      for k, n in enumerate(names)]}
    req.update(extra or {})
    return req


PROBES = [
    ("chain", "ens_chain", _fp32()),
    ("chain, 3 rows and an id", "ens_chain", _fp32(rows=3, extra={"id": "r1"})),
    ("chain, one output", "ens_chain", _fp32(extra={"outputs": [{"name": "OUT1"}]})),
    ("dag", "ens_dag", _fp32(rows=2)),
    ("dag pruned to OUT1", "ens_dag", _fp32(rows=2, extra={"outputs": [{"name": "OUT1"}]})),
    ("bytes", "ens_bytes", {"inputs": [
        {"name": n, "shape": [1, 4], "datatype": "BYTES", "data": ["a", "", "c c", "d"]}
        for n in ("IN0", "IN1")]}),
    ("version 1", "ens_v1", {"inputs": [{"name": "IN0", "shape": [4], "datatype": "FP32",
                                         "data": [1, 2, 3, 4]}]}),
    ("version 2", "ens_v2", {"inputs": [{"name": "IN0", "shape": [4], "datatype": "FP32",
                                         "data": [1, 2, 3, 4]}]}),
    ("latest version", "ens_vlatest", {"inputs": [{"name": "IN0", "shape": [4], "datatype": "FP32",
                                                   "data": [1, 2, 3, 4]}]}),
    ("batching ensemble, step without batching", "ens_mixed", {"inputs": [
        {"name": "IN0", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}]}),
    ("nested", "ens_outer", _fp32(rows=2)),
    ("a step refuses its input", "ens_loose", {"id": "r9", "inputs": [
        {"name": "IN0", "shape": [1, 3], "datatype": "FP32", "data": [1, 2, 3]},
        {"name": "IN1", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}]}),
    ("missing input", "ens_dag", _fp32(names=("IN0",))),
    ("unknown output", "ens_dag", _fp32(extra={"outputs": [{"name": "NOPE"}]})),
    ("wrong datatype", "ens_chain", {"inputs": [
        {"name": "IN0", "shape": [1, 4], "datatype": "INT32", "data": [1, 2, 3, 4]},
        {"name": "IN1", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}]}),
    ("batch above max", "ens_chain", _fp32(rows=9)),
    ("ensemble refused at load", "ens_missing", _fp32()),
]


@pytest.mark.parametrize("check,model,body", PROBES, ids=[p[0] for p in PROBES])
def test_same_answer(pair, check, model, body):
    path = f"/v2/models/{model}/infer"
    same(f"ensemble {check}", *errors_of(_answer(pair.kiln, "POST", path, body),
                                         _answer(pair.triton, "POST", path, body)))


def _grpc(server, model, inputs, outputs=None):
    with grpcclient.InferenceServerClient(server.grpc_url) as c:
        try:
            r = c.infer(model, inputs, outputs=outputs, request_id="g1")
        except InferenceServerException as e:
            return {"status": e.status(), "message": e.message()}
        resp = r.get_response(as_json=True)
        return {"model": resp["model_name"], "version": resp["model_version"], "id": resp["id"],
                "outputs": sorted((o["name"], o["datatype"], o["shape"],
                                   r.as_numpy(o["name"]).tolist()) for o in resp["outputs"])}


def _grpc_in(name, x, datatype="FP32"):
    i = grpcclient.InferInput(name, list(x.shape), datatype)
    i.set_data_from_numpy(x)
    return i


def test_grpc_answers(pair):
    a = np.arange(8, dtype=np.float32).reshape(2, 4)
    s = np.array([[b"x", b"", b"\x00y", b"zz"]], dtype=np.object_)
    cases = [
        ("chain", "ens_chain", [_grpc_in("IN0", a), _grpc_in("IN1", a + 1)], None),
        ("dag, OUT0 only", "ens_dag", [_grpc_in("IN0", a), _grpc_in("IN1", a)],
         [grpcclient.InferRequestedOutput("OUT0")]),
        ("bytes", "ens_bytes", [_grpc_in("IN0", s, "BYTES"), _grpc_in("IN1", s, "BYTES")], None),
        ("a step refuses its input", "ens_loose",
         [_grpc_in("IN0", np.ones((1, 3), np.float32)), _grpc_in("IN1", np.ones((1, 4), np.float32))],
         None),
    ]
    for check, model, inputs, outputs in cases:
        k, t = _grpc(pair.kiln, model, inputs, outputs), _grpc(pair.triton, model, inputs, outputs)
        if "message" in k and "message" in t:
            k["message"], t["message"] = error_text(k["message"], t["message"])
        same(f"grpc ensemble {check}", k, t)


@pytest.mark.parametrize("model", LOADED)
def test_metadata_and_config(pair, model):
    """All of it, platform included: an ensemble's config is the same file on both servers."""
    for what in ("", "/config", "/versions/1", "/ready"):
        path = f"/v2/models/{model}{what}"
        same(f"ensemble {path}", http_answer(pair.kiln, "GET", path),
             http_answer(pair.triton, "GET", path))
    configs = []
    for _, server in pair.both():
        with grpcclient.InferenceServerClient(server.grpc_url) as c:
            configs.append(c.get_model_config(model, as_json=True)["config"])
    same(f"grpc ensemble config {model}", configs[0], configs[1])


def _zero_times(stats):
    for m in stats.get("model_stats", []):
        m["last_inference"] = 1 if m["last_inference"] else 0
        for d in m["inference_stats"].values():
            d["ns"] = 0
        for b in m["batch_stats"]:
            for d in b.values():
                if isinstance(d, dict):
                    d["ns"] = 0
    return stats


def _halve_ensemble_failures(stats):
    """Triton 2.51 counts each failed ensemble request twice (once where the error is answered,
    once when the request is released); Kiln once (docs/SERVER.md)."""
    for m in stats.get("model_stats", []):
        if m["name"].startswith("ens_"):
            m["inference_stats"]["fail"]["count"] //= 2
    return stats


def test_statistics(pair):
    """After the same requests (the probes above, and these): the same counts for the ensembles
    and the composing models, durations zeroed."""
    for _, s in pair.both():
        for rows in (1, 2, 2):
            assert http_answer(s, "POST", "/v2/models/ens_chain/infer", _fp32(rows=rows))["status"] == 200
    for model in ["ens_chain", "ens_dag", "ens_loose", "ens_outer", "add_sub", "add_version",
                  "identity_bytes"]:
        path = f"/v2/models/{model}/stats"
        k, t = http_answer(pair.kiln, "GET", path), http_answer(pair.triton, "GET", path)
        same(f"statistics {model}", (k["status"], _zero_times(k["body"])),
             (t["status"], _halve_ensemble_failures(_zero_times(t["body"]))))


def _series(server, model):
    a = http_answer(server, "GET", "/metrics", port=server.metrics_port)
    out = {}
    for line in a["body"].splitlines():
        m = re.match(r'^(nv_inference_(?:request_success|request_failure|count|exec_count|'
                     r'pending_request_count))\{([^}]*)\} (\S+)$', line)
        if m and f'model="{model}"' in m.group(2):
            out[(m.group(1), m.group(2))] = float(m.group(3))
    return out


@pytest.mark.parametrize("model", ["ens_chain", "ens_loose", "ens_dag"])
def test_metrics(pair, model):
    k, t = _series(pair.kiln, model), _series(pair.triton, model)
    for key in t:
        if key[0] == "nv_inference_request_failure":
            t[key] //= 2  # counted twice by Triton, as in the statistics
    same(f"ensemble metrics {model}", k, t)


def _triton_load_reason(triton, answer, model):
    """What Triton says about a failed load: the load answer's text less its "load failed for
    model 'm': " and trailing newline, or, where it answers only "failed to poll from model
    repository" (a config refused on its own), the reason its log gives."""
    body = answer["body"]["error"]
    if "failed to poll from model repository" in body:
        lines = re.findall(rf"Poll failed for model directory '{model}': (.*)\"$",
                           triton.output(), re.M)
        assert lines, triton.output()[-2000:]
        return 400, lines[-1]
    prefix = f"load failed for model '{model}': "
    assert body.startswith(prefix), body
    return answer["status"], body[len(prefix):].rstrip("\n")


@pytest.mark.parametrize("case", list(ensembles.bad_configs()))
def test_bad_config_load_errors(pair, case):
    config, _ = ensembles.bad_configs()[case]
    body = ensembles.load_body(config)
    k = http_answer(pair.kiln, "POST", "/v2/repository/models/ens_bad/load", body)
    t = http_answer(pair.triton, "POST", "/v2/repository/models/ens_bad/load", body)
    t_status, t_reason = _triton_load_reason(pair.triton, t, "ens_bad")
    k_reason, t_reason = error_text(k["body"]["error"], t_reason)
    same(f"load error, {case}", (k["status"], k_reason), (t_status, t_reason))
    same(f"index after a refused load, {case}",
         [e for e in http_answer(pair.kiln, "POST", "/v2/repository/index")["body"]
          if e["name"] == "ens_bad"],
         [e for e in http_answer(pair.triton, "POST", "/v2/repository/index")["body"]
          if e["name"] == "ens_bad"])


def test_missing_composing_model(pair):
    k = http_answer(pair.kiln, "POST", "/v2/repository/models/ens_missing/load")
    t = http_answer(pair.triton, "POST", "/v2/repository/models/ens_missing/load")
    same("load of an ensemble missing a model", (k["status"], k["body"]["error"]),
         _triton_load_reason(pair.triton, t, "ens_missing"))
    for path in ("/v2/models/ens_missing", "/v2/models/ens_missing/ready",
                 "/v2/models/ens_missing/config", "/v2/models/ens_missing/stats"):
        same(f"after a refused load {path}", http_answer(pair.kiln, "GET", path),
             http_answer(pair.triton, "GET", path))


def _settled_index(server):
    deadline = time.time() + 60
    while True:
        index = http_answer(server, "POST", "/v2/repository/index")["body"]
        if not any(m.get("state") in ("LOADING", "UNLOADING") for m in index) or \
                time.time() > deadline:
            return index


def test_unloading_a_composing_model_unloads_its_ensembles(pair):
    """Last: it changes what both servers serve."""
    for _, s in pair.both():
        assert http_answer(s, "POST", "/v2/repository/models/add_sub/unload")["status"] == 200
    same("index after unloading add_sub", _settled_index(pair.kiln), _settled_index(pair.triton))
    same("infer after unloading add_sub",
         *errors_of(_answer(pair.kiln, "POST", "/v2/models/ens_outer/infer", _fp32()),
                    _answer(pair.triton, "POST", "/v2/models/ens_outer/infer", _fp32())))
    for _, s in pair.both():
        assert http_answer(s, "POST", "/v2/repository/models/ens_outer/load")["status"] == 200
    same("index after loading ens_outer again", _settled_index(pair.kiln),
         _settled_index(pair.triton))
    same("infer after loading ens_outer again",
         _answer(pair.kiln, "POST", "/v2/models/ens_outer/infer", _fp32()),
         _answer(pair.triton, "POST", "/v2/models/ens_outer/infer", _fp32()))
