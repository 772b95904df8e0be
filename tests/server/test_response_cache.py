"""Triton's local response cache: --cache-config local,size=N on the server, response_cache
{ enable: true } on a model. The same request is answered from the cache (same outputs, a hit
in the statistics, no execution), a different one runs; the cache keeps within its size."""
import re
import subprocess

import numpy as np
import pytest
import tritonclient.http as httpclient

import grpc_util
import models

CACHED = 'response_cache { enable: true }\n'


def config(name, datatype="FP32", cached=True):
    t = {"FP32": "TYPE_FP32", "BYTES": "TYPE_STRING"}[datatype]
    return f"""name: "{name}"
max_batch_size: 8
input [ {{ name: "INPUT0" data_type: {t} dims: [ 4 ] }}, {{ name: "INPUT1" data_type: {t} dims: [ 4 ] }} ]
output [ {{ name: "OUTPUT0" data_type: {t} dims: [ 4 ] }}, {{ name: "OUTPUT1" data_type: {t} dims: [ 4 ] }} ]
""" + (CACHED if cached else "")


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("repo"))
    models.add_sub(path, "cached", "FP32", config=config("cached"))
    models.add_sub(path, "plain", "FP32", config=config("plain", cached=False))
    models.add_sub(path, "cached_bytes", "BYTES", config=config("cached_bytes", "BYTES"))
    return path


def infer(client, model, a, b, datatype="FP32", outputs=None):
    inputs = []
    for name, v in (("INPUT0", a), ("INPUT1", b)):
        x = httpclient.InferInput(name, list(v.shape), datatype)
        x.set_data_from_numpy(v)
        inputs.append(x)
    asked = [httpclient.InferRequestedOutput(o) for o in outputs] if outputs else None
    r = client.infer(model, inputs, outputs=asked)
    return {o: r.as_numpy(o) for o in (outputs or ("OUTPUT0", "OUTPUT1"))}


def stats(client, model):
    s = client.get_inference_statistics(model)["model_stats"][0]
    i = s["inference_stats"]
    return {"hit": i["cache_hit"]["count"], "miss": i["cache_miss"]["count"],
            "success": i["success"]["count"], "executions": s["execution_count"],
            "inferences": s["inference_count"]}


def rows(seed, n=2):
    return np.random.default_rng(seed).standard_normal((n, 4)).astype(np.float32)


def test_the_same_request_is_answered_from_the_cache(serve, repo):
    server = serve(repo, "--cache-config=local,size=1048576")
    c = server.client()
    a, b = rows(1), rows(2)
    first = infer(c, "cached", a, b)
    assert stats(c, "cached") == {"hit": 0, "miss": 1, "success": 1, "executions": 1,
                                  "inferences": 2}
    again = infer(c, "cached", a, b)
    for o in first:
        np.testing.assert_array_equal(again[o], first[o])
    np.testing.assert_allclose(again["OUTPUT0"], a + b, rtol=1e-6)
    # A hit is a success that ran nothing.
    assert stats(c, "cached") == {"hit": 1, "miss": 1, "success": 2, "executions": 1,
                                  "inferences": 2}
    # Other bytes, another shape or other outputs asked for: each its own entry.
    infer(c, "cached", a, rows(3))
    infer(c, "cached", a[:1], b[:1])
    only = infer(c, "cached", a, b, outputs=["OUTPUT1"])
    np.testing.assert_allclose(only["OUTPUT1"], a - b, rtol=1e-6)
    assert stats(c, "cached")["miss"] == 4 and stats(c, "cached")["executions"] == 4
    # The inputs' order does not matter.
    inputs = [httpclient.InferInput(n, [2, 4], "FP32") for n in ("INPUT1", "INPUT0")]
    inputs[0].set_data_from_numpy(b)
    inputs[1].set_data_from_numpy(a)
    np.testing.assert_array_equal(c.infer("cached", inputs).as_numpy("OUTPUT0"), first["OUTPUT0"])
    assert stats(c, "cached")["hit"] == 2
    # The metrics port has tritonserver's per-model cache series.
    _, body, _ = server.request("GET", "/metrics", port=server.metrics_port)
    text = body.decode()
    assert 'nv_cache_num_hits_per_model{model="cached",version="1"} 2' in text, text
    assert 'nv_cache_num_misses_per_model{model="cached",version="1"} 4' in text, text
    # A model that does not enable it runs every request.
    for _ in range(2):
        infer(c, "plain", a, b)
    assert stats(c, "plain") == {"hit": 0, "miss": 0, "success": 2, "executions": 2,
                                 "inferences": 4}


