"""Median microseconds per run of one model in one runtime, alone in this process.

Kiln and onnxruntime measured in separate processes, one after the other (the caller interleaves
them): onnxruntime's pool spins after its runs, and in one process with Kiln it took the cores
from Kiln's threads (a 2-thread Kiln run read 3-5x slower beside it than alone).

    python3 bench/cpu_one_session.py kiln|ort|ov MODEL.onnx --input x=1,1280 --threads 2 --reps 300
    python3 bench/cpu_one_session.py kiln BERT.onnx --input input_ids=1,128:int64:30522 \
        --input attention_mask=1,128:int64 --input token_type_ids=1,128:int64:1
Prints one number. KILN_PY: where the kiln package is (default: installed). `ov`: OpenVINO
(PyPI `openvino`; its own process, PYTHONPATH may name a --target install) with its default
precision hint unless --ov-f32 (INFERENCE_PRECISION_HINT f32), one stream, the given threads.
"""
import argparse
import os
import sys
import time

import numpy as np


def random_feeds(specs):
    """NAME=D0,D1,... (float32, standard normal) or NAME=D0,D1:int64[:HIGH] (integers in
    [0, HIGH), default 2) -> {name: array}, the same values for every runtime (seed 1)."""
    rng = np.random.default_rng(1)
    feeds = {}
    for spec in specs:
        name, rest = spec.split("=")
        dims, _, kind = rest.partition(":")
        shape = [int(d) for d in dims.split(",")]
        if kind.startswith("int64"):
            high = int(kind.split(":")[1]) if ":" in kind else 2
            feeds[name] = rng.integers(0, high, shape).astype(np.int64)
        else:
            feeds[name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def main():
    p = argparse.ArgumentParser()
    p.add_argument("runtime", choices=["kiln", "ort", "ov"])
    p.add_argument("model")
    p.add_argument("--input", required=True, action="append",
                   help="NAME=D0,D1,... (float32, random), or NAME=D0,D1:int64[:HIGH] (random "
                        "integers in [0, HIGH), default 2); repeatable")
    p.add_argument("--threads", type=int, default=0, help="0: the runtime's default")
    p.add_argument("--reps", type=int, default=100)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--ov-f32", action="store_true", help="OpenVINO in float32 (not its default)")
    a = p.parse_args()
    feeds = random_feeds(a.input)
    if a.runtime == "ort":
        import onnxruntime as ort
        so = ort.SessionOptions()
        so.intra_op_num_threads = a.threads
        s = ort.InferenceSession(a.model, so, providers=["CPUExecutionProvider"])
    elif a.runtime == "ov":
        import openvino as ov
        config = {"NUM_STREAMS": "1", "PERFORMANCE_HINT": "LATENCY"}
        if a.threads:
            config["INFERENCE_NUM_THREADS"] = str(a.threads)
        if a.ov_f32:
            config["INFERENCE_PRECISION_HINT"] = "f32"
        core = ov.Core()
        model = core.read_model(a.model)
        model.reshape({n: list(v.shape) for n, v in feeds.items()})
        compiled = core.compile_model(model, "CPU", config)
        request = compiled.create_infer_request()

        class OvSession:
            def run(self, _outputs, f):
                return request.infer(f)

        s = OvSession()
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
