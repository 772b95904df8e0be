"""Model repositories for the server tests, built with onnx.helper (no downloads)."""
import os

import numpy as np
import onnx
import onnx.helper as oh
import onnx.numpy_helper as onh
from onnx import TensorProto as T

# KServe v2 datatype -> ONNX element type.
ONNX_TYPES = {
    "BOOL": T.BOOL, "UINT8": T.UINT8, "UINT16": T.UINT16, "UINT32": T.UINT32,
    "UINT64": T.UINT64, "INT8": T.INT8, "INT16": T.INT16, "INT32": T.INT32, "INT64": T.INT64,
    "FP16": T.FLOAT16, "FP32": T.FLOAT, "FP64": T.DOUBLE, "BF16": T.BFLOAT16, "BYTES": T.STRING,
}
DATATYPES = list(ONNX_TYPES)


def _save(graph, path):
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    model.ir_version = 8
    os.makedirs(os.path.dirname(path), exist_ok=True)
    onnx.save(model, path)


def _write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def add_sub(repo, name, datatype, batch=True, config=None, version=1):
    """OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1 for numeric types; BOOL uses Or/Xor and
    BYTES passes its inputs through (ONNX has no string arithmetic)."""
    t = ONNX_TYPES[datatype]
    dims = ["N", 4] if batch else [4]
    if datatype == "BOOL":
        ops = ("Or", "Xor")
    elif datatype == "BYTES":
        ops = None
    else:
        ops = ("Add", "Sub")
    if ops:
        nodes = [oh.make_node(ops[0], ["INPUT0", "INPUT1"], ["OUTPUT0"]),
                 oh.make_node(ops[1], ["INPUT0", "INPUT1"], ["OUTPUT1"])]
    else:
        nodes = [oh.make_node("Identity", ["INPUT0"], ["OUTPUT0"]),
                 oh.make_node("Identity", ["INPUT1"], ["OUTPUT1"])]
    g = oh.make_graph(
        nodes, name,
        [oh.make_tensor_value_info("INPUT0", t, dims), oh.make_tensor_value_info("INPUT1", t, dims)],
        [oh.make_tensor_value_info("OUTPUT0", t, dims), oh.make_tensor_value_info("OUTPUT1", t, dims)])
    _save(g, os.path.join(repo, name, str(version), "model.onnx"))
    if config is not None:
        _write(os.path.join(repo, name, "config.pbtxt"), config)


def add_constant(repo, name, versions, config=None):
    """OUTPUT0 = INPUT0 + version, one folder per version: tells versions apart."""
    for v in versions:
        g = oh.make_graph(
            [oh.make_node("Add", ["INPUT0", "C"], ["OUTPUT0"])], name,
            [oh.make_tensor_value_info("INPUT0", T.FLOAT, [4])],
            [oh.make_tensor_value_info("OUTPUT0", T.FLOAT, [4])],
            [onh.from_array(np.array([v], dtype=np.float32), "C")])
        _save(g, os.path.join(repo, name, str(v), "model.onnx"))
    if config is not None:
        _write(os.path.join(repo, name, "config.pbtxt"), config)


def slow(repo, name, config, layers=8, width=256, rows=1024):
    """A chain of MatMuls with identity weights: OUTPUT0 == INPUT0, tens of milliseconds per
    request on the reference kernels, so requests visibly queue."""
    nodes, inits, prev = [], [], "INPUT0"
    for i in range(layers):
        inits.append(onh.from_array(np.eye(width, dtype=np.float32), f"W{i}"))
        out = "OUTPUT0" if i == layers - 1 else f"t{i}"
        nodes.append(oh.make_node("MatMul", [prev, f"W{i}"], [out]))
        prev = out
    g = oh.make_graph(
        nodes, name, [oh.make_tensor_value_info("INPUT0", T.FLOAT, ["N", rows, width])],
        [oh.make_tensor_value_info("OUTPUT0", T.FLOAT, ["N", rows, width])], inits)
    _save(g, os.path.join(repo, name, "1", "model.onnx"))
    _write(os.path.join(repo, name, "config.pbtxt"), config)


def reshape_model(repo, name):
    """The model takes [N, 2, 2]; the config exposes [N, 4] through `reshape`."""
    g = oh.make_graph(
        [oh.make_node("Identity", ["INPUT0"], ["OUTPUT0"])], name,
        [oh.make_tensor_value_info("INPUT0", T.FLOAT, ["N", 2, 2])],
        [oh.make_tensor_value_info("OUTPUT0", T.FLOAT, ["N", 2, 2])])
    _save(g, os.path.join(repo, name, "1", "model.onnx"))
    _write(os.path.join(repo, name, "config.pbtxt"), f"""
name: "{name}"
backend: "onnxruntime"
max_batch_size: 8
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] reshape: {{ shape: [ 2, 2 ] }} }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] reshape: {{ shape: [ 2, 2 ] }} }} ]
""")
