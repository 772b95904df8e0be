"""Differential tests, system shared memory: the same regions registered, listed and unregistered
on Kiln and on Triton 2.51, the same inferences with inputs and outputs in shared memory (FP32 and
BYTES, HTTP and gRPC) and the same refusals, compared on status, content type and body (error
texts as triton_pair.errors_of compares them), and on what each server wrote into its regions.
The differences kept on purpose are listed in docs/SERVER.md. Skipped with the reason when
tritonserver cannot be installed or started."""
import itertools
import os

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException, serialize_byte_tensor

import triton_pair
from triton_pair import errors_of, http_answer, same

_count = itertools.count()


@pytest.fixture(scope="module")
def pair(serve, tmp_path_factory):
    p, triton = triton_pair.start_pair(serve, tmp_path_factory)
    yield p
    triton.stop()


@pytest.fixture
def regions():
    """new(size) -> (key, handle): a fresh object per call (Triton 2.51 cannot register two
    regions of one key: it reuses the first's closed descriptor)."""
    made = []

    def new(size):
        key = f"/kiln_diff_{os.getpid()}_{next(_count)}"
        h = shm.create_shared_memory_region(key.strip("/"), key, size)
        made.append(h)
        return key, h

    yield new
    for h in made:
        try:
            shm.destroy_shared_memory_region(h)
        except Exception:  # noqa: BLE001
            pass


@pytest.fixture(autouse=True)
def clean(pair):
    yield
    for _, s in pair.both():
        http_answer(s, "POST", "/v2/systemsharedmemory/unregister")


A = np.array([[1, 2, 3, 4]], np.float32)
B = np.array([[10, 20, 30, 40]], np.float32)


def both_http(pair, method, path, body=None):
    return {name: http_answer(s, method, path, body) for name, s in pair.both()}


def compare(what, answers):
    k, t = errors_of(answers["kiln"], answers["triton"])
    same(what, k, t)


def register_both(pair, regions, name, size, offset=0, key_size=None):
    """Registers `name` on both servers, each on an object of its own with the same contents."""
    out = {}
    for server_name, s in pair.both():
        key, h = regions(key_size or size)
        out[server_name] = (key, h)
        a = http_answer(s, "POST", f"/v2/systemsharedmemory/region/{name}/register",
                        {"key": key, "offset": offset, "byte_size": size})
        assert a["status"] == 200, (server_name, a)
    return out


def test_register_status_unregister(pair, regions):
    objs = register_both(pair, regions, "r1", 64)
    register_both(pair, regions, "r2", 32, offset=4096, key_size=8192)  # Triton: page aligned
    answers = {n: http_answer(s, "GET", "/v2/systemsharedmemory/status") for n, s in pair.both()}
    for n in answers:  # the keys differ by construction
        for r in answers[n]["body"]:
            r["key"] = "<key>"
        answers[n]["body"].sort(key=lambda r: r["name"])
    compare("shm status", answers)
    compare("shm status one", {n: {**a, "body": [{**r, "key": "<key>"} for r in a["body"]]}
                               for n, a in both_http(pair, "GET",
                                                     "/v2/systemsharedmemory/region/r1/status")
                               .items()})
    for path in ["/v2/systemsharedmemory/region/nope/status"]:
        compare(f"GET {path}", both_http(pair, "GET", path))
    for path in ["/v2/systemsharedmemory/region/r1/unregister",
                 "/v2/systemsharedmemory/region/nope/unregister",
                 "/v2/systemsharedmemory/unregister"]:
        compare(f"POST {path}", both_http(pair, "POST", path))
    compare("shm status empty", both_http(pair, "GET", "/v2/systemsharedmemory/status"))
    del objs


