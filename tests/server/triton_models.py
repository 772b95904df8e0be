"""The differential tests' models, twice: ONNX for Kiln (tests/server/models.py) and Python-backend
models for Triton (model.py doing the same math), with the same config.pbtxt except the backend
line, so every answer of the two servers can be compared field by field."""
import os
import textwrap

import models

# name -> (config without its backend line, model.py body of execute's per-request work).
_ADD_SUB_PY = """
        a = pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()
        b = pb_utils.get_input_tensor_by_name(r, "INPUT1").as_numpy()
        outs = [pb_utils.Tensor("OUTPUT0", a + b), pb_utils.Tensor("OUTPUT1", a - b)]
"""
_IDENTITY_PY = """
        outs = [pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()),
                pb_utils.Tensor("OUTPUT1", pb_utils.get_input_tensor_by_name(r, "INPUT1").as_numpy())]
"""
_ADD_VERSION_PY = """
        a = pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()
        outs = [pb_utils.Tensor("OUTPUT0", a + np.float32(self.version))]
"""

_MODEL_PY = """import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.version = int(args["model_version"])

    def execute(self, requests):
        responses = []
        for r in requests:{body}
            responses.append(pb_utils.InferenceResponse(output_tensors=outs))
        return responses
"""


def _io(datatype, dims):
    t = f"TYPE_{'STRING' if datatype == 'BYTES' else datatype}"
    d = ", ".join(str(x) for x in dims)
    return t, d


def _two_by_two(name, datatype, max_batch, extra=""):
    t, d = _io(datatype, [4])
    return f"""name: "{name}"
max_batch_size: {max_batch}
input [ {{ name: "INPUT0" data_type: {t} dims: [ {d} ] }}, {{ name: "INPUT1" data_type: {t} dims: [ {d} ] }} ]
output [ {{ name: "OUTPUT0" data_type: {t} dims: [ {d} ] }}, {{ name: "OUTPUT1" data_type: {t} dims: [ {d} ] }} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
{extra}"""


MODELS = {
    "add_sub": (_two_by_two("add_sub", "FP32", 8), _ADD_SUB_PY),
    "add_sub_batch": (_two_by_two("add_sub_batch", "FP32", 8, """dynamic_batching {
  preferred_batch_size: [ 4 ]
  max_queue_delay_microseconds: 2000
}"""), _ADD_SUB_PY),
    "identity_bytes": (_two_by_two("identity_bytes", "BYTES", 8), _IDENTITY_PY),
    "add_version": ("""name: "add_version"
max_batch_size: 0
version_policy: { all: { } }
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
""", _ADD_VERSION_PY),
}
VERSIONS = {"add_version": [1, 2]}


def _write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def kiln_repo(repo):
    for name, (config, _) in MODELS.items():
        cfg = 'backend: "onnxruntime"\n' + config
        if name == "add_version":
            models.add_constant(repo, name, VERSIONS[name], config=cfg)
        else:
            datatype = "BYTES" if name == "identity_bytes" else "FP32"
            models.add_sub(repo, name, datatype, config=cfg)
    return repo


def triton_repo(repo):
    for name, (config, body) in MODELS.items():
        _write(os.path.join(repo, name, "config.pbtxt"), 'backend: "python"\n' + config)
        for v in VERSIONS.get(name, [1]):
            _write(os.path.join(repo, name, str(v), "model.py"), _MODEL_PY.format(body=textwrap.indent(body, "    ")))
    return repo
