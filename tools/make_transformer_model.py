"""Writes a small BERT-style encoder (embeddings' output in, hidden states out) node for node as
torch.onnx 1.13 exports nn.TransformerEncoder-like code below opset 17: projections as MatMul +
Add, heads split by Shape/Gather/Unsqueeze/Concat/Reshape + Transpose, attention as
MatMul/Div/Add(mask)/Softmax/MatMul, LayerNorm decomposed, Gelu as its erf (or tanh) formula.
Used by the fusion tests and to measure what the passes remove."""
import argparse
import math
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class Builder:
    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits, self.count = [], [], 0

    def name(self, base):
        self.count += 1
        return f"/{base}_{self.count}"

    def const(self, array, base="c"):
        t = numpy_helper.from_array(np.asarray(array), self.name(base))
        self.inits.append(t)
        return t.name

    def weight(self, *shape):
        return self.const((self.rng.standard_normal(shape) * 0.2).astype(np.float32), "w")

    def op(self, op_type, inputs, **attrs):
        out = self.name(op_type)
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=out + "_node", **attrs))
        return out

    def scalar(self, v):
        return self.const(np.array(v, np.float32))

    def ints(self, v):
        return self.const(np.array(v, np.int64))

    def dim(self, x, i):
        g = self.op("Gather", [self.op("Shape", [x]), self.const(np.array(i, np.int64))], axis=0)
        return self.op("Unsqueeze", [g, self.ints([0])])

    def view(self, x, tail, dynamic):
        """x.view(x.size(0), x.size(1), *tail)"""
        if not dynamic:
            return self.op("Reshape", [x, self.ints([0, 0] + tail)])
        shape = self.op("Concat", [self.dim(x, 0), self.dim(x, 1)] + [self.ints([t]) for t in tail],
                        axis=0)
        return self.op("Reshape", [x, shape])

    def linear(self, x, k, n):
        return self.op("Add", [self.const(self.rng.standard_normal(n).astype(np.float32) * 0.1),
                               self.op("MatMul", [x, self.weight(k, n)])])

    def layer_norm(self, x, hidden):
        mean = self.op("ReduceMean", [x], axes=[-1])
        d = self.op("Sub", [x, mean])
        var = self.op("ReduceMean", [self.op("Pow", [d, self.scalar(2.0)])], axes=[-1])
        y = self.op("Div", [d, self.op("Sqrt", [self.op("Add", [var, self.scalar(1e-5)])])])
        y = self.op("Mul", [y, self.const(np.ones(hidden, np.float32))])
        return self.op("Add", [y, self.const(np.zeros(hidden, np.float32))])

    def gelu(self, x, tanh):
        if tanh:
            half = self.op("Mul", [x, self.scalar(0.5)])
            cube = self.op("Pow", [x, self.scalar(3.0)])
            inner = self.op("Add", [x, self.op("Mul", [cube, self.scalar(0.044715)])])
            arg = self.op("Mul", [inner, self.scalar(math.sqrt(2 / math.pi))])
            return self.op("Mul", [half, self.op("Add", [self.op("Tanh", [arg]), self.scalar(1.0)])])
        erf = self.op("Erf", [self.op("Div", [x, self.scalar(math.sqrt(2))])])
        return self.op("Mul", [self.op("Mul", [x, self.op("Add", [erf, self.scalar(1.0)])]),
                               self.scalar(0.5)])

    def layer(self, x, mask, hidden, heads, dynamic, tanh):
        d = hidden // heads
        q = self.op("Transpose", [self.view(self.linear(x, hidden, hidden), [heads, d], dynamic)],
                    perm=[0, 2, 1, 3])
        k = self.view(self.linear(x, hidden, hidden), [heads, d], dynamic)
        v = self.op("Transpose", [self.view(self.linear(x, hidden, hidden), [heads, d], dynamic)],
                    perm=[0, 2, 1, 3])
        kt = self.op("Transpose", [k], perm=[0, 2, 3, 1])  # torch merges the two transposes
        s = self.op("Div", [self.op("MatMul", [q, kt]), self.scalar(math.sqrt(d))])
        p = self.op("Softmax", [self.op("Add", [s, mask])], axis=-1)
        ctx = self.op("Transpose", [self.op("MatMul", [p, v])], perm=[0, 2, 1, 3])
        ctx = self.view(ctx, [hidden], dynamic)
        h1 = self.layer_norm(self.op("Add", [x, self.linear(ctx, hidden, hidden)]), hidden)
        ff = self.linear(self.gelu(self.linear(h1, hidden, 4 * hidden), tanh), 4 * hidden, hidden)
        return self.layer_norm(self.op("Add", [h1, ff]), hidden)


def build(path, layers=2, hidden=32, heads=4, opset=13, dynamic=True, tanh=False, seed=3):
    b = Builder(seed)
    dims = ["batch", "seq"] if dynamic else [2, 7]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, dims + [hidden])
    mask = helper.make_tensor_value_info("mask", TensorProto.FLOAT, [dims[0], 1, 1, dims[1]])
    h = "x"
    for _ in range(layers):
        h = b.layer(h, "mask", hidden, heads, dynamic, tanh)
    b.nodes.append(helper.make_node("Identity", [h], ["hidden"]))
    y = helper.make_tensor_value_info("hidden", TensorProto.FLOAT, dims + [hidden])
    graph = helper.make_graph(b.nodes, "encoder", [x, mask], [y], initializer=b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              producer_name="kiln-transformer-test")
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return model


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("out_dir", nargs="?", default=".")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--opset", type=int, default=13)
    ap.add_argument("--static", action="store_true", help="batch 2, seq 7 instead of symbols")
    ap.add_argument("--tanh", action="store_true", help="Gelu in its tanh form")
    a = ap.parse_args()
    os.makedirs(a.out_dir, exist_ok=True)
    out = os.path.join(a.out_dir, "encoder.onnx")
    build(out, layers=a.layers, opset=a.opset, dynamic=not a.static, tanh=a.tanh)
    print(f"wrote {out}")
