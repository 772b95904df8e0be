"""Model control: explicit load / unload (with config override), poll mode, version reloads that
keep in-flight requests, and repository path confinement."""
import json
import os
import shutil
import threading
import time

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

import models


def constant(c, model, version=""):
    inp = httpclient.InferInput("INPUT0", [4], "FP32")
    inp.set_data_from_numpy(np.zeros(4, np.float32))
    return c.infer(model, [inp], model_version=version).as_numpy("OUTPUT0")[0]


@pytest.fixture(scope="module")
def explicit(serve, tmp_path_factory):
    repo = str(tmp_path_factory.mktemp("repo"))
    models.add_constant(repo, "c", [1, 2])
    models.add_constant(repo, "d", [1])
    models.add_sub(repo, "simple", "FP32")
    models.slow(repo, "slow", 'backend: "onnxruntime"\nmax_batch_size: 1\n'
                'instance_group [ { count: 1 kind: KIND_CPU } ]\ndynamic_batching { }', layers=32)
    models.add_constant(repo, "broken", [1], 'backend: "onnxruntime"\ninput [ { name: "NOPE" '
                        'data_type: TYPE_FP32 dims: [ 4 ] } ]')
    os.makedirs(os.path.join(repo, "escape", "1"))
    outside = str(tmp_path_factory.mktemp("outside"))
    models.add_constant(outside, "x", [1])
    os.symlink(os.path.join(outside, "x", "1", "model.onnx"),
               os.path.join(repo, "escape", "1", "model.onnx"))
    server = serve(repo, "--model-control-mode=explicit", "--load-model=c", "--load-model=slow")
    server.repo = repo
    return server


def test_explicit_startup_and_index(explicit):
    c = explicit.client()
    assert c.is_model_ready("c") and not c.is_model_ready("d")
    index = {(m["name"], m.get("version")): m for m in c.get_model_repository_index()}
    assert index[("c", "2")]["state"] == "READY"
    # Never loaded: listed by name, without a state, as tritonserver 2.51 lists it.
    assert ("d", None) in index and "state" not in index[("d", None)]
    ready = c.get_model_repository_index()
    assert {m["name"] for m in ready} >= {"c", "d", "simple", "broken"}
    status, body, _ = explicit.request("POST", "/v2/repository/index", json.dumps({"ready": True}))
    assert status == 200 and {m["name"] for m in json.loads(body)} == {"c", "slow"}


def test_load_and_unload(explicit):
    c = explicit.client()
    c.load_model("d")
    assert c.is_model_ready("d") and constant(c, "d") == 1
    c.unload_model("d")
    assert not c.is_model_ready("d")
    with pytest.raises(InferenceServerException, match="unknown model"):
        constant(c, "d")
    index = {(m["name"], m.get("version")): m for m in c.get_model_repository_index()}
    assert index[("d", "1")]["state"] == "UNAVAILABLE" and index[("d", "1")]["reason"] == "unloaded"
    c.load_model("d")
    assert constant(c, "d") == 1


def test_load_with_config_override(explicit):
    c = explicit.client()
    assert c.get_model_metadata("c")["versions"] == ["2"]
    c.load_model("c", config=json.dumps({"backend": "onnxruntime",
                                         "version_policy": {"all": {}}}))
    assert c.get_model_metadata("c")["versions"] == ["1", "2"]
    assert constant(c, "c", "1") == 1 and constant(c, "c", "2") == 2
    # Reloading from the repository's own config restores the default policy.
    c.load_model("c")
    assert c.get_model_metadata("c")["versions"] == ["2"]
    with pytest.raises(InferenceServerException, match="max_batch_size"):
        c.load_model("simple", config=json.dumps({"backend": "onnxruntime", "max_batch_size": -2}))
    with pytest.raises(InferenceServerException):
        c.load_model("simple", config="{not json")


def test_failed_loads_keep_server_live(explicit):
    c = explicit.client()
    with pytest.raises(InferenceServerException, match="NOPE"):
        c.load_model("broken")
    with pytest.raises(InferenceServerException, match="failed to poll"):
        c.load_model("not_there")
    with pytest.raises(InferenceServerException, match="outside the model repository"):
        c.load_model("escape")
    for bad in ("..", "a/b", ".hidden"):
        status, body, _ = explicit.request(
            "POST", "/v2/repository/models/" + bad.replace("/", "%2F") + "/load", "")
        assert status == 400, (bad, body)
    reason = {m["name"]: m.get("reason", "") for m in c.get_model_repository_index()}
    assert "NOPE" in reason["broken"]
    assert c.is_server_live()


