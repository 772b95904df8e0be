"""gRPC connection limits: --grpc-max-concurrent-streams bounds the calls one connection has
open at once (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS: the client holds further calls, and a
client that ignores the setting has them refused with REFUSED_STREAM), other connections are not
affected, and the server stays live; --grpc-max-connection-age / -grace / -idle are accepted and
checked."""
import time

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

import grpc_util
import models

BLOCKER_ROWS = 32768  # about a second or more of work: the window below must see it running


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    repo = str(tmp_path_factory.mktemp("repo"))
    models.slow(repo, "slow", 'backend: "onnxruntime"\nmax_batch_size: 1', layers=32, rows=None)
    return repo


def own_connection(server):
    # gRPC shares one connection between channels with the same target and arguments unless
    # each channel keeps its own subchannel pool.
    return grpcclient.InferenceServerClient(
        server.grpc_url, channel_args=[("grpc.use_local_subchannel_pool", 1),
                                       ("grpc.max_receive_message_length", -1)])


def send(client, rows, results, key):
    x = np.ones((1, rows, 256), np.float32)

    def done(result, error):
        results[key] = str(error) if error else np.array_equal(result.as_numpy("OUTPUT0"), x)

    client.async_infer("slow", grpc_util.inputs([x], "FP32"), done)


def test_streams_per_connection_are_capped(serve, repo):
    server = grpc_util.start(serve, repo, "--grpc-max-concurrent-streams=1")
    a, b = own_connection(server), own_connection(server)
    results = {}
    send(a, BLOCKER_ROWS, results, "blocker")
    server.wait_pending("slow", 1)
    # Two more calls on the same connection: held back while the blocker's stream is open.
    send(a, 1024, results, "a1")
    send(a, 1024, results, "a2")
    # Another connection is not affected: its call reaches the server at once.
    send(b, 1024, results, "b")
    server.wait_pending("slow", 2)
    highest = 0
    deadline = time.time() + 0.5
    while time.time() < deadline and "blocker" not in results:
        highest = max(highest, server.pending("slow"))
        time.sleep(0.005)
    assert "blocker" not in results, "the blocker ended too soon to observe the limit"
    assert highest == 2, f"{highest} calls pending: connection a had more than one stream open"
    deadline = time.time() + 120
    while len(results) < 4:
        assert time.time() < deadline, results
        time.sleep(0.01)
    assert results == {"blocker": True, "a1": True, "a2": True, "b": True}, results
    assert a.is_server_live() and b.is_server_live()
    s = b.get_inference_statistics("slow").model_stats[0]
    assert s.inference_stats.success.count == 4


def test_connection_age_flags(serve, repo):
    server = grpc_util.start(serve, repo, "--grpc-max-connection-age=60000",
                             "--grpc-max-connection-age-grace=5000",
                             "--grpc-max-connection-idle=60000",
                             "--grpc-max-concurrent-streams=16")
    c = server.grpc_client()
    assert c.is_server_live() and c.is_model_ready("slow")
    for bad in ("--grpc-max-concurrent-streams=0", "--grpc-max-connection-age=-1"):
        s = serve(repo, f"--grpc-port={grpc_util.free_port()}", bad, wait=False)
        assert s.proc.wait(60) != 0 and bad.split("=")[0] in s.output(), s.output()


def test_idle_connections_are_closed(serve, repo):
    # A connection without calls is closed after --grpc-max-connection-idle; the client
    # reconnects transparently on its next call.
    server = grpc_util.start(serve, repo, "--grpc-max-connection-idle=200")
    c = own_connection(server)
    assert c.is_server_live()
    state = []
    channel = c._channel
    channel.subscribe(lambda s: state.append(s), try_to_connect=False)
    deadline = time.time() + 30
    while grpc.ChannelConnectivity.IDLE not in state[1:]:
        assert time.time() < deadline, state
        time.sleep(0.05)
    assert c.is_server_live()


def test_connections_are_capped(serve, repo):
    server = grpc_util.start(serve, repo, "--grpc-max-connections=2")
    # The start-up probe's connection may still count on the server for a moment after the
    # client closed it: take two connections once it is gone.
    deadline = time.time() + 30
    while True:
        clients = [own_connection(server) for _ in range(2)]
        try:
            for c in clients:
                assert c.is_server_live()
            break
        except InferenceServerException:
            for c in clients:
                c.close()
            assert time.time() < deadline, "two connections never both served"
            time.sleep(0.2)
    # A third connection is closed as it comes: its call fails cleanly, the server stays up.
    third = own_connection(server)
    with pytest.raises(InferenceServerException) as e:
        third.is_server_live()
    assert "UNAVAILABLE" in e.value.status(), e.value
    third.close()
    for c in clients:
        assert c.is_server_live() and c.is_model_ready("slow")
    assert server.client().is_server_live()  # HTTP too
    # Once a connection closes, its place is free again (gRPC closes its side asynchronously).
    clients.pop().close()
    deadline = time.time() + 30
    while True:
        late = own_connection(server)
        try:
            assert late.is_server_live()
            break
        except InferenceServerException:
            late.close()
            assert time.time() < deadline, "the closed connection's place never came free"
            time.sleep(0.1)
    assert clients[0].is_server_live()


def test_connection_cap_refuses_tls(serve, repo):
    s = serve(repo, f"--grpc-port={grpc_util.free_port()}", "--grpc-max-connections=2",
              "--grpc-use-ssl=true", "--grpc-server-cert=/nonexistent",
              "--grpc-server-key=/nonexistent", wait=False)
    code = s.proc.wait(60)
    assert code != 0 and "cannot be combined with --grpc-use-ssl" in s.output(), (code, s.output())
