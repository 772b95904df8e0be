"""Hostile HTTP clients against a real kiln-serve (issue 13): oversized trailers and header
fields, credentials smuggled in trailers, unknown transfer codings, bodies and responses past
the memory limits, deeply nested JSON, slow clients. Each case first checks the answer, then
that the server is still live and serving."""
import json
import os
import re
import resource
import socket
import threading
import time

import numpy as np
import onnx.helper as oh
import pytest
from onnx import TensorProto as T

import models


def expand_model(repo, name="expand"):
    """OUTPUT0 = ConstantOfShape(COUNT): the client chooses the output's size."""
    g = oh.make_graph(
        [oh.make_node("ConstantOfShape", ["COUNT"], ["OUTPUT0"],
                      value=oh.make_tensor("v", T.FLOAT, [1], [0.5]))],
        name, [oh.make_tensor_value_info("COUNT", T.INT64, [1])],
        [oh.make_tensor_value_info("OUTPUT0", T.FLOAT, ["M"])])
    models._save(g, os.path.join(repo, name, "1", "model.onnx"))


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    r = tmp_path_factory.mktemp("hostile")
    models.simple(str(r))
    expand_model(str(r))
    return str(r)


def raw(port, data, read_timeout=30):
    """Sends `data` on a fresh connection and returns everything the server answered."""
    with socket.create_connection(("localhost", port), timeout=read_timeout) as s:
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        out = b""
        while True:
            try:
                chunk = s.recv(65536)
            except (ConnectionResetError, socket.timeout):
                break
            if not chunk:
                break
            out += chunk
    return out


def status_of(answer):
    assert answer.startswith(b"HTTP/1."), answer[:200]
    return int(answer.split(b" ", 2)[1])


def assert_serving(server):
    assert server.proc.poll() is None, server.output()[-3000:]
    assert server.request("GET", "/v2/health/live")[0] == 200
    body = json.dumps({"inputs": [
        {"name": "INPUT0", "datatype": "INT32", "shape": [1, 4], "data": [1, 2, 3, 4]},
        {"name": "INPUT1", "datatype": "INT32", "shape": [1, 4], "data": [1, 1, 1, 1]}]})
    status, out, _ = server.request("POST", "/v2/models/simple/infer", body=body)
    assert status == 200, out
    assert json.loads(out)["outputs"][0]["data"] == [2, 3, 4, 5]


def chunked(path, body, trailer=b"", headers=b""):
    return (b"POST " + path + b" HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n" + headers +
            b"\r\n" + b"%x\r\n" % len(body) + body + b"\r\n0\r\n" + trailer + b"\r\n")


@pytest.mark.parametrize("part", ["value", "name"])
def test_trailer_field_of_64k_on_api_and_metrics_ports(serve, repo, part):
    server = serve(repo)
    big = b"a" * (64 << 10)
    field = b"X-Big: " + big if part == "value" else big + b": 1"
    request = chunked(b"/v2/repository/index", b"{}", trailer=field + b"\r\n")
    for port in (server.http_port, server.metrics_port):
        answer = raw(port, request)
        assert status_of(answer) == 431, answer[:300]
    assert_serving(server)
    assert server.request("GET", "/metrics", port=server.metrics_port)[0] == 200


def test_70k_header_field_with_a_1mib_header_limit(serve, repo):
    server = serve(repo, "--http-max-header-bytes=1048576")
    answer = raw(server.http_port, b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\nX-Big: " +
                 b"b" * 70000 + b"\r\n\r\n")
    assert status_of(answer) == 431, answer[:300]
    assert_serving(server)


def test_huge_trailer_is_bounded(serve, repo):
    """Many small trailer fields adding up past the header limit: refused, not buffered."""
    server = serve(repo)
    trailer = b"".join(b"X-T%d: %s\r\n" % (i, b"c" * 1000) for i in range(200))
    answer = raw(server.http_port, chunked(b"/v2/repository/index", b"{}", trailer=trailer))
    assert status_of(answer) == 431, answer[:300]
    assert_serving(server)


