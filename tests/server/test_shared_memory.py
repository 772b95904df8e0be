"""The system shared memory extension with the real tritonclient (HTTP and gRPC): regions made
by tritonclient.utils.shared_memory, registered, listed and unregistered; inputs read from and
outputs written to them; every refusal (names, keys, ownership, bounds, limits, sizes) in
Triton's words where Triton has them; a region unregistered while a request uses it; the
shared-memory restricted-API category (CUDA shared memory: test_cuda_shared_memory.py)."""
import json
import os
import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException, serialize_byte_tensor

import grpc_util
import models

SLOW = 'backend: "onnxruntime"\nmax_batch_size: 1\n'


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    repo = str(tmp_path_factory.mktemp("shm_repo"))
    models.add_sub(repo, "add_sub", "FP32")
    models.add_sub(repo, "identity_bytes", "BYTES")
    models.slow(repo, "slow", SLOW, layers=32, rows=None)
    return repo


@pytest.fixture(scope="module")
def server(serve, repo):
    return grpc_util.start(serve, repo, "--shared-memory-max-regions=16",
                           f"--shared-memory-max-bytes={64 << 20}")


@pytest.fixture
def region():
    """region(key, size) -> a tritonclient shm handle, destroyed after the test."""
    handles = []

    def make(key, size):
        h = shm.create_shared_memory_region(key.strip("/"), key, size)
        handles.append(h)
        return h

    yield make
    for h in handles:
        try:
            shm.destroy_shared_memory_region(h)
        except Exception:  # noqa: BLE001 - already gone
            pass


@pytest.fixture(autouse=True)
def clean(server):
    yield
    server.client().unregister_system_shared_memory()


def key(name):
    return f"/kiln_test_{os.getpid()}_{name}"


def answer(server, method, path, body=None, headers=None):
    if isinstance(body, (dict, list)):
        body = json.dumps(body)
    status, raw, hdrs = server.request(method, path, body=body, headers=headers)
    return status, (json.loads(raw) if raw else None), hdrs.get("Content-Type")


def register(server, name, k, size, offset=0):
    return answer(server, "POST", f"/v2/systemsharedmemory/region/{name}/register",
                  {"key": k, "offset": offset, "byte_size": size})


def fp32_inputs(module, a_region, offset_b=16):
    a = module.InferInput("INPUT0", [1, 4], "FP32")
    a.set_shared_memory(a_region, 16)
    b = module.InferInput("INPUT1", [1, 4], "FP32")
    b.set_shared_memory(a_region, 16, offset=offset_b)
    return [a, b]


A = np.array([[1, 2, 3, 4]], np.float32)
B = np.array([[10, 20, 30, 40]], np.float32)


# ---- register / status / unregister -----------------------------------------------------------

def test_metadata_lists_both_shared_memory_extensions(server):
    ext = server.client().get_server_metadata()["extensions"]
    assert "system_shared_memory" in ext and "cuda_shared_memory" in ext
    grpc_ext = grpc_util.grpcclient.InferenceServerClient(
        server.grpc_url).get_server_metadata().extensions
    assert "system_shared_memory" in grpc_ext and "cuda_shared_memory" in grpc_ext


def test_http_register_status_unregister(server, region):
    c = server.client()
    region(key("r1"), 64)
    region(key("r2"), 4096)
    c.register_system_shared_memory("r1", key("r1"), 64)
    c.register_system_shared_memory("r2", key("r2"), 100, offset=8)
    assert c.get_system_shared_memory_status() == [
        {"name": "r1", "key": key("r1"), "offset": 0, "byte_size": 64},
        {"name": "r2", "key": key("r2"), "offset": 8, "byte_size": 100}]
    assert c.get_system_shared_memory_status("r2") == [
        {"name": "r2", "key": key("r2"), "offset": 8, "byte_size": 100}]
    c.unregister_system_shared_memory("r1")
    assert [r["name"] for r in c.get_system_shared_memory_status()] == ["r2"]
    status, body, _ = answer(server, "GET", "/v2/systemsharedmemory/region/r1/status")
    assert (status, body) == (404, {"error": "Unable to find system shared memory region: 'r1'"})
    # As Triton: unregistering an unknown name is no error; no name unregisters all.
    c.unregister_system_shared_memory("never")
    c.unregister_system_shared_memory()
    assert c.get_system_shared_memory_status() == []


