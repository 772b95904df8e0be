"""ResNet-50 (and other torchvision models, --models) on the GPU: Kiln against PyTorch's best configuration, side by side in one run.

Runs on the lent H200 (scripts/gpu_device_check.sh run calls it). Exports torchvision's
ResNet-50 (seeded random weights: no downloads there) to ONNX at static batch sizes, checks
Kiln's GPU results against onnxruntime (CPU) on the same input, and times, in interleaved rounds:
  - Kiln: `kiln bench ENGINE --device gpu --json`, the device time of its recorded work (CUDA
    events around the replayed graph; feeds and results cross the bus outside it);
  - PyTorch: channels_last, cudnn.benchmark, torch.compile(mode="reduce-overhead") (CUDA graphs),
    the input already on the GPU, CUDA-event timed.
Medians of each round's median; ratios Kiln / torch.

usage: python3 resnet50_vs_torch.py KILN_BIN WORK_DIR OUT_JSON [--batches 1,64] [--rounds 3]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np
import onnx
import torch
import torchvision
from onnx import numpy_helper


def torchvision_model(name):
    torch.manual_seed(0)
    m = getattr(torchvision.models, name)(weights=None)
    # Random weights leave BatchNorm's running statistics at mean 0 / variance 1, so activations
    # shrink layer by layer (MobileNetV2's logits come out near 1e-9, below float16's range, so
    # any float16 engine's answer is 0). A few batches in training mode give the layers the
    # statistics of their own activations, as trained weights would have.
    for mod in m.modules():
        if isinstance(mod, torch.nn.modules.batchnorm._BatchNorm):
            mod.momentum = None  # a cumulative average over the batches
    m.train()
    with torch.no_grad():
        for _ in range(3):
            m(torch.randn(8, 3, 224, 224))
    return m.eval()


def export(name, batch, path):
    if os.path.exists(path):
        return
    m = torchvision_model(name)
    x = torch.randn(batch, 3, 224, 224)
    try:
        torch.onnx.export(m, (x,), path, input_names=["input"], output_names=["logits"],
                          opset_version=17, dynamo=False)
    except TypeError:
        torch.onnx.export(m, (x,), path, input_names=["input"], output_names=["logits"],
                          opset_version=17)


def kiln(bin_, *args, check=True, env=None):
    r = subprocess.run([bin_, *args], capture_output=True, text=True, env=env)
    if check and r.returncode != 0:
        sys.stderr.write(r.stdout + r.stderr)
        raise SystemExit(f"kiln {' '.join(args)} failed ({r.returncode})")
    return r


def rel_l2(a, b):
    return float(np.linalg.norm(a.astype(np.float64) - b) / np.linalg.norm(b.astype(np.float64)))


def cuda_median_ms(call, iters):
    """Median of `iters` calls, each timed with CUDA events, under inference_mode (as when
    compiled: outside it torch.compile records another graph)."""
    with torch.inference_mode():
        ts = []
        for _ in range(iters):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            call()
            b.record()
            b.synchronize()
            ts.append(a.elapsed_time(b))
    return statistics.median(ts)


def torch_best(name, batch, half, iters=200):
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    m = torchvision_model(name).cuda().to(memory_format=torch.channels_last)
    x = torch.randn(batch, 3, 224, 224, device="cuda").to(memory_format=torch.channels_last)
    if half:
        m, x = m.half(), x.half()
    f = torch.compile(m, mode="reduce-overhead")
    with torch.inference_mode():
        t0 = time.time()
        for _ in range(5):
            f(x)
        torch.cuda.synchronize()
        compile_s = time.time() - t0

    return (lambda: cuda_median_ms(lambda: f(x), iters)), compile_s


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kiln")
    ap.add_argument("work")
    ap.add_argument("out")
    ap.add_argument("--batches", default="1,64")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--models", default="resnet50")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    results = {"torch": torch.__version__, "device": torch.cuda.get_device_name(), "rows": []}
    runs = [(n, int(b)) for n in a.models.split(",") for b in a.batches.split(",")]
    for name, batch in runs:
        onnx_path = os.path.join(a.work, f"{name}_b{batch}.onnx")
        export(name, batch, onnx_path)
        rng = np.random.default_rng(batch)
        x = rng.standard_normal((batch, 3, 224, 224)).astype(np.float32)
        x_pb = os.path.join(a.work, f"x_b{batch}.pb")
        open(x_pb, "wb").write(numpy_helper.from_array(x, "input").SerializeToString())
        import onnxruntime as ort
        want = ort.InferenceSession(onnx_path, providers=["CPUExecutionProvider"]).run(
            None, {"input": x})[0]
        row = {"model": name, "batch": batch}
        # What float16 itself costs on this model: PyTorch's own float16 run of the same weights
        # against the float32 reference (Kiln's fp16 error is judged beside it).
        with torch.no_grad():
            m16 = torchvision_model(name).cuda().half().eval()
            got16 = m16(torch.from_numpy(x).cuda().half()).float().cpu().numpy()
        row["torch_fp16_rel_l2_vs_ort"] = rel_l2(got16, want)
        print(f"b{batch} torch fp16 vs onnxruntime fp32 rel L2 {row['torch_fp16_rel_l2_vs_ort']:.3g}",
              flush=True)
        del m16
        for precision in ("fp32", "fp16"):
            engine = os.path.join(a.work, f"{name}_b{batch}_{precision}.kiln")
            t0 = time.time()
            args = ["compile", onnx_path, "-o", engine, "--no-verify", "--device", "gpu"]
            if precision == "fp16":
                args.append("--fp16")
            # The fp16 compile's tactic choices (each convolution's candidates and times).
            traced = precision == "fp16"
            r = kiln(a.kiln, *args, env=dict(os.environ, KILN_GPU_TRACE="1") if traced else None)
            if traced:
                print("\n".join(line for line in r.stderr.splitlines()
                                if "gpu.cudnn.conv" in line and "whole call" in line), flush=True)
            row[f"kiln_compile_s_{precision}"] = round(time.time() - t0, 2)
            outdir = os.path.join(a.work, f"out_b{batch}_{precision}")
            r = kiln(a.kiln, "run", engine, "--device", "gpu", "--input", f"input={x_pb}",
                     "--output-dir", outdir)
            got = numpy_helper.to_array(onnx.load_tensor(os.path.join(outdir, "logits.pb")))
            row[f"rel_l2_vs_ort_{precision}"] = rel_l2(got, want)
            print(f"b{batch} {precision}: kiln gpu vs onnxruntime rel L2 "
                  f"{row[f'rel_l2_vs_ort_{precision}']:.3g}", flush=True)
            if row[f"rel_l2_vs_ort_{precision}"] > 1e-2 and batch == min(
                    int(b) for b in a.batches.split(",")):
                # Wrong: the same engine on the CPU (is it the compile or the GPU?), then the
                # first drifting node, found by kiln verify against the reference interpreter.
                cpu_out = outdir + "_cpu"
                kiln(a.kiln, "run", engine, "--input", f"input={x_pb}", "--output-dir", cpu_out,
                     check=False)
                cpu_path = os.path.join(cpu_out, "logits.pb")
                if os.path.exists(cpu_path):
                    got_cpu = numpy_helper.to_array(onnx.load_tensor(cpu_path))
                    print(f"  same engine on the CPU: rel L2 {rel_l2(got_cpu, want):.3g}")
                r = subprocess.run([a.kiln, "verify", engine, "--onnx", onnx_path, "--device",
                                    "gpu", "--reference", "interpreter", "--input",
                                    f"input={x_pb}"], capture_output=True, text=True,
                                   env=dict(os.environ, KILN_GPU_TRACE="1"))
                print("  kiln verify --device gpu:", r.stdout[-6000:], r.stderr[-12000:],
                      flush=True)
        # Where the time goes (b1 fp16): per node, device events; and without replay.
        engine16 = os.path.join(a.work, f"{name}_b{batch}_fp16.kiln")
        r = subprocess.run([a.kiln, "profile", engine16, "--device", "gpu", "--input",
                            f"input={x_pb}", "--top", "12"], capture_output=True, text=True,
                           env=dict(os.environ, KILN_GPU_TRACE="1"))
        print(r.stdout[-4000:], r.stderr[-9000:], flush=True)
        env = dict(os.environ, KILN_DEVICE_GRAPHS="0")
        r = subprocess.run([a.kiln, "bench", engine16, "--device", "gpu", "--input",
                            f"input={x_pb}", "--iterations", "100", "--duration", "1", "--json"],
                           capture_output=True, text=True, env=env)
        if r.returncode == 0:
            j = json.loads(r.stdout)
            row["kiln_no_replay_wall_p50_fp16"] = j["latency_ms"]["p50"]
            row["kiln_no_replay_device_ms_fp16"] = j.get("device_ms", {}).get("p50")
        timers = {}
        for precision in ("fp16",):
            timers[precision], cs = torch_best(name, batch, precision == "fp16")
            row[f"torch_compile_s_{precision}"] = round(cs, 1)
        k_rounds = {"fp32": [], "fp16": []}
        t_rounds = {"fp16": []}
        for _ in range(a.rounds):
            for precision in ("fp32", "fp16"):
                engine = os.path.join(a.work, f"{name}_b{batch}_{precision}.kiln")
                r = kiln(a.kiln, "bench", engine, "--device", "gpu", "--input", f"input={x_pb}",
                         "--iterations", "200", "--duration", "1", "--warmup", "5", "--json")
                j = json.loads(r.stdout)
                k_rounds[precision].append(j.get("device_ms", {}).get("p50", float("nan")))
                row[f"kiln_wall_p50_{precision}"] = j["latency_ms"]["p50"]
                row[f"kiln_replayed_{precision}"] = f"{j.get('replayed_segments')}/{j.get('replay_segments')}"
            for precision, timed in timers.items():
                t_rounds[precision].append(timed())
        for p in k_rounds:
            row[f"kiln_device_ms_{p}"] = statistics.median(k_rounds[p])
        for p in t_rounds:
            row[f"torch_best_ms_{p}"] = statistics.median(t_rounds[p])
        row["ratio_fp16"] = row["kiln_device_ms_fp16"] / row["torch_best_ms_fp16"]
        print(json.dumps(row), flush=True)
        results["rows"].append(row)
    json.dump(results, open(a.out, "w"), indent=1)


if __name__ == "__main__":
    main()
