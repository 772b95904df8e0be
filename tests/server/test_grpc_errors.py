"""Malformed gRPC inference requests: each gets a clear error status, and the server stays live
and keeps answering valid requests."""
import struct

import grpc
import numpy as np
import pytest
from tritonclient.grpc import service_pb2, service_pb2_grpc

import grpc_util
import models

LIMIT = 1 << 20  # --grpc-max-receive-bytes for this module


@pytest.fixture(scope="module")
def server(serve, tmp_path_factory):
    repo = str(tmp_path_factory.mktemp("repo"))
    models.add_sub(repo, "fp32", "FP32")
    models.add_sub(repo, "strings", "BYTES")
    models.add_sub(repo, "int8", "INT8")
    models.add_sub(repo, "fp16", "FP16")
    return grpc_util.start(serve, repo, f"--grpc-max-receive-bytes={LIMIT}")


@pytest.fixture(scope="module")
def stub(server):
    channel = grpc.insecure_channel(server.grpc_url, options=[
        ("grpc.max_send_message_length", 64 << 20)])
    yield service_pb2_grpc.GRPCInferenceServiceStub(channel)
    channel.close()


def request(model="fp32", dt="FP32", shape=(1, 4), raw=None, n_inputs=2):
    req = service_pb2.ModelInferRequest(model_name=model)
    for i in range(n_inputs):
        req.inputs.add(name=f"INPUT{i}", datatype=dt, shape=list(shape))
    if raw is not None:
        req.raw_input_contents.extend(raw)
    return req


def fp32_raw(n=4):
    return np.ones(n, np.float32).tobytes()


def bytes_raw(*elements):
    return b"".join(struct.pack("<I", len(e)) + e for e in elements)


def expect_error(stub, req, code, needle):
    with pytest.raises(grpc.RpcError) as e:
        stub.ModelInfer(req)
    assert e.value.code() == code, e.value.details()
    assert needle in e.value.details(), e.value.details()


INVALID = grpc.StatusCode.INVALID_ARGUMENT


def typed(req, field, values, index=0):
    getattr(req.inputs[index].contents, field).extend(values)
    return req


