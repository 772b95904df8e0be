"""Kiln's own GPU kernels (the AMD-portable path) against the vendor libraries on one model.

For each batch: a torchvision model exported to ONNX, compiled for the GPU in float16 twice --
with the default kernels (cuDNN convolutions, cuBLASLt GEMMs) and with KILN_GPU_OWN_KERNELS=1
(Kiln's own kernels first: its implicit-GEMM convolution, own GEMM, depthwise kernel; pooling,
which has no own kernel yet, stays on cuDNN) --, both checked against
onnxruntime's float32 output, timed whole (`kiln bench`, device events, graph replay) and per node
(`kiln profile --trace`, device events per node). Prints and writes, per convolution, the two
kernels' times and own/lib, and their geometric mean.

    python3 bench/gpu/own_vs_lib.py KILN WORK_DIR OUT.json [--batches 1,64] [--model resnet50]
"""
import argparse
import collections
import json
import math
import os
import statistics
import subprocess
import sys

import numpy as np
import onnx
from onnx import numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from resnet50_vs_torch import export, kiln, rel_l2  # noqa: E402


def node_times(kiln_bin, engine, x_pb, trace, env):
    """Median device time (us) per node over the profiled runs, with its op type and kernel."""
    subprocess.run([kiln_bin, "profile", engine, "--device", "gpu", "--input", f"input={x_pb}",
                    "--iterations", "20", "--warmup", "5", "--trace", trace],
                   check=True, capture_output=True, text=True, env=env)
    events = json.load(open(trace))["traceEvents"]
    times = collections.defaultdict(list)
    info = {}
    for e in events:
        if e.get("ph") != "X" or e.get("cat") == "run":
            continue
        times[e["name"]].append(e["dur"])
        info[e["name"]] = e.get("args", {})
    return {n: (statistics.median(t), info[n]) for n, t in times.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kiln")
    ap.add_argument("work")
    ap.add_argument("out")
    ap.add_argument("--batches", default="1,64")
    ap.add_argument("--model", default="resnet50")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    results = {"model": a.model, "rows": []}
    for batch in [int(b) for b in a.batches.split(",")]:
        onnx_path = os.path.join(a.work, f"{a.model}_b{batch}.onnx")
        if not os.path.exists(onnx_path):
            export(a.model, batch, onnx_path)
        x = np.random.default_rng(batch).standard_normal((batch, 3, 224, 224)).astype(np.float32)
        x_pb = os.path.join(a.work, f"x_b{batch}.pb")
        open(x_pb, "wb").write(numpy_helper.from_array(x, "input").SerializeToString())
        import onnxruntime as ort
        want = ort.InferenceSession(onnx_path, providers=["CPUExecutionProvider"]).run(
            None, {"input": x})[0]
        row = {"batch": batch}
        per_node = {}
        for mode, own in (("lib", "0"), ("own", "1")):
            env = dict(os.environ, KILN_GPU_OWN_KERNELS=own)
            engine = os.path.join(a.work, f"{a.model}_b{batch}_{mode}.kiln")
            subprocess.run([a.kiln, "compile", onnx_path, "-o", engine, "--no-verify", "--device",
                            "gpu", "--fp16"], check=True, capture_output=True, env=env)
            outdir = os.path.join(a.work, f"out_b{batch}_{mode}")
            subprocess.run([a.kiln, "run", engine, "--device", "gpu", "--input", f"input={x_pb}",
                            "--output-dir", outdir], check=True, capture_output=True, env=env)
            got = numpy_helper.to_array(onnx.load_tensor(os.path.join(outdir, "logits.pb")))
            row[f"rel_l2_vs_ort_{mode}"] = rel_l2(got, want)
            r = subprocess.run([a.kiln, "bench", engine, "--device", "gpu", "--input",
                                f"input={x_pb}", "--iterations", "200", "--duration", "1",
                                "--warmup", "5", "--json"], check=True, capture_output=True,
                               text=True, env=env)
            row[f"device_ms_{mode}"] = json.loads(r.stdout).get("device_ms", {}).get("p50")
            per_node[mode] = node_times(a.kiln, engine, x_pb,
                                        os.path.join(a.work, f"trace_b{batch}_{mode}.json"), env)
        row["own_over_lib_model"] = row["device_ms_own"] / row["device_ms_lib"]
        convs = []
        for name, (lib_us, lib_info) in per_node["lib"].items():
            if name not in per_node["own"] or "Conv" not in lib_info.get("op_type", name):
                continue
            own_us, own_info = per_node["own"][name]
            shapes = " ".join(lib_info.get("input_shapes", [])[:2])
            convs.append({"node": name, "shapes": shapes,
                          "lib_kernel": lib_info.get("kernel", ""),
                          "own_kernel": own_info.get("kernel", ""), "lib_us": lib_us,
                          "own_us": own_us, "own_over_lib": own_us / lib_us if lib_us else None})
        ratios = [c["own_over_lib"] for c in convs if c["own_over_lib"]]
        row["conv_geomean_own_over_lib"] = (math.exp(sum(map(math.log, ratios)) / len(ratios))
                                            if ratios else None)
        row["convs"] = convs
        print(f"b{batch}: rel L2 vs onnxruntime lib {row['rel_l2_vs_ort_lib']:.3g} own "
              f"{row['rel_l2_vs_ort_own']:.3g}; model device ms lib {row['device_ms_lib']:.3f} "
              f"own {row['device_ms_own']:.3f} ({row['own_over_lib_model']:.2f}x); convolutions "
              f"own/lib geomean {row['conv_geomean_own_over_lib']}", flush=True)
        for c in sorted(convs, key=lambda c: -c["lib_us"]):
            print(f"  {c['node']:<28} {c['shapes'][:60]:<60} {c['lib_kernel']:<16} "
                  f"{c['lib_us']:8.1f} us {c['own_kernel']:<18} {c['own_us']:8.1f} us "
                  f"{c['own_over_lib'] or float('nan'):6.2f}", flush=True)
        results["rows"].append(row)
    json.dump(results, open(a.out, "w"), indent=1)


if __name__ == "__main__":
    main()
