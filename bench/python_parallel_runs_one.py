"""One runtime, one session, in this process alone: T Python threads x N runs at once, then the
same T*N runs from one thread (medians of repeats, wall ms). bench/python_parallel_runs.py runs
Kiln and onnxruntime in one process, where onnxruntime's spinning pool took a core from the
Kiln rows that followed it; this script gives each runtime a process of its own (the caller
interleaves them).

    PYTHONPATH=build/python python3 bench/python_parallel_runs_one.py MODEL.onnx 8,256 kiln|ort \
        [--threads 4] [--runs 200] [--intra-op-threads 0] [--parallel-runs N]
"""
import argparse
import os
import statistics
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from parallel_timing import timed  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("model")
    p.add_argument("shape", help="the float32 input's dims, e.g. 8,256")
    p.add_argument("runtime", choices=["kiln", "ort"])
    p.add_argument("--threads", type=int, default=4)
    p.add_argument("--runs", type=int, default=200)
    p.add_argument("--intra-op-threads", type=int, default=0)
    p.add_argument("--parallel-runs", type=int, default=0, help="Kiln's parallel_runs (0: auto)")
    a = p.parse_args()
    x = np.random.default_rng(1).random([int(d) for d in a.shape.split(",")], dtype=np.float32)
    if a.runtime == "ort":
        import onnxruntime as ort
        so = ort.SessionOptions()
        so.intra_op_num_threads = a.intra_op_threads
        s = ort.InferenceSession(a.model, so, providers=["CPUExecutionProvider"])
    else:
        import kiln
        so = kiln.SessionOptions()
        so.intra_op_num_threads = a.intra_op_threads
        if a.parallel_runs:
            so.add_session_config_entry("parallel_runs", str(a.parallel_runs))
        s = kiln.InferenceSession(a.model, so)
    feeds = {s.get_inputs()[0].name: x}

    timed(s, feeds, a.threads, 50)
    overlapping = 1e3 * statistics.median(timed(s, feeds, a.threads, a.runs) for _ in range(7))
    alone = 1e3 * statistics.median(timed(s, feeds, 1, a.threads * a.runs) for _ in range(5))
    print(f"{a.runtime}: {a.threads} threads x {a.runs} runs {overlapping:.1f} ms, "
          f"1 thread x {a.threads * a.runs} runs {alone:.1f} ms")


if __name__ == "__main__":
    main()
