"""Differential tests, gRPC: the same calls through tritonclient.grpc to Kiln and the real
Triton 2.51 (same models), compared on status code and message, or on the response as JSON.
Skipped with the reason when tritonserver cannot be installed or started (tests/server/triton.py)."""
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from triton_pair import error_text, pair, same  # noqa: F401


def _inputs(rows=1, names=("INPUT0", "INPUT1"), datatype="FP32", cols=4):
    out = []
    for n in names:
        inp = grpcclient.InferInput(n, [rows, cols], datatype)
        if datatype == "BYTES":
            inp.set_data_from_numpy(np.array([[b"a", b"", b"c\x00d", b"e"]] * rows, dtype=object))
        else:
            inp.set_data_from_numpy(np.arange(rows * cols, dtype=np.float32).reshape(rows, cols))
        out.append(inp)
    return out


def _raw_short(client, model):
    """One input's raw contents a float short of its shape (the data-count mismatch)."""
    inputs = _inputs()
    inputs[0]._raw_content = inputs[0]._raw_content[:-4]
    return client.infer(model, inputs)


# (check, call(client)): the answer compared is the exception's status and normalized message,
# or the result as JSON.
CALLS = [
    ("live", lambda c: c.is_server_live()),
    ("log settings", lambda c: c.get_log_settings(as_json=True)),
    ("ready", lambda c: c.is_server_ready()),
    ("model ready", lambda c: c.is_model_ready("add_sub")),
    ("unknown model ready", lambda c: c.is_model_ready("nope")),
    ("unknown version ready", lambda c: c.is_model_ready("add_sub", "7")),
    ("unknown model metadata", lambda c: c.get_model_metadata("nope")),
    ("unknown version metadata", lambda c: c.get_model_metadata("add_sub", "7")),
    ("non-numeric version metadata", lambda c: c.get_model_metadata("add_sub", "x")),
    ("unknown model config", lambda c: c.get_model_config("nope")),
    ("unknown version config", lambda c: c.get_model_config("add_sub", "7")),
    ("unknown model stats", lambda c: c.get_inference_statistics("nope")),
    ("unknown version stats", lambda c: c.get_inference_statistics("add_sub", "7")),
    ("unknown model infer", lambda c: c.infer("nope", _inputs())),
    ("unknown version infer", lambda c: c.infer("add_sub", _inputs(), model_version="7")),
    ("load in mode none", lambda c: c.load_model("add_sub")),
    ("unload in mode none", lambda c: c.unload_model("add_sub")),
    ("missing input", lambda c: c.infer("add_sub", _inputs(names=("INPUT0",)))),
    ("unknown input name", lambda c: c.infer("add_sub", _inputs(names=("INPUT0", "X")))),
    ("wrong datatype", lambda c: c.infer("add_sub", [
        _inputs()[0], grpcclient.InferInput("INPUT1", [1, 4], "INT32").set_data_from_numpy(
            np.ones((1, 4), np.int32))])),
    ("wrong shape", lambda c: c.infer("add_sub", _inputs()[:1] + _inputs(names=("INPUT1",), cols=5))),
    ("batch above max", lambda c: c.infer("add_sub", _inputs(rows=9))),
    ("data count mismatch", lambda c: _raw_short(c, "add_sub")),
    ("unknown output", lambda c: c.infer(
        "add_sub", _inputs(), outputs=[grpcclient.InferRequestedOutput("NOPE")])),
    ("server metadata", lambda c: c.get_server_metadata(as_json=True)["extensions"]),
    ("repository index", lambda c: c.get_model_repository_index(as_json=True)),
    ("model metadata", lambda c: c.get_model_metadata("add_sub", as_json=True)),
    ("version metadata", lambda c: c.get_model_metadata("add_version", "1", as_json=True)),
]


def _answer(server, call):
    with grpcclient.InferenceServerClient(server.grpc_url) as c:
        try:
            result = call(c)
        except InferenceServerException as e:
            return {"status": e.status(), "message": e.message()}
    if isinstance(result, dict) and "inputs" in result:
        result.pop("platform", None)  # Triton's Python backend reports none, Kiln its ONNX one
    return {"result": result}


@pytest.mark.parametrize("check,call", CALLS, ids=[c[0] for c in CALLS])
def test_same_answer(pair, check, call):
    k, t = _answer(pair.kiln, call), _answer(pair.triton, call)
    if check == "server metadata" and "result" in t:
        absent = {"classification"}
        t["result"] = [e for e in t["result"] if e not in absent]
    if "message" in k and "message" in t:
        k["message"], t["message"] = error_text(k["message"], t["message"])
    same(f"grpc {check}", k, t)


def test_infer_results(pair):
    """The same outputs, datatypes and shapes for the same inputs (FP32, BYTES, versions)."""
    cases = [("add_sub", _inputs(rows=2), None), ("add_sub_batch", _inputs(rows=3), None),
             ("identity_bytes", _inputs(datatype="BYTES"), None)]
    version_in = grpcclient.InferInput("INPUT0", [4], "FP32")
    version_in.set_data_from_numpy(np.ones(4, np.float32))
    cases.append(("add_version", [version_in], "2"))
    for model, inputs, version in cases:
        answers = []
        for _, server in pair.both():
            with grpcclient.InferenceServerClient(server.grpc_url) as c:
                r = c.infer(model, inputs, model_version=version or "", request_id="r7")
                resp = r.get_response(as_json=True)
                outs = {o["name"]: (o["datatype"], o["shape"], r.as_numpy(o["name"]).tolist())
                        for o in resp["outputs"]}
                answers.append((resp["model_name"], resp["model_version"], resp.get("id"), outs))
        same(f"grpc infer {model}", answers[0], answers[1])


def test_model_config(pair):
    """The config as the gRPC ModelConfigResponse carries it, less the fields naming what runs
    the model (Python backend on Triton, ONNX on Kiln)."""
    for model in ("add_sub", "add_sub_batch", "identity_bytes", "add_version"):
        configs = []
        for _, server in pair.both():
            with grpcclient.InferenceServerClient(server.grpc_url) as c:
                cfg = c.get_model_config(model, as_json=True)["config"]
            for f in ("backend", "platform", "default_model_filename", "runtime"):
                cfg.pop(f, None)
            configs.append(cfg)
        same(f"grpc model config {model}", configs[0], configs[1])
