"""One session, several Python threads calling run() on it at once: Kiln vs onnxruntime.

Issue 13 item 11 measured 4 threads at 80 ms (Kiln) against 29 ms (onnxruntime). This script
times the same thing side by side: for each model and runtime, one InferenceSession, T threads
each running it N times (started together by a barrier); the wall time of all T*N runs, the
median over R repeats, and for reference the same T*N runs on one thread.

    PYTHONPATH=build/python python3 bench/python_parallel_runs.py [--threads 4] [--runs 200] \
        [--repeats 7] [--intra-op-threads 0]

Models: tools/make_demo_model.py's demo CNN (batch 1) and a 2-layer MLP (256 -> 512 -> 256,
batch 8) built with onnx.helper (tools/make_mlp_model.py).
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tools"))
import make_demo_model  # noqa: E402
from make_mlp_model import mlp  # noqa: E402

from parallel_timing import timed  # noqa: E402
import kiln  # noqa: E402
import onnxruntime as ort  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--runs", type=int, default=200, help="runs per thread")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--intra-op-threads", type=int, default=0, help="0: each runtime's default")
    ap.add_argument("--kiln-env", action="append", default=[], metavar="NAME=VALUE",
                    help="also measure Kiln with this environment variable set (repeatable; "
                         "each is a row of its own, e.g. KILN_CPU_MIN_US_PER_THREAD=0)")
    ap.add_argument("--one", nargs=2, metavar=("MODEL", "RUNTIME"), help=argparse.SUPPRESS)
    args = ap.parse_args()

    tmp = tempfile.mkdtemp()
    make_demo_model.build(os.path.join(tmp, "demo.onnx"))
    mlp(os.path.join(tmp, "mlp2.onnx"))
    models = {
        "demo CNN (1x3x8x8)": (os.path.join(tmp, "demo.onnx"),
                               {"image": np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)}),
        "MLP 256-512-256 (8x256)": (os.path.join(tmp, "mlp2.onnx"),
                                    {"x": np.random.default_rng(0).standard_normal((8, 256)).astype(np.float32)}),
    }

    if args.one:
        # One (model, runtime) measurement, in a process of its own: a crash is one row's result.
        name, rt = args.one
        path, feeds = models[name]
        opts = (kiln if rt == "kiln" else ort).SessionOptions()
        opts.intra_op_num_threads = args.intra_op_threads
        sess = (kiln if rt == "kiln" else ort).InferenceSession(
            path, opts, providers=["CPUExecutionProvider"])
        sess.run(None, feeds)  # warm-up (plans, first touch), on the main thread
        seq = [timed(sess, feeds, 1, args.threads * args.runs) for _ in range(args.repeats)]
        par = [timed(sess, feeds, args.threads, args.runs) for _ in range(args.repeats)]
        print(json.dumps({"seq": statistics.median(seq) * 1e3, "par": statistics.median(par) * 1e3}))
        return

    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs visible, "
          f"kiln {kiln.__version__}, onnxruntime {ort.__version__}, numpy {np.__version__}, "
          f"Python {platform.python_version()}")
    print(f"# {args.threads} threads x {args.runs} runs on one session, median of "
          f"{args.repeats} repeats; intra_op_num_threads={args.intra_op_threads}")
    print("| model | runtime | 1 thread x T*N runs (ms) | T threads x N runs (ms) | speed-up |")
    print("|---|---|---:|---:|---:|")
    variants = [("kiln", "kiln", {})]
    for spec in args.kiln_env:
        key, _, value = spec.partition("=")
        variants.append((f"kiln {spec}", "kiln", {key: value}))
    variants.append(("onnxruntime", "onnxruntime", {}))
    for name in models:
        for label, rt, env in variants:
            cmd = [sys.executable, __file__, "--one", name, rt] + [
                f"--{k.replace('_', '-')}={v}" for k, v in vars(args).items()
                if k not in ("one", "kiln_env")]
            r = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **env})
            if r.returncode != 0:
                why = f"signal {-r.returncode}" if r.returncode < 0 else f"exit {r.returncode}"
                tail = (r.stderr.strip().splitlines() or [""])[-1][:120]
                print(f"| {name} | {label} | crashed ({why}) {tail} | | |", flush=True)
                continue
            m = json.loads(r.stdout.strip().splitlines()[-1])
            print(f"| {name} | {label} | {m['seq']:.1f} | {m['par']:.1f} | "
                  f"{m['seq'] / m['par']:.2f}x |", flush=True)

if __name__ == "__main__":
    main()
