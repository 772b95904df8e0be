"""Writes the demo model: a small CNN classifier (Conv-Relu-Pool-Gemm-Softmax) with a dynamic
batch dim, built with the onnx helper API and seeded random weights."""
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


if __name__ == "__main__":
    out_dir = sys.argv[1] if len(sys.argv) > 1 else "."
    os.makedirs(out_dir, exist_ok=True)
    build(os.path.join(out_dir, "demo.onnx"))
    print(f"wrote {os.path.join(out_dir, 'demo.onnx')}")
