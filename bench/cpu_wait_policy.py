#!/usr/bin/env python3
"""OpenMP runtimes and wait policies on this CPU, on a quiet host and beside a busy process: Kiln
vs onnxruntime.

Kiln's CPU kernels run on libgomp (oneDNN's runtime), which reads OMP_WAIT_POLICY and
GOMP_SPINCOUNT once, at load. Spinning long between parallel regions keeps two threads fast on a
quiet host and collapses when another process shares a core; sleeping at once (PASSIVE) is
polite but wakes the threads for every region. This script measures each policy side by side
with onnxruntime (spinning and not), 2 threads, interleaved rounds, medians:

    python3 bench/cpu_wait_policy.py [--kiln build/src/kiln] [--rounds 3] [--runs 50] [--duration 2]
                                     [--policies default,passive,1000,3000,10000,active10000]
                                     [--kiln-gnu BUILD/src/kiln] [--models encoder,mlp]

Policies run `--kiln` (the build's runtime: LLVM's libomp since 2026-12-06, GNU's libgomp before)
with the policy's environment, except the `gnu*` ones, which run `--kiln-gnu`: a build with
-DKILN_OPENMP_RUNTIME=gnu (or one from before the change) for the libgomp side by side.
`llvm-btN` sets KMP_BLOCKTIME=N (ms libomp's idle threads spin, yielding, before they sleep).

Models (built here with onnx.helper): the BERT-style encoder of tools/make_transformer_model.py
(2 layers, hidden 128, 4 heads; batch 8 x 128 tokens) and the 2-layer MLP of
tools/make_mlp_model.py (256 -> 512 -> 256, batch 8). "busy": one process spinning in a
loop for the whole condition. Kiln: `kiln bench --threads 2` (and 1, the reference), p50;
onnxruntime: intra_op_num_threads 2, p50 of the same number of runs after 3 warm-ups; each
measurement at least --duration seconds.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tools"))
sys.path.insert(0, HERE)

POLICIES = {
    "default": {},
    "passive": {"OMP_WAIT_POLICY": "PASSIVE"},
    "1000": {"GOMP_SPINCOUNT": "1000"},
    "3000": {"GOMP_SPINCOUNT": "3000"},
    "10000": {"GOMP_SPINCOUNT": "10000"},
    "active10000": {"OMP_WAIT_POLICY": "ACTIVE", "GOMP_SPINCOUNT": "10000"},
    # On --kiln-gnu (libgomp):
    "gnu": {},
    "gnu-passive": {"OMP_WAIT_POLICY": "PASSIVE"},
    "gnu-active10000": {"OMP_WAIT_POLICY": "ACTIVE", "GOMP_SPINCOUNT": "10000"},
    # On libomp: its idle threads spin KMP_BLOCKTIME ms (yielding the core while they do), then sleep.
    "llvm-bt0": {"KMP_BLOCKTIME": "0"},
    "llvm-bt1": {"KMP_BLOCKTIME": "1"},
    "llvm-bt10": {"KMP_BLOCKTIME": "10"},
    "llvm-bt200": {"KMP_BLOCKTIME": "200"},
}
# What the policies set; none of it leaks in from the caller's environment.
POLICY_VARS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME", "KMP_LIBRARY", "KMP_USE_YIELD")


def ort_child(model, threads, runs, spin, dims_json, duration):
    import time

    import numpy as np
    import onnxruntime as ort

    dims = json.loads(dims_json)
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.add_session_config_entry("session.intra_op.allow_spinning", spin)
    s = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    feeds = {}
    for i in s.get_inputs():
        shape = [dims.get(d, 1) if isinstance(d, str) else d for d in i.shape]
        feeds[i.name] = rng.standard_normal(shape).astype(np.float32)
    for _ in range(3):
        s.run(None, feeds)
    lat = []
    start = time.perf_counter()
    while len(lat) < runs or time.perf_counter() - start < duration:
        t = time.perf_counter()
        s.run(None, feeds)
        lat.append((time.perf_counter() - t) * 1e3)
    print(json.dumps({"p50_ms": float(np.median(lat))}))


def kiln_p50(kiln, engine, threads, runs, dims, policy, duration):
    env = {k: v for k, v in os.environ.items() if k not in POLICY_VARS}
    env.update(POLICIES[policy])
    args = [kiln, "bench", engine, "--threads", str(threads), "--warmup", "3", "--iterations",
            str(runs), "--duration", str(duration), "--json"]
    for k, v in dims.items():
        args += ["-d", f"{k}={v}"]
    r = subprocess.run(args, capture_output=True, text=True, env=env, check=True)
    return json.loads(r.stdout)["latency_ms"]["p50"]


def ort_p50(model, threads, runs, spin, dims, duration):
    r = subprocess.run([sys.executable, __file__, "--ort-child", model, str(threads), str(runs),
                        spin, json.dumps(dims), str(duration)], capture_output=True, text=True,
                       check=True)
    return json.loads(r.stdout.strip().splitlines()[-1])["p50_ms"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kiln", default=os.path.join(HERE, "..", "build", "src", "kiln"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--policies", default="default,passive,1000,3000,10000,active10000")
    ap.add_argument("--kiln-gnu", help="a Kiln built on libgomp, for the gnu* policies")
    ap.add_argument("--models", default="encoder,mlp")
    ap.add_argument("--work", help="folder for the models and engines; models already there are "
                    "used as they are (for a machine without the onnx package)")
    ap.add_argument("--duration", type=float, default=2.0,
                    help="seconds each measurement lasts at least: the first tenths of a second "
                    "after start, before the scheduler has spread the threads, read differently")
    ap.add_argument("--ort-child", nargs=6, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.ort_child:
        model, threads, runs, spin, dims, duration = a.ort_child
        ort_child(model, int(threads), int(runs), spin, dims, float(duration))
        return

    policies = a.policies.split(",")
    for p in policies:
        if p not in POLICIES:
            ap.error(f"unknown policy {p}: one of {', '.join(POLICIES)}")
        if p.startswith("gnu") and not a.kiln_gnu:
            ap.error(f"policy {p} needs --kiln-gnu (a Kiln built with -DKILN_OPENMP_RUNTIME=gnu)")
    binary = {p: a.kiln_gnu if p.startswith("gnu") else a.kiln for p in policies}
    work = a.work or tempfile.mkdtemp(prefix="kiln_wait_policy_")
    os.makedirs(work, exist_ok=True)
    models = {}
    wanted = a.models.split(",")
    if "encoder" in wanted:
        encoder = os.path.join(work, "encoder.onnx")
        if not os.path.exists(encoder):
            import make_transformer_model

            make_transformer_model.build(encoder, layers=2, hidden=128, heads=4, opset=13)
        models["encoder b8 s128"] = (encoder, {"batch": 8, "seq": 128})
    if "mlp" in wanted:
        mlp = os.path.join(work, "mlp.onnx")
        if not os.path.exists(mlp):
            import make_mlp_model

            make_mlp_model.mlp(mlp)
        models["mlp b8"] = (mlp, {"batch": 8})
    engines = {}
    for name, (model, dims) in models.items():
        engine = model.replace(".onnx", ".kiln")
        subprocess.run([a.kiln, "compile", model, "-o", engine, "--no-verify"], check=True,
                       capture_output=True)
        engines[name] = engine
    rows = []
    for condition in ("quiet", "busy"):
        busy = subprocess.Popen(["sh", "-c", "while :; do :; done"]) if condition == "busy" else None
        try:
            for name, (model, dims) in models.items():
                cells = {f"kiln {p}": [] for p in policies}
                cells["kiln 1 thread"] = []
                cells["ort spinning"], cells["ort no spin"] = [], []
                for _ in range(a.rounds):
                    for p in policies:
                        cells[f"kiln {p}"].append(kiln_p50(binary[p], engines[name], 2, a.runs,
                                                           dims, p, a.duration))
                    cells["kiln 1 thread"].append(kiln_p50(a.kiln, engines[name], 1, a.runs, dims,
                                                           "default", a.duration))
                    cells["ort spinning"].append(ort_p50(model, 2, a.runs, "1", dims, a.duration))
                    cells["ort no spin"].append(ort_p50(model, 2, a.runs, "0", dims, a.duration))
                med = {k: statistics.median(v) for k, v in cells.items()}
                rows.append((condition, name, med))
                print(condition, name, json.dumps({k: round(v, 3) for k, v in med.items()}),
                      flush=True)
        finally:
            if busy:
                busy.kill()
                busy.wait()
    cols = [f"kiln {p}" for p in policies] + ["kiln 1 thread", "ort spinning", "ort no spin"]
    print("\n| host | model | " + " | ".join(cols) + " |")
    print("|---|---|" + "---|" * len(cols))
    for condition, name, med in rows:
        print(f"| {condition} | {name} | " + " | ".join(f"{med[c]:.3f}" for c in cols) + " |")


if __name__ == "__main__":
    main()
