"""Differential tests, explicit model control: load, unload and the repository index of Kiln and
the real Triton 2.51 (same models), over HTTP and gRPC, compared on status, body and message.
Skipped with the reason when tritonserver cannot be installed or started (tests/server/triton.py)."""
import time

import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

import triton_pair
from triton_pair import errors_of, error_text, http_answer, same

ARGS = ("--model-control-mode=explicit", "--load-model=add_sub", "--load-model=add_version")


@pytest.fixture(scope="module")
def pair(serve, tmp_path_factory):
    p, triton = triton_pair.start_pair(serve, tmp_path_factory, ARGS, ARGS)
    yield p
    triton.stop()


def _settled(server):
    """Waits until no model of `server` is LOADING or UNLOADING: Triton's unload returns while
    the Python stub still stops (Kiln's returns once the version is gone), so the index is
    compared once both have finished."""
    deadline = time.time() + 60
    while time.time() < deadline:
        index = http_answer(server, "POST", "/v2/repository/index")["body"]
        if not any(m.get("state") in ("LOADING", "UNLOADING") for m in index):
            return
        time.sleep(0.1)
    raise AssertionError(f"index never settled: {index}")


def _both(pair, method, path, body=None):
    return errors_of(http_answer(pair.kiln, method, path, body),
                     http_answer(pair.triton, method, path, body))


def _grpc(server, call):
    with grpcclient.InferenceServerClient(server.grpc_url) as c:
        try:
            return {"result": call(c)}
        except InferenceServerException as e:
            return {"status": e.status(), "message": e.message()}


def _grpc_both(pair, call):
    k, t = _grpc(pair.kiln, call), _grpc(pair.triton, call)
    if "message" in k and "message" in t:
        k["message"], t["message"] = error_text(k["message"], t["message"])
    return k, t


def test_index_after_startup(pair):
    """Models not loaded are listed by name only; loaded ones by version and state."""
    same("explicit index", *_both(pair, "POST", "/v2/repository/index"))
    same("explicit index ready", *_both(pair, "POST", "/v2/repository/index", {"ready": True}))
    same("grpc explicit index",
         *_grpc_both(pair, lambda c: c.get_model_repository_index(as_json=True)))


def test_load_unload_cycle(pair):
    steps = [
        ("load unknown model", "POST", "/v2/repository/models/nope/load", None),
        ("load add_sub_batch", "POST", "/v2/repository/models/add_sub_batch/load", None),
        ("ready after load", "GET", "/v2/models/add_sub_batch/ready", None),
        ("unload add_sub_batch", "POST", "/v2/repository/models/add_sub_batch/unload", None),
        ("unload unknown model", "POST", "/v2/repository/models/nope/unload", None),
        ("ready after unload", "GET", "/v2/models/add_sub_batch/ready", None),
        ("metadata after unload", "GET", "/v2/models/add_sub_batch", None),
        ("index after unload", "POST", "/v2/repository/index", None),
        ("load with bad JSON", "POST", "/v2/repository/models/add_sub_batch/load", "{bad"),
    ]
    for check, method, path, body in steps:
        if check == "index after unload":
            _settled(pair.triton)
        same(f"explicit {check}", *_both(pair, method, path, body))


def test_grpc_load_unload_cycle(pair):
    steps = [
        ("load unknown model", lambda c: c.load_model("nope")),
        ("load identity_bytes", lambda c: c.load_model("identity_bytes")),
        ("ready after load", lambda c: c.is_model_ready("identity_bytes")),
        ("unload identity_bytes", lambda c: c.unload_model("identity_bytes")),
        ("ready after unload", lambda c: c.is_model_ready("identity_bytes")),
        ("unload unknown model", lambda c: c.unload_model("nope")),
        ("index after unload", lambda c: c.get_model_repository_index(as_json=True)),
    ]
    for check, call in steps:
        if check == "index after unload":
            _settled(pair.triton)
        same(f"grpc explicit {check}", *_grpc_both(pair, call))
