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


def simple(repo):
    """Triton's `simple` example (INT32 add_sub [N, 4]) with a complete Triton-style
    config.pbtxt, as existing repositories carry them."""
    add_sub(repo, "simple", "INT32", config="""
name: "simple"
platform: "onnxruntime_onnx"
max_batch_size: 8
version_policy: { latest: { num_versions: 1 } }
input [
  { name: "INPUT0" data_type: TYPE_INT32 dims: [ 4 ] },
  { name: "INPUT1" data_type: TYPE_INT32 dims: [ 4 ] }
]
output [
  { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 4 ] },
  { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 4 ] }
]
instance_group [ { count: 2 kind: KIND_CPU } ]
dynamic_batching { preferred_batch_size: [ 4, 8 ] max_queue_delay_microseconds: 100 }
parameters { key: "intra_op_thread_count" value: { string_value: "1" } }
""")


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
    request on the reference kernels, so requests visibly queue. `rows=None` leaves the row
    count free ([N, R, width]), so one long request can hold the instance while short ones
    queue behind it."""
    rows = "R" if rows is None else rows
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


def slow_policies(repo, timeout_us, timeout_layers):
    """The queue-policy models both protocols' tests use, free row count (see `slow`):
    slow_queue (max_queue_size 2), slow_timeout (REJECT after `timeout_us`, overridable) and
    slow_priority (2 levels, default 2)."""
    batching = 'backend: "onnxruntime"\nmax_batch_size: 1\n'
    slow(repo, "slow_queue", batching +
         "dynamic_batching { default_queue_policy { max_queue_size: 2 } }", layers=32, rows=None)
    slow(repo, "slow_timeout", batching + f"""
dynamic_batching {{
  default_queue_policy {{ timeout_action: REJECT default_timeout_microseconds: {timeout_us}
                         allow_timeout_override: true }}
}}""", layers=timeout_layers, rows=None)
    slow(repo, "slow_priority", batching +
         "dynamic_batching { priority_levels: 2 default_priority_level: 2 }", layers=64, rows=None)


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


def tile(repo, name, factor, config):
    """OUTPUT0 = INPUT0 [N, 4] repeated `factor` times along dim 1 ([N, 4 * factor]): a step
    whose output is `factor` times its input, for the request memory budget."""
    g = oh.make_graph(
        [oh.make_node("Tile", ["INPUT0", "R"], ["OUTPUT0"])], name,
        [oh.make_tensor_value_info("INPUT0", T.FLOAT, ["N", 4])],
        [oh.make_tensor_value_info("OUTPUT0", T.FLOAT, ["N", 4 * factor])],
        [onh.from_array(np.array([1, factor], dtype=np.int64), "R")])
    _save(g, os.path.join(repo, name, "1", "model.onnx"))
    _write(os.path.join(repo, name, "config.pbtxt"), config)
