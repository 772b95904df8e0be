"""Hostile gRPC clients against a real kiln-serve (issue 13): a stream that sends faster than
it is served is held back at --grpc-max-stream-inflight instead of queueing without bound, and
calls the client cancelled leave the queue instead of running."""
import queue
import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

import grpc_util
import models

BLOCKER_ROWS = 32768  # about a second or more of work


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    repo = str(tmp_path_factory.mktemp("repo"))
    models.slow(repo, "slow", 'backend: "onnxruntime"\nmax_batch_size: 1', layers=32, rows=None)
    return repo


def rows_input(rows):
    return grpc_util.inputs([np.ones((1, rows, 256), np.float32)], "FP32")


def test_stream_in_flight_is_capped(serve, repo):
    server = grpc_util.start(serve, repo, "--grpc-max-stream-inflight=4")
    results = queue.Queue()
    client = server.grpc_client()
    client.start_stream(callback=lambda result, error: results.put(error))
    client.async_stream_infer("slow", rows_input(BLOCKER_ROWS))
    server.wait_pending("slow", 1)
    for _ in range(60):
        client.async_stream_infer("slow", rows_input(64))
    highest = 0
    deadline = time.time() + 1.0
    while time.time() < deadline:
        highest = max(highest, server.pending("slow"))
        time.sleep(0.005)
    assert highest <= 4, f"{highest} requests of one stream pending past the cap of 4"
    got = [results.get(timeout=300) for _ in range(61)]
    assert all(e is None for e in got), got
    client.stop_stream()
    s = client.get_inference_statistics("slow").model_stats[0]
    assert s.inference_stats.success.count == 61
    client.close()


def test_cancelled_calls_leave_the_queue(serve, repo):
    server = grpc_util.start(serve, repo)
    client = server.grpc_client()
    done = queue.Queue()
    client.async_infer("slow", rows_input(BLOCKER_ROWS), lambda result, error: done.put(error))
    server.wait_pending("slow", 1)
    # Queued behind the blocker; the client gives up long before the blocker ends: the cancelled
    # calls take 0.4 s of its second or more (5 x 0.2 s let the last one start on a fast machine).
    for _ in range(2):
        with pytest.raises(Exception, match="Deadline"):
            client.infer("slow", rows_input(64), client_timeout=0.2)
    assert done.empty(), "the blocker ended before the cancelled calls did: the test is void"
    assert done.get(timeout=300) is None
    # The next request runs, and the cancelled ones were never executed.
    client.infer("slow", rows_input(64))
    s = client.get_inference_statistics("slow").model_stats[0]
    assert s.execution_count == 2, s
    assert s.inference_stats.success.count == 2
    assert s.inference_stats.fail.count == 2
    client.close()
