"""Dynamic batching, instance groups, priorities and queue policies, observed through
tritonclient and the statistics endpoint."""
import threading
import time

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

import models


@pytest.fixture(scope="module")
def server(serve, tmp_path_factory):
    repo = str(tmp_path_factory.mktemp("repo"))
    models.add_sub(repo, "batched", "FP32", config="""
backend: "onnxruntime"
max_batch_size: 16
dynamic_batching { max_queue_delay_microseconds: 1000000 preferred_batch_size: [ 8 ] }
""")
    models.add_sub(repo, "unbatched", "FP32", config='backend: "onnxruntime"\nmax_batch_size: 16')
    # The 20 ms default timeout expires behind one 128-layer run.
    models.slow_policies(repo, timeout_us=20000, timeout_layers=128)
    models.slow(repo, "slow_instances", """
backend: "onnxruntime"
max_batch_size: 1
instance_group [ { count: 3 kind: KIND_CPU } ]
""")
    return serve(repo, "--http-thread-count=16")


def pair(rows=1):
    a = np.random.default_rng(rows).random((rows, 4), dtype=np.float32)
    inputs = []
    for i in range(2):
        inp = httpclient.InferInput(f"INPUT{i}", [rows, 4], "FP32")
        inp.set_data_from_numpy(a)
        inputs.append(inp)
    return a, inputs


# A blocker of 8x the rows holds the instance for several ordinary runs, so what a test queues
# behind it (after the server shows it pending) is still queued when the test looks.
BLOCKER_ROWS = 8192


def slow_input(rows=1024):
    x = np.random.default_rng(0).random((1, rows, 256), dtype=np.float32)
    inp = httpclient.InferInput("INPUT0", [1, rows, 256], "FP32")
    inp.set_data_from_numpy(x)
    return x, [inp]


def run_concurrently(n, fn):
    results = [None] * n
    def work(i):
        try:
            results[i] = ("ok", fn(i))
        except InferenceServerException as e:
            results[i] = ("error", e)
        except Exception as e:  # noqa: BLE001 - reported by the assertions of the caller
            results[i] = ("exception", e)
    threads = [threading.Thread(target=work, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def stats(server, model):
    return server.client().get_inference_statistics(model)["model_stats"][0]


def test_dynamic_batching_merges_concurrent_requests(server):
    n = 16
    clients = [server.client() for _ in range(n)]
    def one(i):
        a, inputs = pair(1 + i % 2)
        r = clients[i].infer("batched", inputs)
        np.testing.assert_allclose(r.as_numpy("OUTPUT0"), a + a)
        np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), np.zeros_like(a))
        return r.as_numpy("OUTPUT0").shape[0]
    results = run_concurrently(n, one)
    assert all(kind == "ok" for kind, _ in results), results
    s = stats(server, "batched")
    assert s["inference_count"] == sum(1 + i % 2 for i in range(n))
    assert s["execution_count"] < s["inference_stats"]["success"]["count"] == n
    assert max(b["batch_size"] for b in s["batch_stats"]) > 2


def test_without_dynamic_batching_each_request_runs_alone(server):
    clients = [server.client() for _ in range(8)]
    results = run_concurrently(8, lambda i: clients[i].infer("unbatched", pair(2)[1]))
    assert all(kind == "ok" for kind, _ in results)
    s = stats(server, "unbatched")
    assert s["execution_count"] == s["inference_stats"]["success"]["count"] == 8
    assert [b["batch_size"] for b in s["batch_stats"]] == [2]


