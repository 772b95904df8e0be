"""Dynamic INT8 on a real speaker encoder with real speech: Resemblyzer's VoiceEncoder (PyPI
`Resemblyzer`: a 3-layer LSTM 40 -> 256, Linear 256 -> 256, ReLU, L2 normalization; its
pretrained.pt) on the speech clips of Debian's `alsa-utils` (/usr/share/sounds/alsa, 48 kHz
spoken channel names; scripts/setup.sh installs it).

The network is exported with Debian's torch (bench/quantize/resemblyzer_export.py, which also
computes Resemblyzer's mel partials in numpy/scipy) with a dynamic number of partials and frames.
Each clip's utterance embedding is Resemblyzer's: the mean of its partials' embeddings,
L2-normalized; every quantized model is scored by the cosine of that embedding to the float
model's, on every clip (mean and worst), for onnxruntime's `quantize_dynamic` (per tensor, per
channel) and Kiln's `quantize --dynamic` (all int8, and behind its gate). The gate's inputs are the
three Front_* clips; the other five are held out. Then: what costs the accuracy (an emulation of
the DynamicQuantizeLSTM arithmetic in numpy, one part quantized at a time), the two runtimes on the
same files, and the speed at 1 thread.

    pip download Resemblyzer --no-deps -d /tmp/resem      # the wheel (no dependencies needed)
    PYTHONPATH=build/python python3 bench/quantize/resemblyzer.py \\
        --wheel /tmp/resem/Resemblyzer-0.1.4-py3-none-any.whl --work /tmp/resemblyzer \\
        [--out results.json]
"""
import argparse
import glob
import json
import os
import subprocess
import time
import zipfile

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

import kiln

SYSTEM_PYTHON = "/usr/bin/python3"  # Debian's torch and scipy
HERE = os.path.dirname(os.path.abspath(__file__))
GATE_CLIPS = ("Front_Left", "Front_Right", "Front_Center")


def export(args):
    wheel_dir = os.path.join(args.work, "wheel")
    if not os.path.exists(os.path.join(wheel_dir, "resemblyzer", "pretrained.pt")):
        with zipfile.ZipFile(args.wheel) as z:
            z.extractall(wheel_dir)
    clips = sorted(c for c in glob.glob(os.path.join(args.clips, "*.wav"))
                   if not os.path.basename(c).startswith("Noise"))  # speech only
    assert clips, f"no speech clips in {args.clips} (apt-get install alsa-utils)"
    if not os.path.exists(os.path.join(args.work, "resemblyzer.onnx")):
        subprocess.run([SYSTEM_PYTHON, os.path.join(HERE, "resemblyzer_export.py"), wheel_dir,
                        args.work] + clips, check=True)
    return dict(np.load(os.path.join(args.work, "clips.npz")))


def embeddings(run, clips):
    """Resemblyzer's utterance embedding of each clip: its partials' mean, L2-normalized."""
    out = {}
    for name, mels in clips.items():
        e = run(mels).mean(axis=0)
        out[name] = e / np.linalg.norm(e)
    return out


def kiln_runner(path, threads=1):
    opts = kiln.SessionOptions()
    opts.intra_op_num_threads = threads
    sess = kiln.InferenceSession(path, opts)
    return lambda mels: sess.run(None, {"mels": mels})[0]


def ort_runner(path, threads=1):
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    return lambda mels: sess.run(None, {"mels": mels})[0]


def cosines(ref, got):
    c = {k: float(np.dot(ref[k], got[k])) for k in ref}
    held = [v for k, v in c.items() if k not in GATE_CLIPS]
    return {"mean": float(np.mean(list(c.values()))), "min": float(min(c.values())),
            "held_out_mean": float(np.mean(held)), "held_out_min": float(min(held)),
            "per_clip": c}