def test_grpc_register_status_unregister(server, region):
    c = server.grpc_client()
    region(key("g1"), 64)
    c.register_system_shared_memory("g1", key("g1"), 32, offset=16)
    status = c.get_system_shared_memory_status()
    assert list(status.regions) == ["g1"]
    r = status.regions["g1"]
    assert (r.name, r.key, r.offset, r.byte_size) == ("g1", key("g1"), 16, 32)
    with pytest.raises(InferenceServerException) as e:
        c.get_system_shared_memory_status("nope")
    assert e.value.status() == "StatusCode.NOT_FOUND"
    assert "Unable to find system shared memory region: 'nope'" in e.value.message()
    with pytest.raises(InferenceServerException) as e:
        c.register_system_shared_memory("g1", key("g1"), 8)
    assert "shared memory region 'g1' already in manager" in e.value.message()
    c.unregister_system_shared_memory("g1")
    assert not c.get_system_shared_memory_status().regions


# ---- inference ----------------------------------------------------------------------------------

@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_inputs_and_outputs_in_shared_memory(server, region, protocol):
    module = httpclient if protocol == "http" else grpcclient
    c = server.client() if protocol == "http" else server.grpc_client()
    hin = region(key(f"in_{protocol}"), 32)
    hout = region(key(f"out_{protocol}"), 64)
    shm.set_shared_memory_region(hin, [A, B])
    c.register_system_shared_memory("in", key(f"in_{protocol}"), 32)
    c.register_system_shared_memory("out", key(f"out_{protocol}"), 64)
    o0 = module.InferRequestedOutput("OUTPUT0")
    o0.set_shared_memory("out", 16)
    o1 = module.InferRequestedOutput("OUTPUT1")
    o1.set_shared_memory("out", 16, offset=32)  # an offset that is not page aligned
    result = c.infer("add_sub", fp32_inputs(module, "in"), outputs=[o0, o1])
    np.testing.assert_array_equal(shm.get_contents_as_numpy(hout, np.float32, [1, 4]), A + B)
    np.testing.assert_array_equal(
        shm.get_contents_as_numpy(hout, np.float32, [1, 4], offset=32), A - B)
    # As Triton: the answer names the outputs with no data (gRPC: empty raw contents).
    out = result.get_output("OUTPUT0")
    if protocol == "http":
        assert out == {"name": "OUTPUT0", "datatype": "FP32", "shape": [1, 4]}
    else:
        assert list(out.shape) == [1, 4]
        assert list(result.get_response().raw_output_contents) == [b"", b""]
    # One input in shared memory, one in the request; outputs in the answer.
    b = module.InferInput("INPUT1", [1, 4], "FP32")
    b.set_data_from_numpy(B)
    result = c.infer("add_sub", [fp32_inputs(module, "in")[0], b])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), A + B)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_shrunk_object_is_refused_and_the_server_lives(server, region, protocol):
    """A client may shrink its object after registering it (ftruncate): the server reads and
    writes through the object's descriptor, so the request is refused, never a fault (SIGBUS)."""
    module = httpclient if protocol == "http" else grpcclient
    c = server.client() if protocol == "http" else server.grpc_client()
    k = key(f"shrunk_{protocol}")
    h = region(k, 8192)
    shm.set_shared_memory_region(h, [A, B])
    c.register_system_shared_memory("in", k, 8192)
    c.register_system_shared_memory("out", k, 64, offset=4096)
    o0 = module.InferRequestedOutput("OUTPUT0")
    o0.set_shared_memory("out", 16)
    c.infer("add_sub", fp32_inputs(module, "in"), outputs=[o0])  # fine while whole
    fd = os.open("/dev/shm" + k, os.O_RDWR)
    try:
        os.ftruncate(fd, 8)
    finally:
        os.close(fd)
    with pytest.raises(InferenceServerException, match="was it shrunk"):
        c.infer("add_sub", fp32_inputs(module, "in"))
    b = module.InferInput("INPUT1", [1, 4], "FP32")
    b.set_data_from_numpy(B)
    a = module.InferInput("INPUT0", [1, 4], "FP32")
    a.set_data_from_numpy(A)
    with pytest.raises(InferenceServerException, match="was it shrunk"):
        c.infer("add_sub", [a, b], outputs=[o0])
    assert os.stat("/dev/shm" + k).st_size == 8  # the refused write did not grow it
    assert c.is_server_live()


