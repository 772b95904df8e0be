"""Issue 12's Fashion-MNIST case, end to end on real data with the project's own weights: the CNN of
fashion_mnist_train.py (kept as tests/assets/fashion_mnist/cnn.onnx), then

1. fp32 test accuracy in Kiln (the full 10,000 test images);
2. `kiln quantize` static INT8 calibrated on a few hundred training images: test accuracy in
   Kiln, and in onnxruntime on the same QDQ file for reference;
3. `kiln prune` of 50 % of the channels: test accuracy before any fine-tuning;
4. `kiln.distill` of the pruned file (the student) against the fp32 file run by Kiln (the
   teacher) on the training images with their labels, time-limited; exported, then test accuracy
   in Kiln (kept as tests/assets/fashion_mnist/cnn_pruned50_distilled.onnx with --save-assets);
5. latency in Kiln of fp32, INT8 and pruned + distilled, side by side: sessions made once, the
   timed rounds interleave the models, each round keeps the median of its runs, the figures are
   the medians over rounds and the speedups the medians of the per-round ratios (each against
   the fp32 run of the same round).

Runs torch and Kiln in one process, so under Debian's interpreter (python3-torch):

    PYTHONPATH=build/python /usr/bin/python3 bench/quantize/fashion_mnist.py \\
        --kiln build/src/kiln --work /tmp/fmnist --out bench/results/2026-12-06h-fashion-mnist

writes OUT.json and OUT.md. --train trains the fp32 model afresh (else the kept asset is used);
onnxruntime runs under --ort-python (default: the python3 first on PATH, which has it).
"""
import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
ASSETS = os.path.join(ROOT, "tests", "assets", "fashion_mnist")
sys.path.insert(0, os.path.join(ROOT, "tools"))
sys.path.insert(0, HERE)
from idx_dataset import fashion_mnist, to_input  # noqa: E402

ORT_RUN = r"""
import sys, numpy as np, onnxruntime as ort
o = ort.SessionOptions(); o.intra_op_num_threads = 2
s = ort.InferenceSession(sys.argv[1], o, providers=["CPUExecutionProvider"])
x = np.load(sys.argv[2])
np.save(sys.argv[3], np.concatenate([s.run(None, {"image": x[i:i + 500]})[0]
                                     for i in range(0, len(x), 500)]))
print(ort.__version__)
"""


def session(path, threads):
    import kiln

    o = kiln.SessionOptions()
    o.intra_op_num_threads = threads
    return kiln.InferenceSession(path, o)


def logits(path, x, threads=2, batch=500):
    s = session(path, threads)
    return np.concatenate([s.run(None, {"image": x[i:i + batch]})[0]
                           for i in range(0, len(x), batch)])


def accuracy(out, labels):
    return float((out.argmax(1) == labels).mean())


def run_cli(args, what):
    t0 = time.time()
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"{what} failed ({r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    lines = [ln for ln in (r.stdout + r.stderr).splitlines() if ln.strip()]
    return lines, round(time.time() - t0, 1)


def calibration_sets(a, train_x):
    """--calibration images drawn (seeded) from the train split, in .npz sets of 50."""
    pick = np.random.default_rng(a.seed + 1).choice(len(train_x), a.calibration, replace=False)
    flags = []
    for i in range(0, a.calibration, 50):
        p = os.path.join(a.work, f"cal{i // 50}.npz")
        np.savez(p, image=train_x[pick[i:i + 50]])
        flags += ["--calibration-npz", p]
    return flags


