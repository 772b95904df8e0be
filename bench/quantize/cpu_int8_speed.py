"""Static INT8 speed on the CPU: a CNN quantized by `kiln quantize` (a QDQ ONNX file) run by Kiln
on its int8 kernels (passes/fuse_quantized_ops, oneDNN's int8 convolution and matmul), by Kiln
in float32 (the float model), and by onnxruntime on the same QDQ file, at 1 and 2 threads.
Sessions are made once; the timed rounds interleave the engines (A B C A B C ...) so that a
shared machine's noise lands on all of them alike; each round times `--runs` single-image runs
and keeps their median; the figures are the medians over the rounds, and the ratios are taken
round by round (each against the float32 Kiln run of the same round) before their median.

Accuracy: Kiln's int8 run against onnxruntime's run of the same QDQ file (top-1 agreement and
mean logit cosine on held-out photo crops), and both against the float model.

    PYTHONPATH=build/python python3 bench/quantize/cpu_int8_speed.py --kiln build/src/kiln \\
        --work /tmp/int8bench --packages /tmp/effnet [--rounds 7] [--runs 20]

Needs: the EfficientNet-Lite0 packages (bench/quantize/efficientnet_lite0.py says how), Debian's
python3-torch / torchvision / skimage for the exports and crops (run by /usr/bin/python3).
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SYSTEM_PYTHON = "/usr/bin/python3"


def script_text(name):
    """EXPORT / CROPS of efficientnet_lite0.py (one copy of the export and the crops)."""
    src = open(os.path.join(HERE, "efficientnet_lite0.py")).read()
    return re.search(name + r' = r"""(.*?)"""', src, re.S).group(1)


def prepare(a):
    os.makedirs(a.work, exist_ok=True)
    models = {}
    eff = os.path.join(a.work, "efficientnet_lite0.onnx")
    if not os.path.exists(eff):
        subprocess.run([SYSTEM_PYTHON, "-c", script_text("EXPORT"), a.packages, eff], check=True)
    models["EfficientNet-Lite0"] = (eff, "image")
    for name in a.torchvision:
        path = os.path.join(a.work, f"{name}.onnx")
        if not os.path.exists(path):
            subprocess.run([SYSTEM_PYTHON, os.path.join(HERE, "..", "export_torchvision.py"),
                            a.work, name], check=True)
        models[name] = (path, "input")
    crops = {}
    for what, count, seed in (("cal", a.calibration, 1), ("eval", a.eval, 2)):
        p = os.path.join(a.work, f"{what}.npy")
        if not os.path.exists(p) or len(np.load(p)) != count:
            subprocess.run([SYSTEM_PYTHON, "-c", script_text("CROPS"), str(count), str(seed), p],
                           check=True)
        crops[what] = np.load(p)
    return models, crops


def quantize(a, name, path, input_name, cal):
    out = os.path.join(a.work, f"{os.path.splitext(os.path.basename(path))[0]}.int8.onnx")
    if os.path.exists(out):
        return out
    args = [a.kiln, "quantize", path, "-o", out, "--method", "percentile", "--percentile",
            "99.99", "--allow-drift", "--min-cosine", "0.9"]
    for i in range(0, len(cal), 4):
        p = os.path.join(a.work, f"{name}_cal{i // 4}.npz")
        np.savez(p, **{input_name: cal[i:i + 4]})
        args += ["--calibration-npz", p]
    r = subprocess.run(args, capture_output=True, text=True)
    print(r.stdout[-1500:], r.stderr[-1500:], flush=True)
    r.check_returncode()
    return out


def kiln_session(path, threads):
    import kiln
    o = kiln.SessionOptions()
    o.intra_op_num_threads = threads
    return kiln.InferenceSession(path, o)


def ort_session(path, threads):
    import onnxruntime as ort
    o = ort.SessionOptions()
    o.intra_op_num_threads = threads
    o.inter_op_num_threads = 1
    return ort.InferenceSession(path, o, providers=["CPUExecutionProvider"])


def run_all(sess, input_name, x, batch=16):
    return np.concatenate([sess.run(None, {input_name: x[i:i + batch]})[0]
                           for i in range(0, len(x), batch)])


def agreement(a, b):
    top1 = float((a.argmax(1) == b.argmax(1)).mean())
    cos = float(np.mean([u @ v / np.sqrt((u @ u) * (v @ v)) for u, v in zip(a, b)]))
    return top1, cos


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--packages", required=True)
    ap.add_argument("--torchvision", nargs="*", default=["resnet18"])
    ap.add_argument("--calibration", type=int, default=16)
    ap.add_argument("--eval", type=int, default=64)
    ap.add_argument("--threads", nargs="*", type=int, default=[1, 2])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    models, crops = prepare(a)
    results = {"rows": [], "accuracy": []}
    for name, (path, input_name) in models.items():
        qpath = quantize(a, name, path, input_name, crops["cal"])
        x = crops["eval"]
        # Accuracy: one session each at 2 threads.
        ref = run_all(ort_session(path, 2), input_name, x)
        ort_int8 = run_all(ort_session(qpath, 2), input_name, x)
        kiln_int8 = run_all(kiln_session(qpath, 2), input_name, x)
        acc = {"model": name, "crops": len(x)}
        acc["kiln_int8_vs_ort_same_file_top1"], acc["kiln_int8_vs_ort_same_file_cosine"] = \
            agreement(kiln_int8, ort_int8)
        acc["kiln_int8_vs_float_top1"], acc["kiln_int8_vs_float_cosine"] = agreement(kiln_int8, ref)
        acc["ort_int8_vs_float_top1"], acc["ort_int8_vs_float_cosine"] = agreement(ort_int8, ref)
        print(json.dumps(acc), flush=True)
        results["accuracy"].append(acc)
        one = x[:1]
        for threads in a.threads:
            engines = {"kiln int8": kiln_session(qpath, threads),
                       "kiln fp32": kiln_session(path, threads),
                       "onnxruntime int8 (same QDQ file)": ort_session(qpath, threads),
                       "onnxruntime fp32": ort_session(path, threads)}
            for s in engines.values():  # warm-up
                for _ in range(3):
                    s.run(None, {input_name: one})
            per_round = {k: [] for k in engines}
            for _ in range(a.rounds):
                for k, s in engines.items():
                    times = []
                    for _ in range(a.runs):
                        t0 = time.perf_counter()
                        s.run(None, {input_name: one})
                        times.append((time.perf_counter() - t0) * 1e3)
                    per_round[k].append(statistics.median(times))
            base = per_round["kiln fp32"]
            for k, ms in per_round.items():
                row = {"model": name, "threads": threads, "engine": k,
                       "median_ms": round(statistics.median(ms), 2),
                       "vs_kiln_fp32": round(statistics.median(
                           [m / b for m, b in zip(ms, base)]), 3),
                       "vs_kiln_int8": round(statistics.median(
                           [m / i for m, i in zip(ms, per_round["kiln int8"])]), 3)}
                print(json.dumps(row), flush=True)
                results["rows"].append(row)
    if a.out:
        json.dump(results, open(a.out, "w"), indent=1)


if __name__ == "__main__":
    sys.exit(main())
