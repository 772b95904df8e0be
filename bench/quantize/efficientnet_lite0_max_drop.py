"""`kiln quantize --metric top1 --max-drop X` on EfficientNet-Lite0 with real photographs: the
gate holds the top-1 agreement with the float model on the calibration crops to a drop of X,
keeping the most sensitive nodes (each one's drop when alone quantized) float32 until it does;
the file is then scored on the held-out crops by onnxruntime, as efficientnet_lite0.py scores
its files. Reuses that script's work directory (the model, cal*.npz and eval.npy).

    python3 bench/quantize/efficientnet_lite0.py --kiln build/src/kiln --work /tmp/quant ...
    python3 bench/quantize/efficientnet_lite0_max_drop.py --kiln build/src/kiln --work /tmp/quant \\
        [--max-drop 0.05] [--method percentile] [--fallback-nodes 8]
"""
import argparse
import json
import os
import subprocess
import time

import numpy as np


def softmax(z):
    z = z - z.max(1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(1, keepdims=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--max-drop", default="0.05")
    ap.add_argument("--method", default="percentile")
    ap.add_argument("--fallback-nodes", default="8")
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    model = os.path.join(a.work, "efficientnet_lite0.onnx")
    npz = sorted(p for p in os.listdir(a.work) if p.startswith("cal") and p.endswith(".npz"))
    held = np.load(os.path.join(a.work, "eval.npy"))
    out = os.path.join(a.work, "max_drop.onnx")
    report = os.path.join(a.work, "sensitivity.json")
    args = [a.kiln, "quantize", model, "-o", out, "--method", a.method, "--metric", "top1",
            "--max-drop", a.max_drop, "--fallback-nodes", a.fallback_nodes,
            "--sensitivity-report", report]
    if a.method == "percentile":
        args += ["--percentile", "99.99"]
    for p in npz:
        args += ["--calibration-npz", os.path.join(a.work, p)]
    print(" ".join(args), flush=True)
    t0 = time.time()
    r = subprocess.run(["/usr/bin/time", "-f", "peak_rss_kib=%M"] + args, capture_output=True,
                       text=True)
    seconds = time.time() - t0
    print(r.stdout, r.stderr[-3000:], flush=True)
    result = {"command": args, "returncode": r.returncode, "seconds": round(seconds, 1),
              "report": r.stdout}
    if r.returncode == 0:
        import onnxruntime as ort
        ort.set_default_logger_severity(3)

        def logits_of(path):
            s = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
            return np.concatenate([s.run(None, {"image": held[i:i + 16]})[0]
                                   for i in range(0, len(held), 16)])

        want = logits_of(model)
        got = logits_of(out)
        confident = softmax(want).max(1) >= 0.5
        agree = got.argmax(1) == want.argmax(1)
        result.update({"top1_all": float(agree.mean()),
                       "top1_confident": float(agree[confident].mean()),
                       "mean_cosine": float(np.mean([g @ w / np.sqrt((g @ g) * (w @ w))
                                                     for g, w in zip(got, want)]))})
        result["sensitivity_top10"] = json.load(open(report))["nodes"][:10]
    print(json.dumps({k: v for k, v in result.items() if k != "report"}, indent=1), flush=True)
    if a.out:
        json.dump(result, open(a.out, "w"), indent=1)


if __name__ == "__main__":
    main()
