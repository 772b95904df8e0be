"""Kiln's CPU backend against onnxruntime on every full-size real model, steady state.

    python3 bench/models_speed.py --build build [--cases resnet50_op17,bert_op17,...]
                                  [--threads 1] [--runs 10] [--reps 3] [--out FILE.md]
                                  [--baseline-kiln OTHER_BUILD/src/kiln]

Uses the cases bench/models_full.py exports (BUILD/models-full/cases: torchvision ResNet-50,
MobileNetV2, EfficientNet-B0, ViT-B/16, BERT-base, the ONNX light CNNs, the LSTM and Loop/If
models) and their first input set. For each: `kiln compile` (no fixed shapes: the models' own
dynamic dims), then `kiln bench` (p50 of --runs after 2 warm-up runs) and onnxruntime's
InferenceSession (same input, same thread count, p50 of --runs after 2 warm-up runs), in
separate processes, alternating, --reps times; the table gives the medians and their ratio.
OMP_WAIT_POLICY=passive for Kiln and allow_spinning=0 for onnxruntime: idle threads sleep, as
on a machine shared with other jobs. --baseline-kiln adds another build's kiln (the tree before a
change) to every round, compiled with its own `kiln compile`: before/after in one run, as ratios.
"""
import argparse
import glob
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def ort_child(model, threads, runs, inputs):
    import time

    import numpy as np
    import onnx
    import onnxruntime as ort
    from onnx import numpy_helper

    feeds = {}
    for p in inputs:
        t = onnx.TensorProto()
        with open(p, "rb") as f:
            t.ParseFromString(f.read())
        feeds[t.name] = numpy_helper.to_array(t)
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    s = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    for _ in range(2):
        s.run(None, feeds)
    lat = []
    for _ in range(runs):
        t = time.perf_counter()
        s.run(None, feeds)
        lat.append((time.perf_counter() - t) * 1e3)
    print(json.dumps({"p50_ms": float(np.percentile(lat, 50))}))


def input_names(paths):
    import onnx

    names = []
    for p in paths:
        t = onnx.TensorProto()
        with open(p, "rb") as f:
            t.ParseFromString(f.read())
        names.append(t.name)
    return names


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--cases", default="")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", default=None)
    ap.add_argument("--baseline-kiln", default=None, help="another build's kiln, benched beside")
    ap.add_argument("--ort-child", nargs="+", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.ort_child:
        model, threads, runs, *inputs = a.ort_child
        ort_child(model, int(threads), int(runs), inputs)
        return

    root = os.path.join(a.build, "models-full", "cases")
    if not os.path.isdir(root):
        sys.exit(f"no cases in {root}: run python3 bench/models_full.py first")
    cases = a.cases.split(",") if a.cases else sorted(os.listdir(root))
    kiln = os.path.join(a.build, "src", "kiln")
    env = dict(os.environ, OMP_WAIT_POLICY="passive")
    rows = []
    for case in cases:
        d = os.path.join(root, case)
        model = os.path.join(d, "model.onnx")
        inputs = sorted(glob.glob(os.path.join(d, "test_data_set_0", "input_*.pb")))
        engine = os.path.join(a.build, "models-full", "work", f"{case}.speed.kiln")
        binaries = [(kiln, engine)]
        if a.baseline_kiln:
            binaries.append((a.baseline_kiln, engine.replace(".speed.kiln", ".baseline.kiln")))
        failed = False
        for binary, out in binaries:
            c = subprocess.run([binary, "compile", model, "-o", out, "--no-verify"],
                               capture_output=True, text=True, env=env)
            if c.returncode != 0:
                print(f"{case}: {binary} compile failed: {c.stderr.strip()[-300:]}", flush=True)
                failed = True
        if failed:
            continue
        args = []
        for name, p in zip(input_names(inputs), inputs):
            args += ["--input", f"{name}={p}"]
        kiln_ms, base_ms, ort_ms = [], [], []
        for _ in range(a.reps):
            for (binary, out), into in zip(binaries, (kiln_ms, base_ms)):
                r = subprocess.run([binary, "bench", out, *args, "--threads", str(a.threads),
                                    "--warmup", "2", "--iterations", str(a.runs), "--json"],
                                   capture_output=True, text=True, env=env, check=True)
                into.append(json.loads(r.stdout)["latency_ms"]["p50"])
            r = subprocess.run([sys.executable, __file__, "--ort-child", model, str(a.threads),
                                str(a.runs), *inputs], capture_output=True, text=True, check=True)
            ort_ms.append(json.loads(r.stdout.strip().splitlines()[-1])["p50_ms"])
        k, o = statistics.median(kiln_ms), statistics.median(ort_ms)
        b = statistics.median(base_ms) if base_ms else None
        rows.append((case, k, o, b))
        extra = f", baseline {b:.2f} ms, kiln / baseline {k / b:.3f}" if b else ""
        print(f"{case}: kiln {k:.2f} ms, onnxruntime {o:.2f} ms, ratio {k / o:.2f}{extra}",
              flush=True)
    if a.out:
        import onnxruntime

        lines = [f"`python3 bench/models_speed.py --threads {a.threads} --runs {a.runs} "
                 f"--reps {a.reps}`: p50 latency per run, steady state, {a.threads} thread(s), "
                 f"median of {a.reps} alternating processes each; onnxruntime "
                 f"{onnxruntime.__version__} CPUExecutionProvider. Shared 2-core machine.\n",
                 "| case | Kiln ms | onnxruntime ms | Kiln / onnxruntime |"
                 + (" baseline Kiln ms | Kiln / baseline |" if a.baseline_kiln else ""),
                 "|---|---|---|---|" + ("---|---|" if a.baseline_kiln else "")]
        for c, k, o, b in rows:
            lines.append(f"| {c} | {k:.2f} | {o:.2f} | {k / o:.2f} |"
                         + (f" {b:.2f} | {k / b:.3f} |" if b else ""))
        with open(a.out, "w") as f:
            f.write("\n".join(lines) + "\n")
        print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
