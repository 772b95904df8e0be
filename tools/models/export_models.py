#!/usr/bin/python3
"""Exports the real models Kiln is checked on to ONNX, with random weights.

Runs on Debian's system interpreter (/usr/bin/python3) because python3-torch and
python3-torchvision (CPU builds, torch 1.13) install there, not in the pyenv python:

    /usr/bin/python3 tools/models/export_models.py --out DIR [--small] [--opset 17 ...]
                                                   [--only NAME|NAME_opNN,...]

Each model becomes DIR/NAME_opNN.onnx plus DIR/NAME_opNN.json, which says how to draw inputs
for it (one entry per data set; a model with dynamic dims gets data sets of different shapes).
tools/models/make_cases.py turns these into test cases with onnxruntime's outputs.

--small keeps each architecture's real op patterns at a size the reference kernels run in
seconds: CNNs at 32x32 or 64x64 input, ViT with image_size 64 and 2 encoder layers, BERT with
2 layers and hidden 64. Without it the models are the published sizes (224x224, 12 layers).
"""
import argparse
import inspect
import json
import math
import os
import sys

import torch
from torch import nn
import torchvision

# --------------------------------------------------------------------------------------------
# BERT-base-style encoder in plain torch: the op pattern ORT's and TensorRT's attention and
# LayerNorm fusions look for (Q/K/V MatMul+Add, Reshape/Transpose to heads, scaled QK^T + mask,
# Softmax, MatMul, output projection, residual + LayerNorm, GELU feed-forward).


