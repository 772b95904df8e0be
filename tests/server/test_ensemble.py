"""Ensembles (platform "ensemble") on a real kiln-serve with the real tritonclient, HTTP and gRPC:
chains, a DAG whose independent steps run side by side, BYTES between steps, versions, nesting,
a failing step, the request's own checks, statistics and metrics as Triton counts them, the
deadline, the request memory budget, configs refused at load with their messages, and how the
repository loads and unloads ensembles with their composing models. The differential tests
(test_triton_diff_ensemble.py) compare the same ensembles with the real Triton."""
import json
import os
import threading
import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

import ensembles
import grpc_util
import models
import triton_models
from ensembles import ADD_SUB_IN, FP32, ensemble

LOADED = ["ens_chain", "ens_dag", "ens_bytes", "ens_v1", "ens_v2", "ens_vlatest", "ens_mixed",
          "ens_loose", "ens_outer", "ens_stats", "ens_par", "ens_slow", "ens_merge"]
SLOW_ROWS = 1024
NEST = 9  # nest_1 runs nest_2 ... nest_9 runs add_sub: nest_1 nests 9 deep, one too many


def _slow_models(repo):
    """slow_a / slow_b: [1, R, 256] in and out, tens of milliseconds a request."""
    for name in ("slow_a", "slow_b"):
        models.slow(repo, name, 'backend: "onnxruntime"\nmax_batch_size: 1\n', layers=16, rows=None)
    slow_io = (("IN", FP32, [-1, 256]),)
    ensembles.write(repo, ensemble("ens_par", [
        ("slow_a", -1, {"INPUT0": "IN"}, {"OUTPUT0": "A"}),
        ("slow_b", -1, {"INPUT0": "IN"}, {"OUTPUT0": "B"})],
        inputs=slow_io, outputs=(("A", FP32, [-1, 256]), ("B", FP32, [-1, 256])), max_batch=1))
    ensembles.write(repo, ensemble("ens_slow", [("slow_a", -1, {"INPUT0": "IN"}, {"OUTPUT0": "A"})],
                                   inputs=slow_io, outputs=(("A", FP32, [-1, 256]),), max_batch=1))


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    repo = str(tmp_path_factory.mktemp("ensembles"))
    triton_models.kiln_repo(repo)
    for config in ensembles.WORKING:
        ensembles.write(repo, config)
    # add_sub_stats serves ens_stats alone, so its statistics are the ensemble's steps' only.
    models.add_sub(repo, "add_sub_stats", "FP32", config=triton_models.MODELS["add_sub"][0].replace(
        '"add_sub"', '"add_sub_stats"').replace("name:", 'backend: "onnxruntime"\nname:', 1))
    # add_sub behind a dynamic batcher with a long delay: concurrent ensembles' steps merge.
    models.add_sub(repo, "add_sub_merge", "FP32", config=triton_models.MODELS["add_sub"][0].replace(
        '"add_sub"', '"add_sub_merge"').replace("name:", 'backend: "onnxruntime"\nname:', 1) +
        "dynamic_batching { max_queue_delay_microseconds: 200000 }\n")
    ensembles.write(repo, ensemble("ens_merge", [
        ("add_sub_merge", -1, ADD_SUB_IN, {"OUTPUT0": "s", "OUTPUT1": "d"}),
        ("add_sub_merge", -1, {"INPUT0": "s", "INPUT1": "d"}, {"OUTPUT0": "OUT0", "OUTPUT1": "OUT1"})]))
    ensembles.write(repo, ensemble("ens_stats", [
        ("add_sub_stats", -1, ADD_SUB_IN, {"OUTPUT0": "s", "OUTPUT1": "d"}),
        ("add_sub_stats", -1, {"INPUT0": "s", "INPUT1": "d"}, {"OUTPUT0": "OUT0", "OUTPUT1": "OUT1"})]))
    _slow_models(repo)
    for k in range(1, NEST + 1):
        inner = f"nest_{k + 1}" if k < NEST else "add_sub"
        inner_in = {"IN0": "IN0", "IN1": "IN1"} if k < NEST else ADD_SUB_IN
        inner_out = ({"OUT0": "OUT0", "OUT1": "OUT1"} if k < NEST
                     else {"OUTPUT0": "OUT0", "OUTPUT1": "OUT1"})
        ensembles.write(repo, ensemble(f"nest_{k}", [(inner, -1, inner_in, inner_out)]))
    ensembles.write(repo, ensemble("cyc_a", [("cyc_b", -1, {"IN0": "IN0", "IN1": "IN1"},
                                              {"OUT0": "OUT0", "OUT1": "OUT1"})]))
    ensembles.write(repo, ensemble("cyc_b", [("cyc_a", -1, {"IN0": "IN0", "IN1": "IN1"},
                                              {"OUT0": "OUT0", "OUT1": "OUT1"})]))
    os.makedirs(os.path.join(repo, "ens_bad", "1"))  # loaded through the API with a config
    return repo