def test_reload_keeps_inflight_requests(explicit):
    """Requests queued on a version finish after the version is replaced or unloaded."""
    x = np.random.default_rng(0).random((1, 1024, 256), dtype=np.float32)
    results = []
    def send():
        c = explicit.client()
        inp = httpclient.InferInput("INPUT0", [1, 1024, 256], "FP32")
        inp.set_data_from_numpy(x)
        try:
            results.append(np.array_equal(c.infer("slow", [inp]).as_numpy("OUTPUT0"), x))
        except InferenceServerException as e:
            results.append(e)
    threads = [threading.Thread(target=send) for _ in range(6)]
    for t in threads:
        t.start()
    # Every request accepted (queued, running or done) before the version changes.
    deadline = time.time() + 120
    while (pending := explicit.pending("slow")) + len(results) < 6:
        assert time.time() < deadline, "the requests never reached the server"
        time.sleep(0.002)
    assert pending > 0, "every request finished before the reload: nothing was in flight"
    c = explicit.client()
    c.load_model("slow")    # replace the version while requests are queued on the old one
    c.unload_model("slow")  # and unload the new one
    for t in threads:
        t.join()
    assert results == [True] * 6, results
    c.load_model("slow")


def test_load_unload_refused_outside_explicit_mode(serve, tmp_path):
    models.add_constant(str(tmp_path), "c", [1])
    server = serve(str(tmp_path))
    with pytest.raises(InferenceServerException, match="not allowed"):
        server.client().load_model("c")


def test_poll_mode(serve, tmp_path):
    repo = str(tmp_path)
    models.add_constant(repo, "p", [1])
    server = serve(repo, "--model-control-mode=poll", "--repository-poll-secs=1")
    c = server.client()
    assert constant(c, "p") == 1
    def wait_for(check, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if check():
                return
            time.sleep(0.2)
        raise AssertionError("poll did not pick up the change")
    models.add_constant(repo, "p", [2])   # a new version appears
    wait_for(lambda: c.get_model_metadata("p")["versions"] == ["2"])
    assert constant(c, "p") == 2
    models.add_constant(repo, "q", [1])   # a new model appears
    wait_for(lambda: c.is_model_ready("q"))
    shutil.rmtree(os.path.join(repo, "q"))  # and goes away
    wait_for(lambda: not c.is_model_ready("q"))


def test_startup_failure_exits_unless_told(serve, tmp_path):
    models.add_constant(str(tmp_path), "broken", [1], 'backend: "nope"')
    models.add_constant(str(tmp_path), "fine", [1])
    s = serve(str(tmp_path), wait=False)
    assert s.proc.wait(60) == 1 and "broken" in s.output()
    s = serve(str(tmp_path), "--exit-on-error=false")
    c = s.client()
    assert c.is_server_live() and not c.is_server_ready() and c.is_model_ready("fine")
    s2 = serve(str(tmp_path), "--exit-on-error=false", "--strict-readiness=false")
    assert s2.client().is_server_ready()


def test_kiln_engine_models(serve, tmp_path, request):
    """model.kiln engines (backend "kiln"), compiled by the kiln binary beside kiln-serve; a
    bounded batch range becomes the auto-completed max_batch_size."""
    import subprocess
    kiln = os.path.join(os.path.dirname(os.path.abspath(request.config.getoption("--kiln-serve"))),
                        "kiln")
    if not os.path.exists(kiln):
        pytest.skip(f"no kiln binary beside kiln-serve ({kiln})")
    src = str(tmp_path / "src")
    models.add_sub(src, "m", "FP32")
    repo = tmp_path / "repo"
    os.makedirs(repo / "engine" / "1")
    os.makedirs(repo / "ranged" / "1")
    onnx_path = os.path.join(src, "m", "1", "model.onnx")
    subprocess.run([kiln, "compile", onnx_path, "-o", str(repo / "engine" / "1" / "model.kiln")],
                   check=True, capture_output=True)
    subprocess.run([kiln, "compile", onnx_path, "-o", str(repo / "ranged" / "1" / "model.kiln"),
                    "--shape-range", "INPUT0:1..2x4", "--shape-range", "INPUT1:1..2x4"],
                   check=True, capture_output=True)
    server = serve(str(repo))
    c = server.client()
    assert c.get_model_metadata("engine")["platform"] == "kiln"
    cfg = c.get_model_config("engine")
    assert cfg["backend"] == "kiln" and cfg["max_batch_size"] == 4
    assert c.get_model_config("ranged")["max_batch_size"] == 2
    a = np.arange(8, dtype=np.float32).reshape(2, 4)
    inputs = []
    for i in range(2):
        inp = httpclient.InferInput(f"INPUT{i}", [2, 4], "FP32")
        inp.set_data_from_numpy(a)
        inputs.append(inp)
    for model in ("engine", "ranged"):
        r = c.infer(model, inputs)
        np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), a + a)
        np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), a - a)
