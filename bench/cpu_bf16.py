"""Kiln's CPU in float32 and bfloat16 against onnxruntime and OpenVINO, in one run.

    python3 bench/cpu_bf16.py --build build [--cases resnet50_op17,mobilenet_v2_op17,bert_op17]
                              [--threads 1,2] [--runs 10] [--reps 3] [--out FILE.md]

OpenVINO comes from PyPI (`pip install openvino`; PYTHONPATH may name a --target install). Cases
are bench/models_full.py's (BUILD/models-full/cases/NAME: model.onnx, its first input set and
onnxruntime's float32 outputs). For each case and thread count, in alternating separate
processes, --reps rounds: Kiln's float32 engine and its `--bf16` engine (`kiln bench`, p50 of
--runs after 2 warm-ups), onnxruntime (all graph optimizations), OpenVINO with
INFERENCE_PRECISION_HINT=f32 and with its default precision (bf16 on a CPU with AVX512_BF16 or
AMX). Idle threads sleep everywhere (OMP_WAIT_POLICY=passive for Kiln, allow_spinning=0 for
onnxruntime; OpenVINO's own pool). The table gives medians, the ratios, and each bf16 path's
relative L2 error against onnxruntime's float32 outputs.
"""
import argparse
import glob
import json
import os
import statistics
import subprocess
import sys

import numpy as np


def read_pb(path):
    import onnx
    from onnx import numpy_helper

    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return t.name, numpy_helper.to_array(t)


def rel_l2(got, want):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float(np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30))


def timed(fn, runs):
    import time

    for _ in range(2):
        fn()
    lat = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        lat.append((time.perf_counter() - t) * 1e3)
    return float(np.percentile(lat, 50))


def ort_child(model, threads, runs, inputs):
    import onnxruntime as ort

    feeds = dict(read_pb(p) for p in inputs)
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    s = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    print(json.dumps({"p50_ms": timed(lambda: s.run(None, feeds), runs)}))


def ov_child(model, threads, runs, precision, out_npz, inputs):
    import openvino as ov

    feeds = dict(read_pb(p) for p in inputs)
    config = {"INFERENCE_NUM_THREADS": threads, "PERFORMANCE_HINT": "LATENCY"}
    if precision != "default":
        config["INFERENCE_PRECISION_HINT"] = precision
    compiled = ov.Core().compile_model(model, "CPU", config)
    request = compiled.create_infer_request()
    ms = timed(lambda: request.infer(feeds), runs)
    result = request.infer(feeds)
    outs = {o.get_any_name(): np.asarray(result[o]) for o in compiled.outputs}
    np.savez(out_npz, **outs)
    hint = compiled.get_property("INFERENCE_PRECISION_HINT")
    print(json.dumps({"p50_ms": ms, "precision": str(hint)}))


def child(args, env=None):
    r = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise RuntimeError(r.stderr.strip()[-600:])
    return json.loads(r.stdout.strip().splitlines()[-1])


def kiln_outputs(kiln, engine, args, work, env):
    out_dir = os.path.join(work, os.path.basename(engine) + ".out")
    subprocess.run([kiln, "run", engine, *args, "--output-dir", out_dir], check=True,
                   capture_output=True, text=True, env=env)
    return dict(read_pb(p) for p in glob.glob(os.path.join(out_dir, "*.pb")))


