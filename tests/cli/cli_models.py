"""Small ONNX models built with onnx.helper for the kiln command tests (seeded random weights)."""
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def _save(nodes, inputs, outputs, inits, path, opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def _w(rng, name, *shape):
    return numpy_helper.from_array((rng.standard_normal(shape) * 0.5).astype(np.float32), name)


def mlp(path):
    """x[n,4] -> MatMul -> Add -> Tanh -> MatMul -> y[n,3]; named nodes."""
    rng = np.random.default_rng(1)
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"], name="fc1"),
        helper.make_node("Add", ["h", "b1"], ["hb"], name="bias1"),
        helper.make_node("Tanh", ["hb"], ["t"], name="act"),
        helper.make_node("MatMul", ["t", "w2"], ["y"], name="fc2"),
    ]
    return _save(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
                 [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])],
                 [_w(rng, "w1", 4, 5), _w(rng, "b1", 5), _w(rng, "w2", 5, 3)], path)


def conv_bn(path):
    """Conv -> BatchNormalization -> Relu -> GlobalAveragePool: the BN folds into the Conv."""
    rng = np.random.default_rng(2)
    scale = numpy_helper.from_array(rng.uniform(0.5, 1.5, 4).astype(np.float32), "scale")
    var = numpy_helper.from_array(rng.uniform(0.5, 2.0, 4).astype(np.float32), "var")
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["bn"],
                         name="bn"),
        helper.make_node("Relu", ["bn"], ["r"], name="relu"),
        helper.make_node("GlobalAveragePool", ["r"], ["y"], name="gap"),
    ]
    return _save(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 6, 6])],
                 [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 1, 1])],
                 [_w(rng, "w", 4, 2, 3, 3), _w(rng, "b", 4), scale, _w(rng, "bias", 4),
                  _w(rng, "mean", 4), var], path)


def layernorm_softmax(path):
    """LayerNormalization -> Softmax and an ArgMax (int64) output: two outputs."""
    rng = np.random.default_rng(3)
    nodes = [
        helper.make_node("LayerNormalization", ["x", "gamma", "beta"], ["ln"], name="ln", axis=-1),
        helper.make_node("Softmax", ["ln"], ["probs"], name="softmax", axis=-1),
        helper.make_node("ArgMax", ["ln"], ["best"], name="argmax", axis=-1, keepdims=0),
    ]
    return _save(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", "s", 8])],
                 [helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["b", "s", 8]),
                  helper.make_tensor_value_info("best", TensorProto.INT64, ["b", "s"])],
                 [_w(rng, "gamma", 8), _w(rng, "beta", 8)], path)


def odd_output_name(path):
    """y = x * 2, with an output name that is not file-safe."""
    two = numpy_helper.from_array(np.array([2.0], np.float32), "two")
    nodes = [helper.make_node("Mul", ["x", "two"], ["out/put:0"], name="double")]
    return _save(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])],
                 [helper.make_tensor_value_info("out/put:0", TensorProto.FLOAT, [2, 2])], [two],
                 path)


def adagrad(path):
    """One ai.onnx.preview.training Adagrad step: Kiln runs it, onnxruntime's inference build
    does not."""
    node = helper.make_node("Adagrad", ["r", "t", "x", "g", "h"], ["x2", "h2"],
                            domain="ai.onnx.preview.training", decay_factor=0.1, epsilon=1e-5,
                            norm_coefficient=0.001)
    inputs = [helper.make_tensor_value_info("r", TensorProto.FLOAT, []),
              helper.make_tensor_value_info("t", TensorProto.INT64, [])]
    inputs += [helper.make_tensor_value_info(n, TensorProto.FLOAT, [3]) for n in "xgh"]
    outputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [3]) for n in ("x2", "h2")]
    graph = helper.make_graph([node], "g", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.preview.training", 1)])
    onnx.save(model, str(path))
    return path


def random_noise(path):
    """y = x + RandomUniformLike(x) and z = x * 2: y differs from run to run, z does not."""
    two = numpy_helper.from_array(np.array([2.0], np.float32), "two")
    nodes = [helper.make_node("RandomUniformLike", ["x"], ["noise"], name="noise"),
             helper.make_node("Add", ["x", "noise"], ["y"], name="add"),
             helper.make_node("Mul", ["x", "two"], ["z"], name="double")]
    return _save(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                 [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4]),
                  helper.make_tensor_value_info("z", TensorProto.FLOAT, [4])], [two], path)


def sequence_input(path):
    """y = ConcatFromSequence(seq): a sequence input the gate generates two tensors for."""
    nodes = [helper.make_node("ConcatFromSequence", ["seq"], ["y"], name="concat", axis=0)]
    seq = helper.make_tensor_sequence_value_info("seq", TensorProto.FLOAT, [2, 3])
    return _save(nodes, [seq], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 3])],
                 [], path)


def wide_conv(path):
    """x[n,32,32,32] -> Conv 32->32 3x3 -> Relu -> GlobalAveragePool -> y[n,32,1,1]: ~19 M FLOPs
    an image, so a batch range's top is costly for the reference while the engine runs it in
    milliseconds."""
    rng = np.random.default_rng(3)
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("GlobalAveragePool", ["r"], ["y"], name="gap"),
    ]
    return _save(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 32, 32, 32])],
                 [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 32, 1, 1])],
                 [_w(rng, "w", 32, 32, 3, 3), _w(rng, "b", 32)], path)
