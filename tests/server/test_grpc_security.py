"""gRPC restricted protocols, bearer token, TLS and mutual TLS, SIGTERM drain, explicit
load/unload, dynamic batching seen through gRPC statistics, and the queue policies' status codes
(queue full, queue timeout) and priorities over gRPC."""
import asyncio
import json
import signal
import subprocess
import threading
import time

import grpc
import numpy as np
import pytest
import tritonclient.grpc.aio as aioclient
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

import grpc_util
import models


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    repo = str(tmp_path_factory.mktemp("repo"))
    models.add_sub(repo, "simple", "FP32")
    models.slow(repo, "slow", 'backend: "onnxruntime"\nmax_batch_size: 1\ndynamic_batching { }',
                layers=32)
    models.add_sub(repo, "batched", "FP32", config="""
backend: "onnxruntime"
max_batch_size: 16
dynamic_batching { max_queue_delay_microseconds: 200000 preferred_batch_size: [ 8 ] }
""")
    return repo


def infer_simple(client, **kwargs):
    a = np.arange(4, dtype=np.float32).reshape(1, 4)
    r = client.infer("simple", grpc_util.inputs([a, a], "FP32"), **kwargs)
    np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), a * 2)


def test_restricted_protocol(serve, repo):
    server = grpc_util.start(
        serve, repo, "--model-control-mode=explicit", "--load-model=*",
        "--grpc-restricted-protocol=model-repository,inference:Admin-Key=s3cret",
        "--grpc-restricted-protocol=statistics:stats-key=abc")
    c = server.grpc_client()
    assert c.is_server_live() and c.get_model_metadata("simple").name == "simple"
    with pytest.raises(InferenceServerException, match="expecting header 'admin-key'") as e:
        infer_simple(c)
    assert e.value.status() == "StatusCode.UNAVAILABLE"
    with pytest.raises(InferenceServerException, match="admin-key"):
        c.get_model_repository_index(headers={"admin-key": "wrong"})
    with pytest.raises(InferenceServerException, match="stats-key"):
        c.get_inference_statistics()
    admin = {"admin-key": "s3cret"}
    infer_simple(c, headers=admin)
    c.unload_model("simple", headers=admin)
    c.load_model("simple", headers=admin)
    assert c.get_inference_statistics(headers={"stats-key": "abc"}).model_stats
    # The HTTP side is not restricted by the gRPC flag.
    assert server.client().get_model_repository_index()


def test_bad_restricted_protocol_flag_refused(serve, repo):
    s = serve(repo, f"--grpc-port={grpc_util.free_port()}",
              "--grpc-restricted-protocol=bogus:k=v", wait=False)
    assert s.proc.wait(60) == 1 and "bogus" in s.output()


def test_bearer_token_follows_http(serve, repo):
    server = grpc_util.start(serve, repo, "--http-bearer-token=tok123")
    c = server.grpc_client()
    assert c.is_server_live() and c.is_server_ready() and c.is_model_ready("simple")
    with pytest.raises(InferenceServerException) as e:
        c.get_model_metadata("simple")
    assert e.value.status() == "StatusCode.UNAUTHENTICATED"
    with pytest.raises(InferenceServerException, match="Unauthorized"):
        infer_simple(c, headers={"authorization": "Bearer wrong"})
    auth = {"authorization": "Bearer tok123"}
    assert c.get_model_metadata("simple", headers=auth).name == "simple"
    infer_simple(c, headers=auth)


def test_grpc_bearer_token_overrides(serve, repo):
    server = grpc_util.start(serve, repo, "--http-bearer-token=httptok", "--grpc-bearer-token=grpctok")
    c = server.grpc_client()
    with pytest.raises(InferenceServerException, match="Unauthorized"):
        infer_simple(c, headers={"authorization": "Bearer httptok"})
    infer_simple(c, headers={"authorization": "Bearer grpctok"})


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    """A throwaway CA, a server certificate for localhost and a client certificate."""
    d = tmp_path_factory.mktemp("certs")
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=kiln-test-ca",
            "-keyout", "ca.key", "-out", "ca.pem", cwd=d)
    for name in ("server", "client"):
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}", "-keyout",
                f"{name}.key", "-out", f"{name}.csr", cwd=d)
        (d / f"{name}.ext").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                "-CAcreateserial", "-days", "2", "-extfile", f"{name}.ext", "-out", f"{name}.pem",
                cwd=d)
    return d


