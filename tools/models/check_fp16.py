#!/usr/bin/env python3
"""Checks one real-model case (a directory from make_cases.py) as a float16 engine: compiles it
with and without `kiln compile --fp16` (the case's --shape ranges), runs both engines through
kiln_model_check on the case's data sets and compares every output with onnxruntime's float32
outputs by relative L2 error. Returns (and, run as a script, prints as JSON) the engine sizes,
the errors and the median run times of both engines.

    python3 tools/models/check_fp16.py CASE_DIR --kiln build/src/kiln \
        --check build/tests/kiln_model_check [--work DIR] [--repeat N]
"""
import argparse
import json
import os
import subprocess
import sys

from check_case import parse_result

# kiln's default precision-gate limit for --fp16 engines (src/cli/fp16.hpp, docs/FP16.md).
FP16_MAX_REL_L2 = 1e-2


def check_fp16_case(case_dir, kiln, check, work_dir, repeat=1, timeout=1200, env=None):
    name = os.path.basename(os.path.normpath(case_dir))
    with open(os.path.join(case_dir, "case.json")) as f:
        info = json.load(f)
    model = os.path.join(case_dir, "model.onnx")
    os.makedirs(work_dir, exist_ok=True)
    shapes = [a for r in info.get("shape_range", "").split(",") if r for a in ("--shape", r)]
    result = {"case": name, "ok": True, "log": ""}
    # Sizes compare the weights as the model has them: --no-prepack leaves out the float32
    # engine's second, packed copy of its convolution weights (float16 ones have none).
    for tag, flags in (("fp32", ["--no-prepack"]), ("fp16", ["--fp16"])):
        engine = os.path.join(work_dir, f"{name}_{tag}.kiln")
        # The gate would run the reference interpreter again; the check below compares with
        # onnxruntime itself.
        compiled = subprocess.run([kiln, "compile", model, "-o", engine, *shapes, *flags,
                                   "--no-verify"], capture_output=True, text=True,
                                  timeout=timeout, env=env)
        entry = {"compile_exit": compiled.returncode}
        if compiled.returncode == 0:
            entry["engine_bytes"] = os.path.getsize(engine)
            limit = FP16_MAX_REL_L2 if tag == "fp16" else 1e-4
            out = subprocess.run([check, engine, case_dir, "--max-rel-l2", str(limit), "--repeat",
                                  str(repeat)], capture_output=True, text=True, timeout=timeout,
                                 env=env).stdout
            entry["run"] = parse_result(out)
            if not entry["run"] or not entry["run"]["ok"]:
                result["ok"] = False
                result["log"] += f"{tag} engine:\n{out}\n"
            os.remove(engine)
        else:
            result["ok"] = False
            result["log"] += f"{tag} compile:\n{compiled.stdout}{compiled.stderr}\n"
        result[tag] = entry
    if result["ok"]:
        result["size_ratio"] = result["fp16"]["engine_bytes"] / result["fp32"]["engine_bytes"]
        result["max_rel_l2"] = result["fp16"]["run"]["max_rel_l2"]
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("case_dir")
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--check", required=True)
    ap.add_argument("--work", default="/tmp/kiln_models_fp16")
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    r = check_fp16_case(args.case_dir, args.kiln, args.check, args.work, args.repeat)
    print(json.dumps(r, indent=1))
    sys.exit(0 if r["ok"] else 1)


if __name__ == "__main__":
    main()
