"""Triton's CUDA shared memory extension with the real tritonclient (HTTP and gRPC), on a machine
without a GPU (this one, CI): registering answers tritonserver's failed-registration status with
the cause ("no GPU ..."), the status lists nothing, unregistering an unknown name is no error,
one name space and one region limit with system shared memory, and every malformed register body
is a 400 naming what is wrong. The handles are fake (tritonclient.utils.cuda_shared_memory needs
cuda-python); the device side is scripts/gpu_device_check.sh's KILN_GPU_CUDASHM section."""
import base64
import json
import os

import numpy as np
import pytest
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException

import grpc_util
import models

FAKE = base64.b64encode(bytes(range(64))).decode()  # what cuda_shared_memory.get_raw_handle gives


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    repo = str(tmp_path_factory.mktemp("cudashm_repo"))
    models.add_sub(repo, "add_sub", "FP32")
    return repo


@pytest.fixture(scope="module")
def server(serve, repo):
    return grpc_util.start(serve, repo, "--shared-memory-max-regions=4")


@pytest.fixture
def system_region():
    """A POSIX shm object of 64 bytes, destroyed after the test."""
    handles = []

    def make(name):
        key = f"/kiln_test_cuda_{os.getpid()}_{name}"
        handles.append(shm.create_shared_memory_region(name, key, 64))
        return key

    yield make
    for h in handles:
        shm.destroy_shared_memory_region(h)


@pytest.fixture(autouse=True)
def clean(server):
    yield
    server.client().unregister_system_shared_memory()
    server.client().unregister_cuda_shared_memory()


def answer(server, method, path, body=None):
    if isinstance(body, (dict, list)):
        body = json.dumps(body)
    status, raw, _ = server.request(method, path, body=body)
    return status, (json.loads(raw) if raw else None)


def register_body(b64=FAKE, device_id=0, byte_size=64):
    return {"raw_handle": {"b64": b64}, "device_id": device_id, "byte_size": byte_size}


def no_gpu_refusal(message, name):
    """The refusal of a fake handle: no GPU here; on a GPU machine, the handle does not open."""
    prefix = f"failed to register CUDA shared memory region '{name}': "
    assert message.startswith(prefix), message
    assert "no GPU" in message or "IPC handle" in message, message


def test_status_lists_nothing(server):
    assert answer(server, "GET", "/v2/cudasharedmemory/status") == (200, [])
    assert server.client().get_cuda_shared_memory_status() == []
    assert answer(server, "GET", "/v2/cudasharedmemory/region/x/status") == (
        404, {"error": "Unable to find cuda shared memory region: 'x'"})
    g = server.grpc_client()
    assert not g.get_cuda_shared_memory_status().regions
    with pytest.raises(InferenceServerException) as e:
        g.get_cuda_shared_memory_status("x")
    assert e.value.status() == "StatusCode.NOT_FOUND"
    assert "Unable to find cuda shared memory region: 'x'" in e.value.message()


def test_http_register_without_gpu_names_the_cause(server):
    c = server.client()
    with pytest.raises(InferenceServerException) as e:
        c.register_cuda_shared_memory("x", FAKE, 0, 64)
    assert e.value.status() == "400"
    no_gpu_refusal(e.value.message(), "x")
    # The same again (the loader's failure is remembered), and the server stays healthy.
    s, body = answer(server, "POST", "/v2/cudasharedmemory/region/y/register", register_body())
    assert s == 400
    no_gpu_refusal(body["error"], "y")
    assert c.get_cuda_shared_memory_status() == []
    assert c.is_server_live() and c.is_server_ready()
    assert c.is_model_ready("add_sub")


def test_grpc_register_without_gpu_names_the_cause(server):
    g = server.grpc_client()
    with pytest.raises(InferenceServerException) as e:
        g.register_cuda_shared_memory("x", FAKE, 0, 64)
    assert e.value.status() == "StatusCode.INVALID_ARGUMENT"
    no_gpu_refusal(e.value.message(), "x")
    assert not g.get_cuda_shared_memory_status().regions
    assert g.is_server_live()