def test_tls(serve, repo, certs):
    tls = {"ssl": True, "root_certificates": str(certs / "ca.pem")}
    server = grpc_util.start(serve, repo, "--grpc-use-ssl=true",
                             f"--grpc-server-cert={certs / 'server.pem'}",
                             f"--grpc-server-key={certs / 'server.key'}", **tls)
    c = server.grpc_client(**tls)
    assert c.is_server_live()
    infer_simple(c)
    # A plaintext client cannot talk to the TLS port.
    with pytest.raises(InferenceServerException):
        server.grpc_client().is_server_live(client_timeout=5)


def test_mutual_tls(serve, repo, certs):
    client_tls = {"ssl": True, "root_certificates": str(certs / "ca.pem"),
                  "private_key": str(certs / "client.key"),
                  "certificate_chain": str(certs / "client.pem")}
    server = grpc_util.start(serve, repo, "--grpc-use-ssl-mutual=true",
                             f"--grpc-server-cert={certs / 'server.pem'}",
                             f"--grpc-server-key={certs / 'server.key'}",
                             f"--grpc-root-cert={certs / 'ca.pem'}", **client_tls)
    infer_simple(server.grpc_client(**client_tls))
    # Without a client certificate the handshake fails.
    anonymous = server.grpc_client(ssl=True, root_certificates=str(certs / "ca.pem"))
    with pytest.raises(InferenceServerException):
        anonymous.is_server_live(client_timeout=5)


def test_missing_tls_file_refused(serve, repo, tmp_path):
    s = serve(repo, f"--grpc-port={grpc_util.free_port()}", "--grpc-use-ssl=true",
              f"--grpc-server-cert={tmp_path / 'none.pem'}", f"--grpc-server-key={tmp_path / 'none.key'}",
              wait=False)
    assert s.proc.wait(60) == 1 and "none" in s.output()


def test_explicit_load_unload_with_config_override(serve, repo):
    server = grpc_util.start(serve, repo, "--model-control-mode=explicit")
    c = server.grpc_client()
    assert not c.is_model_ready("simple")
    states = {m.name: m.state for m in c.get_model_repository_index().models}
    assert states["simple"] != "READY"
    stub = service_pb2_grpc.GRPCInferenceServiceStub(grpc.insecure_channel(server.grpc_url))
    ready_only = lambda: {m.name for m in stub.RepositoryIndex(
        service_pb2.RepositoryIndexRequest(ready=True)).models}
    assert ready_only() == set()
    c.load_model("simple")
    assert ready_only() == {"simple"}
    assert c.is_model_ready("simple")
    infer_simple(c)
    override = {"backend": "onnxruntime", "max_batch_size": 2,
                "dynamic_batching": {"max_queue_delay_microseconds": 10}}
    c.load_model("simple", config=json.dumps(override))
    cfg = c.get_model_config("simple").config
    assert cfg.max_batch_size == 2 and cfg.dynamic_batching.max_queue_delay_microseconds == 10
    with pytest.raises(InferenceServerException, match="batch-size must be <= 2"):
        c.infer("simple", grpc_util.inputs([np.ones((3, 4), np.float32)] * 2, "FP32"))
    c.unload_model("simple")
    assert not c.is_model_ready("simple")
    with pytest.raises(InferenceServerException):
        infer_simple(c)
    with pytest.raises(InferenceServerException, match="nope"):
        c.load_model("nope")
    assert c.is_server_live()


def test_dynamic_batching_in_statistics(serve, repo):
    server = grpc_util.start(serve, repo)

    async def run():
        async with aioclient.InferenceServerClient(server.grpc_url) as c:
            arrays = [np.full((1, 4), i, np.float32) for i in range(8)]
            results = await asyncio.gather(*[
                c.infer("batched", grpc_util.inputs([a, a], "FP32")) for a in arrays])
            for a, r in zip(arrays, results):
                np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), a * 2)
            return (await c.get_inference_statistics("batched")).model_stats[0]

    stats = asyncio.run(run())
    assert stats.inference_count == 8
    assert stats.execution_count < stats.inference_count
    assert any(b.batch_size > 1 for b in stats.batch_stats)


