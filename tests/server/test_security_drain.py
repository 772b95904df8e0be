"""Restricted API categories, bearer-token auth, and the SIGTERM drain."""
import signal
import threading
import time

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

import models


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    repo = str(tmp_path_factory.mktemp("repo"))
    models.add_sub(repo, "simple", "FP32")
    models.slow(repo, "slow", 'backend: "onnxruntime"\nmax_batch_size: 1\ndynamic_batching { }', layers=64)
    return repo


def simple_inputs():
    inputs = []
    for i in range(2):
        inp = httpclient.InferInput(f"INPUT{i}", [1, 4], "FP32")
        inp.set_data_from_numpy(np.ones((1, 4), np.float32))
        inputs.append(inp)
    return inputs


def test_restricted_api(serve, repo):
    server = serve(repo, "--model-control-mode=explicit", "--load-model=*",
                   "--http-restricted-api=model-repository,inference:admin-key=s3cret",
                   "--http-restricted-api=statistics:stats-key=abc")
    c = server.client()
    assert c.is_server_live() and c.get_model_metadata("simple")["name"] == "simple"
    with pytest.raises(InferenceServerException, match="expecting header 'admin-key'") as e:
        c.infer("simple", simple_inputs())
    assert e.value.status() == "403"
    with pytest.raises(InferenceServerException, match="403"):
        c.get_model_repository_index(headers={"admin-key": "wrong"})
    with pytest.raises(InferenceServerException, match="stats-key"):
        c.get_inference_statistics()
    admin = {"admin-key": "s3cret"}
    c.infer("simple", simple_inputs(), headers=admin)
    c.unload_model("simple", headers=admin)
    c.load_model("simple", headers=admin)
    assert c.get_inference_statistics(headers={"stats-key": "abc"})["model_stats"]


def test_bad_restricted_api_flag_refused(serve, repo):
    s = serve(repo, "--http-restricted-api=bogus:k=v", wait=False)
    assert s.proc.wait(60) == 1 and "bogus" in s.output()


def test_bearer_token(serve, repo):
    server = serve(repo, "--http-bearer-token=tok123")
    c = server.client()
    assert c.is_server_live() and c.is_server_ready()  # health stays open for probes
    with pytest.raises(InferenceServerException) as e:
        c.get_model_metadata("simple")
    assert e.value.status() == "401"
    auth = {"Authorization": "Bearer tok123"}
    assert c.get_model_metadata("simple", headers=auth)["name"] == "simple"
    c.infer("simple", simple_inputs(), headers=auth)


