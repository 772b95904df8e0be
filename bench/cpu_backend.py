"""Kiln's CPU backend side by side with onnxruntime on torchvision ResNet-50 and MobileNetV2.

For each model: `kiln compile` once (input fixed at 1x3x224x224), then, in separate processes
so that peak RSS is per runtime, alternating Kiln and onnxruntime, for each thread count:
  - load: Kiln opens the .kiln engine until the session is ready to run; onnxruntime creates an
    InferenceSession from the ONNX file (its graph optimizations and weight prepacking included);
  - first run, then latency p50/p90 over --runs runs after a warm-up;
  - ready: load plus what the first run costs over a warm one (work a runtime defers to its
    first run, such as packing weights, counted as loading);
  - peak RSS of the process (getrusage), and RSS just before loading (the process's baseline:
    the Python interpreter with numpy and onnxruntime imported, or the C++ driver).
Medians over --reps repetitions. The outputs of both are compared (max abs diff, relative L2).

    python3 bench/cpu_backend.py --build build --out bench/results/2026-11-30-cpu-backend.md

Models are exported with Debian's python3-torch (/usr/bin/python3, bench/export_torchvision.py).
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def ort_child(model: str, threads: int, runs: int, warmup: int, input_path: str, out_path: str,
              spin: bool):
    import onnxruntime as ort  # imported here: the baseline RSS includes it, as a user's would

    x = np.load(input_path)
    rss_start = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    if not spin:
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    t0 = time.perf_counter()
    s = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    open_ms = (time.perf_counter() - t0) * 1e3
    name = s.get_inputs()[0].name
    t1 = time.perf_counter()
    y = s.run(None, {name: x})[0]
    first_ms = (time.perf_counter() - t1) * 1e3
    for _ in range(warmup):
        s.run(None, {name: x})
    lat = []
    cpu_start = time.process_time()
    for _ in range(runs):
        t = time.perf_counter()
        s.run(None, {name: x})
        lat.append((time.perf_counter() - t) * 1e3)
    cpu_per_run = (time.process_time() - cpu_start) * 1e3 / runs
    np.save(out_path, y)
    print(json.dumps({"open_ms": open_ms, "first_run_ms": first_ms,
                      "p50_ms": float(np.percentile(lat, 50)),
                      "p90_ms": float(np.percentile(lat, 90)), "cpu_ms_per_run": cpu_per_run,
                      "rss_start_mb": rss_start,
                      "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


def run_json(cmd, env=None):
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{r.stderr}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def median_of(results, key):
    return statistics.median(r[key] for r in results)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--work", default=None, help="models and engines (default BUILD/bench-models)")
    ap.add_argument("--models", default="resnet50,mobilenet_v2")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--no-spin", action="store_true",
                    help="idle threads sleep instead of spinning (onnxruntime allow_spinning=0, "
                    "Kiln OMP_WAIT_POLICY=passive): fairer on a machine shared with other jobs")
    ap.add_argument("--out", default=None, help="write the markdown table here")
    ap.add_argument("--ort-child", nargs=7, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.ort_child:
        m, t, r, w, i, o, spin = a.ort_child
        ort_child(m, int(t), int(r), int(w), i, o, spin == "1")
        return

    work = a.work or os.path.join(a.build, "bench-models")
    os.makedirs(work, exist_ok=True)
    kiln = os.path.join(a.build, "src", "kiln")
    driver = os.path.join(a.build, "bench", "kiln_session_bench")
    models = a.models.split(",")
    missing = [m for m in models if not os.path.exists(os.path.join(work, f"{m}.onnx"))]
    if missing:
        subprocess.run(["/usr/bin/python3", os.path.join(HERE, "export_torchvision.py"), work,
                        *missing], check=True, capture_output=True)
    rng = np.random.default_rng(0)
    x = rng.random((1, 3, 224, 224), dtype=np.float32)
    np.save(os.path.join(work, "input.npy"), x)
    x.tofile(os.path.join(work, "input.f32"))

    rows, compile_notes = [], []
    for m in models:
        onnx_path = os.path.join(work, f"{m}.onnx")
        engine = os.path.join(work, f"{m}.kiln")
        t = time.perf_counter()
        c = subprocess.run([kiln, "compile", onnx_path, "-o", engine, "--shape",
                            "input:1x3x224x224"], capture_output=True, text=True)
        if c.returncode != 0:
            sys.exit(c.stderr)
        compile_s = time.perf_counter() - t
        lines = [ln for ln in c.stdout.splitlines()
                 if ln.startswith(("nodes:", "activation memory:", "kernels:",
                                   "packed weights:", "wrote "))]
        compile_notes.append((m, compile_s, lines))
        for threads in [int(t) for t in a.threads.split(",")]:
            kres, ores = [], []
            for rep in range(a.reps):
                kout = os.path.join(work, f"{m}.kiln_out.f32")
                oout = os.path.join(work, f"{m}.ort_out.npy")
                env = dict(os.environ)
                if a.no_spin:
                    env["OMP_WAIT_POLICY"] = "passive"
                kres.append(run_json([driver, engine, "--threads", str(threads), "--runs",
                                      str(a.runs), "--warmup", str(a.warmup), "--input",
                                      os.path.join(work, "input.f32"), "--output", kout], env))
                ores.append(run_json([sys.executable, __file__, "--ort-child", onnx_path,
                                      str(threads), str(a.runs), str(a.warmup),
                                      os.path.join(work, "input.npy"), oout,
                                      "0" if a.no_spin else "1"]))
            ky = np.fromfile(kout, dtype=np.float32)
            oy = np.load(oout).reshape(-1)
            diff = float(np.max(np.abs(ky - oy)))
            rel_l2 = float(np.linalg.norm(ky - oy) / max(np.linalg.norm(oy), 1e-30))
            row = {"model": m, "threads": threads, "max_abs_diff": diff, "rel_l2": rel_l2}
            for res in kres + ores:
                res["ready_ms"] = res["open_ms"] + max(0.0, res["first_run_ms"] - res["p50_ms"])
            for key in ("open_ms", "first_run_ms", "ready_ms", "p50_ms", "p90_ms",
                        "cpu_ms_per_run", "rss_start_mb", "peak_rss_mb"):
                row["kiln_" + key] = median_of(kres, key)
                row["ort_" + key] = median_of(ores, key)
            rows.append(row)
            print(json.dumps(row), flush=True)

    if a.out:
        write_markdown(a, rows, compile_notes)


def write_markdown(a, rows, compile_notes):
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    import onnxruntime
    out = []
    out.append(f"Machine: {cpu}, {os.cpu_count()} cores (shared with other jobs: figures are "
               f"noisy; each is the median of {a.reps} alternating Kiln/onnxruntime processes). "
               f"onnxruntime {onnxruntime.__version__}, CPUExecutionProvider, default options "
               f"but intra_op_num_threads. Input 1x3x224x224, {a.runs} timed runs after "
               f"{a.warmup} warm-up runs.\n")
    out.append(f"Threads {'sleep' if a.no_spin else 'spin (defaults)'} when idle.\n")
    out.append("Ready = load + (first run - p50): work deferred to the first run counts as "
               "loading. The ready ratio divides Kiln's ready time by onnxruntime's session "
               "creation (the acceptance target is <= 0.2 for ResNet-50).\n")
    out.append("| model | threads | load Kiln / ORT ms | load ratio | first run Kiln / ORT ms | "
               "ready Kiln / ORT ms | ready ratio | "
               "p50 Kiln / ORT ms | CPU ms per run Kiln / ORT | CPU ratio | peak RSS Kiln / ORT "
               "MB | RSS ratio | max abs diff | rel L2 |")
    out.append("|" + "---|" * 14)
    for r in rows:
        out.append(
            f"| {r['model']} | {r['threads']} | {r['kiln_open_ms']:.1f} / {r['ort_open_ms']:.1f} "
            f"| {r['kiln_open_ms'] / r['ort_open_ms']:.3f} | {r['kiln_first_run_ms']:.1f} / "
            f"{r['ort_first_run_ms']:.1f} | {r['kiln_ready_ms']:.1f} / {r['ort_ready_ms']:.1f} | "
            f"{r['kiln_ready_ms'] / r['ort_open_ms']:.3f} | "
            f"{r['kiln_p50_ms']:.1f} / {r['ort_p50_ms']:.1f} | "
            f"{r['kiln_cpu_ms_per_run']:.1f} / {r['ort_cpu_ms_per_run']:.1f} | "
            f"{r['kiln_cpu_ms_per_run'] / r['ort_cpu_ms_per_run']:.2f} | "
            f"{r['kiln_peak_rss_mb']:.0f} / {r['ort_peak_rss_mb']:.0f} | "
            f"{r['kiln_peak_rss_mb'] / r['ort_peak_rss_mb']:.2f} | {r['max_abs_diff']:.2e} | "
            f"{r['rel_l2']:.2e} |")
    out.append("")
    out.append("Process baselines (RSS before loading): Kiln's C++ driver "
               + ", ".join(f"{r['kiln_rss_start_mb']:.0f}" for r in rows[:1])
               + " MB; Python with numpy and onnxruntime imported "
               + ", ".join(f"{r['ort_rss_start_mb']:.0f}" for r in rows[:1])
               + " MB. Peak RSS above the baseline, Kiln / ORT: "
               + "; ".join(f"{r['model']} x{r['threads']}: "
                           f"{r['kiln_peak_rss_mb'] - r['kiln_rss_start_mb']:.0f} / "
                           f"{r['ort_peak_rss_mb'] - r['ort_rss_start_mb']:.0f} MB" for r in rows)
               + ".\n")
    out.append("")
    for m, secs, lines in compile_notes:
        out.append(f"`kiln compile {m}.onnx --shape input:1x3x224x224` ({secs:.1f} s):\n")
        out.append("```\n" + "\n".join(lines) + "\n```\n")
    with open(a.out, "w") as f:
        f.write("\n".join(out) + "\n")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