def test_http_json_body_with_shared_memory(server, region):
    hin = region(key("json_in"), 32)
    shm.set_shared_memory_region(hin, [A, B])
    register(server, "in", key("json_in"), 32)
    body = {"inputs": [
        {"name": "INPUT0", "shape": [1, 4], "datatype": "FP32",
         "parameters": {"shared_memory_region": "in", "shared_memory_byte_size": 16}},
        {"name": "INPUT1", "shape": [1, 4], "datatype": "FP32", "data": [1, 1, 1, 1]}]}
    status, out, _ = answer(server, "POST", "/v2/models/add_sub/infer", body)
    assert status == 200
    assert out["outputs"][0]["data"] == [2, 3, 4, 5]


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_bytes_in_shared_memory(server, region, protocol):
    module = httpclient if protocol == "http" else grpcclient
    c = server.client() if protocol == "http" else server.grpc_client()
    values = np.array([[b"a", b"bc", b"", b"d\0f"]], dtype=np.object_)
    serialized = serialize_byte_tensor(values)
    n = len(serialized.item())
    hin = region(key(f"bin_{protocol}"), 256)
    hout = region(key(f"bout_{protocol}"), 256)
    shm.set_shared_memory_region(hin, [serialized])
    c.register_system_shared_memory("bin", key(f"bin_{protocol}"), 256)
    c.register_system_shared_memory("bout", key(f"bout_{protocol}"), 256)
    inputs = []
    for name in ("INPUT0", "INPUT1"):
        i = module.InferInput(name, [1, 4], "BYTES")
        i.set_shared_memory("bin", n)
        inputs.append(i)
    o = module.InferRequestedOutput("OUTPUT0")
    o.set_shared_memory("bout", 128)
    c.infer("identity_bytes", inputs, outputs=[o])
    got = shm.get_contents_as_numpy(hout, np.object_, [1, 4])
    assert got.tolist() == values.tolist()
    # Too small for the serialized output (22 bytes): Triton's words.
    o.set_shared_memory("bout", 10)
    with pytest.raises(InferenceServerException, match="should be at least 22 bytes"):
        c.infer("identity_bytes", inputs, outputs=[o])


def _wait_pending(server, model, n, timeout=120):
    """server.wait_pending for tritonclient.http's async requests: they go out only while its
    gevent loop runs, so wait in gevent's sleep."""
    import gevent
    deadline = time.time() + timeout
    while server.pending(model) < n:
        assert time.time() < deadline, f"{model}: never {n} pending"
        gevent.sleep(0.01)


