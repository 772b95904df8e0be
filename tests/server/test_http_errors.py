"""Malformed and hostile requests: each gets a 4xx with a JSON error, and the server stays live."""
import json
import socket
import struct

import pytest

import models


@pytest.fixture(scope="module")
def server(serve, tmp_path_factory):
    repo = str(tmp_path_factory.mktemp("repo"))
    models.add_sub(repo, "simple", "FP32", config='backend: "onnxruntime"\nmax_batch_size: 8')
    models.add_sub(repo, "strings", "BYTES")
    return serve(repo)


def good_body(**overrides):
    body = {"inputs": [
        {"name": "INPUT0", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]},
        {"name": "INPUT1", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}]}
    body.update(overrides)
    return body


def post(server, body, headers=None, model="simple"):
    if not isinstance(body, (bytes, str)):
        body = json.dumps(body)
    return server.request("POST", f"/v2/models/{model}/infer", body, headers)


def assert_client_error(result, status=400, needle=None):
    code, body, headers = result
    assert code == status, (code, body)
    message = json.loads(body)["error"]
    if needle:
        assert needle in message, message
    return message


def binary_request(json_part, binary):
    raw = json.dumps(json_part).encode()
    return raw + binary, {"Inference-Header-Content-Length": str(len(raw))}


CASES = {
    "bad json": (b'{"inputs": [', None, "failed to parse"),
    "not an object": (b"[1, 2]", None, "JSON object"),
    "inputs missing": ({"outputs": []}, None, "'inputs'"),
    "bad datatype": (good_body(inputs=[{"name": "INPUT0", "datatype": "FP33", "shape": [1, 4],
                                        "data": [1, 2, 3, 4]}]), None, "invalid datatype"),
    "dtype mismatch": (good_body(inputs=[
        {"name": "INPUT0", "datatype": "INT32", "shape": [1, 4], "data": [1, 2, 3, 4]},
        {"name": "INPUT1", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}]),
        None, "data-type is 'INT32', but model 'simple' expects 'FP32'"),
    "shape mismatch": (good_body(inputs=[
        {"name": "INPUT0", "datatype": "FP32", "shape": [1, 5], "data": [1, 2, 3, 4, 5]},
        {"name": "INPUT1", "datatype": "FP32", "shape": [1, 5], "data": [1, 2, 3, 4, 5]}]),
        None, "unexpected shape for input 'INPUT0'"),
    "data count": (good_body(inputs=[
        {"name": "INPUT0", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3]},
        {"name": "INPUT1", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}]),
        None, "has 3 elements"),
    "negative dim": (good_body(inputs=[
        {"name": "INPUT0", "datatype": "FP32", "shape": [-1, 4], "data": [1, 2, 3, 4]}]),
        None, "non-negative"),
    "overflowing shape": (good_body(inputs=[
        {"name": "INPUT0", "datatype": "FP32", "shape": [2**40, 2**40], "data": [1]}]),
        None, "overflow"),
    "huge shape tiny data": (good_body(inputs=[
        {"name": "INPUT0", "datatype": "FP32", "shape": [100000, 100000], "data": [1]}]),
        None, "elements"),
    "string for number": (good_body(inputs=[
        {"name": "INPUT0", "datatype": "FP32", "shape": [1, 4], "data": ["a", 2, 3, 4]},
        {"name": "INPUT1", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}]),
        None, "must be numbers"),
    "missing input": (good_body(inputs=[
        {"name": "INPUT0", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}]),
        None, "expected 2 inputs but got 1"),
    "unknown input": (good_body(inputs=[
        {"name": "INPUTX", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}]),
        None, "Got input(s) ['INPUTX'], but missing required input(s) ['INPUT0','INPUT1']"),
    "unknown output": (good_body(outputs=[{"name": "NOPE"}]), None, "unexpected inference output"),
    "batch too big": (good_body(inputs=[
        {"name": f"INPUT{i}", "datatype": "FP32", "shape": [9, 4], "data": [0] * 36}
        for i in range(2)]), None, "batch-size must be <= 8"),
    "huge output count": (good_body(outputs=[{"name": "OUTPUT0"}] * 100000), None,
                          "outputs; at most"),
    "deep nesting": (b'{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[1,4],"data":'
                     + b"[" * 100000 + b"]" * 100000 + b"}]}", None, "nested deeper than"),
    "priority type": (good_body(parameters={"priority": "high"}), None, "'priority'"),
}


UNPARSED = {"bad json", "not an object", "inputs missing", "data count", "huge shape tiny data",
            "string for number"}