def test_credentials_only_in_a_trailer_are_refused(serve, repo):
    bearer = b"Authorization: Bearer s3cret\r\n"
    server = serve(repo, "--http-bearer-token=s3cret")
    answer = raw(server.http_port, chunked(b"/v2/repository/index", b"{}", trailer=bearer))
    assert status_of(answer) == 401, answer[:300]
    answer = raw(server.http_port, chunked(b"/v2/repository/index", b"{}", headers=bearer))
    assert status_of(answer) == 200, answer[:300]
    # The restricted-API key as a trailer does not open its category either.
    server = serve(repo, "--http-restricted-api=model-repository:admin-key=k")
    key = b"admin-key: k\r\n"
    answer = raw(server.http_port, chunked(b"/v2/repository/index", b"{}", trailer=key))
    assert status_of(answer) == 403, answer[:300]
    answer = raw(server.http_port, chunked(b"/v2/repository/index", b"{}", headers=key))
    assert status_of(answer) == 200, answer[:300]


@pytest.mark.parametrize("scheme", ["bearer", "BEARER", "Bearer"])
def test_bearer_scheme_is_case_insensitive(serve, repo, scheme):
    server = serve(repo, "--http-bearer-token=tok")
    assert server.request("GET", "/v2", headers={"Authorization": f"{scheme} tok"})[0] == 200
    assert server.request("GET", "/v2", headers={"Authorization": f"{scheme} tak"})[0] == 401
    assert server.request("GET", "/v2", headers={"Authorization": f"{scheme}tok"})[0] == 401


def test_metrics_can_require_the_token(serve, repo):
    server = serve(repo, "--http-bearer-token=tok", "--metrics-require-token=true")
    assert server.request("GET", "/metrics", port=server.metrics_port)[0] == 401
    status, body, _ = server.request("GET", "/metrics", port=server.metrics_port,
                                     headers={"Authorization": "Bearer tok"})
    assert status == 200 and b"nv_inference_count" in body
    # Without the flag the metrics port stays open, as Triton's does.
    server = serve(repo, "--http-bearer-token=tok")
    assert server.request("GET", "/metrics", port=server.metrics_port)[0] == 200


@pytest.mark.parametrize("coding", [b"gzip", b"gzip, chunked", b"identity", b"chunked, chunked"])
def test_unknown_transfer_coding_is_501(serve, repo, coding):
    server = serve(repo)
    answer = raw(server.http_port, b"POST /v2/repository/index HTTP/1.1\r\nHost: x\r\n"
                 b"Transfer-Encoding: " + coding + b"\r\n\r\n2\r\n{}\r\n0\r\n\r\n")
    assert status_of(answer) == 501, answer[:300]
    assert_serving(server)


def expand_request(count, binary=False):
    body = {"inputs": [{"name": "COUNT", "datatype": "INT64", "shape": [1], "data": [count]}]}
    if binary:
        body["outputs"] = [{"name": "OUTPUT0", "parameters": {"binary_data": True}}]
    return json.dumps(body)


@pytest.mark.parametrize("binary", [False, True])
def test_response_larger_than_the_limit_is_refused(serve, repo, binary):
    server = serve(repo, f"--http-max-response-bytes={1 << 20}")
    status, out, _ = server.request("POST", "/v2/models/expand/infer",
                                    body=expand_request(1 << 20, binary))
    assert status == 400, out
    assert b"larger than the limit of 1048576 bytes" in out
    status, out, _ = server.request("POST", "/v2/models/expand/infer",
                                    body=expand_request(1000, binary))
    assert status == 200, out
    assert_serving(server)


