"""The Fashion-MNIST CNN of issue 12's real case: its architecture, its training on the train
split, its ONNX export. bench/quantize/fashion_mnist.py calls train_and_export(); run alone it
trains and writes the file:

    /usr/bin/python3 bench/quantize/fashion_mnist_train.py OUT.onnx [--epochs 3]

The network is four 3x3 convolutions with BatchNorm and ReLU (32 channels at 28x28, 64 and 64 at
14x14, 128 at 7x7, max pooling between the stages), global average pooling and one linear layer:
14.6 M multiply-adds an image, 131 k parameters (0.5 MB as float32), small enough to keep in the
repository, wide enough that halving its channels (a quarter of the multiply-adds of the middle
layers) shows in the latency. Training: Adam 1e-3 with a cosine decay, batches of 128, mirrored
half the time, fixed seeds. The export is in eval mode, so torch folds each BatchNormalization
into its Conv (the file has Conv, Relu, MaxPool, GlobalAveragePool, Flatten, Gemm).
"""
import argparse
import math
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
from idx_dataset import fashion_mnist, to_input  # noqa: E402

WIDTHS = (32, 64, 64, 128)


def make_model():
    import torch.nn as nn

    def block(i, o):
        return [nn.Conv2d(i, o, 3, padding=1, bias=False), nn.BatchNorm2d(o), nn.ReLU()]

    a, b, c, d = WIDTHS
    return nn.Sequential(*block(1, a), nn.MaxPool2d(2), *block(a, b), *block(b, c),
                         nn.MaxPool2d(2), *block(c, d), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(d, 10))


def _log(line):
    print(line, flush=True)


def train(epochs=3, batch=128, lr=1e-3, seed=0, threads=2, log=_log):
    """The trained model (eval mode) and a summary dict."""
    import torch
    import torch.nn.functional as F

    torch.manual_seed(seed)
    torch.set_num_threads(threads)
    images, labels = fashion_mnist("train")
    x, y = torch.from_numpy(to_input(images)), torch.from_numpy(labels.astype(np.int64))
    model = make_model()
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    rng = np.random.default_rng(seed)
    per_epoch = math.ceil(len(x) / batch)
    total, step = per_epoch * epochs, 0
    start = time.time()
    history = []
    model.train()
    for epoch in range(epochs):
        order = torch.from_numpy(rng.permutation(len(x)))
        seen = correct = 0
        loss_sum = 0.0
        for i in range(per_epoch):
            idx = order[i * batch:(i + 1) * batch]
            xb, yb = x[idx], y[idx]
            flip = torch.from_numpy(rng.random(len(idx)) < 0.5)
            xb = torch.where(flip[:, None, None, None], xb.flip(3), xb)
            for g in opt.param_groups:  # cosine to 0 over the whole run
                g["lr"] = lr * 0.5 * (1 + math.cos(math.pi * step / total))
            out = model(xb)
            loss = F.cross_entropy(out, yb)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step += 1
            seen += len(idx)
            correct += int((out.argmax(1) == yb).sum())
            loss_sum += float(loss) * len(idx)
        history.append({"epoch": epoch, "loss": round(loss_sum / seen, 4),
                        "train_top1": round(correct / seen, 4),
                        "seconds": round(time.time() - start, 1)})
        log(f"train: epoch {epoch}: loss {loss_sum / seen:.4f}, batch top-1 {correct / seen:.4f}, "
            f"{time.time() - start:.0f} s")
    model.eval()
    return model, {"epochs": epochs, "batch": batch, "lr": lr, "seed": seed, "threads": threads,
                   "seconds": round(time.time() - start, 1), "history": history}


def export(model, path):
    """ONNX opset 13 with a dynamic batch: input 'image' [batch, 1, 28, 28], output 'logits'."""
    import torch

    example = torch.zeros(1, 1, 28, 28)
    torch.onnx.export(model, example, path, opset_version=13, input_names=["image"],
                      output_names=["logits"],
                      dynamic_axes={"image": {0: "batch"}, "logits": {0: "batch"}})
    return path


def train_and_export(path, **kw):
    model, summary = train(**kw)
    export(model, path)
    return summary


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    print(train_and_export(a.out, epochs=a.epochs, threads=a.threads))


if __name__ == "__main__":
    main()
