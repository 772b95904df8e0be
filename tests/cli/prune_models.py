"""The small CNN the pruning tests share (tests/cli/test_prune.py, tests/python/test_prune.py): a
prunable Conv through BatchNormalization and a depthwise Conv, two Convs joined by a residual Add,
and a Gemm whose features are the graph output."""
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def residual_cnn(path, seed=0):
    """image [N,3,16,16] -> conv1 (3->8) -> BN -> Relu -> depthwise (8) -> Relu -> conv2 (8->16)
    -> Relu -> conv3 (16->16) -> Add(conv2's Relu) -> GAP -> Flatten -> fc (16->10) -> logits."""
    rng = np.random.default_rng(seed)
    inits = []

    def w(name, *shape, low=None):
        a = rng.standard_normal(shape).astype(np.float32) * 0.5
        if low is not None:
            a = rng.uniform(low, 1.5, shape).astype(np.float32)
        inits.append(numpy_helper.from_array(a, name))
        return name

    nodes = [
        helper.make_node("Conv", ["image", w("w1", 8, 3, 3, 3), w("b1", 8)], ["c1"], name="conv1",
                         pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c1", w("g", 8, low=0.1), w("beta", 8),
                                                w("mean", 8), w("var", 8, low=0.5)], ["n1"],
                         name="bn1"),
        helper.make_node("Relu", ["n1"], ["r1"]),
        helper.make_node("Conv", ["r1", w("wd", 8, 1, 3, 3), w("bd", 8)], ["d1"], name="dw",
                         group=8, pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["d1"], ["r2"]),
        helper.make_node("Conv", ["r2", w("w2", 16, 8, 1, 1), w("b2", 16)], ["c2"], name="conv2"),
        helper.make_node("Relu", ["c2"], ["r3"]),
        helper.make_node("Conv", ["r3", w("w3", 16, 16, 3, 3)], ["c3"], name="conv3",
                         pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c3", "r3"], ["s"], name="residual"),
        helper.make_node("GlobalAveragePool", ["s"], ["p"]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("Gemm", ["f", w("wf", 10, 16), w("bf", 10)], ["logits"], name="fc",
                         transB=1),
    ]
    g = helper.make_graph(nodes, "residual_cnn",
                          [helper.make_tensor_value_info("image", TensorProto.FLOAT,
                                                         ["N", 3, 16, 16])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])],
                          inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, str(path))
    return path
