"""Writes the demo model: a small CNN classifier (Conv-Relu-Pool-Gemm-Softmax) with a dynamic
batch dim, built with the onnx helper API and seeded random weights; and, beside it,
convs.onnx: two convolutions whose activation between them stays channel-blocked, so that its
engine stores packed weights (a seed for the engine fuzzer)."""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def build(path: str) -> None:
    rng = np.random.default_rng(7)
    w = lambda *shape: numpy_helper.from_array(  # noqa: E731
        (rng.standard_normal(shape) * 0.1).astype(np.float32))
    inits = [w(8, 3, 3, 3), w(8), w(10, 8 * 4 * 4), w(10)]
    for t, name in zip(inits, ["conv_w", "conv_b", "fc_w", "fc_b"]):
        t.name = name
    nodes = [
        helper.make_node("Conv", ["image", "conv_w", "conv_b"], ["conv"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["conv"], ["relu"]),
        helper.make_node("MaxPool", ["relu"], ["pool"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["pool"], ["flat"]),
        helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["logits"], transB=1),
        helper.make_node("Softmax", ["logits"], ["probs"], axis=-1),
    ]
    graph = helper.make_graph(
        nodes, "demo_cnn",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["batch", 3, 8, 8])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["batch", 10])],
        initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              producer_name="kiln-demo")
    onnx.checker.check_model(model)
    onnx.save(model, path)


def build_convs(path: str) -> None:
    rng = np.random.default_rng(8)
    w = lambda *shape: numpy_helper.from_array(  # noqa: E731
        (rng.standard_normal(shape) * 0.1).astype(np.float32))
    inits = [w(16, 8, 3, 3), w(16), w(8, 16, 3, 3), w(8)]
    for t, name in zip(inits, ["w1", "b1", "w2", "b2"]):
        t.name = name
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["y"], pads=[1, 1, 1, 1]),
    ]
    graph = helper.make_graph(
        nodes, "convs", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 6, 6])], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              producer_name="kiln-demo")
    onnx.checker.check_model(model)
    onnx.save(model, path)


if __name__ == "__main__":
    out_dir = sys.argv[1] if len(sys.argv) > 1 else "."
    os.makedirs(out_dir, exist_ok=True)
    build(os.path.join(out_dir, "demo.onnx"))
    build_convs(os.path.join(out_dir, "convs.onnx"))
    print(f"wrote {os.path.join(out_dir, 'demo.onnx')} and convs.onnx")
