"""BERT-base on the GPU: Kiln against PyTorch's best configuration (SDPA attention,
torch.compile(mode="reduce-overhead")), side by side in one run, as resnet50_vs_torch.py does
for ResNet-50. Seeded random weights (BertConfig defaults: 12 layers, hidden 768; no downloads on
the device), sequence 128, static batch sizes; accuracy against onnxruntime on the same input.

usage: python3 bert_vs_torch.py KILN_BIN WORK_DIR OUT_JSON [--batches 1,32] [--rounds 3]
"""
import argparse
import json
import os
import statistics
import subprocess
import time

import numpy as np
import onnx
import torch
from onnx import numpy_helper

from resnet50_vs_torch import cuda_median_ms, kiln, rel_l2

SEQ = 128
T0 = time.time()


def stage(what):
    # Elapsed time per step: the device call has a hard limit, and this says which step ate it.
    print(f"[{time.time() - T0:7.1f} s] {what}", flush=True)


def model():
    from transformers import BertConfig, BertModel
    torch.manual_seed(0)
    # The attention implementation is a config field (BertModel takes no such argument).
    config = BertConfig(attn_implementation="sdpa")
    return BertModel(config, add_pooling_layer=False).eval()


def export(batch, path):
    if os.path.exists(path):
        return
    m = model()
    ids = torch.randint(0, 30522, (batch, SEQ))
    mask = torch.ones(batch, SEQ, dtype=torch.int64)

    class Wrap(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, ids, mask):
            return self.m(input_ids=ids, attention_mask=mask).last_hidden_state

    torch.onnx.export(Wrap(m), (ids, mask), path, input_names=["input_ids", "attention_mask"],
                      output_names=["hidden"], opset_version=17, dynamo=False)


def torch_best(batch, iters=200):
    torch.backends.cuda.matmul.allow_tf32 = False
    m = model().cuda().half()
    ids = torch.randint(0, 30522, (batch, SEQ), device="cuda")
    mask = torch.ones(batch, SEQ, dtype=torch.int64, device="cuda")
    f = torch.compile(lambda a, b: m(input_ids=a, attention_mask=b).last_hidden_state,
                      mode="reduce-overhead")
    with torch.inference_mode():
        t0 = time.time()
        for _ in range(5):
            f(ids, mask)
        torch.cuda.synchronize()
        compile_s = time.time() - t0

    return (lambda: cuda_median_ms(lambda: f(ids, mask), iters)), compile_s


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kiln")
    ap.add_argument("work")
    ap.add_argument("out")
    ap.add_argument("--batches", default="1,32")
    ap.add_argument("--rounds", type=int, default=3)
    # Kiln variants timed beside the default in the same rounds, e.g.
    # "waves8:KILN_GPU_ATTENTION_WAVES=8;s128:KILN_GPU_GEMM_TACTICS=1 KILN_GPU_GEMM_TILE=s128x128x64"
    # (name:NAME=VALUE ..., separated by ';'); each reports its device ms and its ratio to torch.
    ap.add_argument("--variants", default="")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    variants = []
    for item in filter(None, (v.strip() for v in a.variants.split(";"))):
        name, _, assignments = item.partition(":")
        env = dict(os.environ)
        env.update(kv.split("=", 1) for kv in assignments.split())
        variants.append((name, env))
    results = {"torch": torch.__version__, "device": torch.cuda.get_device_name(), "rows": []}
    for batch in [int(b) for b in a.batches.split(",")]:
        onnx_path = os.path.join(a.work, f"bert_b{batch}.onnx")
        stage(f"b{batch}: export")
        export(batch, onnx_path)
        rng = np.random.default_rng(batch)
        ids = rng.integers(0, 30522, (batch, SEQ)).astype(np.int64)
        mask = np.ones((batch, SEQ), np.int64)
        feeds = []
        for name, v in (("input_ids", ids), ("attention_mask", mask)):
            p = os.path.join(a.work, f"{name}_b{batch}.pb")
            open(p, "wb").write(numpy_helper.from_array(v, name).SerializeToString())
            feeds += ["--input", f"{name}={p}"]
        stage(f"b{batch}: onnxruntime reference")
        import onnxruntime as ort
        want = ort.InferenceSession(onnx_path, providers=["CPUExecutionProvider"]).run(
            None, {"input_ids": ids, "attention_mask": mask})[0]
        row = {"model": "bert-base", "batch": batch, "seq": SEQ}
        for precision in ("fp32", "fp16"):
            engine = os.path.join(a.work, f"bert_b{batch}_{precision}.kiln")
            args = ["compile", onnx_path, "-o", engine, "--no-verify", "--device", "gpu"]
            if precision == "fp16":
                args.append("--fp16")
            stage(f"b{batch}: kiln compile {precision}")
            t0 = time.time()
            r = kiln(a.kiln, *args)
            row[f"kiln_compile_s_{precision}"] = round(time.time() - t0, 2)
            outdir = os.path.join(a.work, f"bert_out_b{batch}_{precision}")
            r = kiln(a.kiln, "run", engine, "--device", "gpu", *feeds, "--output-dir", outdir)
            print(r.stderr[-3000:], flush=True)
            got = numpy_helper.to_array(onnx.load_tensor(os.path.join(outdir, "hidden.pb")))
            row[f"rel_l2_vs_ort_{precision}"] = rel_l2(got, want)
            print(f"b{batch} {precision}: kiln gpu vs onnxruntime rel L2 "
                  f"{row[f'rel_l2_vs_ort_{precision}']:.3g}", flush=True)
        engine16 = os.path.join(a.work, f"bert_b{batch}_fp16.kiln")
        stage(f"b{batch}: kiln profile fp16")
        r = kiln(a.kiln, "profile", engine16, "--device", "gpu", *feeds, "--top", "24", check=False)
        print(r.stdout[-6000:], flush=True)
        stage(f"b{batch}: torch.compile")
        timed, cs = torch_best(batch)
        stage(f"b{batch}: timing, {a.rounds} rounds")
        row["torch_compile_s_fp16"] = round(cs, 1)
        bench = ["bench", engine16, "--device", "gpu", *feeds, "--iterations", "200",
                 "--duration", "1", "--warmup", "5", "--json"]
        k, t = [], []
        kv = {name: [] for name, _ in variants}
        for _ in range(a.rounds):
            r = kiln(a.kiln, *bench)
            j = json.loads(r.stdout)
            k.append(j.get("device_ms", {}).get("p50", float("nan")))
            row["kiln_wall_p50_fp16"] = j["latency_ms"]["p50"]
            row["kiln_replayed_fp16"] = f"{j.get('replayed_segments')}/{j.get('replay_segments')}"
            t.append(timed())
            for name, env in variants:
                r = kiln(a.kiln, *bench, env=env, check=False)
                try:
                    kv[name].append(json.loads(r.stdout)["device_ms"]["p50"])
                except (ValueError, KeyError):
                    print(f"variant {name} failed: {r.stderr[-1500:]}", flush=True)
        row["kiln_device_ms_fp16"] = statistics.median(k)
        row["torch_best_ms_fp16"] = statistics.median(t)
        row["ratio_fp16"] = row["kiln_device_ms_fp16"] / row["torch_best_ms_fp16"]
        for name, times in kv.items():
            if times:
                row[f"variant_{name}_device_ms"] = statistics.median(times)
                row[f"variant_{name}_ratio"] = statistics.median(times) / row["torch_best_ms_fp16"]
        print(json.dumps(row), flush=True)
        results["rows"].append(row)
    json.dump(results, open(a.out, "w"), indent=1)


if __name__ == "__main__":
    main()