@pytest.fixture(scope="module")
def server(serve, repo):
    return grpc_util.start(serve, repo, "--model-control-mode=explicit",
                           *[f"--load-model={m}" for m in LOADED])


def fp32_inputs(mod, a, b, names=("IN0", "IN1")):
    out = []
    for name, x in zip(names, (a, b)):
        i = mod.InferInput(name, list(x.shape), "FP32")
        i.set_data_from_numpy(x)
        out.append(i)
    return out


def rows(n, offset=0.0):
    a = np.arange(4 * n, dtype=np.float32).reshape(n, 4) + offset
    return a, np.full((n, 4), 1.5, np.float32)


def stats(server, model, version=""):
    s = server.client().get_inference_statistics(model, version)["model_stats"]
    return s[0] if len(s) == 1 else s


def http_json(server, method, path, body=None):
    status, raw, _ = server.request(method, path, body=body)
    return status, json.loads(raw) if raw else None


def metric(server, family, model):
    _, body, _ = server.request("GET", "/metrics", port=server.metrics_port)
    prefix = f'{family}{{model="{model}",version="1"}} '
    line = [l for l in body.decode().splitlines() if l.startswith(prefix)]
    return float(line[0].split()[-1]) if line else None


# ---- running ---------------------------------------------------------------------------------

def test_chain_over_http(server):
    a, b = rows(3)
    r = server.client().infer("ens_chain", fp32_inputs(httpclient, a, b))
    # step 0: sum = a + b, diff = a - b; step 1: sum + diff = 2a, sum - diff = 2b
    np.testing.assert_array_equal(r.as_numpy("OUT0"), 2 * a)
    np.testing.assert_array_equal(r.as_numpy("OUT1"), 2 * b)
    resp = r.get_response()
    assert resp["model_name"] == "ens_chain" and resp["model_version"] == "1"
    assert [o["name"] for o in resp["outputs"]] == ["OUT0", "OUT1"]


def test_chain_over_grpc(server):
    a, b = rows(2, offset=-3)
    with server.grpc_client() as c:
        r = c.infer("ens_chain", fp32_inputs(grpcclient, a, b),
                    outputs=[grpcclient.InferRequestedOutput("OUT1")], request_id="g1")
        assert r.get_response().id == "g1"
        np.testing.assert_array_equal(r.as_numpy("OUT1"), 2 * b)
        assert r.as_numpy("OUT0") is None


def test_dag_runs_every_step_once_and_only_the_steps_an_output_needs(server):
    a, b = rows(2)
    before = stats(server, "add_sub")["execution_count"]
    r = server.client().infer("ens_dag", fp32_inputs(httpclient, a, b))
    np.testing.assert_array_equal(r.as_numpy("OUT0"), 2 * a)    # s + d
    np.testing.assert_array_equal(r.as_numpy("OUT1"), -2 * b)   # d - s
    assert stats(server, "add_sub")["execution_count"] == before + 3
    # Only OUT1: the step writing OUT0 is not run (Triton prunes the same way).
    r = server.client().infer("ens_dag", fp32_inputs(httpclient, a, b),
                              outputs=[httpclient.InferRequestedOutput("OUT1")])
    np.testing.assert_array_equal(r.as_numpy("OUT1"), -2 * b)
    assert stats(server, "add_sub")["execution_count"] == before + 5


