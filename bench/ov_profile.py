"""OpenVINO's per-node times (PERF_COUNT) for one model, grouped by its executed node type, to set
beside `kiln profile` when a row of the CPU standing is close.

    PYTHONPATH=/tmp/ovpkg python3 bench/ov_profile.py MODEL.onnx --input x=1,3,224,224 \
        [--threads 1] [--ov-f32] [--reps 50] [--top 25]

Inputs as bench/cpu_one_session.py's (the same values). Prints the total of the median per-node times, the
share of each executed type, and the slowest nodes (median microseconds over the runs).
"""
import argparse
import collections
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cpu_one_session import random_feeds  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("model")
    p.add_argument("--input", required=True, action="append")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--reps", type=int, default=50)
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--ov-f32", action="store_true")
    a = p.parse_args()
    import openvino as ov
    feeds = random_feeds(a.input)
    config = {"NUM_STREAMS": "1", "PERFORMANCE_HINT": "LATENCY", "PERF_COUNT": "YES",
              "INFERENCE_NUM_THREADS": str(a.threads)}
    if a.ov_f32:
        config["INFERENCE_PRECISION_HINT"] = "f32"
    core = ov.Core()
    model = core.read_model(a.model)
    model.reshape({n: list(v.shape) for n, v in feeds.items()})
    request = core.compile_model(model, "CPU", config).create_infer_request()
    for _ in range(10):
        request.infer(feeds)
    per_node = collections.defaultdict(list)
    kinds = {}
    for _ in range(a.reps):
        request.infer(feeds)
        for info in request.profiling_info:
            us = info.real_time.total_seconds() * 1e6
            per_node[info.node_name].append(us)
            kinds[info.node_name] = f"{info.exec_type} ({info.node_type})"
    medians = {n: float(np.median(v)) for n, v in per_node.items()}
    total = sum(medians.values())
    print(f"total of per-node medians: {total:.0f} us ({len(medians)} nodes)")
    by_kind = collections.Counter()
    for n, us in medians.items():
        by_kind[kinds[n]] += us
    for kind, us in by_kind.most_common():
        if us > 0:
            print(f"  {us:9.0f} us {100 * us / total:5.1f} %  {kind}")
    print("slowest nodes:")
    for n, us in sorted(medians.items(), key=lambda kv: -kv[1])[:a.top]:
        print(f"  {us:9.1f} us  {kinds[n]:40s} {n}")


if __name__ == "__main__":
    main()