def test_queue_full_is_503(server):
    x, inputs = slow_input()
    _, blocker_inputs = slow_input(BLOCKER_ROWS)
    clients = [server.client() for _ in range(4)]

    def one(i):
        if i == 0:
            return clients[0].infer("slow_queue", blocker_inputs)
        # Two fill the queue (max_queue_size 2) behind the blocker; the fourth finds it full.
        server.wait_pending("slow_queue", 1 if i < 3 else 3)
        return clients[i].infer("slow_queue", inputs)
    results = run_concurrently(4, one)
    assert [kind for kind, _ in results] == ["ok", "ok", "ok", "error"], results
    e = results[3][1]
    assert e.status() == "503" and "Exceeds maximum queue size" in e.message()
    for _, r in results[1:3]:
        np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), x)
    s = stats(server, "slow_queue")
    assert s["inference_stats"]["fail"]["count"] == 1
    assert s["inference_stats"]["success"]["count"] == 3
    assert server.client().is_server_live()


def test_queue_timeout_is_503(server):
    _, inputs = slow_input()
    _, blocker_inputs = slow_input(BLOCKER_ROWS // 2)
    clients = [server.client() for _ in range(3)]

    def one(i):
        if i == 0:
            return clients[0].infer("slow_timeout", blocker_inputs)
        server.wait_pending("slow_timeout", 1)
        return clients[i].infer("slow_timeout", inputs)
    # Queued behind a run of hundreds of milliseconds, both expire after the 20 ms default.
    results = run_concurrently(3, one)
    assert results[0][0] == "ok", results
    for kind, e in results[1:]:
        assert kind == "error" and e.status() == "503", results
        assert "Request timeout expired" in e.message()


def test_timeout_override_only_shortens(server):
    _, inputs = slow_input()
    # A 1 us timeout (shorter than the 20 ms default) expires before any worker can take it.
    with pytest.raises(InferenceServerException, match="Request timeout expired"):
        server.client().infer("slow_timeout", inputs, timeout=1)
    clients = [server.client() for _ in range(2)]
    # A 10 s timeout cannot lengthen the default: queued behind a 128-layer run, it
    # still expires.
    def one(i):
        if i == 1:
            server.wait_pending("slow_timeout", 1)
        return clients[i].infer("slow_timeout", inputs, timeout=10_000_000)
    results = run_concurrently(2, one)
    assert results[0][0] == "ok", results
    assert results[1][0] == "error" and "Request timeout expired" in results[1][1].message()


def test_priority_levels(server):
    # A long blocker holds the one instance while five low-priority requests queue behind it,
    # then a high-priority one; each is sent only once the server shows the earlier ones pending.
    _, inputs = slow_input()
    _, blocker_inputs = slow_input(BLOCKER_ROWS)
    done = []
    lock = threading.Lock()
    clients = [server.client() for _ in range(7)]
    def send(i, priority):
        clients[i].infer("slow_priority", blocker_inputs if i == 0 else inputs, priority=priority)
        with lock:
            done.append(i)
    blocker = threading.Thread(target=send, args=(0, 2))
    blocker.start()
    server.wait_pending("slow_priority", 1)
    low = [threading.Thread(target=send, args=(i, 2)) for i in range(1, 6)]
    for t in low:
        t.start()
    server.wait_pending("slow_priority", 6)
    high = threading.Thread(target=send, args=(6, 1))
    high.start()
    server.wait_pending("slow_priority", 7)
    for t in [blocker, *low, high]:
        t.join()
    # The high-priority request overtakes the low-priority ones queued before it: the instance
    # takes it as soon as the blocker ends (a client thread may still report a little late).
    assert done[0] == 0, done
    assert done.index(6) <= 2, done
    assert done.index(6) < max(done.index(i) for i in range(1, 6)), done


def test_instance_group_runs_in_parallel(server):
    _, inputs = slow_input()
    c = server.client()
    t0 = time.time()
    c.infer("slow_instances", inputs)
    single = time.time() - t0
    clients = [server.client() for _ in range(3)]
    t0 = time.time()
    results = run_concurrently(3, lambda i: clients[i].infer("slow_instances", inputs))
    assert all(kind == "ok" for kind, _ in results)
    s = stats(server, "slow_instances")
    assert s["execution_count"] == 4
    # Not a timing assertion on speed: three instances must not serialize into three runs' time
    # plus one more; on a loaded 2-core machine they may still overlap only partly.
    assert time.time() - t0 < 3 * single + 2.0
