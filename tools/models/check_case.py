#!/usr/bin/env python3
"""Checks one test case (a directory from make_cases.py) through Kiln, both ways:

  direct: the ONNX model as imported, no passes, on the reference interpreter (the oracle:
          kiln_model_check --no-optimize --interpreter)
  engine: `kiln compile` with the default passes (and the case's --shape ranges), then the .kiln
          through the executor (fast kernels where they exist, the planned arena)

Each compares every output of every data set with onnxruntime's by relative L2 error. Returns
(and, run as a script, prints as JSON) the figures: node counts before/after optimization,
planned activation bytes vs the naive sum, errors and run times.

    python3 tools/models/check_case.py CASE_DIR --kiln build/src/kiln \
        --check build/tests/kiln_model_check [--work DIR] [--repeat N] [--max-rel-l2 1e-4]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time

MAX_REL_L2 = 1e-4
FP16_MAX_REL_L2 = 1e-2


def parse_result(stdout):
    for line in stdout.splitlines():
        if line.startswith("RESULT "):
            try:
                return json.loads(line[len("RESULT "):])
            except json.JSONDecodeError:
                return None  # a checker of before null for non-finite errors printed nan
    return None


def parse_compile(stdout):
    out = {}
    m = re.search(r"^nodes: (\d+) -> (\d+)", stdout, re.M)
    if m:
        out["nodes_before"], out["nodes_after"] = int(m.group(1)), int(m.group(2))
    # One line per arena (device); older builds printed one line without the device.
    arenas = re.findall(r"^activation memory: (\d+) bytes planned in one (?:(\S+) )?arena "
                        r"\(naive sum (\d+) bytes, [0-9.]+x(?:; (\d+) of (\d+) values in place "
                        r"or views)?\)(?:; (\d+) values of unbounded size)?", stdout, re.M)
    if arenas or re.search(r"^activation memory: 0 bytes", stdout, re.M):
        out["arena_bytes"] = sum(int(a[0]) for a in arenas)
        out["naive_bytes"] = sum(int(a[2]) for a in arenas)
        out["shared_values"] = sum(int(a[3] or 0) for a in arenas)
        out["unplanned_values"] = sum(int(a[5] or 0) for a in arenas)
    m = re.search(r"^kernels:(.*)$", stdout, re.M)
    if m:
        out["kernels"] = m.group(1).strip()
    m = re.search(r"^wrote .*: (\d+) bytes \((\d+) of weights\) in ([0-9.]+) ms", stdout, re.M)
    if m:
        out["engine_bytes"], out["compile_ms"] = int(m.group(1)), float(m.group(3))
    return out


_COMPILE_FLAGS = {}


def compile_flags(kiln):
    """`kiln compile` gains a precision gate that runs the model against the reference; this
    script checks the engine against onnxruntime itself, so skip the gate where it exists rather
    than run every model twice more."""
    if kiln not in _COMPILE_FLAGS:
        help_text = subprocess.run([kiln, "compile", "--help"], capture_output=True,
                                   text=True).stdout
        _COMPILE_FLAGS[kiln] = ["--no-verify"] if "--no-verify" in help_text else []
    return _COMPILE_FLAGS[kiln]


def check_case(case_dir, kiln, check, work_dir, repeat=1, max_rel_l2=MAX_REL_L2, timeout=1200,
                parallel=True, device="", direct=True, fp16=False):
    """Runs both paths. With `parallel` the direct check runs beside the compile and the engine
    check, so two cores are used; timings are then only indicative (benchmarks pass False).
    With `device` ("gpu", ...) the engine is compiled for that device and checked running there;
    the direct path stays the reference interpreter on the CPU. `direct=False` checks the
    engine alone (the direct path is the CPU's, already checked on the CPU machine); `fp16`
    compiles it with --fp16 and checks it within FP16_MAX_REL_L2."""
    name = os.path.basename(os.path.normpath(case_dir))
    with open(os.path.join(case_dir, "case.json")) as f:
        info = json.load(f)
    model = os.path.join(case_dir, "model.onnx")
    engine = os.path.join(work_dir, name + ".kiln")
    os.makedirs(work_dir, exist_ok=True)

    def check_args(tolerance):
        return [case_dir, "--max-rel-l2", str(tolerance), "--repeat", str(repeat)]

    common = check_args(max_rel_l2)
    engine_common = check_args(FP16_MAX_REL_L2 if fp16 else max_rel_l2)
    start = time.monotonic()
    direct_run = None
    direct_out = ""
    if direct:
        direct_run = subprocess.Popen([check, model, *common, "--no-optimize", "--interpreter"],
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if not parallel:
            direct_out = direct_run.communicate(timeout=timeout)[0]
    shapes = [a for r in info.get("shape_range", "").split(",") if r for a in ("--shape", r)]
    on_device = ["--device", device] if device else []
    precision = ["--fp16"] if fp16 else []
    compiled = subprocess.run([kiln, "compile", model, "-o", engine, *shapes,
                               *compile_flags(kiln), *on_device, *precision],
                              capture_output=True, text=True, timeout=timeout)
    result = {"case": name, "opset": info.get("opset"), "source": info.get("source"),
              "shape_range": info.get("shape_range", ""), "ok": False, "log": ""}
    result.update(parse_compile(compiled.stdout))
    # Nodes the device could not run (each with its reason), for the report.
    result["fallbacks"] = sorted(set(line for line in compiled.stderr.splitlines()
                                     if "falling back" in line))
    engine_out = None
    if compiled.returncode == 0:
        engine_out = subprocess.run([check, engine, *engine_common, *on_device],
                                    capture_output=True,
                                    text=True,
                                    timeout=timeout).stdout
    if direct_run and parallel:
        direct_out = direct_run.communicate(timeout=timeout)[0]
    result["wall_s"] = round(time.monotonic() - start, 2)
    result["precision"] = "fp16" if fp16 else "fp32"
    result["direct"] = parse_result(direct_out) if direct else None
    result["engine"] = parse_result(engine_out) if engine_out is not None else None
    direct_ok = not direct or bool(result["direct"] and result["direct"]["ok"])
    result["ok"] = bool(compiled.returncode == 0 and direct_ok and result["engine"]
                        and result["engine"]["ok"])
    if not result["ok"]:
        result["log"] = "\n".join([
            "direct:\n" + (direct_out if direct else "(not run)"),
            f"compile (exit {compiled.returncode}):\n" + compiled.stdout + compiled.stderr,
            "engine:\n" + (engine_out or "(not run)")])
    if os.path.exists(engine):
        os.remove(engine)  # engines of the bigger models are tens of MB each
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("case_dir")
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--check", required=True)
    ap.add_argument("--work", default="/tmp/kiln_models_work")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--max-rel-l2", type=float, default=MAX_REL_L2)
    ap.add_argument("--sequential", action="store_true", help="one run at a time (for timing)")
    ap.add_argument("--device", default="", help="compile for and run the engine on this device")
    args = ap.parse_args()
    r = check_case(args.case_dir, args.kiln, args.check, args.work, args.repeat, args.max_rel_l2,
                   parallel=not args.sequential, device=args.device)
    print(json.dumps(r, indent=1))
    sys.exit(0 if r["ok"] else 1)


if __name__ == "__main__":
    main()