CASES = {
    "raw size too small": (lambda: request(raw=[fp32_raw(3), fp32_raw()]),
                           "input byte size mismatch for input 'INPUT0'"),
    "raw size too large": (lambda: request(raw=[fp32_raw(), fp32_raw(5)]), "Expected 16, got 20"),
    "raw count": (lambda: request(raw=[fp32_raw()]), "raw_input_contents has 1 entries"),
    "shape mismatch": (lambda: request(shape=(1, 3), raw=[fp32_raw(3)] * 2), "unexpected shape"),
    "dtype mismatch": (lambda: request(dt="INT32", raw=[fp32_raw()] * 2), "data-type is 'INT32'"),
    "unknown datatype": (lambda: request(dt="FLOAT", raw=[fp32_raw()] * 2), "invalid datatype"),
    "unknown model": (lambda: request(model="nope", raw=[fp32_raw()] * 2), "unknown model"),
    "unknown input": (lambda: (lambda r: (setattr(r.inputs[1], "name", "BOGUS"), r)[1])(
        request(raw=[fp32_raw()] * 2)), "unexpected inference input 'BOGUS'"),
    "missing input": (lambda: request(raw=[fp32_raw()], n_inputs=1), "expected 2 inputs"),
    "unknown output": (lambda: (lambda r: (r.outputs.add(name="NOPE"), r)[1])(
        request(raw=[fp32_raw()] * 2)), "unexpected inference output 'NOPE'"),
    "bad version": (lambda: (lambda r: (setattr(r, "model_version", "x1"), r)[1])(
        request(raw=[fp32_raw()] * 2)), "from specified version string 'x1'"),
    "typed count": (lambda: typed(typed(request(), "fp32_contents", [1.0] * 3), "fp32_contents",
                                  [1.0] * 4, 1), "fp32_contents has 3 elements"),
    "typed wrong field": (lambda: typed(typed(request(), "int_contents", [1] * 4), "fp32_contents",
                                        [1.0] * 4, 1), "FP32 data given in int_contents"),
    "typed and raw": (lambda: typed(request(raw=[fp32_raw()] * 2), "fp32_contents", [1.0] * 4),
                      "both contents and raw_input_contents"),
    "fp16 typed": (lambda: typed(typed(request("fp16", "FP16"), "fp32_contents", [1.0] * 4),
                                 "fp32_contents", [1.0] * 4, 1), "FP16 data must be sent in raw"),
    "int8 out of range": (lambda: typed(typed(request("int8", "INT8"), "int_contents", [1, 2, 300, 4]),
                                        "int_contents", [0] * 4, 1), "out of range for INT8"),
    "bytes prefix claims too much": (
        lambda: request("strings", "BYTES", raw=[bytes_raw(b"ab", b"c", b"d", b"e")[:-1] + b"",
                                                 bytes_raw(b"a", b"b", b"c", b"d")]), "claims"),
    "bytes prefix cut short": (
        lambda: request("strings", "BYTES", raw=[bytes_raw(b"a", b"b", b"c", b"d") + b"\x01\x00",
                                                 bytes_raw(b"a", b"b", b"c", b"d")]), "cut short"),
    "bytes element count": (
        lambda: request("strings", "BYTES", raw=[bytes_raw(b"a", b"b", b"c"),
                                                 bytes_raw(b"a", b"b", b"c", b"d")]),
        "3 BYTES elements"),
    "negative dim": (lambda: request(shape=(1, -4), raw=[fp32_raw()] * 2), "non-negative"),
    "overflowing shape": (lambda: request(shape=(1 << 40, 1 << 40), raw=[b"", b""]), "overflows"),
    "huge claimed tensor": (lambda: request(shape=(1 << 30, 4), raw=[fp32_raw()] * 2),
                            "Expected 17179869184, got 16"),
    "no model name": (lambda: request(model="", raw=[fp32_raw()] * 2), "names no model"),
    "too many outputs": (lambda: (lambda r: ([r.outputs.add(name=f"O{i}") for i in range(2000)], r)[1])(
        request(raw=[fp32_raw()] * 2)), "at most"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_malformed_request(server, stub, case):
    make, needle = CASES[case]
    # An unknown model is NOT_FOUND, as in tritonserver 2.51; every other case INVALID_ARGUMENT.
    expect_error(stub, make(), grpc.StatusCode.NOT_FOUND if case == "unknown model" else INVALID,
                 needle)
    assert server.grpc_client().is_server_live()


def test_shared_memory_input_of_an_unknown_region(server, stub):
    req = request(raw=[fp32_raw()])
    req.inputs[0].parameters["shared_memory_region"].string_param = "region"
    req.inputs[0].parameters["shared_memory_byte_size"].int64_param = 8
    expect_error(stub, req, grpc.StatusCode.NOT_FOUND,
                 "Unable to find shared memory region: 'region'")


def test_message_over_the_receive_limit(server, stub):
    n = LIMIT // 4 + 16
    req = request(shape=(1, n), raw=[np.zeros(n, np.float32).tobytes()] * 2)
    with pytest.raises(grpc.RpcError) as e:
        stub.ModelInfer(req)
    assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED


def test_server_healthy_after_errors(server, stub):
    for case in sorted(CASES):
        with pytest.raises(grpc.RpcError):
            stub.ModelInfer(CASES[case][0]())
    c = server.grpc_client()
    assert c.is_server_live() and c.is_server_ready()
    a = np.arange(4, dtype=np.float32).reshape(1, 4)
    r = c.infer("fp32", grpc_util.inputs([a, a], "FP32"))
    np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), a * 2)
    stats = c.get_inference_statistics("fp32").model_stats[0]
    # Refused before they reach the model, they count in no statistic (as in tritonserver).
    assert stats.inference_stats.fail.count == 0 and stats.inference_stats.success.count >= 1
    assert server.request("GET", "/v2/health/live")[0] == 200
