"""Speed of pruned dense models against the original, at 1 thread: `kiln bench` (its median) and
onnxruntime (the median of --runs runs), the models interleaved round by round so that a busy
machine slows them all alike; reports each model's median over the rounds and its best round.

    python3 bench/quantize/prune_speed.py --kiln build/src/kiln --rounds 5 \\
        original.onnx pruned_a.onnx pruned_b.onnx [--out speed.json]

Every model takes one float32 input of static shape (EfficientNet-Lite0 at batch 1 here).
"""
import argparse
import json
import subprocess
import time

import numpy as np


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--duration", type=float, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default="")
    ap.add_argument("models", nargs="+")
    a = ap.parse_args()

    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = a.threads
    sessions = {m: ort.InferenceSession(m, so, providers=["CPUExecutionProvider"])
                for m in a.models}

    def ort_ms(m):
        s = sessions[m]
        i = s.get_inputs()[0]
        x = np.random.default_rng(0).standard_normal(i.shape).astype(np.float32)
        for _ in range(5):
            s.run(None, {i.name: x})
        times = []
        for _ in range(a.runs):
            t0 = time.perf_counter()
            s.run(None, {i.name: x})
            times.append((time.perf_counter() - t0) * 1e3)
        return float(np.median(times))

    def kiln_ms(m):
        r = subprocess.run([a.kiln, "bench", m, "--threads", str(a.threads), "--json",
                            "--duration", str(a.duration)], capture_output=True, text=True,
                           check=True)
        return float(json.loads(r.stdout)["latency_ms"]["median"])

    rows = {m: {"kiln": [], "onnxruntime": []} for m in a.models}
    for r in range(a.rounds):
        for m in a.models:
            rows[m]["kiln"].append(kiln_ms(m))
            rows[m]["onnxruntime"].append(ort_ms(m))
        last = [f"{m.split('/')[-1]} kiln {rows[m]['kiln'][-1]:.1f} "
                f"ort {rows[m]['onnxruntime'][-1]:.1f}" for m in a.models]
        print(f"round {r + 1}: " + ", ".join(last), flush=True)
    out = []
    for m in a.models:
        row = {"model": m}
        for k in ("kiln", "onnxruntime"):
            row[f"{k}_median_ms"] = round(float(np.median(rows[m][k])), 2)
            row[f"{k}_best_ms"] = round(float(np.min(rows[m][k])), 2)
        out.append(row)
        print(json.dumps(row), flush=True)
    if a.out:
        json.dump(out, open(a.out, "w"), indent=1)


if __name__ == "__main__":
    main()