@pytest.mark.parametrize("name", list(CASES))
def test_malformed_json_requests(server, name):
    body, headers, needle = CASES[name]
    # JSON that does not parse, or cannot be read as the request (kinds, data counts), is 500 in
    # tritonserver 2.51, and so in Kiln (tests/server/test_triton_diff_http.py).
    status = 500 if name in UNPARSED else 400
    assert_client_error(post(server, body, headers), status, needle)
    assert server.request("GET", "/v2/health/live")[0] == 200


def test_binary_header_length_errors(server):
    inputs = [{"name": f"INPUT{i}", "datatype": "FP32", "shape": [1, 4],
               "parameters": {"binary_data_size": 16}} for i in range(2)]
    body, headers = binary_request({"inputs": inputs}, struct.pack("8f", *range(8)))
    assert post(server, body, headers)[0] == 200
    # Header length past the body, not a number, or cutting the JSON short.
    assert_client_error(post(server, body, {"Inference-Header-Content-Length": str(len(body) + 1)}),
                        400, "larger than the body")
    assert_client_error(post(server, body, {"Inference-Header-Content-Length": "12x"}), 400,
                        "Inference-Header-Content-Length")
    assert_client_error(post(server, body, {"Inference-Header-Content-Length": "10"}), 500,
                        "failed to parse")
    # Binary section too short, too long, or sizes that disagree with the shape.
    short, h = binary_request({"inputs": inputs}, struct.pack("7f", *range(7)))
    assert_client_error(post(server, short, h), 400, "binary data remain")
    long_, h = binary_request({"inputs": inputs}, struct.pack("9f", *range(9)))
    assert_client_error(post(server, long_, h), 400, "binary data follow")
    odd = [dict(inputs[0], parameters={"binary_data_size": 12}),
           dict(inputs[1], parameters={"binary_data_size": 20})]
    bad, h = binary_request({"inputs": odd}, struct.pack("8f", *range(8)))
    assert_client_error(post(server, bad, h), 400, "Expected 16, got 12")


def test_bytes_binary_errors(server):
    def req(blob, shape=(1, 4)):
        inputs = [{"name": f"INPUT{i}", "datatype": "BYTES", "shape": list(shape),
                   "parameters": {"binary_data_size": len(blob)}} for i in range(2)]
        return binary_request({"inputs": inputs}, blob + blob)
    elems = b"".join(struct.pack("<I", len(s)) + s for s in [b"a", b"", b"\x00", b"xyz"])
    assert post(server, *req(elems), model="strings")[0] == 200
    assert_client_error(post(server, *req(elems[:-1]), model="strings"), 400, "claims")
    assert_client_error(post(server, *req(elems[:2]), model="strings"), 400, "length prefix")
    assert_client_error(post(server, *req(struct.pack("<I", 2**32 - 1)), model="strings"), 400,
                        "claims")
    assert_client_error(post(server, *req(elems, shape=(1, 5)), model="strings"), 400,
                        "BYTES elements")


def test_oversized_body_is_413(server):
    # The limit is checked against Content-Length before any of the body is read.
    with socket.create_connection(("localhost", server.http_port), timeout=10) as s:
        s.sendall(b"POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\n"
                  b"Content-Length: %d\r\n\r\n" % (64 * 1024 * 1024 + 1))
        reply = s.recv(4096)
    assert reply.startswith(b"HTTP/1.1 413") and b"limit" in reply
    # A body at the limit is read (and refused as JSON, not for its size).
    code, body, _ = post(server, b" " * (64 * 1024 * 1024))
    assert code == 500  # tritonserver's status for JSON that does not parse
    assert server.request("GET", "/v2/health/live")[0] == 200


def test_garbage_and_oversized_headers(server):
    for payload in (b"NOT HTTP AT ALL\r\n\r\n",
                    b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\nX: " + b"a" * 100000 + b"\r\n\r\n",
                    b"POST /v2/models/simple/infer HTTP/1.1\r\nContent-Length: -5\r\n\r\n"):
        with socket.create_connection(("localhost", server.http_port), timeout=10) as s:
            s.sendall(payload)
            reply = s.recv(4096)
        assert reply.startswith(b"HTTP/1.1 4"), reply[:100]
    # A client that connects and leaves mid-request does no harm either.
    with socket.create_connection(("localhost", server.http_port), timeout=10) as s:
        s.sendall(b"POST /v2/models/simple/infer HTTP/1.1\r\nContent-Length: 1000\r\n\r\n{")
    assert server.request("GET", "/v2/health/live")[0] == 200


def test_unknown_model_and_version(server):
    # 404, as tritonserver 2.51.
    assert_client_error(post(server, good_body(), model="nope"), 404, "unknown model: 'nope'")
    code, body, _ = server.request("POST", "/v2/models/simple/versions/3/infer",
                                   json.dumps(good_body()))
    assert code == 404 and "version 3" in json.loads(body)["error"]
    assert server.request("GET", "/v2/models/..%2F..%2Fetc/config")[0] == 404  # no such model
