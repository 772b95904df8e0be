"""Exports a small BERT-style encoder layer with torch.onnx (run it with an interpreter that has
torch, e.g. Debian's /usr/bin/python3 with python3-torch): the real exporter's patterns for the
fusion tests. Usage: export_torch_encoder.py OUT.onnx [--opset N] [--static] [--tanh]"""
import argparse
import math

import torch


class EncoderLayer(torch.nn.Module):
    def __init__(self, hidden=32, heads=4, tanh=False):
        super().__init__()
        self.hidden, self.heads = hidden, heads
        self.q, self.k, self.v, self.o = (torch.nn.Linear(hidden, hidden) for _ in range(4))
        self.ln1, self.ln2 = torch.nn.LayerNorm(hidden), torch.nn.LayerNorm(hidden)
        self.f1, self.f2 = torch.nn.Linear(hidden, 4 * hidden), torch.nn.Linear(4 * hidden, hidden)
        self.act = torch.nn.GELU(approximate="tanh" if tanh else "none")

    def split(self, t):
        b, n, _ = t.shape
        return t.view(b, n, self.heads, self.hidden // self.heads).permute(0, 2, 1, 3)

    def forward(self, x, mask):
        q, k, v = self.split(self.q(x)), self.split(self.k(x)), self.split(self.v(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.hidden // self.heads)
        p = torch.softmax(scores + mask, dim=-1)
        ctx = torch.matmul(p, v).permute(0, 2, 1, 3).contiguous()
        ctx = ctx.view(x.shape[0], x.shape[1], self.hidden)
        h1 = self.ln1(x + self.o(ctx))
        return self.ln2(h1 + self.f2(self.act(self.f1(h1))))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("out")
    ap.add_argument("--opset", type=int, default=13)
    ap.add_argument("--static", action="store_true")
    ap.add_argument("--tanh", action="store_true")
    a = ap.parse_args()
    torch.manual_seed(0)
    model = EncoderLayer(tanh=a.tanh).eval()
    axes = {} if a.static else {"dynamic_axes": {"x": {0: "batch", 1: "seq"},
                                                 "mask": {0: "batch", 3: "seq"}}}
    torch.onnx.export(model, (torch.randn(2, 5, 32), torch.zeros(2, 1, 1, 5)), a.out,
                      opset_version=a.opset, input_names=["x", "mask"], output_names=["y"],
                      **axes)
