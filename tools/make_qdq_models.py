"""Small static INT8 QDQ models, as `kiln quantize` and onnxruntime's quantize_static write them:
QuantizeLinear / DequantizeLinear around Conv, MatMul and Gemm, int8 weights per output channel
(or per tensor), uint8 (or int8) activations per tensor. Seeded random weights; the scales are
taken from the ranges the float model's values have on seeded random inputs, so every code is
used. For the int8 kernel tests (tests/python/test_int8_kernels.py, tests/cli)."""
import numpy as np
from onnx import TensorProto, helper, numpy_helper

OPSET = 19


class Builder:
    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits = [], []
        self.count = 0

    def name(self, base):
        self.count += 1
        return f"{base}{self.count}"

    def const(self, base, array):
        n = self.name(base)
        self.inits.append(numpy_helper.from_array(np.asarray(array), n))
        return n

    def node(self, op, inputs, base, **attrs):
        out = self.name(base)
        self.nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        return out

    def qdq(self, x, lo, hi, dtype=np.uint8):
        """x -> QuantizeLinear -> DequantizeLinear over [lo, hi] (0 inside), uint8 or int8."""
        lo, hi = min(lo, 0.0), max(hi, 0.0)
        qmin, qmax = (0, 255) if dtype == np.uint8 else (-128, 127)
        scale = np.float32((hi - lo) / (qmax - qmin) or 1.0)
        zero = dtype(np.clip(np.round(qmin - lo / scale), qmin, qmax))
        s, z = self.const("scale", scale), self.const("zero", np.array(zero, dtype=dtype))
        q = self.node("QuantizeLinear", [x, s, z], "q")
        return self.node("DequantizeLinear", [q, s, z], "dq"), (scale, zero)

    def weight(self, w, axis, per_channel=True, zero=0):
        """A float weight as DequantizeLinear(int8 constant) (symmetric), per channel on axis."""
        if per_channel:
            other = tuple(i for i in range(w.ndim) if i != axis)
            scale = (np.abs(w).max(axis=other) / 127).astype(np.float32)
            shape = [1] * w.ndim
            shape[axis] = -1
            q = np.clip(np.round(w / scale.reshape(shape)), -127, 127).astype(np.int8)
            zp = np.full(scale.shape, zero, dtype=np.int8)
        else:
            scale = np.float32(np.abs(w).max() / 127)
            q = np.clip(np.round(w / scale), -127, 127).astype(np.int8)
            zp = np.int8(zero)
        attrs = {"axis": axis} if per_channel else {}
        return self.node("DequantizeLinear", [self.const("w", q), self.const("ws", scale),
                                              self.const("wz", zp)], "wdq", **attrs)

    def save(self, path, x_name, x_shape, y, y_shape):
        graph = helper.make_graph(
            self.nodes, "qdq", [helper.make_tensor_value_info(x_name, TensorProto.FLOAT, x_shape)],
            [helper.make_tensor_value_info(y, TensorProto.FLOAT, y_shape)], self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
        model.ir_version = 9
        from onnx import checker, save
        checker.check_model(model)
        save(model, str(path))
        return str(path)


def conv(path, c=8, m=16, k=3, group=1, hw=10, act=None, quantized_output=True,
         per_channel=True, stride=1, pad=1, x_dtype=np.uint8, w_zero=0, seed=0, batch=2,
         bias=True):
    """x -> Q/DQ -> Conv(DQ(int8 W), float B) [-> Relu / Clip 0..6] [-> Q/DQ] -> y."""
    b = Builder(seed)
    x_range = (-1.0, 3.0) if x_dtype == np.uint8 else (-2.0, 2.0)
    xdq, _ = b.qdq("x", *x_range, dtype=x_dtype)
    w = b.rng.standard_normal((m, c // group, k, k)).astype(np.float32) * 0.3
    inputs = [xdq, b.weight(w, 0, per_channel, w_zero)]
    if bias:
        inputs.append(b.const("b", b.rng.standard_normal(m).astype(np.float32) * 0.2))
    y = b.node("Conv", inputs, "conv", group=group, strides=[stride, stride],
               pads=[pad] * 4, kernel_shape=[k, k])
    if act == "relu":
        y = b.node("Relu", [y], "relu")
    elif act == "clip":
        y = b.node("Clip", [y, b.const("lo", np.float32(0)), b.const("hi", np.float32(6))],
                   "clip")
    if quantized_output:
        y, _ = b.qdq(y, -4.0 if act is None else 0.0, 4.0)
    out = (hw + 2 * pad - k) // stride + 1
    return b.save(path, "x", [batch, c, hw, hw], y, [batch, m, out, out])


def chain(path, seed=0):
    """Conv -> Relu -> Q/DQ -> depthwise Conv -> Clip -> Q/DQ -> 1x1 Conv (float out): uint8
    flows between the int8 nodes."""
    b = Builder(seed)
    x, _ = b.qdq("x", -1.0, 1.0)
    w1 = b.rng.standard_normal((16, 3, 3, 3)).astype(np.float32) * 0.3
    y = b.node("Conv", [x, b.weight(w1, 0), b.const("b", np.zeros(16, np.float32))], "conv",
               pads=[1, 1, 1, 1])
    y = b.node("Relu", [y], "relu")
    y, _ = b.qdq(y, 0.0, 3.0)
    w2 = b.rng.standard_normal((16, 1, 3, 3)).astype(np.float32) * 0.5
    y = b.node("Conv", [y, b.weight(w2, 0)], "dw", group=16, pads=[1, 1, 1, 1], strides=[2, 2])
    y = b.node("Clip", [y, b.const("lo", np.float32(0)), b.const("hi", np.float32(6))], "clip")
    y, _ = b.qdq(y, 0.0, 6.0)
    w3 = b.rng.standard_normal((8, 16, 1, 1)).astype(np.float32) * 0.3
    y = b.node("Conv", [y, b.weight(w3, 0), b.const("b", np.ones(8, np.float32))], "pw")
    return b.save(path, "x", [1, 3, 12, 12], y, [1, 8, 6, 6])


def residual(path, relu=True, quantized_skip=False, seed=0):
    """A ResNet block's end: x -> Conv -> Relu -> Q/DQ -> Conv (float out) -> Add(the first
    Relu's float output) [-> Relu]: the Add (and Relu) join the second int8 convolution. With
    quantized_skip, the Add reads the skip through the Q/DQ pair (as `kiln quantize` writes it)
    and the sum is quantized (Q/DQ) after it: the convolution adds the uint8 residual and writes
    uint8 itself."""
    b = Builder(seed)
    x, _ = b.qdq("x", -1.0, 1.0)
    w1 = b.rng.standard_normal((16, 8, 3, 3)).astype(np.float32) * 0.3
    a = b.node("Conv", [x, b.weight(w1, 0), b.const("b1", np.zeros(16, np.float32))], "conv1",
               pads=[1, 1, 1, 1])
    a = b.node("Relu", [a], "relu1")
    q, _ = b.qdq(a, 0.0, 3.0)
    w2 = b.rng.standard_normal((16, 16, 3, 3)).astype(np.float32) * 0.2
    y = b.node("Conv", [q, b.weight(w2, 0), b.const("b2", np.full(16, 0.1, np.float32))],
               "conv2", pads=[1, 1, 1, 1])
    y = b.node("Add", [y, q if quantized_skip else a], "add")
    if relu:
        y = b.node("Relu", [y], "relu2")
    if quantized_skip:
        y, _ = b.qdq(y, -2.0 if not relu else 0.0, 5.0)
    return b.save(path, "x", [1, 8, 10, 10], y, [1, 16, 10, 10])


def gemm(path, k=32, n=24, trans_b=1, alpha=1.0, beta=1.0, act=None, quantized_output=True,
         per_channel=True, seed=0):
    """x[4, k] -> Q/DQ -> Gemm(DQ(int8 W), C[n]) [-> Relu] [-> Q/DQ] -> y[4, n]."""
    b = Builder(seed)
    x, _ = b.qdq("x", -2.0, 2.0)
    w = b.rng.standard_normal((n, k) if trans_b else (k, n)).astype(np.float32) * 0.2
    c = b.const("c", b.rng.standard_normal(n).astype(np.float32))
    y = b.node("Gemm", [x, b.weight(w, 0 if trans_b else 1, per_channel), c], "gemm",
               transB=trans_b, alpha=alpha, beta=beta)
    if act == "relu":
        y = b.node("Relu", [y], "relu")
    if quantized_output:
        y, _ = b.qdq(y, -3.0, 3.0)
    return b.save(path, "x", [4, k], y, [4, n])


def matmul(path, k=32, n=16, act="relu", quantized_output=True, per_channel=True, seed=0,
           dynamic=False):
    """x[2, 5, k] -> Q/DQ -> MatMul(DQ(int8 W[k, n])) -> Add(bias) [-> Relu | Gelu] [-> Q/DQ] -> y
    (`dynamic`: x[batch, rows, k], both dims named)."""
    b = Builder(seed)
    x, _ = b.qdq("x", -2.0, 2.0)
    w = b.rng.standard_normal((k, n)).astype(np.float32) * 0.2
    y = b.node("MatMul", [x, b.weight(w, 1, per_channel)], "matmul")
    y = b.node("Add", [y, b.const("bias", b.rng.standard_normal(n).astype(np.float32))], "add")
    if act == "relu":
        y = b.node("Relu", [y], "relu")
    elif act == "gelu":
        # The erf form exporters write (BERT's FFN): y * 0.5 * (1 + erf(y / sqrt(2))).
        e = b.node("Erf", [b.node("Div", [y, b.const("sqrt2", np.float32(np.sqrt(2)))], "div")],
                   "erf")
        e = b.node("Add", [e, b.const("one", np.float32(1))], "plus_one")
        y = b.node("Mul", [b.node("Mul", [y, e], "mul"), b.const("half", np.float32(0.5))],
                   "half")
    if quantized_output:
        y, _ = b.qdq(y, -3.0, 3.0)
    lead = ["batch", "rows"] if dynamic else [2, 5]
    return b.save(path, "x", lead + [k], y, lead + [n])


def padded_depthwise(path, seed=0):
    """Conv -> Clip -> Pad (zeros, asymmetric, as TensorFlow-style "same" exports write) -> Q/DQ
    -> strided depthwise Conv -> Q/DQ: the Pad joins the depthwise convolution's padding."""
    b = Builder(seed)
    x, _ = b.qdq("x", -1.0, 1.0)
    w1 = b.rng.standard_normal((16, 3, 1, 1)).astype(np.float32) * 0.5
    y = b.node("Conv", [x, b.weight(w1, 0)], "conv")
    y = b.node("Clip", [y, b.const("lo", np.float32(0)), b.const("hi", np.float32(6))], "clip")
    pads = np.array([0, 0, 0, 0, 0, 0, 1, 1], np.int64)
    y = b.node("Pad", [y, b.const("pads", pads)], "pad")
    y, _ = b.qdq(y, 0.0, 6.0)
    w2 = b.rng.standard_normal((16, 1, 3, 3)).astype(np.float32) * 0.5
    y = b.node("Conv", [y, b.weight(w2, 0)], "dw", group=16, strides=[2, 2])
    y, _ = b.qdq(y, -6.0, 6.0)
    return b.save(path, "x", [1, 3, 12, 12], y, [1, 16, 6, 6])


def stem(path, seed=0):
    """A ResNet stem: Conv -> Relu -> MaxPool (3x3, stride 2, padded) -> Q/DQ -> Conv -> Q/DQ.
    The QuantizeLinear moves before the MaxPool (exact), so the first convolution writes uint8
    and the pooling runs on it."""
    b = Builder(seed)
    x, _ = b.qdq("x", -1.0, 3.0)
    w1 = b.rng.standard_normal((16, 3, 3, 3)).astype(np.float32) * 0.5
    y = b.node("Conv", [x, b.weight(w1, 0)], "stem", pads=[1, 1, 1, 1], strides=[2, 2])
    y = b.node("Relu", [y], "relu")
    y = b.node("MaxPool", [y], "pool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    y, _ = b.qdq(y, 0.0, 6.0)
    w2 = b.rng.standard_normal((8, 16, 1, 1)).astype(np.float32) * 0.3
    y = b.node("Conv", [y, b.weight(w2, 0)], "conv")
    y, _ = b.qdq(y, -4.0, 4.0)
    return b.save(path, "x", [1, 3, 20, 20], y, [1, 8, 5, 5])


def branches(path, seed=0):
    """An Inception-style block: two convolution branches (6 and 10 filters, Relu) and a max
    pool of the input joined by Concat -> Q/DQ -> Conv -> Q/DQ. The QuantizeLinear moves
    before the Concat (exact): the branches' convolutions write uint8 and the Concat joins
    uint8."""
    b = Builder(seed)
    x, _ = b.qdq("x", -1.0, 3.0)
    parts = []
    for i, m in enumerate([6, 10]):
        w = b.rng.standard_normal((m, 8, 3, 3)).astype(np.float32) * 0.3
        y = b.node("Conv", [x, b.weight(w, 0), b.const("b", b.rng.standard_normal(m).astype(
            np.float32) * 0.2)], f"branch{i}", pads=[1, 1, 1, 1])
        parts.append(b.node("Relu", [y], f"relu{i}"))
    parts.append(b.node("MaxPool", [x], "pool", kernel_shape=[3, 3], pads=[1, 1, 1, 1]))
    y = b.node("Concat", parts, "concat", axis=1)
    y, _ = b.qdq(y, 0.0, 6.0)
    w = b.rng.standard_normal((4, 24, 1, 1)).astype(np.float32) * 0.3
    y = b.node("Conv", [y, b.weight(w, 0)], "conv")
    y, _ = b.qdq(y, -4.0, 4.0)
    return b.save(path, "x", [2, 8, 9, 9], y, [2, 4, 9, 9])