def test_bytes_responses_and_grpc_statistics(serve, repo):
    server = grpc_util.start(serve, repo, "--cache-config=local,size=1048576")
    c = server.client()
    words = np.array([[b"a", b"bb", b"", b"dddd"]] * 2, dtype=np.object_)
    other = np.array([[b"x", b"y", b"z", b"w"]] * 2, dtype=np.object_)
    first = infer(c, "cached_bytes", words, other, "BYTES")
    again = infer(c, "cached_bytes", words, other, "BYTES")
    assert again["OUTPUT0"].tolist() == first["OUTPUT0"].tolist() == words.tolist()
    with server.grpc_client() as g:
        s = g.get_inference_statistics("cached_bytes", as_json=True)["model_stats"][0]
    assert s["inference_stats"]["cache_hit"]["count"] == "1"
    assert s["inference_stats"]["cache_miss"]["count"] == "1"


def entry_bytes(serve, repo, a):
    """What one response of `a` takes in the cache, from the verbose log's line."""
    probe = serve(repo, "--cache-config=local,size=1048576", "--log-verbose=1")
    infer(probe.client(), "cached", a, a)
    line = [l for l in probe.output().splitlines() if "kept a response of" in l][-1]
    return int(re.search(r"kept a response of (\d+) bytes", line).group(1))


def test_the_cache_keeps_within_its_size(serve, repo):
    a, b, d = rows(10, 8), rows(11, 8), rows(12, 8)
    size = entry_bytes(serve, repo, a)
    # Room for two of these responses: the least recently used one goes first.
    server = serve(repo, f"--cache-config=local,size={size * 5 // 2}")
    c = server.client()
    infer(c, "cached", a, a)
    infer(c, "cached", b, b)
    infer(c, "cached", a, a)  # hit: a becomes the most recent
    infer(c, "cached", d, d)  # evicts b
    infer(c, "cached", a, a)  # still there
    infer(c, "cached", b, b)  # gone: runs again
    assert stats(c, "cached")["hit"] == 2 and stats(c, "cached")["miss"] == 4
    # A response larger than the whole cache is never kept.
    small = serve(repo, "--cache-config=local,size=100")
    sc = small.client()
    for _ in range(2):
        infer(sc, "cached", a, b)
    assert stats(sc, "cached")["hit"] == 0 and stats(sc, "cached")["miss"] == 2


def test_without_a_cache_the_model_runs_and_the_log_says_why(serve, repo):
    server = serve(repo)
    c = server.client()
    for _ in range(2):
        infer(c, "cached", rows(1), rows(2))
    assert stats(c, "cached")["hit"] == 0 and stats(c, "cached")["executions"] == 2
    assert "'cached' enables response_cache but the server has no cache" in server.output()
    _, body, _ = server.request("GET", "/metrics", port=server.metrics_port)
    assert "nv_cache_" not in body.decode()


@pytest.mark.parametrize("spec,why", [
    ("redis,host=x", "only the local cache"),
    ("local", "expected local,size=<bytes>"),
    ("local,capacity=10", "takes size=<bytes>"),
    ("local,size=ten", "'ten' is not a number of bytes"),
])
def test_a_bad_cache_config_is_refused_at_start(request, repo, spec, why):
    binary = request.config.getoption("--kiln-serve")
    r = subprocess.run([binary, f"--model-repository={repo}", f"--cache-config={spec}",
                        "--http-port=0", "--allow-grpc=false", "--allow-metrics=false"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and why in r.stderr, r.stderr


def test_an_ensemble_cannot_enable_it(serve, tmp_path):
    repo = str(tmp_path)
    models.add_sub(repo, "step", "FP32", config=config("step", cached=False))
    ens = """name: "ens"
platform: "ensemble"
max_batch_size: 8
input [ { name: "A" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "B" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "S" data_type: TYPE_FP32 dims: [ 4 ] } ]
ensemble_scheduling { step [ { model_name: "step" model_version: -1
  input_map { key: "INPUT0" value: "A" } input_map { key: "INPUT1" value: "B" }
  output_map { key: "OUTPUT0" value: "S" } } ] }
response_cache { enable: true }
"""
    import os
    os.makedirs(os.path.join(repo, "ens", "1"))
    with open(os.path.join(repo, "ens", "config.pbtxt"), "w") as f:
        f.write(ens)
    server = serve(repo, "--cache-config=local,size=1048576", "--exit-on-error=false")
    assert "not supported for ensembles" in server.output(), server.output()