def test_grpc_register_checks(server):
    g = server.grpc_client()
    cases = [
        (("x", base64.b64encode(bytes(63)).decode(), 0, 64),
         "failed to register CUDA shared memory region 'x': invalid args (the raw handle is 63 "
         "bytes; a cudaIpcMemHandle_t is 64)"),
        (("x", base64.b64encode(bytes(65)).decode(), 0, 64), "the raw handle is 65 bytes"),
        (("x", "", 0, 64), "the raw handle is 0 bytes"),
        (("x", FAKE, -1, 64), "invalid args (device_id -1 is not a GPU index from 0 to 255)"),
        (("x", FAKE, 256, 64), "device_id 256 is not a GPU index"),
        (("x", FAKE, 0, 0), "invalid args (byte_size must be above 0)"),
        (("a b", FAKE, 0, 64), "invalid shared memory region name 'a b'"),
    ]
    for args, words in cases:
        with pytest.raises(InferenceServerException) as e:
            g.register_cuda_shared_memory(*args)
        assert e.value.status() == "StatusCode.INVALID_ARGUMENT", args
        assert words in e.value.message(), (args, e.value.message())
    # A huge byte size passes the checks made before the device (the device bounds it by the
    # exported allocation): here, it meets the missing GPU.
    with pytest.raises(InferenceServerException) as e:
        g.register_cuda_shared_memory("x", FAKE, 0, 2**64 - 1)
    no_gpu_refusal(e.value.message(), "x")


def test_unregister_unknown_names_is_no_error(server):
    c, g = server.client(), server.grpc_client()
    c.unregister_cuda_shared_memory("never")
    c.unregister_cuda_shared_memory()
    g.unregister_cuda_shared_memory("never")
    g.unregister_cuda_shared_memory()
    assert answer(server, "POST", "/v2/cudasharedmemory/region/never/unregister") == (200, None)
    assert answer(server, "POST", "/v2/cudasharedmemory/unregister") == (200, None)


def test_one_name_space_with_system_regions(server, system_region):
    c, g = server.client(), server.grpc_client()
    c.register_system_shared_memory("s", system_region("s"), 64)
    # The name is taken: refused before any GPU is asked.
    with pytest.raises(InferenceServerException) as e:
        c.register_cuda_shared_memory("s", FAKE, 0, 64)
    assert e.value.status() == "400"
    assert e.value.message() == "shared memory region 's' already in manager"
    with pytest.raises(InferenceServerException) as e:
        g.register_cuda_shared_memory("s", FAKE, 0, 64)
    assert e.value.status() == "StatusCode.INVALID_ARGUMENT"
    # Each kind's status and unregistering see their own kind only (tritonserver's words).
    assert c.get_cuda_shared_memory_status() == []
    assert answer(server, "GET", "/v2/cudasharedmemory/region/s/status") == (
        404, {"error": "The region named 's' is registered as system shared memory, not CUDA "
                       "shared memory"})
    with pytest.raises(InferenceServerException) as e:
        g.get_cuda_shared_memory_status("s")
    assert e.value.status() == "StatusCode.NOT_FOUND"
    c.unregister_cuda_shared_memory("s")
    g.unregister_cuda_shared_memory()
    assert [r["name"] for r in c.get_system_shared_memory_status()] == ["s"]


def test_region_limit_counts_both_kinds(serve, repo, system_region):
    server = grpc_util.start(serve, repo, "--shared-memory-max-regions=1")
    c = server.client()
    c.register_system_shared_memory("s", system_region("limit"), 64)
    s, body = answer(server, "POST", "/v2/cudasharedmemory/region/x/register", register_body())
    assert s == 503
    assert body["error"] == (
        "failed to register CUDA shared memory region 'x': 1 regions are registered, the most "
        "this server takes (--shared-memory-max-regions)")
    c.unregister_system_shared_memory()
    s, body = answer(server, "POST", "/v2/cudasharedmemory/region/x/register", register_body())
    assert s == 400
    no_gpu_refusal(body["error"], "x")