def test_sigterm_drains_without_losing_requests(serve, repo):
    server = serve(repo, "--exit-timeout-secs=60")
    x = np.random.default_rng(0).random((1, 1024, 256), dtype=np.float32)
    n = 8
    results = [None] * n
    def send(i):
        c = server.client()
        inp = httpclient.InferInput("INPUT0", [1, 1024, 256], "FP32")
        inp.set_data_from_numpy(x)
        try:
            results[i] = np.array_equal(c.infer("slow", [inp]).as_numpy("OUTPUT0"), x)
        except Exception as e:  # noqa: BLE001 - checked below
            results[i] = e
    threads = [threading.Thread(target=send, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    # Wait until every request is accepted (queued, running or done), then ask the server to stop.
    deadline = time.time() + 120
    while True:
        pending = server.pending("slow")
        finished = sum(r is not None for r in results)
        if pending + finished == n:
            assert finished < n - 1, "too fast to observe a drain"
            break
        assert time.time() < deadline
        time.sleep(0.005)
    t0 = time.time()
    server.proc.send_signal(signal.SIGTERM)
    # Draining: not ready, new inference refused with 503, accepted ones still running.
    while server.request("GET", "/v2/health/ready")[0] != 400:
        assert time.time() - t0 < 10, "readiness did not fail after SIGTERM"
        time.sleep(0.005)
    with pytest.raises(InferenceServerException) as e:
        server.client().infer("simple", simple_inputs())
    assert e.value.status() == "503" and "shutting down" in e.value.message()
    for t in threads:
        t.join()
    assert results == [True] * n, results
    assert server.proc.wait(60) == 0, server.output()
    assert time.time() - t0 < 60
    assert "draining" in server.output()


def test_exit_timeout_bounds_the_drain(serve, repo):
    server = serve(repo, "--exit-timeout-secs=0")
    x = np.zeros((1, 1024, 256), np.float32)
    def send():
        c = server.client()
        inp = httpclient.InferInput("INPUT0", [1, 1024, 256], "FP32")
        inp.set_data_from_numpy(x)
        try:
            c.infer("slow", [inp])
        except Exception:  # noqa: BLE001 - the server may go away under this request
            pass
    threads = [threading.Thread(target=send) for _ in range(6)]
    for t in threads:
        t.start()
    # Several accepted (one running, the rest queued behind it) before the signal, whatever the
    # machine's load: none of them can finish within a zero exit timeout.
    server.wait_pending("slow", 4)
    t0 = time.time()
    server.proc.send_signal(signal.SIGTERM)
    assert server.proc.wait(60) == 1, server.output()
    assert time.time() - t0 < 10
    assert "exit timeout" in server.output()
    for t in threads:
        t.join()


def make_cert(directory, name, ca=None):
    """A self-signed (or `ca`-signed) certificate for localhost, with the openssl command."""
    import subprocess
    key, crt = str(directory / f"{name}.key"), str(directory / f"{name}.crt")
    if ca is None:
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                        "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost",
                        "-keyout", key, "-out", crt], check=True, capture_output=True)
    else:
        csr = str(directory / f"{name}.csr")
        subprocess.run(["openssl", "req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}",
                        "-keyout", key, "-out", csr], check=True, capture_output=True)
        subprocess.run(["openssl", "x509", "-req", "-in", csr, "-CA", ca[1], "-CAkey", ca[0],
                        "-CAcreateserial", "-days", "2", "-out", crt], check=True,
                       capture_output=True)
    return key, crt


def test_https(serve, repo, tmp_path):
    import gevent.ssl
    key, crt = make_cert(tmp_path, "server")
    server = serve(repo, f"--http-server-cert={crt}", f"--http-server-key={key}", wait=False)
    factory = lambda: gevent.ssl.create_default_context(cafile=crt)  # noqa: E731
    c = httpclient.InferenceServerClient(server.url, ssl=True, ssl_context_factory=factory)
    deadline = time.time() + 60
    while True:
        try:
            if c.is_server_live():
                break
        except Exception:  # noqa: BLE001 - still starting
            assert time.time() < deadline, server.output()
            time.sleep(0.1)
    assert "HTTPSService" in server.output()
    r = c.infer("simple", simple_inputs())
    np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), np.full((1, 4), 2, np.float32))
    # Plain HTTP to the HTTPS port is refused, and the server stays up.
    with pytest.raises(Exception):
        server.request("GET", "/v2/health/live", timeout=5)
    assert c.is_server_live()


def test_mutual_tls(serve, repo, tmp_path):
    import gevent.ssl
    ca = make_cert(tmp_path, "ca")
    key, crt = make_cert(tmp_path, "server")
    client_key, client_crt = make_cert(tmp_path, "client", ca=ca)
    server = serve(repo, f"--http-server-cert={crt}", f"--http-server-key={key}",
                   f"--http-root-cert={ca[1]}", wait=False)
    def factory(with_cert):
        def make():
            ctx = gevent.ssl.create_default_context(cafile=crt)
            if with_cert:
                ctx.load_cert_chain(client_crt, client_key)
            return ctx
        return make
    good = httpclient.InferenceServerClient(server.url, ssl=True, ssl_context_factory=factory(True))
    deadline = time.time() + 60
    while True:
        try:
            if good.is_server_live():
                break
        except Exception:  # noqa: BLE001 - still starting
            assert time.time() < deadline, server.output()
            time.sleep(0.1)
    bad = httpclient.InferenceServerClient(server.url, ssl=True, ssl_context_factory=factory(False))
    with pytest.raises(Exception):
        bad.is_server_live()
    assert good.infer("simple", simple_inputs()).as_numpy("OUTPUT1").sum() == 0