def worst_rel_l2(outputs, expected):
    return max(rel_l2(outputs[name], want) for name, want in expected.items() if name in outputs)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--cases", default="resnet50_op17,mobilenet_v2_op17,bert_op17")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", default=None)
    ap.add_argument("--ort-child", nargs="+", help=argparse.SUPPRESS)
    ap.add_argument("--ov-child", nargs="+", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.ort_child:
        model, threads, runs, *inputs = a.ort_child
        return ort_child(model, int(threads), int(runs), inputs)
    if a.ov_child:
        model, threads, runs, precision, out_npz, *inputs = a.ov_child
        return ov_child(model, int(threads), int(runs), precision, out_npz, inputs)

    root = os.path.join(a.build, "models-full", "cases")
    if not os.path.isdir(root):
        sys.exit(f"no cases in {root}: run python3 bench/models_full.py first")
    kiln = os.path.join(a.build, "src", "kiln")
    work = os.path.join(a.build, "models-full", "work")
    os.makedirs(work, exist_ok=True)
    env = dict(os.environ, OMP_WAIT_POLICY="passive")
    rows = []
    for case in a.cases.split(","):
        d = os.path.join(root, case)
        model = os.path.join(d, "model.onnx")
        inputs = sorted(glob.glob(os.path.join(d, "test_data_set_0", "input_*.pb")))
        expected = dict(read_pb(p) for p in glob.glob(os.path.join(d, "test_data_set_0",
                                                                    "output_*.pb")))
        args = []
        for p in inputs:
            args += ["--input", f"{read_pb(p)[0]}={p}"]
        engines = {}
        for precision, flags in (("fp32", []), ("bf16", ["--bf16"])):
            engines[precision] = os.path.join(work, f"{case}.{precision}.kiln")
            subprocess.run([kiln, "compile", model, "-o", engines[precision], "--no-verify",
                            *flags], check=True, capture_output=True, text=True, env=env)
        kiln_err = worst_rel_l2(kiln_outputs(kiln, engines["bf16"], args, work, env), expected)
        ov_npz = os.path.join(work, f"{case}.ov.npz")
        for threads in [int(t) for t in a.threads.split(",")]:
            times = {k: [] for k in ("kiln_fp32", "kiln_bf16", "ort", "ov_f32", "ov_default")}
            ov_precision = ""
            for _ in range(a.reps):
                for precision in ("fp32", "bf16"):
                    r = subprocess.run([kiln, "bench", engines[precision], *args, "--threads",
                                        str(threads), "--warmup", "2", "--iterations",
                                        str(a.runs), "--json"],
                                       capture_output=True, text=True, env=env, check=True)
                    times[f"kiln_{precision}"].append(json.loads(r.stdout)["latency_ms"]["p50"])
                times["ort"].append(child(["--ort-child", model, str(threads), str(a.runs),
                                           *inputs])["p50_ms"])
                times["ov_f32"].append(child(["--ov-child", model, str(threads), str(a.runs),
                                              "f32", ov_npz, *inputs])["p50_ms"])
                r = child(["--ov-child", model, str(threads), str(a.runs), "default", ov_npz,
                           *inputs])
                times["ov_default"].append(r["p50_ms"])
                ov_precision = r["precision"]
            ov_outs = dict(np.load(ov_npz))
            ov_err = max(rel_l2(v, expected[k]) for k, v in ov_outs.items() if k in expected) \
                if any(k in expected for k in ov_outs) else float("nan")
            m = {k: statistics.median(v) for k, v in times.items()}
            rows.append((case, threads, m, kiln_err, ov_err, ov_precision))
            print(f"{case} t{threads}: kiln fp32 {m['kiln_fp32']:.2f} bf16 {m['kiln_bf16']:.2f} "
                  f"| ort {m['ort']:.2f} | ov f32 {m['ov_f32']:.2f} default({ov_precision}) "
                  f"{m['ov_default']:.2f} ms | bf16/ov_default "
                  f"{m['kiln_bf16'] / m['ov_default']:.2f} | rel L2 kiln bf16 {kiln_err:.1e} "
                  f"ov {ov_err:.1e}", flush=True)
    if a.out:
        import onnxruntime
        import openvino

        lines = [f"`python3 bench/cpu_bf16.py --cases {a.cases} --threads {a.threads} --runs "
                 f"{a.runs} --reps {a.reps}`: p50 latency per run, steady state, median of "
                 f"{a.reps} alternating processes; onnxruntime {onnxruntime.__version__}, "
                 f"OpenVINO {openvino.__version__}. Shared 2-core machine.\n",
                 "| case | threads | Kiln fp32 ms | Kiln bf16 ms | onnxruntime ms | OpenVINO f32 ms "
                 "| OpenVINO default ms | Kiln bf16 / OpenVINO default | Kiln fp32 / min(ort, "
                 "OV f32) | rel L2 Kiln bf16 | rel L2 OpenVINO default |",
                 "|---|---|---|---|---|---|---|---|---|---|---|"]
        for case, threads, m, ke, oe, prec in rows:
            lines.append(
                f"| {case} | {threads} | {m['kiln_fp32']:.2f} | {m['kiln_bf16']:.2f} | "
                f"{m['ort']:.2f} | {m['ov_f32']:.2f} | {m['ov_default']:.2f} ({prec}) | "
                f"{m['kiln_bf16'] / m['ov_default']:.2f} | "
                f"{m['kiln_fp32'] / min(m['ort'], m['ov_f32']):.2f} | {ke:.1e} | {oe:.1e} |")
        with open(a.out, "w") as f:
            f.write("\n".join(lines) + "\n")
        print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
