#!/usr/bin/env python3
"""Exports issue 15's torch `nn.TransformerEncoder` case: 2 layers, d_model 128, 4 heads,
feed-forward 512, batch_first, input x float[8, 128, 128], opset 17 (TorchScript exporter).

    /usr/bin/python3 bench/export_transformer_encoder.py OUT.onnx [--ff 512] [--heads 4]

Debian's python3-torch; random weights (seed 0): the case is for speed.
"""
import argparse
import inspect

import torch
from torch import nn


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--ff", type=int, default=512)
    ap.add_argument("--heads", type=int, default=4)
    a = ap.parse_args()
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(d_model=128, nhead=a.heads, dim_feedforward=a.ff,
                                       batch_first=True)
    model = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False).eval()
    x = torch.randn(8, 128, 128)
    legacy = {"dynamo": False} if "dynamo" in inspect.signature(torch.onnx.export).parameters else {}
    # Not under no_grad: there the encoder takes its fused fast path, which has no ONNX export.
    torch.onnx.export(model, (x,), a.out, opset_version=17, input_names=["x"],
                      output_names=["y"], do_constant_folding=True, **legacy)


if __name__ == "__main__":
    main()