def distill(a, teacher_path, pruned_path, train_x, train_y, test_x):
    import torch

    import kiln.distill as kd

    torch.set_num_threads(a.threads)
    student = kd.student_from_onnx(pruned_path)
    rng = np.random.default_rng(a.seed + 2)

    def batches():
        """One pass over the shuffled train split, mirrored half the time (as in training)."""
        order = rng.permutation(len(train_x))
        for i in range(0, len(order) - a.batch_size + 1, a.batch_size):
            idx = order[i:i + a.batch_size]
            x = train_x[idx].copy()
            flip = rng.random(len(idx)) < 0.5
            x[flip] = x[flip][..., ::-1]
            yield {"image": x, "label": train_y[idx].astype(np.int64)}

    progress = []
    t0 = time.time()

    def log(step, loss, agreement):
        if step % 100 == 0:
            progress.append((step, round(loss, 4), round(agreement, 3), round(time.time() - t0)))
            print(f"distill: step {step}: loss {loss:.4f}, batch agreement {agreement:.3f}, "
                  f"{time.time() - t0:.0f} s", flush=True)

    # max_steps is the epochs' steps, so that the cosine reaches 0 when they end (with only the
    # time limit it would decay over the time, and stop short where the epochs end first).
    report = kd.distill(student, teacher_path, batches, epochs=a.distill_epochs, lr=a.lr,
                        temperature=a.temperature, alpha=a.alpha, labels="label",
                        batch_size=None, shuffle=False, time_limit=a.distill_time,
                        max_steps=a.distill_epochs * (len(train_x) // a.batch_size),
                        threads=a.threads, seed=a.seed, log=log)
    print(report.summary(), flush=True)
    out = os.path.join(a.work, "cnn_pruned50_distilled.onnx")
    export = kd.export_onnx(student, out, {"image": test_x[:1]}, threads=a.threads)
    return out, {"steps": report.steps, "samples": report.samples, "stopped": report.stopped,
                 "seconds": round(report.seconds, 1),
                 "teacher_seconds": round(report.teacher_seconds, 1),
                 "loss_start": round(report.loss_start, 4), "loss_end": round(report.loss_end, 4),
                 "export_rel_l2_kiln_vs_torch": export.rel_l2, "progress": progress}


def latency(a, models, x):
    """{threads: {batch: {model: median ms, model + ' speedup': median ratio vs fp32}}}."""
    out = {}
    for threads in a.latency_threads:
        out[threads] = {}
        sessions = {name: session(path, threads) for name, path in models.items()}
        for batch in a.latency_batches:
            feed = {"image": np.ascontiguousarray(x[:batch])}
            runs = max(5, a.runs // batch) if batch > 1 else a.runs
            for s in sessions.values():  # warm-up
                for _ in range(5):
                    s.run(None, feed)
            rounds = {name: [] for name in sessions}
            for _ in range(a.rounds):
                for name, s in sessions.items():
                    times = []
                    for _ in range(runs):
                        t = time.perf_counter()
                        s.run(None, feed)
                        times.append((time.perf_counter() - t) * 1e3)
                    rounds[name].append(statistics.median(times))
            row = {}
            for name, ms in rounds.items():
                row[name] = round(statistics.median(ms), 4)
                if name != "fp32":
                    row[name + " speedup"] = round(statistics.median(
                        [f / m for f, m in zip(rounds["fp32"], ms)]), 3)
            out[threads][batch] = row
            print(f"latency: {threads} thread(s), batch {batch}: {json.dumps(row)}", flush=True)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--out", default="", help="OUT: writes OUT.json and OUT.md")
    ap.add_argument("--train", action="store_true", help="train afresh instead of the kept asset")
    ap.add_argument("--model", default=os.path.join(ASSETS, "cnn.onnx"),
                    help="the fp32 file to start from (without --train)")
    ap.add_argument("--save-assets", action="store_true",
                    help="copy the fp32 and distilled files into tests/assets/fashion_mnist")
    ap.add_argument("--calibration", type=int, default=500)
    ap.add_argument("--method", default="minmax")
    ap.add_argument("--quantize-flags", default="", help="more `kiln quantize` flags")
    ap.add_argument("--ratio", type=float, default=0.5)
    ap.add_argument("--criterion", default="contribution")
    ap.add_argument("--distill-time", type=float, default=240)
    ap.add_argument("--distill-epochs", type=int, default=5)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--temperature", type=float, default=4.0)
    ap.add_argument("--alpha", type=float, default=0.5)
    ap.add_argument("--threads", type=int, default=1, help="torch's and the teacher's")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--latency-threads", type=int, nargs="*", default=[1, 2])
    ap.add_argument("--latency-batches", type=int, nargs="*", default=[1, 32])
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--runs", type=int, default=200, help="runs a round at batch 1")
    ap.add_argument("--ort-python", default=shutil.which("python3") or "python3")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    t_start = time.time()
    train_images, train_y = fashion_mnist("train")
    test_images, test_y = fashion_mnist("test")
    train_x, test_x = to_input(train_images), to_input(test_images)
    res = {"args": {k: v for k, v in vars(a).items()}, "command": " ".join(sys.argv),
           "machine": f"{platform.machine()}, {os.cpu_count()} cores (shared)"}

    fp32 = os.path.join(a.work, "cnn.onnx")
    if a.train:
        import fashion_mnist_train

        res["training"] = fashion_mnist_train.train_and_export(fp32)
    else:
        shutil.copy(a.model, fp32)
        res["training"] = f"the file {os.path.relpath(a.model, ROOT)} (fashion_mnist_train.py)"
    acc = {"fp32": accuracy(logits(fp32, test_x), test_y)}
    print(f"fp32: test accuracy {acc['fp32']:.4f}", flush=True)

    cal = calibration_sets(a, train_x)
    int8 = os.path.join(a.work, "cnn.int8.onnx")
    lines, secs = run_cli([a.kiln, "quantize", fp32, "-o", int8, "--method", a.method,
                           *a.quantize_flags.split(), *cal], "kiln quantize")
    res["quantize"] = {"report": lines, "seconds": secs}
    print("\n".join(lines), flush=True)
    acc["int8"] = accuracy(logits(int8, test_x), test_y)
    np.save(os.path.join(a.work, "test_x.npy"), test_x)
    r = subprocess.run([a.ort_python, "-c", ORT_RUN, int8, os.path.join(a.work, "test_x.npy"),
                        os.path.join(a.work, "ort_int8.npy")], capture_output=True, text=True)
    if r.returncode == 0:
        ort_out = np.load(os.path.join(a.work, "ort_int8.npy"))
        acc["int8 (onnxruntime, same file)"] = accuracy(ort_out, test_y)
        res["onnxruntime"] = r.stdout.strip()
        res["int8_kiln_vs_onnxruntime_top1_agreement"] = float(
            (ort_out.argmax(1) == logits(int8, test_x).argmax(1)).mean())
    else:
        res["onnxruntime"] = f"not run: {r.stderr.strip()[-300:]}"
    print(f"int8: test accuracy {acc['int8']:.4f} (onnxruntime "
          f"{acc.get('int8 (onnxruntime, same file)')})", flush=True)

    pruned = os.path.join(a.work, "cnn_pruned50.onnx")
    lines, secs = run_cli([a.kiln, "prune", fp32, "-o", pruned, "--method", "channels",
                           "--ratio", str(a.ratio), "--criterion", a.criterion,
                           "--channel-multiple", "8", "--allow-drift", *cal], "kiln prune")
    res["prune"] = {"report": lines, "seconds": secs}
    print("\n".join(lines), flush=True)
    acc["pruned 50 %"] = accuracy(logits(pruned, test_x), test_y)
    print(f"pruned: test accuracy {acc['pruned 50 %']:.4f}", flush=True)

    distilled, res["distill"] = distill(a, fp32, pruned, train_x, train_y, test_x)
    acc["pruned 50 % + distilled"] = accuracy(logits(distilled, test_x), test_y)
    print(f"distilled: test accuracy {acc['pruned 50 % + distilled']:.4f}", flush=True)
    res["accuracy"] = acc
    res["drops_points"] = {"int8": round(100 * (acc["fp32"] - acc["int8"]), 2),
                           "pruned 50 % + distilled": round(
                               100 * (acc["fp32"] - acc["pruned 50 % + distilled"]), 2)}
    if a.save_assets:
        os.makedirs(ASSETS, exist_ok=True)
        shutil.copy(fp32, os.path.join(ASSETS, "cnn.onnx"))
        shutil.copy(distilled, os.path.join(ASSETS, "cnn_pruned50_distilled.onnx"))

    res["latency_ms"] = latency(a, {"fp32": fp32, "int8": int8,
                                    "pruned 50 % + distilled": distilled}, test_x)
    res["total_seconds"] = round(time.time() - t_start, 1)
    print(json.dumps({k: res[k] for k in ("accuracy", "drops_points", "total_seconds")}))
    if a.out:
        with open(a.out + ".json", "w") as f:
            json.dump(res, f, indent=1)
        import fashion_mnist_report

        with open(a.out + ".md", "w") as f:
            f.write(fashion_mnist_report.markdown(res))


if __name__ == "__main__":
    main()
