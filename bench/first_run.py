#!/usr/bin/env python3
"""Open time, first run and second run of one model (ONNX file or engine) in Kiln, in this
process (what a packed weight stored in the engine saves shows as a shorter first run).

    KILN_PY=build/python python3 bench/first_run.py MODEL [--threads 1] [--input NAME=SHAPE[:int64]]

Inputs not named get random float32 data of their declared shape (symbolic dims 1); BERT-style
int64 inputs take `--input input_ids=1,128:int64`. Prints "open X ms first run Y ms second Z ms".
"""
import argparse
import os
import sys
import time

import numpy as np


def main():
    p = argparse.ArgumentParser()
    p.add_argument("model")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--input", action="append", default=[], help="NAME=D0,D1,...[:int64]")
    a = p.parse_args()
    if os.environ.get("KILN_PY"):
        sys.path.insert(0, os.environ["KILN_PY"])
    import kiln

    given = {}
    for spec in a.input:
        name, rest = spec.split("=", 1)
        shape, _, dtype = rest.partition(":")
        dims = [int(d) for d in shape.split(",")]
        given[name] = (np.zeros(dims, np.int64) if dtype == "int64"
                       else np.random.default_rng(0).standard_normal(dims).astype(np.float32))
    so = kiln.SessionOptions()
    so.intra_op_num_threads = a.threads
    t0 = time.perf_counter()
    s = kiln.InferenceSession(a.model, so)
    t1 = time.perf_counter()
    feeds = {}
    for i in s.get_inputs():
        if i.name in given:
            feeds[i.name] = given[i.name]
        else:
            dims = [d if isinstance(d, int) and d > 0 else 1 for d in i.shape]
            feeds[i.name] = np.random.default_rng(0).standard_normal(dims).astype(np.float32)
    s.run(None, feeds)
    t2 = time.perf_counter()
    s.run(None, feeds)
    t3 = time.perf_counter()
    print(f"open {1e3 * (t1 - t0):.1f} ms first run {1e3 * (t2 - t1):.1f} ms "
          f"second {1e3 * (t3 - t2):.1f} ms")


if __name__ == "__main__":
    main()
