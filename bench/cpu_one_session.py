"""Median microseconds per run of one model in one runtime, alone in this process.

Kiln and onnxruntime measured in separate processes, one after the other (the caller interleaves
them): onnxruntime's pool spins after its runs, and in one process with Kiln it took the cores
from Kiln's threads (a 2-thread Kiln run read 3-5x slower beside it than alone).

    python3 bench/cpu_one_session.py kiln|ort MODEL.onnx --input x=1,1280 --threads 2 --reps 300
Prints one number. KILN_PY: where the kiln package is (default: installed).
"""
import argparse
import os
import sys
import time

import numpy as np


def main():
    p = argparse.ArgumentParser()
    p.add_argument("runtime", choices=["kiln", "ort"])
    p.add_argument("model")
    p.add_argument("--input", required=True, help="NAME=D0,D1,... (float32, random)")
    p.add_argument("--threads", type=int, default=0, help="0: the runtime's default")
    p.add_argument("--reps", type=int, default=100)
    p.add_argument("--rounds", type=int, default=5)
    a = p.parse_args()
    name, dims = a.input.split("=")
    x = np.random.default_rng(1).standard_normal([int(d) for d in dims.split(",")])
    feeds = {name: x.astype(np.float32)}
    if a.runtime == "ort":
        import onnxruntime as ort
        so = ort.SessionOptions()
        so.intra_op_num_threads = a.threads
        s = ort.InferenceSession(a.model, so, providers=["CPUExecutionProvider"])
    else:
        if os.environ.get("KILN_PY"):
            sys.path.insert(0, os.environ["KILN_PY"])
        import kiln
        so = kiln.SessionOptions()
        so.intra_op_num_threads = a.threads
        s = kiln.InferenceSession(a.model, so)
    for _ in range(20):
        s.run(None, feeds)
    times = []
    for _ in range(a.rounds):
        t0 = time.perf_counter()
        for _ in range(a.reps):
            s.run(None, feeds)
        times.append((time.perf_counter() - t0) / a.reps * 1e6)
    print(round(float(np.median(times)), 1))


if __name__ == "__main__":
    main()