def emulate(model_path, clips, parts):
    """The DynamicQuantizeLSTM / MatMulInteger arithmetic in numpy (float64), with only the
    listed parts quantized: 'W<l>', 'R<l>' (int8 weights per gate row of LSTM l), 'X<l>' (LSTM
    l's input as one uint8 block over the sequence), 'H<l>' (its hidden state, each step), 'head'
    (the Linear's weight and input). Mean embedding cosine to the float model over the clips."""
    m = onnx.load(model_path)
    init = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    lstms = [n for n in m.graph.node if n.op_type == "LSTM"]
    gemm = next(n for n in m.graph.node if n.op_type == "Gemm")

    def qw(w):  # rows of w: output channels
        s = np.abs(w).max(axis=1, keepdims=True) / 127
        s[s == 0] = 1
        return np.clip(np.round(w / s), -127, 127) * s

    def qa(a):
        lo, hi = min(a.min(), 0.0), max(a.max(), 0.0)
        s = (hi - lo) / 255 if hi > lo else 1.0
        zp = np.round(-lo / s)
        return (np.clip(np.round(a / s) + zp, 0, 255) - zp) * s

    def sig(v):
        return 1 / (1 + np.exp(-v))

    def forward(mels, quant):
        x = mels.transpose(1, 0, 2).astype(np.float64)  # [frames, partials, 40]
        for li, n in enumerate(lstms):
            w, r, b = (init[n.input[i]][0].astype(np.float64) for i in (1, 2, 3))
            w = qw(w) if f"W{li}" in quant else w
            r = qw(r) if f"R{li}" in quant else r
            xs = qa(x) if f"X{li}" in quant else x
            proj = xs @ w.T + b[:w.shape[0]] + b[w.shape[0]:]
            h = np.zeros((x.shape[1], r.shape[1]))
            c = np.zeros_like(h)
            ys = []
            for t in range(x.shape[0]):
                hs = np.stack([qa(row) for row in h]) if f"H{li}" in quant else h
                i, o, f, g = np.split(proj[t] + hs @ r.T, 4, axis=1)
                c = sig(f) * c + sig(i) * np.tanh(g)
                h = sig(o) * np.tanh(c)
                ys.append(h)
            x = np.stack(ys)
        wl, bl = init[gemm.input[1]].astype(np.float64), init[gemm.input[2]]
        if "head" in quant:
            wl, h = qw(wl), qa(h)
        e = np.maximum(h @ wl.T + bl, 0)
        return e / np.linalg.norm(e, axis=1, keepdims=True)

    ref = embeddings(lambda v: forward(v, set()), clips)
    got = embeddings(lambda v: forward(v, set(parts)), clips)
    return cosines(ref, got)