def status_bytes(pid, key):
    """A size field of /proc/PID/status ("VmSize", "VmHWM", ...) in bytes."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no {key}")


def vm_size(pid):
    return status_bytes(pid, "VmSize")


def peak_rss(pid):
    return status_bytes(pid, "VmHWM")


def test_out_of_memory_while_encoding_a_response_answers_503(serve, repo):
    """Under an address-space limit, a JSON response the limit cannot hold: the allocation
    fails inside the JSON writer, which answers 503 and keeps serving (it wrote through a null
    pointer before)."""
    server = serve(repo, f"--http-max-response-bytes={1 << 40}", "--http-thread-count=2")
    assert_serving(server)
    # The server's address space now plus 768 MiB: room for the 2^27-element output tensor
    # (512 MiB) but not for its JSON text (4 bytes per element, grown by half each time).
    limit = vm_size(server.proc.pid) + (768 << 20)
    soft, hard = resource.prlimit(server.proc.pid, resource.RLIMIT_AS)
    resource.prlimit(server.proc.pid, resource.RLIMIT_AS, (limit, hard))
    status, out, _ = server.request("POST", "/v2/models/expand/infer",
                                    body=expand_request(1 << 27), timeout=300)
    assert status == 503 and b"out of memory while encoding the response" in out, out[:300]
    resource.prlimit(server.proc.pid, resource.RLIMIT_AS, (soft, hard))
    assert_serving(server)


def test_deeply_nested_json_costs_little_and_is_refused(serve, repo):
    server = serve(repo)
    base = peak_rss(server.proc.pid)
    body = b"[" * (60 << 20)
    answers = []

    def send():
        answers.append(server.request("POST", "/v2/models/simple/infer", body=body, timeout=300))

    threads = [threading.Thread(target=send) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(answers) == 8
    for status, out, _ in answers:
        assert status == 400 and b"nested deeper than" in out, out[:300]
    # Eight 60 MiB bodies held at once, plus little: no parse tree was built for them.
    assert peak_rss(server.proc.pid) - base < 8 * (60 << 20) * 2
    assert_serving(server)


def test_body_memory_budget_refuses_what_it_cannot_cover(serve, repo):
    server = serve(repo, f"--request-memory-bytes={100 << 20}", "--http-read-timeout-secs=20")
    header = (b"POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n"
              % (60 << 20))
    first = socket.create_connection(("localhost", server.http_port))
    try:
        first.sendall(header + b"{")  # holds a 60 MiB lease while it sends nothing more
        time.sleep(0.5)
        answer = raw(server.http_port, header + b"{")
        assert status_of(answer) == 503, answer[:300]
        assert b"memory budget" in answer
        assert_serving(server)
    finally:
        first.close()
    # The lease came back with the connection: the same body is accepted again.
    time.sleep(0.5)
    answer = raw(server.http_port, header + b" " * (60 << 20))
    assert status_of(answer) == 500, answer[:300]  # read whole, then refused as bad JSON (Triton's 500)


def test_slow_header_is_cut_at_the_read_timeout(serve, repo):
    server = serve(repo, "--http-read-timeout-secs=2")
    s = socket.create_connection(("localhost", server.http_port), timeout=30)
    start = time.time()
    closed = False
    try:
        for c in b"GET /v2/health/live HTTP/1.1\r\nX-Slow: " + b"z" * 100:
            s.sendall(bytes([c]))
            time.sleep(0.2)
    except (BrokenPipeError, ConnectionResetError):
        closed = True
    if not closed:
        closed = s.recv(100) == b""
    s.close()
    assert closed
    assert time.time() - start < 10
    assert_serving(server)


def test_slow_clients_do_not_lock_out_health_probes(serve, repo):
    server = serve(repo, "--http-max-connections=20", "--http-read-timeout-secs=60")
    slow = []
    try:
        for _ in range(40):
            s = socket.create_connection(("localhost", server.http_port))
            s.sendall(b"GET /v2/health/live HTTP/1.1\r\n")  # and then nothing
            slow.append(s)
        time.sleep(0.5)
        for _ in range(5):
            assert server.request("GET", "/v2/health/ready", timeout=10)[0] == 200
        assert_serving(server)
    finally:
        for s in slow:
            s.close()


def test_pipelined_requests_are_answered_in_order(serve, repo):
    server = serve(repo)
    one = b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n"
    bad = b"GET /v2/nope HTTP/1.1\r\nHost: x\r\n\r\n"
    answer = raw(server.http_port, one + bad + one + chunked(b"/v2/repository/index", b"{}"))
    statuses = [int(code) for code in re.findall(rb"HTTP/1\.1 (\d{3}) ", answer)]
    assert statuses == [200, 404, 200, 200]
