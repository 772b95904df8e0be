"""KServe v2 / Triton gRPC API of kiln-serve, through the real tritonclient.grpc (sync, callback
and asyncio clients) and through a bare stub of the published service for typed contents."""
import asyncio
import queue

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient
import tritonclient.http as httpclient
from google.protobuf import json_format
from tritonclient.grpc import model_config_pb2, service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

import grpc_util
import models
from test_http_api import NUMPY, expected, values


@pytest.fixture(scope="module")
def server(serve, tmp_path_factory):
    repo = str(tmp_path_factory.mktemp("repo"))
    for dt in models.DATATYPES:
        models.add_sub(repo, f"add_sub_{dt.lower()}", dt)
    models.simple(repo)
    models.add_sub(repo, "nobatch", "FP32", batch=False)
    models.add_constant(repo, "allv", [1, 2, 3], 'version_policy: { all: {} }')
    return grpc_util.start(serve, repo, "--grpc-thread-count=2")


@pytest.fixture(scope="module")
def stub(server):
    channel = grpc.insecure_channel(server.grpc_url)
    yield service_pb2_grpc.GRPCInferenceServiceStub(channel)
    channel.close()


def infer(client, model, arrays, dt, version="", **kwargs):
    outputs = [grpcclient.InferRequestedOutput(f"OUTPUT{i}") for i in range(2)]
    return client.infer(model, grpc_util.inputs(arrays, dt), outputs=outputs,
                        model_version=version, **kwargs)


def as_bytes_list(arr):
    return [s.encode() if isinstance(s, str) else bytes(s) for s in arr.ravel()]


def test_health_and_server_metadata(server):
    c = server.grpc_client()
    assert c.is_server_live() and c.is_server_ready()
    meta = c.get_server_metadata(as_json=True)
    assert meta["name"] == "kiln" and "statistics" in meta["extensions"]
    assert meta == server.client().get_server_metadata()
    assert c.is_model_ready("simple") and c.is_model_ready("simple", "1")
    assert not c.is_model_ready("simple", "7") and not c.is_model_ready("nope")


def test_model_metadata_and_config_match_http(server):
    c, h = server.grpc_client(), server.client()
    meta = c.get_model_metadata("simple", as_json=True)
    assert meta["platform"] == "onnxruntime_onnx" and meta["versions"] == ["1"]
    # Protobuf JSON prints int64 as strings; compare as messages.
    http_meta = json_format.ParseDict(h.get_model_metadata("simple"),
                                      service_pb2.ModelMetadataResponse())
    assert c.get_model_metadata("simple") == http_meta
    for model in ("simple", "add_sub_fp32", "nobatch", "allv"):
        cfg = c.get_model_config(model).config
        assert isinstance(cfg, model_config_pb2.ModelConfig)
        assert cfg == json_format.ParseDict(h.get_model_config(model), model_config_pb2.ModelConfig(),
                                            ignore_unknown_fields=True)
    cfg = c.get_model_config("simple").config
    assert cfg.max_batch_size == 8 and list(cfg.dynamic_batching.preferred_batch_size) == [4, 8]
    assert cfg.instance_group[0].count == 2
    assert cfg.input[0].data_type == model_config_pb2.TYPE_INT32
    assert cfg.parameters["intra_op_thread_count"].string_value == "1"
    with pytest.raises(InferenceServerException, match="unknown model") as e:
        c.get_model_metadata("nope")
    assert e.value.status() == "StatusCode.NOT_FOUND"  # as tritonserver 2.51


@pytest.mark.parametrize("dt", models.DATATYPES)
def test_every_datatype_raw(server, dt):
    c = server.grpc_client()
    a, b = values(dt, (3, 4), 1), values(dt, (3, 4), 2)
    r = infer(c, f"add_sub_{dt.lower()}", [a, b], dt)
    want0, want1 = expected(dt, a, b)
    got0, got1 = r.as_numpy("OUTPUT0"), r.as_numpy("OUTPUT1")
    out = r.get_response()
    assert len(out.raw_output_contents) == 2 and out.outputs[0].datatype == dt
    if dt == "BYTES":
        assert as_bytes_list(got0) == as_bytes_list(want0)
        assert as_bytes_list(got1) == as_bytes_list(want1)
    else:
        assert got0.dtype == NUMPY[dt] and got0.shape == (3, 4)
        np.testing.assert_array_equal(got0, want0)
        np.testing.assert_array_equal(got1, want1)