def test_register_errors(pair, regions):
    register_both(pair, regions, "dup", 8, key_size=64)
    compare("register twice", {n: http_answer(s, "POST",
                                              "/v2/systemsharedmemory/region/dup/register",
                                              {"key": regions(64)[0], "byte_size": 8})
                               for n, s in pair.both()})
    missing = f"/kiln_diff_{os.getpid()}_missing"
    cases = [
        ("unknown key", {"key": missing, "offset": 0, "byte_size": 8}),
        ("past the end", {"key": None, "offset": 0, "byte_size": 65}),
        ("offset past the end", {"key": None, "offset": 60, "byte_size": 8}),
        ("no key", {"offset": 0, "byte_size": 8}),
        ("no byte_size", {"key": None, "offset": 0}),
        ("not an object", [1]),
        ("key not a string", {"key": 5, "byte_size": 8}),
        ("byte_size a string", {"key": None, "byte_size": "8"}),
        ("negative offset", {"key": None, "offset": -1, "byte_size": 8}),
        ("bad JSON", "{bad"),
    ]
    for what, body in cases:
        answers = {}
        for n, s in pair.both():
            b = body
            if isinstance(body, dict) and body.get("key", 1) is None:
                b = {**body, "key": regions(64)[0]}
            answers[n] = http_answer(s, "POST", "/v2/systemsharedmemory/region/x/register", b)
        compare(f"register: {what}", answers)
    for method, path in [("GET", "/v2/systemsharedmemory/region/x/register"),
                         ("POST", "/v2/systemsharedmemory/status"),
                         ("GET", "/v2/systemsharedmemory/unregister"),
                         ("GET", "/v2/systemsharedmemory/region/x/y/status"),
                         ("GET", "/v2/systemsharedmemory"),
                         ("GET", "/v2/cudasharedmemory/status"),
                         ("GET", "/v2/cudasharedmemory/region/x/status"),
                         ("POST", "/v2/cudasharedmemory/unregister")]:
        compare(f"{method} {path}", both_http(pair, method, path))


def _infer_body(in_params=None, out_params=None, data=None, second_out=True):
    p0 = {"shared_memory_region": "in", "shared_memory_byte_size": 16}
    p0.update(in_params or {})
    i0 = {"name": "INPUT0", "shape": [1, 4], "datatype": "FP32", "parameters": p0}
    if data:
        i0["data"] = data
    i1 = {"name": "INPUT1", "shape": [1, 4], "datatype": "FP32",
          "parameters": {"shared_memory_region": "in", "shared_memory_byte_size": 16,
                         "shared_memory_offset": 16}}
    outs = []
    p = {"shared_memory_region": "out", "shared_memory_byte_size": 16}
    p.update(out_params or {})
    outs.append({"name": "OUTPUT0", "parameters": p})
    if second_out:
        outs.append({"name": "OUTPUT1", "parameters": {
            "shared_memory_region": "out", "shared_memory_byte_size": 16,
            "shared_memory_offset": 32}})
    return {"inputs": [i0, i1], "outputs": outs}


def test_infer_http(pair, regions):
    ins = register_both(pair, regions, "in", 32)
    outs = register_both(pair, regions, "out", 64)
    for n in ins:
        shm.set_shared_memory_region(ins[n][1], [A, B])
    compare("infer in shared memory", both_http(pair, "POST", "/v2/models/add_sub/infer",
                                                _infer_body()))
    for n in outs:
        h = outs[n][1]
        np.testing.assert_array_equal(shm.get_contents_as_numpy(h, np.float32, [1, 4]), A + B)
        np.testing.assert_array_equal(
            shm.get_contents_as_numpy(h, np.float32, [1, 4], offset=32), A - B)
    cases = {
        "input byte size small": _infer_body({"shared_memory_byte_size": 12}),
        "input byte size large": _infer_body({"shared_memory_byte_size": 20}),
        "input offset + size out": _infer_body({"shared_memory_offset": 24}),
        "input offset out": _infer_body({"shared_memory_offset": 32}),
        "input unknown region": _infer_body({"shared_memory_region": "zzz"}),
        "input byte size string": _infer_body({"shared_memory_byte_size": "16"}),
        "input region int": _infer_body({"shared_memory_region": 5}),
        "input data too": _infer_body(data=[1, 2, 3, 4]),
        "output larger region": _infer_body(out_params={"shared_memory_byte_size": 20}),
        "output range out": _infer_body(out_params={"shared_memory_offset": 56}),
        "output unknown region": _infer_body(out_params={"shared_memory_region": "zzz"}),
        "output binary_data too": _infer_body(out_params={"binary_data": True}),
        "one output": _infer_body(second_out=False),
    }
    for what, body in cases.items():
        compare(f"infer: {what}", both_http(pair, "POST", "/v2/models/add_sub/infer", body))
    # Kept difference (docs/SERVER.md): too small is 400 before the run on Kiln, 500 after on
    # Triton; the words are the same.
    a = both_http(pair, "POST", "/v2/models/add_sub/infer",
                  _infer_body(out_params={"shared_memory_byte_size": 8}))
    assert (a["kiln"]["status"], a["triton"]["status"]) == (400, 500)
    assert a["kiln"]["body"] == a["triton"]["body"]