def test_sigterm_drains_grpc_without_losing_requests(serve, repo):
    server = grpc_util.start(serve, repo, "--exit-timeout-secs=60")
    x = np.random.default_rng(0).random((1, 1024, 256), dtype=np.float32)
    n = 6
    results = [None] * n

    def send(i):
        try:
            r = server.grpc_client().infer("slow", grpc_util.inputs([x], "FP32"))
            results[i] = np.array_equal(r.as_numpy("OUTPUT0"), x)
        except Exception as e:  # noqa: BLE001 - checked below
            results[i] = e

    threads = [threading.Thread(target=send, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    server.wait_pending("slow", n)
    server.proc.send_signal(signal.SIGTERM)
    c = server.grpc_client()
    deadline = time.time() + 30
    while c.is_server_ready():  # readiness fails as soon as the signal is handled
        assert time.time() < deadline, "still ready after SIGTERM"
        time.sleep(0.005)
    with pytest.raises(InferenceServerException) as e:
        infer_simple(c)
    assert e.value.status() == "StatusCode.UNAVAILABLE" and "shutting down" in e.value.message()
    for t in threads:
        t.join()
    assert results == [True] * n, results
    assert server.proc.wait(60) == 0


@pytest.fixture(scope="module")
def queue_server(serve, tmp_path_factory):
    repo = str(tmp_path_factory.mktemp("queue_repo"))
    models.slow_policies(repo, timeout_us=5000000, timeout_layers=32)
    return grpc_util.start(serve, repo)


# A blocker of 8x the rows holds the instance for several ordinary runs (see test_scheduling).
BLOCKER_ROWS = 8192


def slow_infer(server, model, results, key, rows=1024, **kwargs):
    x = np.ones((1, rows, 256), np.float32)
    try:
        server.grpc_client().infer(model, grpc_util.inputs([x], "FP32"), **kwargs)
        results[key] = "ok"
    except InferenceServerException as e:
        results[key] = e


def start_thread(*args, **kwargs):
    t = threading.Thread(target=slow_infer, args=args, kwargs=kwargs)
    t.start()
    return t


def test_queue_full_is_unavailable(queue_server):
    s, results = queue_server, {}
    threads = [start_thread(s, "slow_queue", results, "running", rows=BLOCKER_ROWS)]
    s.wait_pending("slow_queue", 1)
    threads += [start_thread(s, "slow_queue", results, f"queued{i}") for i in range(2)]
    s.wait_pending("slow_queue", 3)
    slow_infer(s, "slow_queue", results, "refused")
    for t in threads:
        t.join()
    assert results.pop("refused").status() == "StatusCode.UNAVAILABLE"
    assert set(results.values()) == {"ok"}, results


def test_queue_timeout_is_unavailable(queue_server):
    s, results = queue_server, {}
    blocker = start_thread(s, "slow_timeout", results, "running", rows=BLOCKER_ROWS)
    s.wait_pending("slow_timeout", 1)
    # The request's own 1 ms timeout (shorter than the model's 5 s) expires behind the blocker.
    slow_infer(s, "slow_timeout", results, "expired", timeout=1000)
    blocker.join()
    e = results["expired"]
    assert e.status() == "StatusCode.UNAVAILABLE" and "Request timeout expired" in e.message()
    assert results["running"] == "ok"


def test_priority_overtakes(queue_server):
    s, results, order = queue_server, {}, []
    lock = threading.Lock()

    def send(key, priority, rows=1024):
        slow_infer(s, "slow_priority", results, key, rows=rows, priority=priority)
        with lock:
            order.append(key)

    threads = [threading.Thread(target=send, args=("blocker", 2, BLOCKER_ROWS))]
    threads[0].start()
    s.wait_pending("slow_priority", 1)
    for i in range(3):
        threads.append(threading.Thread(target=send, args=(f"low{i}", 2)))
        threads[-1].start()
    s.wait_pending("slow_priority", 4)
    threads.append(threading.Thread(target=send, args=("high", 1)))
    threads[-1].start()
    s.wait_pending("slow_priority", 5)
    for t in threads:
        t.join()
    assert set(results.values()) == {"ok"}, results
    # Queued after every low-priority request, the high-priority one still overtakes some.
    assert order.index("high") < max(order.index(f"low{i}") for i in range(3)), order


def test_compression_and_keepalive_flags(serve, repo):
    server = grpc_util.start(serve, repo, "--grpc-infer-response-compression-level=high",
                             "--grpc-keepalive-time=10000", "--grpc-keepalive-timeout=5000",
                             "--grpc-keepalive-permit-without-calls=true",
                             "--grpc-http2-max-pings-without-data=0",
                             "--grpc-http2-min-recv-ping-interval-without-data=5000",
                             "--grpc-http2-max-ping-strikes=2")
    c = server.grpc_client()
    infer_simple(c)
    infer_simple(c, compression_algorithm="gzip")
    s = serve(repo, f"--grpc-port={grpc_util.free_port()}",
              "--grpc-infer-response-compression-level=extreme", wait=False)
    assert s.proc.wait(60) != 0 and "compression-level" in s.output()