def test_unregister_while_a_request_uses_the_region(server, region):
    """The region stays mapped until the request that uses it ends; the answer is complete."""
    rows = 64
    x = np.random.default_rng(0).random((1, rows, 256), np.float32)
    nbytes = x.nbytes
    hin = region(key("busy_in"), nbytes)
    hout = region(key("busy_out"), nbytes)
    shm.set_shared_memory_region(hin, [x])
    c = server.client(concurrency=2)
    c.register_system_shared_memory("busy_in", key("busy_in"), nbytes)
    c.register_system_shared_memory("busy_out", key("busy_out"), nbytes)
    # A long request first, so the shared memory one waits in the queue behind it.
    blocker = httpclient.InferInput("INPUT0", [1, 2048, 256], "FP32")
    blocker.set_data_from_numpy(np.zeros((1, 2048, 256), np.float32))
    first = c.async_infer("slow", [blocker])
    _wait_pending(server, "slow", 1)
    i = httpclient.InferInput("INPUT0", [1, rows, 256], "FP32")
    i.set_shared_memory("busy_in", nbytes)
    o = httpclient.InferRequestedOutput("OUTPUT0")
    o.set_shared_memory("busy_out", nbytes)
    second = c.async_infer("slow", [i], outputs=[o])
    _wait_pending(server, "slow", 2)
    admin = server.client()
    admin.unregister_system_shared_memory()
    assert admin.get_system_shared_memory_status() == []
    # The names are free again at once.
    admin.register_system_shared_memory("busy_in", key("busy_in"), 64)
    first.get_result()
    assert second.get_result().get_output("OUTPUT0")["shape"] == [1, rows, 256]
    np.testing.assert_allclose(shm.get_contents_as_numpy(hout, np.float32, x.shape), x,
                               rtol=1e-5)


# ---- refusals -----------------------------------------------------------------------------------

def test_register_refusals(server, region):
    region(key("ref"), 64)
    assert register(server, "ok", key("ref"), 64)[0] == 200
    cases = [
        # Triton's words and statuses
        (("ok", key("ref"), 8), 400, "shared memory region 'ok' already in manager"),
        (("x", key("missing"), 8), 500, f"Unable to open shared memory region: '{key('missing')}'"),
        (("x", key("ref"), 65), 400, "failed to register shared memory region 'x': invalid args"),
        (("x", key("ref"), 8, 60), 400,
         "failed to register shared memory region 'x': invalid args"),
        (("x", key("ref"), 2, 2 ** 64 - 1), 400,
         "failed to register shared memory region 'x': invalid args"),
        (("x", key("ref"), 0), 400, "failed to register shared memory region 'x': invalid args"),
        # Kiln's own: names and keys
        (("n" * 257, key("ref"), 8), 400, "invalid shared memory region name"),
        (("a%20b", key("ref"), 8), 400, "invalid shared memory region name 'a b'"),
        (("x", "/a/b", 8), 400, "is not a POSIX shared memory name"),
        (("x", "/..", 8), 400, "is not a POSIX shared memory name"),
        (("x", "", 8), 400, "is not a POSIX shared memory name"),
    ]
    for args, status, needle in cases:
        s, body, _ = register(server, *args)
        assert s == status and needle in body["error"], (args, s, body)
    assert [r["name"] for r in server.client().get_system_shared_memory_status()] == ["ok"]


def test_register_body_errors(server, region):
    region(key("body"), 64)
    path = "/v2/systemsharedmemory/region/x/register"
    cases = [
        ({"offset": 0, "byte_size": 8}, 400, "Shared memory register request has no 'key' field"),
        ({"key": key("body")}, 400, "Shared memory register request has no 'byte_size' field"),
        ([1], 400, "Shared memory register request has no 'key' field"),
        ({"key": 5, "byte_size": 8}, 500, "attempt to access JSON non-string as string"),
        ({"key": key("body"), "byte_size": "8"}, 500,
         "attempt to access JSON non-unsigned-integer as unsigned-integer"),
        ({"key": key("body"), "byte_size": 8, "offset": -1}, 500,
         "attempt to access JSON non-unsigned-integer as unsigned-integer"),
        ("{bad", 500, "failed to parse the request JSON buffer"),
    ]
    for body, status, needle in cases:
        s, out, _ = answer(server, "POST", path, body)
        assert s == status and needle in out["error"], (body, s, out)
    assert answer(server, "GET", path)[0] == 405
    assert answer(server, "POST", "/v2/systemsharedmemory/status")[0] == 405
    assert answer(server, "GET", "/v2/systemsharedmemory/unregister")[0] == 405
    assert answer(server, "GET", "/v2/systemsharedmemory/region/x/y/status")[0] == 404
    assert answer(server, "GET", "/v2/systemsharedmemory")[0] == 404


