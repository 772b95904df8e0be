"""`kiln compile --fp16` on the CI-size real models: accuracy against onnxruntime in float32,
engine size, and CPU run time of the float16 engine against the float32 one.

For each case of tests/models (BUILD/models/cases, made by `make test-models`):
  - accuracy and size: tools/models/check_fp16.py (both engines compiled with the case's shape
    ranges, run by kiln_model_check on the case's data sets; largest relative L2 error of any
    output of the float16 engine against onnxruntime's float32 outputs);
  - time: both engines compiled again with every dim fixed at the top of its range, then
    `kiln bench --threads T --json` on each, alternating float32 / float16, --reps times; the
    median of the p50 latencies and the fastest single run (the least disturbed by other jobs
    on a shared machine).

    python3 bench/fp16.py --build build --reps 5 --iterations 20 --threads 1 \
        --out bench/results/2026-11-30-fp16.md
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tools", "models"))

from check_fp16 import check_fp16_case  # noqa: E402

CASES = ["resnet50_op17", "mobilenet_v2_op17", "efficientnet_b0_op17", "vit_b_16_op17",
         "bert_op17", "bert_op13"]


def top_of_ranges(shape_range):
    """'input:1..8x3x32x32' -> ['--shape', 'input:8x3x32x32'] (every range at its maximum)."""
    args = []
    for spec in filter(None, shape_range.split(",")):
        name, dims = spec.rsplit(":", 1)
        args += ["--shape", name + ":" + re.sub(r"\d+\.\.(\d+)", r"\1", dims)]
    return args


def bench_once(kiln, engine, threads, iterations):
    r = subprocess.run([kiln, "bench", engine, "--threads", str(threads), "--iterations",
                        str(iterations), "--warmup", "3", "--json"], capture_output=True,
                       text=True, check=True)
    lat = json.loads(r.stdout)["latency_ms"]
    return lat["p50"], lat["min"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--iterations", type=int, default=20)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--out", help="write the markdown table here (default: print it)")
    args = ap.parse_args()
    kiln = os.path.join(args.build, "src", "kiln")
    check = os.path.join(args.build, "tests", "kiln_model_check")
    cases_dir = os.path.join(args.build, "models", "cases")
    work = os.path.join(args.build, "models", "work_fp16_bench")
    os.makedirs(work, exist_ok=True)
    rows = []
    for case in args.cases.split(","):
        case_dir = os.path.join(cases_dir, case)
        acc = check_fp16_case(case_dir, kiln, check, work)
        if not acc["ok"]:
            sys.exit(f"{case}: {acc['log']}")
        with open(os.path.join(case_dir, "case.json")) as f:
            shapes = top_of_ranges(json.load(f).get("shape_range", ""))
        engines = {}
        for tag, flags in (("fp32", []), ("fp16", ["--fp16"])):
            engines[tag] = os.path.join(work, f"{case}_{tag}_fixed.kiln")
            subprocess.run([kiln, "compile", os.path.join(case_dir, "model.onnx"), "-o",
                            engines[tag], *shapes, *flags, "--no-verify"], check=True,
                           capture_output=True)
        p50 = {"fp32": [], "fp16": []}
        fastest = {"fp32": [], "fp16": []}
        for _ in range(args.reps):
            for tag in ("fp32", "fp16"):
                p, m = bench_once(kiln, engines[tag], args.threads, args.iterations)
                p50[tag].append(p)
                fastest[tag].append(m)
        for e in engines.values():
            os.remove(e)
        t32, t16 = statistics.median(p50["fp32"]), statistics.median(p50["fp16"])
        # The fastest run of all is the least disturbed by other jobs on a shared machine.
        m32, m16 = min(fastest["fp32"]), min(fastest["fp16"])
        rows.append((case, " ".join(shapes[1::2]), acc["max_rel_l2"],
                     acc["fp32"]["engine_bytes"], acc["fp16"]["engine_bytes"], acc["size_ratio"],
                     t32, t16, t16 / t32, m32, m16, m16 / m32))
        print(f"{case}: rel L2 {acc['max_rel_l2']:.2e}, size {acc['size_ratio']:.3f}, "
              f"p50 {t32:.2f} / {t16:.2f} ms, min {m32:.2f} / {m16:.2f} ms", file=sys.stderr)
    lines = ["| model | timed at | rel L2 fp16 vs ORT fp32 | engine fp32 bytes | engine fp16 "
             "bytes | size ratio | p50 fp32 / fp16 ms | p50 ratio | min fp32 / fp16 ms | "
             "min ratio |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r[0]} | {r[1]} | {r[2]:.2e} | {r[3]} | {r[4]} | {r[5]:.3f} | "
                     f"{r[6]:.2f} / {r[7]:.2f} | {r[8]:.2f} | {r[9]:.2f} / {r[10]:.2f} | "
                     f"{r[11]:.2f} |")
    table = "\n".join(lines) + "\n"
    if args.out:
        with open(args.out, "w") as f:
            f.write(table)
    print(table)


if __name__ == "__main__":
    main()