BAD_BODIES = [
    ({}, "Shared memory register request has no 'raw_handle' field"),
    ([register_body()], "Shared memory register request has no 'raw_handle' field"),
    ({"raw_handle": FAKE, "device_id": 0, "byte_size": 8},
     "Shared memory register request's 'raw_handle' has no 'b64' string field"),
    ({"raw_handle": {"b64": 7}, "device_id": 0, "byte_size": 8}, "has no 'b64' string field"),
    ({"raw_handle": {"b64": FAKE}, "device_id": 0},
     "Shared memory register request has no 'byte_size' field"),
    ({"raw_handle": {"b64": FAKE}, "byte_size": 8},
     "Shared memory register request has no 'device_id' field"),
    (register_body(byte_size=-8),
     "Shared memory register request's 'byte_size' must be an unsigned integer of 64 bits"),
    (register_body(byte_size=2**64), "'byte_size' must be an unsigned integer"),
    (register_body(byte_size=1.5), "'byte_size' must be an unsigned integer"),
    (register_body(byte_size="8"), "'byte_size' must be an unsigned integer"),
    (register_body(device_id=-1), "'device_id' must be an unsigned integer"),
    (register_body(device_id=256),
     "failed to register CUDA shared memory region 'x': invalid args (device_id 256 is not a "
     "GPU index from 0 to 255)"),
    (register_body(device_id=2**64 - 1), "is not a GPU index from 0 to 255"),
    (register_body(byte_size=0), "invalid args (byte_size must be above 0)"),
    (register_body(b64="not base64!"),
     "'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t (not base64)"),
    (register_body(b64=FAKE[:-4] + "A==="), "(not base64)"),
    (register_body(b64=FAKE.replace("A", "-", 1)), "(not base64)"),
    (register_body(b64=" " + FAKE[1:]), "(not base64)"),
    (register_body(b64=base64.b64encode(bytes(63)).decode()),
     "'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t (63 bytes after "
     "decoding, not 64)"),
    (register_body(b64=base64.b64encode(bytes(65)).decode()), "(65 bytes after decoding"),
    (register_body(b64=""), "(0 bytes after decoding, not 64)"),
]


@pytest.mark.parametrize("body,words", BAD_BODIES, ids=[str(i) for i in range(len(BAD_BODIES))])
def test_malformed_register_bodies(server, body, words):
    s, answer_body = answer(server, "POST", "/v2/cudasharedmemory/region/x/register", body)
    assert s == 400, (body, answer_body)
    assert words in answer_body["error"], answer_body
    assert server.client().get_cuda_shared_memory_status() == []


def test_unparsable_body(server):
    """Not JSON at all: the JSON parser's answer, as for every endpoint (tritonserver's 500)."""
    s, body = answer(server, "POST", "/v2/cudasharedmemory/region/x/register", "{")
    assert s == 500 and body["error"].startswith("failed to parse the request JSON buffer")


def test_routes_and_methods(server):
    assert answer(server, "GET", "/v2/cudasharedmemory/region/x/register")[0] == 405
    assert answer(server, "POST", "/v2/cudasharedmemory/status")[0] == 405
    assert answer(server, "GET", "/v2/cudasharedmemory/unregister")[0] == 405
    assert answer(server, "POST", "/v2/cudasharedmemory/register", register_body())[0] == 404
    s, body = answer(server, "POST", "/v2/cudasharedmemory/region/bad$name/register",
                     register_body())
    assert s == 400 and "invalid shared memory region name 'bad$name'" in body["error"]


def test_infer_naming_an_unregistered_cuda_region(server):
    """A request naming a region never registered (a CUDA one failed to register) is refused as
    for system regions, and the model still answers after."""
    c = server.client()
    a = httpclient.InferInput("INPUT0", [1, 4], "FP32")
    a.set_shared_memory("x", 16)
    b = httpclient.InferInput("INPUT1", [1, 4], "FP32")
    b.set_data_from_numpy(np.ones((1, 4), np.float32))
    with pytest.raises(InferenceServerException) as e:
        c.infer("add_sub", [a, b])
    assert e.value.status() == "404"
    assert "Unable to find shared memory region: 'x'" in e.value.message()
    a = httpclient.InferInput("INPUT0", [1, 4], "FP32")
    a.set_data_from_numpy(np.ones((1, 4), np.float32))
    out = c.infer("add_sub", [a, b]).as_numpy("OUTPUT0")
    assert out.tolist() == [[2, 2, 2, 2]]