class BertSelfAttention(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.heads = heads
        self.head_dim = hidden // heads
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)
        self.output = nn.Linear(hidden, hidden)
        self.norm = nn.LayerNorm(hidden, eps=1e-12)

    def split_heads(self, x):
        b, s, _ = x.shape
        return x.view(b, s, self.heads, self.head_dim).permute(0, 2, 1, 3)

    def forward(self, x, mask_bias):
        q = self.split_heads(self.query(x))
        k = self.split_heads(self.key(x))
        v = self.split_heads(self.value(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        probs = torch.softmax(scores + mask_bias, dim=-1)
        ctx = torch.matmul(probs, v).permute(0, 2, 1, 3)
        b, s = ctx.shape[0], ctx.shape[1]
        ctx = ctx.reshape(b, s, self.heads * self.head_dim)
        return self.norm(x + self.output(ctx))


class BertLayer(nn.Module):
    def __init__(self, hidden, heads, intermediate):
        super().__init__()
        self.attention = BertSelfAttention(hidden, heads)
        self.up = nn.Linear(hidden, intermediate)
        self.down = nn.Linear(intermediate, hidden)
        self.norm = nn.LayerNorm(hidden, eps=1e-12)

    def forward(self, x, mask_bias):
        x = self.attention(x, mask_bias)
        return self.norm(x + self.down(nn.functional.gelu(self.up(x))))


class BertEncoder(nn.Module):
    def __init__(self, vocab, hidden, layers, heads, intermediate, max_positions, type_vocab=2):
        super().__init__()
        self.word = nn.Embedding(vocab, hidden)
        self.position = nn.Embedding(max_positions, hidden)
        self.token_type = nn.Embedding(type_vocab, hidden)
        self.norm = nn.LayerNorm(hidden, eps=1e-12)
        self.layers = nn.ModuleList(
            [BertLayer(hidden, heads, intermediate) for _ in range(layers)])
        self.pooler = nn.Linear(hidden, hidden)
        self.register_buffer("position_ids", torch.arange(max_positions).unsqueeze(0))

    def forward(self, input_ids, attention_mask, token_type_ids):
        seq = input_ids.shape[1]
        positions = self.position_ids[:, :seq]
        x = self.word(input_ids) + self.position(positions) + self.token_type(token_type_ids)
        x = self.norm(x)
        # [batch, 1, 1, seq]: 0 where attended, a large negative where padded.
        mask_bias = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * -10000.0
        for layer in self.layers:
            x = layer(x, mask_bias)
        pooled = torch.tanh(self.pooler(x[:, 0]))
        return x, pooled


# --------------------------------------------------------------------------------------------
# Control flow: a Loop whose trip count is an input and an If on a data-dependent condition,
# produced by TorchScript (the way real exported models get them).


class ControlFlow(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.step = nn.Linear(width, width)
        self.head = nn.Linear(width, width)

    def forward(self, x, steps):
        h = x
        for _ in range(int(steps)):
            h = torch.tanh(self.step(h)) + h
        if bool(h.mean() > 0):
            out = self.head(h)
        else:
            out = torch.sigmoid(h) - h
        return out


# --------------------------------------------------------------------------------------------


class LstmModel(nn.Module):
    def __init__(self, features, hidden, layers, bidirectional, classes):
        super().__init__()
        self.lstm = nn.LSTM(features, hidden, num_layers=layers, bidirectional=bidirectional)
        self.head = nn.Linear(hidden * (2 if bidirectional else 1), classes)

    def forward(self, x):  # x: [seq, batch, features]
        y, (h, c) = self.lstm(x)
        return self.head(y), h, c


# --------------------------------------------------------------------------------------------
# The model table. Each builder returns a dict with the module, example inputs for export,
# input/output names, dynamic axes and the data sets to draw (input specs per set).


def image_input(name, batch, size, sets=1):
    shape = [batch, 3, size, size]
    return {"names": [name], "sets": [{name: {"shape": shape, "dist": "normal"}}] * sets}


def cnn(factory, small, size_small=32, **kwargs):
    size = size_small if small else 224
    model = factory(weights=None, **kwargs)
    return {
        "module": model,
        "example": (torch.randn(1, 3, size, size),),
        "inputs": ["input"],
        "outputs": ["logits"],
        "dynamic_axes": {"input": {0: "batch"}, "logits": {0: "batch"}},
        "sets": [{"input": {"shape": [1, 3, size, size], "dist": "normal"}},
                 {"input": {"shape": [2, 3, size, size], "dist": "normal"}}]
        if small else [{"input": {"shape": [1, 3, size, size], "dist": "normal"}}],
        "shape_range": f"input:1..8x3x{size}x{size}",
    }


def vit(small):
    if small:
        # ViT-B/16's patch size and block structure at ViT-Tiny width, 64x64 images, 2 blocks.
        model = torchvision.models.VisionTransformer(
            image_size=64, patch_size=16, num_layers=2, num_heads=3, hidden_dim=192,
            mlp_dim=768, num_classes=100)
        size = 64
    else:
        model = torchvision.models.vit_b_16(weights=None)
        size = 224
    return {
        "module": model,
        "example": (torch.randn(1, 3, size, size),),
        "inputs": ["input"],
        "outputs": ["logits"],
        "dynamic_axes": {"input": {0: "batch"}, "logits": {0: "batch"}},
        "sets": [{"input": {"shape": [1, 3, size, size], "dist": "normal"}}] +
                ([{"input": {"shape": [2, 3, size, size], "dist": "normal"}}] if small else []),
        "shape_range": f"input:1..8x3x{size}x{size}",
    }


def bert(small):
    if small:
        cfg = dict(vocab=1000, hidden=64, layers=2, heads=4, intermediate=256, max_positions=128)
        sets = [(2, 16), (1, 7), (3, 33)]
    else:
        cfg = dict(vocab=30522, hidden=768, layers=12, heads=12, intermediate=3072,
                   max_positions=512)
        sets = [(1, 128)]
    model = BertEncoder(**cfg)
    ids = torch.randint(0, cfg["vocab"], (2, 16))

    def one_set(b, s):
        return {
            "input_ids": {"shape": [b, s], "dist": "int", "low": 0, "high": cfg["vocab"]},
            # Rows end in padding of different lengths, so the mask matters.
            "attention_mask": {"shape": [b, s], "dist": "padding_mask"},
            "token_type_ids": {"shape": [b, s], "dist": "int", "low": 0, "high": 2},
        }

    return {
        "module": model,
        "example": (ids, torch.ones(2, 16, dtype=torch.int64),
                    torch.zeros(2, 16, dtype=torch.int64)),
        "inputs": ["input_ids", "attention_mask", "token_type_ids"],
        "outputs": ["last_hidden_state", "pooled"],
        "dynamic_axes": {
            "input_ids": {0: "batch", 1: "sequence"},
            "attention_mask": {0: "batch", 1: "sequence"},
            "token_type_ids": {0: "batch", 1: "sequence"},
            "last_hidden_state": {0: "batch", 1: "sequence"},
            "pooled": {0: "batch"},
        },
        "sets": [one_set(b, s) for b, s in sets],
        "shape_range": ",".join(f"{n}:1..4x1..64" if small else f"{n}:1..8x1..512"
                                for n in ["input_ids", "attention_mask", "token_type_ids"]),
    }


def control_flow(small):
    width = 16 if small else 256
    model = torch.jit.script(ControlFlow(width))
    x_spec = {"shape": [4, width], "dist": "normal"}
    return {
        "module": model,
        "example": (torch.randn(4, width), torch.tensor(3)),
        "inputs": ["x", "steps"],
        "outputs": ["y"],
        "dynamic_axes": {"x": {0: "batch"}, "y": {0: "batch"}},
        # Trip counts 0, 3 and 5; the sign of the mean picks the If branch.
        "sets": [{"x": x_spec, "steps": {"shape": [], "dist": "const", "value": n}}
                 for n in (3, 0, 5)] +
                [{"x": {"shape": [2, width], "dist": "normal", "offset": -4.0},
                  "steps": {"shape": [], "dist": "const", "value": 1}}],
    }


def lstm(small, bidirectional):
    features, hidden = (16, 32) if small else (256, 512)
    layers = 2
    model = LstmModel(features, hidden, layers, bidirectional, 10)
    return {
        "module": model,
        "example": (torch.randn(5, 2, features),),
        "inputs": ["x"],
        "outputs": ["y", "h", "c"],
        "dynamic_axes": {"x": {0: "sequence", 1: "batch"}, "y": {0: "sequence", 1: "batch"},
                         "h": {1: "batch"}, "c": {1: "batch"}},
        "sets": [{"x": {"shape": [s, b, features], "dist": "normal"}}
                 for s, b in ([(5, 2), (11, 1), (1, 3)] if small else [(64, 1)])],
        "shape_range": f"x:1..64x1..4x{features}",
    }


MODELS = {
    "resnet50": lambda small: cnn(torchvision.models.resnet50, small),
    "mobilenet_v2": lambda small: cnn(torchvision.models.mobilenet_v2, small),
    "efficientnet_b0": lambda small: cnn(torchvision.models.efficientnet_b0, small),
    "vit_b_16": vit,
    "bert": bert,
    "control_flow": control_flow,
    "lstm": lambda small: lstm(small, False),
    "lstm_bidirectional": lambda small: lstm(small, True),
}


def export_one(name, small, opset, out_dir):
    torch.manual_seed(0)
    spec = MODELS[name](small)
    model = spec["module"].eval()
    # BatchNorm at its default statistics (mean 0, var 1) is nearly the identity; draw them so
    # the folded weights are not trivial. Parameters initialized to zero (ViT's class token and
    # classifier head, many biases) would make outputs constant and the check blind: draw them.
    with torch.no_grad():
        for p in model.parameters():
            if not p.any():
                p.normal_(0.0, 0.02)
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.1, 0.1)
                m.running_var.uniform_(0.5, 1.5)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.1, 0.1)
    stem = f"{name}_op{opset}"
    path = os.path.join(out_dir, stem + ".onnx")
    # Not under no_grad: there nn.MultiheadAttention (ViT) takes its fused inference path,
    # aten::_native_multi_head_attention, which has no ONNX export.
    # The TorchScript exporter everywhere: newer torch (2.9+, the lent GPU machine's 2.11)
    # defaults to the dynamo one, which exports no ScriptModule (the control-flow model) and
    # writes opset 18 instead of the one asked for.
    params = inspect.signature(torch.onnx.export).parameters
    legacy = {"dynamo": False} if "dynamo" in params else {}
    torch.onnx.export(model, spec["example"], path, opset_version=opset,
                      input_names=spec["inputs"], output_names=spec["outputs"],
                      dynamic_axes=spec["dynamic_axes"], do_constant_folding=True, **legacy)
    meta = {"name": stem, "model": stem + ".onnx", "opset": opset, "small": small,
            "sets": spec["sets"], "shape_range": spec.get("shape_range", "")}
    with open(os.path.join(out_dir, stem + ".json"), "w") as f:
        json.dump(meta, f, indent=1)
    return path


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--small", action="store_true", help="CI sizes")
    ap.add_argument("--opset", type=int, action="append",
                    help="opset(s) to export (default 17); repeat for more")
    ap.add_argument("--only", default="",
                    help="comma-separated NAME (at each --opset) or NAME_opNN (at opset NN)")
    args = ap.parse_args()
    opsets = args.opset or [17]
    # NAME exports the model at every --opset; NAME_opNN at that opset only.
    wanted = []
    for item in [n for n in args.only.split(",") if n] or list(MODELS):
        name, _, opset = item.rpartition("_op")
        if name in MODELS and opset.isdigit():
            wanted.append((name, int(opset)))
        elif item in MODELS:
            wanted += [(item, o) for o in opsets]
        else:
            sys.exit(f"export_models: unknown model '{item}' (known: {', '.join(MODELS)})")
    os.makedirs(args.out, exist_ok=True)
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    for name, opset in wanted:
        print(export_one(name, args.small, opset, args.out), flush=True)


if __name__ == "__main__":
    main()