@pytest.mark.skipif(os.geteuid() != 0, reason="chown of the test's object needs root")
def test_objects_of_another_user_are_refused(server, region):
    region(key("other"), 64)
    os.chown("/dev/shm" + key("other"), 12345, -1)
    s, body, _ = register(server, "other", key("other"), 64)
    assert s == 400 and "is owned by uid 12345, not by the server's uid 0" in body["error"]


def test_only_regular_objects(server):
    fifo = "/dev/shm" + key("fifo")
    link = "/dev/shm" + key("link")
    os.mkfifo(fifo)
    os.symlink("/etc/passwd", link)
    try:
        s, body, _ = register(server, "fifo", key("fifo"), 8)
        assert s == 400 and "is not a regular shared memory object" in body["error"]
        # A link is not followed (shm_open's O_NOFOLLOW).
        s, body, _ = register(server, "link", key("link"), 8)
        assert s == 500 and "Unable to open shared memory region" in body["error"]
    finally:
        os.unlink(fifo)
        os.unlink(link)


def test_limits(serve, repo, region):
    server = grpc_util.start(serve, repo, "--shared-memory-max-regions=2",
                             "--shared-memory-max-bytes=16384")
    region(key("lim"), 65536)
    c = server.client()
    c.register_system_shared_memory("a", key("lim"), 4096)
    c.register_system_shared_memory("b", key("lim"), 4096, offset=4096)
    s, body, _ = register(server, "c", key("lim"), 8)
    assert s == 503 and "2 regions are registered" in body["error"]
    c.unregister_system_shared_memory("a")
    # The bytes are checked before anything is mapped.
    s, body, _ = register(server, "c", key("lim"), 16384)
    assert s == 503 and "--shared-memory-max-bytes" in body["error"]
    c.register_system_shared_memory("c", key("lim"), 8192)
    assert [r["name"] for r in c.get_system_shared_memory_status()] == ["b", "c"]