def test_infer_bytes_http(pair, regions):
    values = np.array([[b"a", b"bc", b"", b"def"]], dtype=np.object_)
    serialized = serialize_byte_tensor(values)
    n = len(serialized.item())
    ins = register_both(pair, regions, "bin", 256)
    outs = register_both(pair, regions, "bout", 256)
    for name in ins:
        shm.set_shared_memory_region(ins[name][1], [serialized])
    body = {"inputs": [{"name": f"INPUT{i}", "shape": [1, 4], "datatype": "BYTES",
                        "parameters": {"shared_memory_region": "bin", "shared_memory_byte_size": n}}
                       for i in range(2)],
            "outputs": [{"name": "OUTPUT0", "parameters": {"shared_memory_region": "bout",
                                                           "shared_memory_byte_size": 128}}]}
    compare("BYTES in shared memory", both_http(pair, "POST", "/v2/models/identity_bytes/infer",
                                                body))
    for name in outs:
        assert shm.get_contents_as_numpy(outs[name][1], np.object_, [1, 4]).tolist() == \
            values.tolist()


def test_grpc(pair, regions):
    ins = register_both(pair, regions, "in", 32)
    outs = register_both(pair, regions, "out", 64)
    answers = {}
    for n, s in pair.both():
        shm.set_shared_memory_region(ins[n][1], [A, B])
        c = grpcclient.InferenceServerClient(s.grpc_url)
        status = c.get_system_shared_memory_status(as_json=True)
        for r in status.get("regions", {}).values():
            r["key"] = "<key>"
        a = grpcclient.InferInput("INPUT0", [1, 4], "FP32")
        a.set_shared_memory("in", 16)
        b = grpcclient.InferInput("INPUT1", [1, 4], "FP32")
        b.set_shared_memory("in", 16, offset=16)
        o = grpcclient.InferRequestedOutput("OUTPUT0")
        o.set_shared_memory("out", 16)
        result = c.infer("add_sub", [a, b], outputs=[o]).get_response(as_json=True)
        a.set_shared_memory("in", 12)
        errors = []
        try:
            c.infer("add_sub", [a, b])
        except InferenceServerException as e:
            errors.append((e.status(), e.message()))
        a.set_shared_memory("zzz", 16)
        try:
            c.infer("add_sub", [a, b])
        except InferenceServerException as e:
            errors.append((e.status(), e.message()))
        for call, args in [("get_system_shared_memory_status", ("nope",)),
                           ("unregister_system_shared_memory", ("nope",)),
                           ("get_cuda_shared_memory_status", ("x",))]:
            try:
                getattr(c, call)(*args)
                errors.append((call, "ok"))
            except InferenceServerException as e:
                errors.append((e.status(), e.message()))
        c.unregister_system_shared_memory()
        answers[n] = {"status": status, "infer": result, "errors": errors,
                      "after": c.get_system_shared_memory_status(as_json=True),
                      "cuda": c.get_cuda_shared_memory_status(as_json=True)}
        np.testing.assert_array_equal(
            shm.get_contents_as_numpy(outs[n][1], np.float32, [1, 4]), A + B)
    same("grpc shared memory", answers["kiln"], answers["triton"])