# Typed InferTensorContents field per datatype (narrow integers travel widened).
CONTENTS = {"BOOL": "bool_contents", "UINT8": "uint_contents", "UINT16": "uint_contents",
            "UINT32": "uint_contents", "UINT64": "uint64_contents", "INT8": "int_contents",
            "INT16": "int_contents", "INT32": "int_contents", "INT64": "int64_contents",
            "FP32": "fp32_contents", "FP64": "fp64_contents", "BYTES": "bytes_contents"}


def typed_request(model, arrays, dt):
    req = service_pb2.ModelInferRequest(model_name=model)
    for i, arr in enumerate(arrays):
        t = req.inputs.add(name=f"INPUT{i}", datatype=dt, shape=list(arr.shape))
        field = getattr(t.contents, CONTENTS[dt])
        field.extend(arr.ravel().tolist())
    return req


@pytest.mark.parametrize("dt", sorted(CONTENTS))
def test_every_datatype_typed_contents(server, stub, dt):
    a, b = values(dt, (2, 4), 3), values(dt, (2, 4), 4)
    response = stub.ModelInfer(typed_request(f"add_sub_{dt.lower()}", [a, b], dt))
    result = grpcclient.InferResult(response)
    want0, want1 = expected(dt, a, b)
    if dt == "BYTES":
        assert as_bytes_list(result.as_numpy("OUTPUT0")) == as_bytes_list(want0)
    else:
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), want0)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), want1)


def test_bytes_nul_and_unicode_roundtrip(server):
    c = server.grpc_client()
    data = np.array([b"\x00\x00", "\u00fc\u00df\u20ac".encode(), b"tail\x00", b"\xff\xfe raw",
                     "\U0001F600".encode(), b"", b"x", b"\x00y\x00"], dtype=np.object_).reshape(2, 4)
    r = infer(c, "add_sub_bytes", [data, data[::-1]], "BYTES")
    assert as_bytes_list(r.as_numpy("OUTPUT0")) == as_bytes_list(data)
    assert as_bytes_list(r.as_numpy("OUTPUT1")) == as_bytes_list(data[::-1])
    # Length-prefixed on the wire: 4-byte little-endian length, then the element.
    raw = r.get_response().raw_output_contents[0]
    assert raw[:6] == b"\x02\x00\x00\x00\x00\x00"


@pytest.mark.parametrize("dt", ["FP32", "INT8", "BOOL", "BF16", "BYTES", "UINT64"])
def test_http_grpc_parity(server, dt):
    a, b = values(dt, (4, 4), 5), values(dt, (4, 4), 6)
    g = infer(server.grpc_client(), f"add_sub_{dt.lower()}", [a, b], dt)
    h_inputs = []
    for i, arr in enumerate((a, b)):
        inp = httpclient.InferInput(f"INPUT{i}", [4, 4], dt)
        inp.set_data_from_numpy(arr, binary_data=True)
        h_inputs.append(inp)
    h = server.client().infer(f"add_sub_{dt.lower()}", h_inputs)
    for name in ("OUTPUT0", "OUTPUT1"):
        gx, hx = g.as_numpy(name), h.as_numpy(name)
        if dt == "BYTES":
            assert as_bytes_list(gx) == as_bytes_list(hx)
        else:
            assert gx.dtype == hx.dtype and np.array_equal(gx, hx)


def test_requested_output_and_request_id(server):
    c = server.grpc_client()
    a = np.arange(8, dtype=np.int32).reshape(2, 4)
    r = c.infer("simple", grpc_util.inputs([a, np.ones_like(a)], "INT32"),
                outputs=[grpcclient.InferRequestedOutput("OUTPUT1")], request_id="req-7")
    resp = r.get_response()
    assert resp.id == "req-7" and resp.model_name == "simple" and resp.model_version == "1"
    assert [o.name for o in resp.outputs] == ["OUTPUT1"] and list(resp.outputs[0].shape) == [2, 4]
    np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), a - 1)


def test_no_batch_model_and_versions(server):
    c = server.grpc_client()
    a, b = np.ones(4, np.float32), np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(infer(c, "nobatch", [a, b], "FP32").as_numpy("OUTPUT0"), a + b)
    for version in ("1", "2", "3"):
        r = c.infer("allv", grpc_util.inputs([np.zeros(4, np.float32)], "FP32"), model_version=version)
        assert r.as_numpy("OUTPUT0")[0] == int(version)
        assert r.get_response().model_version == version
    assert c.get_model_metadata("allv").versions == ["1", "2", "3"]


