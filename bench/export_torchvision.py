"""Exports torchvision models (random weights) to ONNX with a dynamic batch dim.

Run with Debian's interpreter, which has python3-torch / python3-torchvision:
    /usr/bin/python3 bench/export_torchvision.py OUT_DIR resnet50 mobilenet_v2
"""
import os
import sys

import torch
import torchvision


def export(name: str, out_dir: str) -> str:
    path = os.path.join(out_dir, f"{name}.onnx")
    torch.manual_seed(0)
    model = getattr(torchvision.models, name)(weights=None).eval()
    x = torch.randn(1, 3, 224, 224)
    torch.onnx.export(model, x, path, input_names=["input"], output_names=["output"],
                      dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}},
                      opset_version=13)
    return path


if __name__ == "__main__":
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    for name in sys.argv[2:] or ["resnet50", "mobilenet_v2"]:
        print(export(name, out_dir))
