"""Differential tests, sequence batcher: the accumulator of test_sequence.py on Kiln (ONNX with an
implicit state) and on Triton 2.51 (a Python-backend model keeping the same sum per correlation ID
itself), with the same control inputs, the same requests, compared on status and body over HTTP
and gRPC: interleaved sequences, and Triton's request errors. Skipped with the reason when
tritonserver cannot be installed or started."""
import os

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

import sequences
import triton_pair
from triton_pair import errors_of, http_answer, same

_IO = """
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] },
         { name: "CORRID_OUT" data_type: TYPE_UINT64 dims: [ 1 ] },
         { name: "FLAGS" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
"""

_MODEL_PY = """import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.acc = {}

    def execute(self, requests):
        responses = []
        for r in requests:
            get = lambda n: pb_utils.get_input_tensor_by_name(r, n).as_numpy()
            x, start, end = get("INPUT"), get("START"), get("END")
            ready, corrid = get("READY"), get("CORRID")
            key = int(corrid.reshape(-1)[0])
            out = np.zeros_like(x)
            if bool(ready.reshape(-1)[0]):
                if int(start.reshape(-1)[0]) or key not in self.acc:
                    self.acc[key] = np.zeros_like(x)
                self.acc[key] = self.acc[key] + x
                out = self.acc[key]
                if int(end.reshape(-1)[0]):
                    self.acc.pop(key, None)
            flags = (start + 2 * end + 4 * ready.astype(np.int32)).astype(np.int32)
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUTPUT", out.astype(np.int32)),
                pb_utils.Tensor("CORRID_OUT", corrid.astype(np.uint64)),
                pb_utils.Tensor("FLAGS", flags)]))
        return responses
"""


def _repo(repo):
    """seq_acc: the implicit-state ONNX accumulator for Kiln, the Python one for Triton; the
    configs differ only in the backend and Kiln's `state`."""
    controls = sequences.CONTROLS.format(corrid="UINT64")
    if os.path.basename(repo) == "kiln_repo":
        sequences.accumulator(repo, "seq_acc")
        state = sequences.STATE.format(width=1, initial="")
        config = f'backend: "onnxruntime"\nname: "seq_acc"\nmax_batch_size: 4\n{_IO}' \
                 f"sequence_batching {{ direct {{ }} {controls} {state} }}\n"
        with open(os.path.join(repo, "seq_acc", "config.pbtxt"), "w") as f:
            f.write(config)
        return
    os.makedirs(os.path.join(repo, "seq_acc", "1"), exist_ok=True)
    with open(os.path.join(repo, "seq_acc", "config.pbtxt"), "w") as f:
        f.write(f'backend: "python"\nname: "seq_acc"\nmax_batch_size: 4\n{_IO}'
                f"sequence_batching {{ direct {{ }} {controls} }}\n")
    with open(os.path.join(repo, "seq_acc", "1", "model.py"), "w") as f:
        f.write(_MODEL_PY)


@pytest.fixture(scope="module")
def pair(serve, tmp_path_factory):
    p, triton = triton_pair.start_pair(serve, tmp_path_factory, extra=_repo)
    yield p
    triton.stop()


def _request(value, rows=1, **params):
    return {"inputs": [{"name": "INPUT", "shape": [rows, 1], "datatype": "INT32",
                        "data": [value] * rows}], "parameters": params}


PATH = "/v2/models/seq_acc/infer"


def test_interleaved_http(pair):
    plan = [(1, 5, True, False), (2, 50, True, False), (1, 6, False, False),
            (2, 60, False, True), (1, 7, False, True), (1, 8, True, True)]
    for seq, value, start, end in plan:
        body = _request(value, sequence_id=seq, sequence_start=start, sequence_end=end)
        k, t = http_answer(pair.kiln, "POST", PATH, body), http_answer(pair.triton, "POST", PATH,
                                                                      body)
        same(f"sequence {seq} value {value}", k, t)


ERRORS = [
    ("no sequence id", _request(1)),
    ("sequence id 0", _request(1, sequence_id=0, sequence_start=True)),
    ("no START", _request(1, sequence_id=424242)),
    ("two rows", _request(1, rows=2, sequence_id=9, sequence_start=True)),
    ("negative id", _request(1, sequence_id=-3, sequence_start=True)),
    ("start not a bool", _request(1, sequence_id=3, sequence_start="yes")),
]


@pytest.mark.parametrize("case,body", ERRORS, ids=[e[0] for e in ERRORS])
def test_errors_http(pair, case, body):
    k, t = errors_of(http_answer(pair.kiln, "POST", PATH, body),
                     http_answer(pair.triton, "POST", PATH, body))
    same(case, k, t)


def test_string_id_for_integer_corrid(pair):
    """A kept difference (docs/SERVER.md): Triton 2.51 runs a string ID through a UINT64 CORRID
    control, which then holds the string's bytes; Kiln refuses the request."""
    body = _request(1, sequence_id="abc", sequence_start=True, sequence_end=True)
    k, t = http_answer(pair.kiln, "POST", PATH, body), http_answer(pair.triton, "POST", PATH, body)
    assert k["status"] == 400 and "must specify an integer correlation ID" in k["body"]["error"]
    assert t["status"] == 200


def _grpc(server, value, **kwargs):
    x = grpcclient.InferInput("INPUT", [1, 1], "INT32")
    x.set_data_from_numpy(np.full((1, 1), value, np.int32))
    with grpcclient.InferenceServerClient(server.grpc_url) as c:
        try:
            r = c.infer("seq_acc", [x], **kwargs)
            return {n: r.as_numpy(n).tolist() for n in ("OUTPUT", "CORRID_OUT", "FLAGS")}
        except InferenceServerException as e:
            return {"status": e.status(), "message": e.message()}


def test_grpc(pair):
    plan = [dict(sequence_id=11, sequence_start=True), dict(sequence_id=11),
            dict(sequence_id=11, sequence_end=True), dict(sequence_id=11), dict()]
    for i, kwargs in enumerate(plan):
        same(f"grpc step {i} {kwargs}", _grpc(pair.kiln, i + 1, **kwargs),
             _grpc(pair.triton, i + 1, **kwargs))


def test_model_config(pair):
    """The whole config as /config returns it, but what runs the model and Kiln's `state` (the
    Python model keeps its sums itself)."""
    k = http_answer(pair.kiln, "GET", "/v2/models/seq_acc/config")
    t = http_answer(pair.triton, "GET", "/v2/models/seq_acc/config")
    for a in (k, t):
        for f in ("backend", "platform", "default_model_filename", "runtime"):
            a["body"][f] = "<backend>" if f in a["body"] else None
    k["body"]["sequence_batching"]["state"] = []
    same("sequence model config keys", sorted(k["body"]), sorted(t["body"]))
    for key in sorted(t["body"]):
        same(f"sequence model config .{key}", k["body"].get(key), t["body"][key])