def test_statistics_match_http(server):
    c = server.grpc_client()
    a = values("INT16", (2, 4), 7)
    before = c.get_inference_statistics("add_sub_int16").model_stats[0]
    for _ in range(3):
        infer(c, "add_sub_int16", [a, a], "INT16")
    stats = c.get_inference_statistics("add_sub_int16").model_stats[0]
    assert stats.name == "add_sub_int16" and stats.version == "1"
    assert stats.inference_count - before.inference_count == 6
    assert stats.inference_stats.success.count - before.inference_stats.success.count == 3
    for key in ("queue", "compute_input", "compute_infer", "compute_output"):
        d = getattr(stats.inference_stats, key)
        assert d.count >= 3 and d.ns > 0
    assert any(b.batch_size == 2 for b in stats.batch_stats) and stats.last_inference > 0
    http = server.client().get_inference_statistics("add_sub_int16")["model_stats"][0]
    assert http["inference_count"] == stats.inference_count
    assert http["inference_stats"]["success"]["ns"] == stats.inference_stats.success.ns
    every = c.get_inference_statistics().model_stats
    assert len([s for s in every if s.name == "allv"]) == 3
    assert [(s.name, s.version) for s in c.get_inference_statistics("allv", "2").model_stats] == [
        ("allv", "2")]


def test_repository_index(server):
    c = server.grpc_client()
    rows = {(m.name, m.version): m.state for m in c.get_model_repository_index().models}
    assert rows[("simple", "1")] == "READY" and rows[("allv", "3")] == "READY"
    # Loading needs explicit mode (test_grpc_security.py covers it).
    with pytest.raises(InferenceServerException, match="not allowed"):
        c.unload_model("simple")


def test_cuda_shared_memory_without_gpu(server):
    """CUDA shared memory is served; with no GPU here a registration is refused with its cause
    (test_cuda_shared_memory.py covers the extension)."""
    c = server.grpc_client()
    with pytest.raises(InferenceServerException) as e:
        c.register_cuda_shared_memory("r", "AAAA" * 21 + "AA==", 0, 64)
    assert e.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert "failed to register CUDA shared memory region 'r'" in e.value.message()
    assert c.is_server_live()


def test_async_infer_callbacks(server):
    c = server.grpc_client()
    done = queue.Queue()
    arrays = [np.full((1, 4), i, np.int32) for i in range(12)]
    for i, a in enumerate(arrays):
        c.async_infer("simple", grpc_util.inputs([a, a], "INT32"),
                      lambda result, error, i=i: done.put((i, result, error)), request_id=str(i))
    for _ in arrays:
        i, result, error = done.get(timeout=60)
        assert error is None
        assert result.get_response().id == str(i)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), arrays[i] * 2)


def test_asyncio_client(server):
    async def run():
        async with aioclient.InferenceServerClient(server.grpc_url) as c:
            assert await c.is_server_live() and await c.is_server_ready()
            assert (await c.get_model_metadata("simple")).name == "simple"
            assert (await c.get_model_config("simple")).config.max_batch_size == 8
            arrays = [np.full((1, 4), i, np.int32) for i in range(16)]
            results = await asyncio.gather(*[
                c.infer("simple", grpc_util.inputs([a, a], "INT32")) for a in arrays])
            for a, r in zip(arrays, results):
                np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), np.zeros_like(a))
            stats = await c.get_inference_statistics("simple")
            assert stats.model_stats[0].inference_count >= 16
    asyncio.run(run())


def test_stream_infer(server):
    c = server.grpc_client()
    responses = queue.Queue()
    c.start_stream(callback=lambda result, error: responses.put((result, error)))
    arrays = {str(i): np.full((1, 4), i, np.int32) for i in range(10)}
    for rid, a in arrays.items():
        c.async_stream_infer("simple", grpc_util.inputs([a, a], "INT32"), request_id=rid)
    # A bad request in the stream gets its error and the stream carries on.
    bad = grpc_util.inputs([np.zeros((1, 3), np.int32)] * 2, "INT32")
    c.async_stream_infer("simple", bad, request_id="bad")
    c.async_stream_infer("simple", grpc_util.inputs([arrays["3"]] * 2, "INT32"), request_id="after")
    seen, errors = {}, []
    for _ in range(len(arrays) + 2):
        result, error = responses.get(timeout=60)
        if error is not None:
            errors.append(error)
        else:
            seen[result.get_response().id] = result.as_numpy("OUTPUT0")
    c.stop_stream()
    assert len(errors) == 1 and "unexpected shape" in errors[0].message()
    assert set(seen) == set(arrays) | {"after"}
    for rid, a in arrays.items():
        np.testing.assert_array_equal(seen[rid], a * 2)
