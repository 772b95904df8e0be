"""Shared helpers for the kiln Python package tests: small ONNX models written with onnx.helper.

Run with the package importable, e.g. `PYTHONPATH=build/python python3 -m pytest tests/python`
(`make test-python` does that).
"""
import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import kiln


def pytest_report_header(config):
    return f"kiln {kiln.__version__} from {os.path.dirname(kiln.__file__)}"


@pytest.fixture
def save_model(tmp_path):
    """save_model(name, nodes, inputs, outputs, initializers=()) -> path of a model, checked
    unless check=False (the checker refuses inputs of unknown rank, which ORT and Kiln accept)."""

    def save(name, nodes, inputs, outputs, initializers=(), opset=19, check=True):
        graph = helper.make_graph(nodes, name, inputs, outputs, initializer=list(initializers))
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        model.ir_version = 9
        if check:
            onnx.checker.check_model(model)
        path = tmp_path / f"{name}.onnx"
        onnx.save(model, str(path))
        return str(path)

    return save


@pytest.fixture
def mlp_model(save_model):
    """x float[batch, 4] -> y = Relu(x @ W + b), p = Softmax(y): a dynamic-batch model."""
    rng = np.random.default_rng(7)
    w = rng.standard_normal((4, 3)).astype(np.float32)
    b = rng.standard_normal(3).astype(np.float32)
    return save_model(
        "mlp",
        [
            helper.make_node("MatMul", ["x", "W"], ["xw"]),
            helper.make_node("Add", ["xw", "b"], ["z"]),
            helper.make_node("Relu", ["z"], ["y"]),
            helper.make_node("Softmax", ["y"], ["p"], axis=-1),
        ],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3]),
            helper.make_tensor_value_info("p", TensorProto.FLOAT, ["batch", 3]),
        ],
        [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "b")],
    )