def test_independent_steps_run_side_by_side(server):
    """ens_par's two steps read only the ensemble's input: both are queued or running at once,
    before either has finished."""
    x = np.random.rand(1, SLOW_ROWS, 256).astype(np.float32)
    inp = httpclient.InferInput("IN", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    result = {}
    t = threading.Thread(target=lambda: result.update(r=server.client().infer("ens_par", [inp])))
    t.start()
    seen_both = False
    deadline = time.time() + 120
    while t.is_alive() and time.time() < deadline:
        if server.pending("slow_a") >= 1 and server.pending("slow_b") >= 1:
            seen_both = True
            break
        time.sleep(0.001)
    t.join(120)
    assert seen_both, "the two independent steps never ran at the same time"
    np.testing.assert_allclose(result["r"].as_numpy("A"), x, rtol=1e-5)
    np.testing.assert_allclose(result["r"].as_numpy("B"), x, rtol=1e-5)


def test_concurrent_ensembles_steps_batch_together_in_the_composing_model(server):
    """Steps go through the composing model's dynamic batcher as any request: the steps of
    concurrent ensemble requests merge; each ensemble still gets its own rows back."""
    n = 16
    clients = [server.client() for _ in range(n)]
    errors = []

    def one(i):
        try:
            a, b = rows(1 + i % 3, offset=i)
            r = clients[i].infer("ens_merge", fp32_inputs(httpclient, a, b))
            np.testing.assert_array_equal(r.as_numpy("OUT0"), 2 * a)
            np.testing.assert_array_equal(r.as_numpy("OUT1"), 2 * b)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    ens, comp = stats(server, "ens_merge"), stats(server, "add_sub_merge")
    total = sum(1 + i % 3 for i in range(n))
    assert (ens["inference_count"], ens["execution_count"]) == (total, n)
    assert comp["inference_count"] == 2 * total
    assert comp["inference_stats"]["success"]["count"] == 2 * n
    assert comp["execution_count"] < 2 * n
    assert max(b["batch_size"] for b in comp["batch_stats"]) > 3


def _bytes_inputs(mod, a, b):
    out = []
    for name, x in (("IN0", a), ("IN1", b)):
        i = mod.InferInput(name, list(x.shape), "BYTES")
        i.set_data_from_numpy(x)
        out.append(i)
    return out


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_bytes_pass_between_steps(server, protocol):
    a = np.array([[b"", b"a\x00b", "é".encode(), b"x" * 1000]], dtype=np.object_)
    b = np.array([[b"w", b"", b"\xff\xfe", b"z"]], dtype=np.object_)
    if protocol == "http":
        r = server.client().infer("ens_bytes", _bytes_inputs(httpclient, a, b))
    else:
        with server.grpc_client() as c:
            r = c.infer("ens_bytes", _bytes_inputs(grpcclient, a, b))
    # step 0 passes (IN0, IN1) through as (a, b); step 1 reads them crossed.
    assert r.as_numpy("OUT0").tolist() == b.tolist()
    assert r.as_numpy("OUT1").tolist() == a.tolist()


def test_versions(server):
    x = np.arange(4, dtype=np.float32)
    before = {v: stats(server, "add_version", v)["execution_count"] for v in ("1", "2")}
    for model, plus in (("ens_v1", 1), ("ens_v2", 2), ("ens_vlatest", 2)):
        inp = httpclient.InferInput("IN0", [4], "FP32")
        inp.set_data_from_numpy(x)
        np.testing.assert_array_equal(server.client().infer(model, [inp]).as_numpy("OUT0"), x + plus)
    assert stats(server, "add_version", "1")["execution_count"] == before["1"] + 1
    assert stats(server, "add_version", "2")["execution_count"] == before["2"] + 2


def test_batching_ensemble_over_a_model_that_does_not_batch(server):
    x = np.arange(4, dtype=np.float32).reshape(1, 4)
    inp = httpclient.InferInput("IN0", [1, 4], "FP32")
    inp.set_data_from_numpy(x)
    out = server.client().infer("ens_mixed", [inp]).as_numpy("OUT0")
    assert out.shape == (1, 4)
    np.testing.assert_array_equal(out, x + 1)


def test_nested_ensemble(server):
    a, b = rows(1)
    before = (stats(server, "ens_outer")["inference_count"],
              stats(server, "ens_chain")["inference_count"])
    r = server.client().infer("ens_outer", fp32_inputs(httpclient, a, b))
    np.testing.assert_array_equal(r.as_numpy("OUT0"), 2 * a)
    after = (stats(server, "ens_outer")["inference_count"],
             stats(server, "ens_chain")["inference_count"])
    assert after == (before[0] + 1, before[1] + 1)


# ---- errors ----------------------------------------------------------------------------------

LOOSE_ERROR = ("in ensemble 'ens_loose', [request id: {id}] unexpected shape for input 'INPUT0' for "
               "model 'add_sub'. Expected [-1,4], got [1,3]. NOTE: Setting a non-zero "
               "max_batch_size in the model config requires a batch dimension to be prepended to "
               "each input shape. If you want to specify the full shape including the batch dim in "
               "your input dims config, try setting max_batch_size to zero. See the model "
               "configuration docs for more info on max_batch_size. (step 0: model 'add_sub' "
               "version 1)")


def test_a_failing_step_fails_the_ensemble_naming_the_step(server):
    a = np.ones((1, 3), np.float32)
    b = np.ones((1, 4), np.float32)
    before = stats(server, "ens_loose")["inference_stats"]["fail"]["count"]
    with pytest.raises(InferenceServerException) as e:
        server.client().infer("ens_loose", fp32_inputs(httpclient, a, b), request_id="r7")
    assert e.value.status() == "400"
    assert e.value.message() == LOOSE_ERROR.format(id="r7")
    with server.grpc_client() as c, pytest.raises(InferenceServerException) as e:
        c.infer("ens_loose", fp32_inputs(grpcclient, a, b))
    assert e.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert e.value.message() == LOOSE_ERROR.format(id="<id_unknown>")
    s = stats(server, "ens_loose")
    assert s["inference_stats"]["fail"]["count"] == before + 2   # once each, not twice as Triton
    _, body, _ = server.request("GET", "/metrics", port=server.metrics_port)
    assert f'nv_inference_request_failure{{model="ens_loose",reason="OTHER",version="1"}} {before + 2}' \
        in body.decode()


def test_the_ensemble_checks_its_own_request_first(server):
    a, b = rows(1)
    before = stats(server, "ens_dag")
    status, body = http_json(server, "POST", "/v2/models/ens_dag/infer", json.dumps(
        {"inputs": [{"name": "IN0", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}]}))
    assert status == 400
    assert body["error"] == ("[request id: <id_unknown>] expected 2 inputs but got 1 inputs for "
                             "model 'ens_dag'. Got input(s) ['IN0'], but missing required input(s) "
                             "['IN1']. Please provide all required input(s).")
    with pytest.raises(InferenceServerException, match="unexpected inference output 'NOPE' for "
                                                       "model 'ens_dag'"):
        server.client().infer("ens_dag", fp32_inputs(httpclient, a, b),
                              outputs=[httpclient.InferRequestedOutput("NOPE")])
    after = stats(server, "ens_dag")
    # Refused before any step: no statistic counts it, as for any model.
    assert after["inference_stats"]["fail"] == before["inference_stats"]["fail"]
    assert after["execution_count"] == before["execution_count"]


def test_the_request_deadline_covers_the_steps(server):
    x = np.random.rand(1, SLOW_ROWS, 256).astype(np.float32)
    inp = httpclient.InferInput("IN", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    before = stats(server, "ens_slow")["inference_stats"]["fail"]["count"]
    with pytest.raises(InferenceServerException) as e:
        server.client().infer("ens_slow", [inp], timeout=1000)  # microseconds
    assert e.value.status() == "503"
    assert e.value.message() == ("in ensemble 'ens_slow', Request timeout expired (step 0: model "
                                 "'slow_a' version 1)")
    assert stats(server, "ens_slow")["inference_stats"]["fail"]["count"] == before + 1
    # The instance is free again: a request without a timeout runs.
    r = server.client().infer("ens_slow", [inp])
    np.testing.assert_allclose(r.as_numpy("A"), x, rtol=1e-5)


# ---- statistics ------------------------------------------------------------------------------

def test_statistics_and_metrics_as_triton_counts_them(server):
    """The ensemble counts its requests, one execution each, and is charged its steps' compute
    time; the composing model counts the steps as its own requests."""
    for n in (2, 1, 1):
        a, b = rows(n)
        server.client().infer("ens_stats", fp32_inputs(httpclient, a, b))
    ens, comp = stats(server, "ens_stats"), stats(server, "add_sub_stats")
    assert (ens["inference_count"], ens["execution_count"]) == (4, 3)
    assert ens["inference_stats"]["success"]["count"] == 3
    assert ens["inference_stats"]["fail"]["count"] == 0
    assert sorted((b["batch_size"], b["compute_infer"]["count"]) for b in ens["batch_stats"]) == \
        [(1, 2), (2, 1)]
    assert (comp["inference_count"], comp["execution_count"]) == (8, 6)
    for phase in ("compute_input", "compute_infer", "compute_output"):
        assert ens["inference_stats"][phase]["count"] == 3
        assert ens["inference_stats"][phase]["ns"] == comp["inference_stats"][phase]["ns"]
    assert ens["inference_stats"]["queue"]["count"] == 3
    assert ens["inference_stats"]["success"]["ns"] >= ens["inference_stats"]["compute_infer"]["ns"]
    assert metric(server, "nv_inference_request_success", "ens_stats") == 3
    assert metric(server, "nv_inference_count", "ens_stats") == 4
    assert metric(server, "nv_inference_exec_count", "ens_stats") == 3
    assert metric(server, "nv_inference_exec_count", "add_sub_stats") == 6
    assert metric(server, "nv_inference_pending_request_count", "ens_stats") == 0
    with server.grpc_client() as c:
        g = c.get_inference_statistics("ens_stats", as_json=True)["model_stats"][0]
    assert (int(g["inference_count"]), int(g["execution_count"])) == (4, 3)


def test_config_and_metadata(server):
    status, meta = http_json(server, "GET", "/v2/models/ens_chain")
    assert status == 200
    assert meta == {"name": "ens_chain", "versions": ["1"], "platform": "ensemble",
                    "inputs": [{"name": n, "datatype": "FP32", "shape": [-1, 4]} for n in ("IN0", "IN1")],
                    "outputs": [{"name": n, "datatype": "FP32", "shape": [-1, 4]}
                                for n in ("OUT0", "OUT1")]}
    status, config = http_json(server, "GET", "/v2/models/ens_chain/config")
    assert status == 200
    assert config["platform"] == "ensemble" and config["backend"] == ""
    assert config["instance_group"] == [] and "dynamic_batching" not in config
    assert "optimization" not in config
    assert config["version_policy"] == {"latest": {"num_versions": 1}}
    assert config["model_transaction_policy"] == {"decoupled": False}
    steps = config["ensemble_scheduling"]["step"]
    assert [s["model_name"] for s in steps] == ["add_sub", "add_sub"]
    assert steps[1]["input_map"] == {"INPUT0": "sum", "INPUT1": "diff"}
    assert steps[1]["output_map"] == {"OUTPUT0": "OUT0", "OUTPUT1": "OUT1"}
    with server.grpc_client() as c:
        g = c.get_model_config("ens_chain").config
        assert g.platform == "ensemble" and len(g.ensemble_scheduling.step) == 2
        assert c.get_model_metadata("ens_chain").platform == "ensemble"


# ---- loading ---------------------------------------------------------------------------------

def _load(server, model, config=None):
    body = ensembles.load_body(config) if config is not None else None
    return http_json(server, "POST", f"/v2/repository/models/{model}/load", body)


def _index_entry(server, model):
    _, index = http_json(server, "POST", "/v2/repository/index", "{}")
    return [e for e in index if e["name"] == model]


@pytest.mark.parametrize("case", list(ensembles.bad_configs()))
def test_a_bad_config_is_refused_at_load_with_its_message(server, case):
    config, message = ensembles.bad_configs()[case]
    status, body = _load(server, "ens_bad", config)
    assert (status, body) == (400, {"error": message})
    # As Triton: the ensemble never got a version, so it is listed by name only, and the model
    # APIs answer as for a model never loaded.
    assert _index_entry(server, "ens_bad") == [{"name": "ens_bad"}]
    assert http_json(server, "GET", "/v2/models/ens_bad") == (
        404, {"error": "Request for unknown model: 'ens_bad' is not found"})
    assert server.request("GET", "/v2/models/ens_bad/ready")[0] == 400
    assert f"kiln-serve: failed to load 'ens_bad': {message}" in server.output()


def test_a_newer_tritons_inflight_cap_is_refused(server):
    config = dict(ensembles.CHAIN, name="ens_bad")
    config["ensemble_scheduling"] = dict(config["ensemble_scheduling"], max_inflight_requests=4)
    assert _load(server, "ens_bad", config) == (501, {"error": (
        "ensemble 'ens_bad': max_inflight_requests is not supported (a newer Triton's setting)")})


def test_a_bad_config_over_grpc(server):
    config, message = ensembles.bad_configs()["cycle"]
    with server.grpc_client() as c, pytest.raises(InferenceServerException) as e:
        c.load_model("ens_bad", config=json.dumps(config))
    assert e.value.status() == "StatusCode.INVALID_ARGUMENT" and e.value.message() == message


def test_nesting_is_bounded(server):
    status, body = _load(server, "nest_1")
    assert (status, body) == (400, {"error": f"ensemble 'nest_1' nests ensembles {NEST} deep (itself "
                                             "included); at most 8 levels are allowed"})
    # The composing ensembles loaded on the way, each within the bound: 8 levels run.
    assert _index_entry(server, "nest_2") == [{"name": "nest_2", "version": "1", "state": "READY"}]
    a, b = rows(1)
    r = server.client().infer("nest_2", fp32_inputs(httpclient, a, b))
    np.testing.assert_array_equal(r.as_numpy("OUT0"), a + b)
    np.testing.assert_array_equal(r.as_numpy("OUT1"), a - b)


def test_a_cycle_between_ensembles_is_refused(server):
    status, body = _load(server, "cyc_a")
    assert (status, body) == (400, {"error": "circular dependency between ensembles: cyc_a -> ... -> "
                                             "cyc_b -> cyc_a"})
    assert _index_entry(server, "cyc_b") == [{"name": "cyc_b"}]


@pytest.fixture
def small_repo(tmp_path):
    repo = str(tmp_path / "repo")
    triton_models.kiln_repo(repo)
    ensembles.write(repo, ensembles.CHAIN)
    ensembles.write(repo, ensembles.OUTER)
    return repo


def test_loading_and_unloading_follow_the_composing_models(serve, small_repo):
    """As tritonserver: loading an ensemble loads what it runs; unloading a model unloads the
    ensembles using it, and loading it again brings them back; reloading one into a shape they
    no longer fit unloads them, saying why."""
    s = serve(small_repo, "--model-control-mode=explicit", "--load-model=ens_outer")
    index = {e["name"]: e for e in http_json(s, "POST", "/v2/repository/index", "{}")[1]}
    for m in ("add_sub", "ens_chain", "ens_outer"):
        assert index[m] == {"name": m, "version": "1", "state": "READY"}
    assert index["add_version"] == {"name": "add_version"}
    assert http_json(s, "POST", "/v2/repository/models/add_sub/unload") == (200, None)
    for m in ("ens_chain", "ens_outer"):
        assert _index_entry(s, m) == [{"name": m, "version": "1", "state": "UNAVAILABLE",
                                       "reason": "unloaded"}]
    a, b = rows(1)
    with pytest.raises(InferenceServerException, match="'ens_outer' has no available versions"):
        s.client().infer("ens_outer", fp32_inputs(httpclient, a, b))
    assert _load(s, "add_sub") == (200, None)
    for m in ("add_sub", "ens_chain", "ens_outer"):
        assert _index_entry(s, m) == [{"name": m, "version": "1", "state": "READY"}]
    np.testing.assert_array_equal(
        s.client().infer("ens_outer", fp32_inputs(httpclient, a, b)).as_numpy("OUT0"), 2 * a)
    # add_sub reloaded batching only 4: ens_chain (8) no longer fits, nor ens_outer above it.
    smaller = json.dumps({"name": "add_sub", "backend": "onnxruntime", "max_batch_size": 4})
    status, _ = http_json(s, "POST", "/v2/repository/models/add_sub/load",
                          json.dumps({"parameters": {"config": smaller}}))
    assert status == 200
    why = ("ensemble ens_chain allows maximum batch size 8, but it contains model add_sub which "
           "only allows maximum batch size to be 4")
    for m in ("ens_chain", "ens_outer"):
        assert _index_entry(s, m) == [{"name": m, "version": "1", "state": "UNAVAILABLE",
                                       "reason": why}]


def test_a_missing_composing_model_at_startup(serve, tmp_path):
    repo = str(tmp_path / "repo")
    triton_models.kiln_repo(repo)
    ensembles.write(repo, ensembles.bad_configs("ens_missing")["missing model"][0])
    why = "ensemble ens_missing contains models that are not available or ambiguous: nope"
    s = serve(repo, "--exit-on-error=false")
    assert f"kiln-serve: failed to load 'ens_missing': {why}" in s.output()
    assert _index_entry(s, "ens_missing") == [{"name": "ens_missing"}]
    assert s.request("GET", "/v2/models/ens_missing/ready")[0] == 400
    assert http_json(s, "GET", "/v2/models/ens_missing")[0] == 404
    # With --exit-on-error (the default), as tritonserver: the server does not start.
    s2 = serve(repo, wait=False)
    assert s2.proc.wait(120) == 1


def test_the_steps_tensors_count_against_the_request_memory_budget(serve, tmp_path):
    repo = str(tmp_path / "repo")
    factor = 65536  # [N, 4] -> [N, 262144] FP32: 1 MiB a row
    models.tile(repo, "tile", factor, f"""name: "tile"
backend: "onnxruntime"
max_batch_size: 8
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ {4 * factor} ] }} ]
""")
    ensembles.write(repo, ensemble("ens_big", [("tile", -1, {"INPUT0": "IN0"}, {"OUTPUT0": "BIG"})],
                                   inputs=(("IN0", FP32, [4]),),
                                   outputs=(("BIG", FP32, [4 * factor]),)))
    budget = 4 << 20
    s = grpc_util.start(serve, repo, f"--request-memory-bytes={budget}")

    def infer(n, protocol="http"):
        x = np.ones((n, 4), np.float32)
        mod = httpclient if protocol == "http" else grpcclient
        inp = mod.InferInput("IN0", [n, 4], "FP32")
        inp.set_data_from_numpy(x)
        if protocol == "http":
            return s.client().infer("ens_big", [inp], outputs=[
                httpclient.InferRequestedOutput("BIG", binary_data=True)])
        with s.grpc_client() as c:
            return c.infer("ens_big", [inp])

    message = ("in ensemble 'ens_big', the server's request memory budget (4194304 bytes) is "
               "spent; retry later (step 0: model 'tile' version 1 returned 8388608 bytes for 'BIG')")
    for _ in range(3):
        assert infer(1).as_numpy("BIG").shape == (1, 4 * factor)
        with pytest.raises(InferenceServerException) as e:
            infer(2 * 4)
        assert (e.value.status(), e.value.message()) == ("503", message)
    with pytest.raises(InferenceServerException) as e:
        infer(8, "grpc")
    assert e.value.status() == "StatusCode.UNAVAILABLE" and e.value.message() == message
    # Every lease came back: a request needing most of the budget still fits.
    assert infer(3).as_numpy("BIG").shape == (3, 4 * factor)


def test_poll_mode_loads_an_ensemble_once_its_model_arrives(serve, tmp_path):
    repo = str(tmp_path / "repo")
    os.makedirs(repo)
    ensembles.write(repo, ensembles.CHAIN)
    s = serve(repo, "--model-control-mode=poll", "--repository-poll-secs=1",
              "--exit-on-error=false")
    assert _index_entry(s, "ens_chain") == [{"name": "ens_chain"}]
    models.add_sub(repo, "add_sub", "FP32", config=triton_models.MODELS["add_sub"][0].replace(
        "name:", 'backend: "onnxruntime"\nname:', 1))
    deadline = time.time() + 60
    while _index_entry(s, "ens_chain") != [{"name": "ens_chain", "version": "1", "state": "READY"}]:
        assert time.time() < deadline, _index_entry(s, "ens_chain")
        time.sleep(0.1)
    a, b = rows(1)
    np.testing.assert_array_equal(
        s.client().infer("ens_chain", fp32_inputs(httpclient, a, b)).as_numpy("OUT1"), 2 * b)