def speed(run, mels, rounds=30):
    run(mels)
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        run(mels)
        times.append(time.perf_counter() - t)
    return float(np.median(times) * 1e3)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--wheel", required=True, help="Resemblyzer-*.whl (pip download Resemblyzer)")
    p.add_argument("--work", required=True)
    p.add_argument("--clips", default="/usr/share/sounds/alsa")
    p.add_argument("--out")
    p.add_argument("--skip-emulation", action="store_true")
    args = p.parse_args()
    os.makedirs(args.work, exist_ok=True)
    clips = export(args)
    model = os.path.join(args.work, "resemblyzer.onnx")
    w = lambda name: os.path.join(args.work, name)  # noqa: E731
    gate_sets = []
    for name in GATE_CLIPS:
        np.savez(w(f"gate_{name}.npz"), mels=clips[name])
        gate_sets.append(w(f"gate_{name}.npz"))
    results = {"clips": sorted(clips), "gate_clips": list(GATE_CLIPS), "models": {}}
    float_emb = embeddings(ort_runner(model), clips)
    results["float_kiln_vs_ort"] = cosines(float_emb, embeddings(kiln_runner(model), clips))

    from onnxruntime.quantization import QuantType, quantize_dynamic
    files = {}
    for per_channel in (False, True):
        name = f"ort_dynamic_{'per_channel' if per_channel else 'per_tensor'}"
        quantize_dynamic(model, w(name + ".onnx"), per_channel=per_channel,
                         weight_type=QuantType.QInt8)
        files[name] = w(name + ".onnx")
    kiln_variants = {
        # Every LSTM and the Linear in int8, no fallback: what the format itself costs.
        "kiln_dynamic_all_int8": dict(allow_drift=True, fallback_nodes=0),
        # The default gate (cosine >= 0.99; keeps the node whose output drifts most float32).
        "kiln_dynamic_gate": dict(),
        # The task gate: each node's own drop measured, the most sensitive kept float32.
        "kiln_dynamic_max_drop": dict(metric="cosine", max_drop=0.01),
    }
    for name, extra in kiln_variants.items():
        t = time.perf_counter()
        r = kiln.quantize(model, w(name + ".onnx"), dynamic=True, calibration=gate_sets, **extra)
        results["models"][name] = {"quantize_s": round(time.perf_counter() - t, 1),
                                   "kept_float": list(r.kept_float),
                                   "quantized_nodes": r.quantized_nodes,
                                   "int8_weight_bytes": r.int8_weight_bytes,
                                   "float_weight_bytes": r.float_weight_bytes}
        files[name] = w(name + ".onnx")
    for name, path in files.items():
        entry = results["models"].setdefault(name, {})
        ort_emb = embeddings(ort_runner(path), clips)
        kiln_emb = embeddings(kiln_runner(path), clips)
        entry["ort"] = cosines(float_emb, ort_emb)
        entry["kiln"] = cosines(float_emb, kiln_emb)
        entry["kiln_vs_ort_same_file"] = cosines(ort_emb, kiln_emb)
        print(f"{name:28s} cosine to float: onnxruntime mean {entry['ort']['mean']:.4f} "
              f"min {entry['ort']['min']:.4f}; kiln mean {entry['kiln']['mean']:.4f} "
              f"min {entry['kiln']['min']:.4f}; kiln vs ort {entry['kiln_vs_ort_same_file']['min']:.5f}",
              flush=True)

    mels = clips[sorted(clips)[0]]
    results["speed_ms_1_thread"] = {
        "float_ort": speed(ort_runner(model), mels),
        "float_kiln": speed(kiln_runner(model), mels),
        "int8_ort_per_channel_file_in_ort": speed(ort_runner(files["ort_dynamic_per_channel"]), mels),
        "kiln_all_int8_in_kiln": speed(kiln_runner(files["kiln_dynamic_all_int8"]), mels),
        "kiln_all_int8_in_ort": speed(ort_runner(files["kiln_dynamic_all_int8"]), mels),
        "kiln_max_drop_in_kiln": speed(kiln_runner(files["kiln_dynamic_max_drop"]), mels),
    }
    print("speed (ms, 1 thread, one partial of 160 frames):", results["speed_ms_1_thread"])

    if not args.skip_emulation:
        studies = {
            "all (onnxruntime per channel)": ["W0", "R0", "X0", "H0", "W1", "R1", "X1", "H1",
                                              "W2", "R2", "X2", "H2", "head"],
            "LSTM 0 only": ["W0", "R0", "X0", "H0"],
            "LSTM 1 only": ["W1", "R1", "X1", "H1"],
            "LSTM 2 only": ["W2", "R2", "X2", "H2"],
            "head only": ["head"],
            "LSTM 0: W only": ["W0"],
            "LSTM 0: X only": ["X0"],
            "LSTM 0: R and h only": ["R0", "H0"],
            "all but LSTM 0": ["W1", "R1", "X1", "H1", "W2", "R2", "X2", "H2", "head"],
        }
        results["emulation"] = {}
        for name, parts in studies.items():
            c = emulate(model, clips, parts)
            results["emulation"][name] = {"mean": c["mean"], "min": c["min"]}
            print(f"emulated, quantized {name:32s}: mean {c['mean']:.4f} min {c['min']:.4f}",
                  flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
