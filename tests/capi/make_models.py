"""Writes the small ONNX models the C ABI tests run (tests/capi/*.c, *.cpp) into a directory.

basic.onnx: x float[batch,3], n int64[2], s string[k], b bool[2] ->
            y = Relu(x), x_id = Identity(x), n2 = n + n, s_id = Identity(s), nb = Not(b)
relu.onnx:  x float[batch,3] -> y = Relu(x)   (compiled to relu.kiln with a batch range)
seq.onnx:   x float[4] -> parts = SplitToSequence(x) (four 1-element tensors)
"""
import os
import sys

import onnx
from onnx import TensorProto, helper


def save(graph, path):
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)


def main(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    vi = helper.make_tensor_value_info
    save(
        helper.make_graph(
            [
                helper.make_node("Relu", ["x"], ["y"]),
                helper.make_node("Identity", ["x"], ["x_id"]),
                helper.make_node("Add", ["n", "n"], ["n2"]),
                helper.make_node("Identity", ["s"], ["s_id"]),
                helper.make_node("Not", ["b"], ["nb"]),
            ],
            "basic",
            [
                vi("x", TensorProto.FLOAT, ["batch", 3]),
                vi("n", TensorProto.INT64, [2]),
                vi("s", TensorProto.STRING, ["k"]),
                vi("b", TensorProto.BOOL, [2]),
            ],
            [
                vi("y", TensorProto.FLOAT, ["batch", 3]),
                vi("x_id", TensorProto.FLOAT, ["batch", 3]),
                vi("n2", TensorProto.INT64, [2]),
                vi("s_id", TensorProto.STRING, ["k"]),
                vi("nb", TensorProto.BOOL, [2]),
            ],
        ),
        os.path.join(out_dir, "basic.onnx"),
    )
    save(
        helper.make_graph(
            [helper.make_node("Relu", ["x"], ["y"])],
            "relu",
            [vi("x", TensorProto.FLOAT, ["batch", 3])],
            [vi("y", TensorProto.FLOAT, ["batch", 3])],
        ),
        os.path.join(out_dir, "relu.onnx"),
    )
    seq_out = helper.make_tensor_sequence_value_info("parts", TensorProto.FLOAT, None)
    save(
        helper.make_graph(
            [helper.make_node("SplitToSequence", ["x"], ["parts"], keepdims=1)],
            "seq",
            [vi("x", TensorProto.FLOAT, [4])],
            [seq_out],
        ),
        os.path.join(out_dir, "seq.onnx"),
    )


if __name__ == "__main__":
    main(sys.argv[1])
