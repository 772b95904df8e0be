#!/usr/bin/env python3
"""Real models at their published sizes through Kiln, beside onnxruntime.

    python3 bench/models_full.py [--out build/models-full] [--only resnet50,bert,light_vgg19,...]
                                 [--repeat 3] [--opset 17] [--small] [--device gpu]

Exports (Debian's /usr/bin/python3 with python3-torch) ResNet-50, MobileNetV2, EfficientNet-B0,
ViT-B/16 at 224x224 batch 1, BERT-base (12 layers, hidden 768) at batch 1 x 128 tokens, the LSTM
and control-flow models at their larger widths; adds the onnx wheel's light CNNs (VGG-19 too).
Then for each: onnxruntime's outputs as the reference, Kiln directly from ONNX and as a compiled
engine, within 1e-4 relative L2; node counts, planned activation memory, and the median run
time of Kiln (both paths) and of onnxruntime on the first data set, one process at a time, as
wall and as process CPU time (on a shared machine the CPU time is the steadier figure; the
reference interpreter is single-threaded, onnxruntime uses every core).
Writes OUT/results/CASE.json and prints the Markdown table (tools/models/summarize.py).

--small measures the CI suite instead (tools/models/suite.py: small sizes, opsets 17 and 13).

On the reference kernels the full sizes take long (ResNet-50 is tens of seconds a run): meant for when a
fast backend lands. Build Kiln first (make build).
"""
import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOLS = os.path.join(ROOT, "tools", "models")
sys.path.insert(0, TOOLS)

from check_case import check_case  # noqa: E402
from summarize import table  # noqa: E402
from suite import SYSTEM_PYTHON, case_names  # noqa: E402

import onnx  # noqa: E402
from onnx import numpy_helper  # noqa: E402
import onnxruntime as ort  # noqa: E402

EXPORTED = ["resnet50", "mobilenet_v2", "efficientnet_b0", "vit_b_16", "bert", "control_flow",
            "lstm", "lstm_bidirectional"]


def ort_median_ms(case_dir, repeat):
    """Median wall and process CPU time of an onnxruntime run (default options, all cores) on
    data set 0."""
    model = onnx.load(os.path.join(case_dir, "model.onnx"), load_external_data=False)
    inits = {i.name for i in model.graph.initializer}
    names = [v.name for v in model.graph.input if v.name not in inits]
    feeds = {}
    for k, name in enumerate(names):
        path = os.path.join(case_dir, "test_data_set_0", f"input_{k}.pb")
        feeds[name] = numpy_helper.to_array(onnx.load_tensor(path))
    session = ort.InferenceSession(os.path.join(case_dir, "model.onnx"),
                                   providers=["CPUExecutionProvider"])
    session.run(None, feeds)  # warm-up
    times, cpu = [], []
    for _ in range(repeat):
        start, cpu_start = time.perf_counter(), time.process_time()
        session.run(None, feeds)
        times.append((time.perf_counter() - start) * 1000)
        cpu.append((time.process_time() - cpu_start) * 1000)
    return statistics.median(times), statistics.median(cpu)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(ROOT, "build", "models-full"))
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    ap.add_argument("--only", default="", help="comma-separated: model names, light_* names")
    ap.add_argument("--opset", type=int, default=17)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--small", action="store_true", help="the CI suite's cases and sizes")
    ap.add_argument("--device", default="", help="compile the engines for this device (gpu) and "
                    "check them running there; the direct path stays the CPU's reference")
    ap.add_argument("--engine-only", action="store_true", help="check the compiled engines "
                    "only, not the direct path (the reference interpreter, checked on the CPU)")
    ap.add_argument("--fp16", action="store_true", help="compile with --fp16 and check within "
                    "1e-2 relative L2")
    args = ap.parse_args()
    if args.small and args.out == ap.get_default("out"):
        args.out = os.path.join(ROOT, "build", "models-bench-small")
    kiln = os.path.join(args.build_dir, "src", "kiln")
    check = os.path.join(args.build_dir, "tests", "kiln_model_check")
    for p in (kiln, check):
        if not os.path.exists(p):
            sys.exit(f"models_full: {p} is missing: build Kiln first")
    only = [n for n in args.only.split(",") if n]
    exported = [n for n in EXPORTED if not only or n in only]
    light = [os.path.splitext(os.path.basename(p))[0] for p in sorted(glob.glob(os.path.join(
        os.path.dirname(onnx.__file__), "backend", "test", "data", "light", "*.onnx")))]
    light = [n for n in light if not only or n in only]

    onnx_dir = os.path.join(args.out, "onnx")
    cases = os.path.join(args.out, "cases")
    results = os.path.join(args.out, "results")
    os.makedirs(results, exist_ok=True)
    stems = [f"{n}_op{args.opset}" for n in exported]
    if args.small:
        suite = [c for c in case_names() if not only or c.rpartition("_op")[0] in only or
                 c in only]
        stems = [c for c in suite if not c.startswith("light_")]
        light = [c for c in suite if c.startswith("light_")]
        exported = stems
    if exported:
        subprocess.run([SYSTEM_PYTHON, os.path.join(TOOLS, "export_models.py"), "--out",
                        onnx_dir, "--opset", str(args.opset), "--only", ",".join(stems)] +
                       (["--small"] if args.small else []), check=True)
    make = [sys.executable, os.path.join(TOOLS, "make_cases.py"), "--out", cases,
            "--only", ",".join(stems + light)]
    if exported:
        make += ["--models", onnx_dir]
    if light:
        make.append("--light")
    subprocess.run(make, check=True)

    failed = []
    for case in stems + light:
        print(f"models_full: {case}", flush=True)
        case_dir = os.path.join(cases, case)
        r = check_case(case_dir, kiln, check, os.path.join(args.out, "work"), args.repeat,
                       parallel=False, timeout=6 * 3600, device=args.device,
                       direct=not args.engine_only, fp16=args.fp16)
        r["ort_ms"], r["ort_cpu_ms"] = ort_median_ms(case_dir, args.repeat)
        with open(os.path.join(results, case + ".json"), "w") as f:
            json.dump(r, f, indent=1)
        e = r.get("engine") or {}
        print(f"models_full: {case}: {'ok' if r['ok'] else 'FAILED'}, engine {json.dumps(e)}",
              flush=True)
        if not r["ok"]:
            failed.append(case)
            print(r["log"], flush=True)
    print(table(results))
    if failed:
        sys.exit(f"models_full: failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