def test_inference_refusals(server, region):
    hin = region(key("inf_in"), 32)
    region(key("inf_out"), 64)
    shm.set_shared_memory_region(hin, [A, B])
    register(server, "in", key("inf_in"), 32)
    register(server, "out", key("inf_out"), 64)

    def infer_body(in_params=None, out_params=None, data=None):
        p0 = {"shared_memory_region": "in", "shared_memory_byte_size": 16}
        p0.update(in_params or {})
        i0 = {"name": "INPUT0", "shape": [1, 4], "datatype": "FP32", "parameters": p0}
        if data:
            i0["data"] = data
        body = {"inputs": [i0, {"name": "INPUT1", "shape": [1, 4], "datatype": "FP32",
                                "data": [1, 1, 1, 1]}]}
        if out_params is not None:
            p = {"shared_memory_region": "out", "shared_memory_byte_size": 16}
            p.update(out_params)
            body["outputs"] = [{"name": "OUTPUT0", "parameters": p}]
        return body

    stats = server.client().get_inference_statistics("add_sub")["model_stats"][0]
    cases = [
        (infer_body({"shared_memory_byte_size": 12}), 400,
         "[request id: <id_unknown>] input byte size mismatch for input 'INPUT0' for model "
         "'add_sub'. Expected 16, got 12"),
        (infer_body({"shared_memory_offset": 24}), 400,
         "Invalid offset + byte size for shared memory region: 'in'"),
        (infer_body({"shared_memory_offset": 32}), 400,
         "Invalid offset for shared memory region: 'in'"),
        (infer_body({"shared_memory_region": "zzz"}), 404,
         "Unable to find shared memory region: 'zzz'"),
        (infer_body({"shared_memory_byte_size": "16"}), 500,
         "Unable to parse 'shared_memory_byte_size'"),
        (infer_body({"shared_memory_region": 5}), 500, "Unable to parse 'shared_memory_region'"),
        (infer_body(data=[1, 2, 3, 4]), 400,
         "Input must set only one of the following fields: 'data', 'binary_data_size' in "
         "'parameters', 'shared_memory_region' in 'parameters'. But set 'data' "
         "'shared_memory_region'"),
        # An output region too small is refused before the model runs.
        (infer_body(out_params={"shared_memory_byte_size": 8}), 400,
         "shared memory size specified with the request for output 'OUTPUT0' (8 bytes) should be "
         "at least 16 bytes to hold the results"),
        (infer_body(out_params={"shared_memory_offset": 56}), 400,
         "Invalid offset + byte size for shared memory region: 'out'"),
        (infer_body(out_params={"shared_memory_region": "zzz"}), 404,
         "Unable to find shared memory region: 'zzz'"),
        (infer_body(out_params={"binary_data": True}), 400,
         "Output can't set both 'shared_memory_region' and 'binary_data'"),
    ]
    for body, status, needle in cases:
        s, out, _ = answer(server, "POST", "/v2/models/add_sub/infer", body)
        assert s == status and out["error"].startswith(needle), (body, s, out)
    after = server.client().get_inference_statistics("add_sub")["model_stats"][0]
    assert after["inference_count"] == stats["inference_count"]
    # A larger output region is fine.
    assert answer(server, "POST", "/v2/models/add_sub/infer",
                  infer_body(out_params={"shared_memory_byte_size": 20}))[0] == 200


def test_grpc_inference_refusals(server, region):
    hin = region(key("ginf"), 32)
    shm.set_shared_memory_region(hin, [A, B])
    c = server.grpc_client()
    c.register_system_shared_memory("gin", key("ginf"), 32)
    inputs = fp32_inputs(grpcclient, "gin")
    inputs[0].set_shared_memory("gin", 12)
    with pytest.raises(InferenceServerException) as e:
        c.infer("add_sub", inputs)
    assert e.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert "input byte size mismatch for input 'INPUT0'" in e.value.message()
    inputs[0].set_shared_memory("gone", 16)
    with pytest.raises(InferenceServerException) as e:
        c.infer("add_sub", inputs)
    assert e.value.status() == "StatusCode.NOT_FOUND"
    assert c.is_server_live()


# ---- access control --------------------------------------------------------------------

def test_restricted_api_category(serve, repo, region):
    server = grpc_util.start(serve, repo, "--http-restricted-api=shared-memory:shm-key=yes",
                             "--grpc-restricted-protocol=shared-memory:shm-key=yes")
    region(key("restricted"), 64)
    for path, method in [("/v2/systemsharedmemory/status", "GET"),
                         ("/v2/systemsharedmemory/region/r/register", "POST"),
                         ("/v2/systemsharedmemory/unregister", "POST"),
                         ("/v2/cudasharedmemory/status", "GET")]:
        s, body, _ = answer(server, method, path, {"key": key("restricted"), "byte_size": 8})
        assert s == 403 and body == {"error": "This API is restricted, expecting header 'shm-key'"}
    c = server.client()
    c.register_system_shared_memory("r", key("restricted"), 8, headers={"shm-key": "yes"})
    assert len(c.get_system_shared_memory_status(headers={"shm-key": "yes"})) == 1
    g = server.grpc_client()
    with pytest.raises(InferenceServerException) as e:
        g.get_system_shared_memory_status()
    assert e.value.status() == "StatusCode.UNAVAILABLE"
    assert len(g.get_system_shared_memory_status(headers={"shm-key": "yes"}).regions) == 1
