"""The 2-layer MLP (256 -> 512 -> 256, symbolic batch, seeded weights) that the CPU thread
benchmarks run (bench/python_parallel_runs.py, bench/cpu_wait_policy.py), built with onnx.helper."""
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def mlp(path):
    rng = np.random.default_rng(1)
    inits = [
        numpy_helper.from_array((rng.standard_normal(s) * 0.05).astype(np.float32), n)
        for n, s in [("w1", (256, 512)), ("b1", (512,)), ("w2", (512, 256)), ("b2", (256,))]
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h0"]),
        helper.make_node("Add", ["h0", "b1"], ["h1"]),
        helper.make_node("Relu", ["h1"], ["h"]),
        helper.make_node("MatMul", ["h", "w2"], ["y0"]),
        helper.make_node("Add", ["y0", "b2"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "mlp2",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 256])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 256])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
